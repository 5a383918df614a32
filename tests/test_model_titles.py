"""What a model's answer to "name this conversation" becomes (providers/titles.py)."""
from app.providers.titles import title_from

ASKED = "Why is the sky blue during the day and red at sunset?"
ANSWERED = "The sky looks blue because of Rayleigh scattering of sunlight by the atmosphere."


def test_a_title_is_at_most_six_words_cut_on_a_word_boundary():
    assert title_from("## Colours of the sky at sunset and the blue daytime sky", ASKED, ANSWERED) == \
        "Colours of the sky at sunset"
    assert title_from('Title: "Why the Sky Is Blue."', ASKED, ANSWERED) == "Why the Sky Is Blue"
    long_words = "Atmospheric " * 3 + "scatteringscatteringscatteringscattering " * 3
    cut = title_from(long_words, ASKED + " atmospheric scattering", ANSWERED)
    assert len(cut) <= 80 and all(w in long_words.split() for w in cut.split()), "never cut mid-word"


def test_an_answer_that_is_not_a_title_leaves_the_first_words():
    sentence = ("The sky appears blue because of physical processes and atmospheric scattering of sunlight "
                "by molecules in the air")
    assert title_from(sentence, ASKED, ANSWERED) == "", "a whole sentence"
    assert title_from("SECTION 1", ASKED, ANSWERED) == "", "a heading"
    assert title_from("Sure! Here is a title for you", ASKED, ANSWERED) == "", "a reply"
    assert title_from("Otters holding hands", ASKED, ANSWERED) == "", "about something else"
    assert title_from("", ASKED, ANSWERED) == "" and title_from("1234", ASKED, ANSWERED) == ""
