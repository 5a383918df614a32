"""What a model's answer to "name this conversation" becomes (titles.py)."""
from app.titles import title_from


def test_a_title_is_at_most_six_words_cut_on_a_word_boundary():
    assert title_from("## Colours of the sky at sunset and the blue daytime sky") == \
        "Colours of the sky at sunset"
    assert title_from('Title: "Why the Sky Is Blue."') == "Why the Sky Is Blue"
    # SmolLM2's own: a cut ends at the clause it stops in
    assert title_from("The sea's a boundless realm, where every corner is hidden.") == "The sea's a boundless realm"
    assert title_from("Soak up those yeast, and bake your bread.") == "Soak up those yeast"
    long_words = "Atmospheric " * 3 + "scatteringscatteringscatteringscattering " * 3
    cut = title_from(long_words)
    assert len(cut) <= 80 and all(w in long_words.split() for w in cut.split()), "never cut mid-word"


def test_an_answer_that_is_not_a_title_leaves_the_first_words():
    sentence = ("The sky appears blue because of physical processes and atmospheric scattering of sunlight "
                "by molecules in the air")
    assert title_from(sentence) == "", "a whole sentence"
    assert title_from("SECTION 1") == "", "a heading"
    assert title_from("Sure! Here is a title for you") == "", "a reply"
    assert title_from("") == "" and title_from("1234") == ""
