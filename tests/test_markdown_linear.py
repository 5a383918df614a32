"""Markdown rendering is linear in its input, growing or not: counts, not times.

The growing edge's scanner counts the characters it steps over (`markdown.counting()`); a
growing render of hostile text (thousands of `[`, `![`, "[`", unmatched delimiters ...)
may step over each character a bounded number of times, the same bound at 1,000 and
at 8,000 repetitions. Before, `_link` scanned to the end from every `[`: 4,000 `[` cost
11-16 s a render.
"""
from pathlib import Path

import pytest

from app import markdown
from app.markdown import Pace, Rendering, labels

HOSTILE = ["[", "![", "[`", "`[", "[a](", "[a][", "[a](b ", "_a a* ", "*a _a ", "<a ", "` `` ", "\\[", "a_ "]
PER_CHAR = 40  # the replay of the last grid points scans the edge ~17 times, each linear


def scanned(text: str) -> int:
    with markdown.counting() as work:
        markdown.keyed(text, "k", growing=True)
    return work.scanned


@pytest.mark.parametrize("unit", HOSTILE)
def test_a_growing_render_scans_each_character_a_bounded_number_of_times(unit):
    small = "x " + unit * 1000 + " and some text at the end"
    large = "x " + unit * 8000 + " and some text at the end"
    counts = scanned(small), scanned(large)
    assert counts[0] <= PER_CHAR * len(small), counts
    assert counts[1] <= PER_CHAR * len(large), counts


def test_label_ends_are_found_once_for_nested_and_unclosed_brackets():
    text = labels.Text("[" * 5000 + "a" + "]" * 2500)
    with markdown.counting() as work:
        ends = [text.label_end(i) for i in range(5000)]
    assert work.scanned <= 2 * len(text.s)
    assert ends[2500] == 5000 + 1 + 2499 and ends[4999] == 5001 and ends[0] == -1
    # the same answers as a walk from each `[` alone
    for i in (0, 1, 2499, 2500, 3000, 4999):
        assert ends[i] == labels.Text(text.s).label_end(i)


def test_label_walks_skip_code_spans_and_escapes_like_before():
    for s, i, end in [
        ("[a `]` b]", 0, 8),
        ("[a \\] b]", 0, 7),
        ("[a [b] c]", 0, 8),
        ("[a [b] c]", 3, 5),
        ("[a `` ` `` ]", 0, 11),
        ("[a ` b", 0, -1),
    ]:
        assert labels.Text(s).label_end(i) == end, s


def find_run(s: str, start: int, char: str, size: int) -> int:
    """Start of the first run of exactly `size` `char`s at or after `start`, or -1: a search
    from `start` (what labels.Text.run answers from its index)."""
    i = s.find(char, start)
    while i >= 0:
        j = i
        while j < len(s) and s[j] == char:
            j += 1
        if j - i == size:
            return i
        i = s.find(char, j)
    return -1


def test_runs_index_agrees_with_a_search():
    s = "a ` b `` c ``` d `` e ` f"
    text = labels.Text(s)
    for start in range(len(s)):
        if start and s[start - 1] == "`" and s[start] == "`":
            continue  # never asked inside a run
        for size in (1, 2, 3, 4):
            assert text.run(start, size) == find_run(s, start, "`", size), (start, size)


RICH = "a [link](https://example.com/) and **bold**"


def test_inline_syntax_past_the_budget_is_shown_as_text():
    INLINE_BUDGET = markdown.INLINE_BUDGET
    hostile = "[" * (INLINE_BUDGET + 1)
    parts = markdown.render(f"{RICH}\n\n{hostile}\n\n{RICH}").split("</p>\n")
    assert '<a href="https://example.com/"' in parts[0] and "<strong>bold</strong>" in parts[0]
    assert parts[1] == "<p>" + hostile  # as text: over the budget on its own
    assert '<a href="https://example.com/"' in parts[2]  # it spent nothing
    # paragraphs in order spend it: once spent, the rest is text
    paragraph = "[a](https://example.com/) *b* " * 50  # 200 characters of syntax
    html = markdown.render("\n\n".join([paragraph] * (INLINE_BUDGET // 200 + 2) + [RICH]))
    assert html.count("<a href") == INLINE_BUDGET // 200 * 50
    assert html.endswith(f"<p>{RICH}</p>\n")


@pytest.mark.parametrize("unit", ["[", "![", "[`", "*a _b "])
def test_a_hostile_megabyte_is_scanned_a_bounded_number_of_times(unit):
    one = "x " + unit * (1_000_000 // len(unit))
    split = "\n\n".join(["x " + unit * (15_000 // len(unit))] * 66)
    for text in (one, split):
        count = scanned(text)
        assert count <= 2 * len(text), (unit, count)
        blocks_ = markdown.keyed(text, "h", growing=True)
        final = markdown.keyed(text, "h")
        assert final and blocks_  # and the final render is the non-streaming one, as ever
        assert final == markdown.keyed(text, "h", growing=False)


def test_a_growing_answer_parses_only_from_its_last_open_block():
    # the long answer 4 times over, streamed 40 characters a flush (840 renders): blocks
    # before the open one are parsed a bounded number of times, not again at every flush
    answer = "\n\n".join([(Path(__file__).parent / "fixtures" / "long_answer.md").read_text()] * 4)
    stream = Rendering("stream")
    with markdown.counting() as work:
        for end in range(40, len(answer) + 40, 40):
            last = stream.blocks(answer[:end], growing=True)
    renders = len(answer) // 40
    # a whole parse at every flush was renders * len / 2 (~420x the answer)
    # each render parses its region (from the block holding the last 640 characters): ~38x
    assert work.parsed <= 60 * len(answer), f"{work.parsed:,} characters parsed in {renders} renders"
    # what the renders found final reaches nearly to the end: one more step parses little
    with markdown.counting() as step:
        stream.blocks(answer + "\n\nOne more paragraph, growing as the answer goes on.", growing=True)
    assert step.parsed <= 2_000, step.parsed
    # and it is the render a whole parse gives
    whole = [b.html.replace('id="fresh-', 'id="stream-') for b in markdown.keyed(answer, "fresh", growing=True)]
    assert [b.html for b in last] == whole


TRICKY = [
    # a fence and a paragraph that grow without a parse (pieces._Open), and what ends them
    "intro\n\n```python\n" + "".join(f"x{i} = '''{i}\nmore'''\n" for i in range(70)) + "```\n\nafter\n",
    "intro\n\n" + "words and *more* words\n" * 40 + "then 1. not a list\n- a list\n\nend\n",
    "intro\n\n" + "words " * 300 + "\n===\n\n~~~\ncode\n  ~~~ not\n~~~\n\nlast **words**\n",
    "intro\n\npara\n\\[\nb\n# h\n" + "word " * 150 + "\n" + "more " * 150 + "\n\\]\nafter\n\nend.\n",
    "intro\n\npara\n$$\nb\n# h\n" + "word " * 150 + "\n$$\nafter\n\nend para here.\n",
    "- a\n- b\n\n1\n\n1. x\n2. y\n\n" * 30,
    "para\n| a | b |\n|---|---|\n| 1 | 2 |\n\nmore\n\n" * 30,
    "[x]: https://a.example\n\nsee [x] and [y]\n\n" + "filler words " * 80 + "\n\n[y]: https://b.example\n\n" * 3,
]


@pytest.mark.parametrize("text", TRICKY)
def test_the_incremental_growing_render_is_the_whole_one(text):
    # without the cadence (a big open block rendered less often, on purpose unlike a
    # fresh render), the kept head changes nothing
    pace = Pace(cadence=0)
    for step in (7, 40):
        rendering = Rendering("inc", pace)
        for end in range(step, len(text) + step, step):
            inc = [b.html for b in rendering.blocks(text[:end], growing=True)]
            whole = [b.html.replace('id="whole-', 'id="inc-')
                     for b in markdown.keyed(text[:end], "whole", growing=True, pace=pace)]
            assert inc == whole, (step, end, text[:end][-80:])


CUT = [
    "para one **bold\nstill** more\n1986. a\n\npara two _x_ [link](http://a.b) and\n```a`b\ntext\n\n- item\n- two\n\nend",
    "intro\n\n```py\n" + "x = 1\n" * 30 + "```\n\nafter **bold** para\nline two *it* and `code`\n\n~~~\nplain\n~~~\n",
    (Path(__file__).parent / "fixtures" / "long_answer.md").read_text(),
]


@pytest.mark.parametrize("text", CUT)
def test_a_block_cut_without_a_parse_is_what_a_parse_gives(text):
    # a growing render makes the tokens of a cut fence or paragraph from the first parse
    # (Pace.cuts): the same render as parsing the cut text
    for step in (7, 40):
        renders = []
        for cuts in (True, False):
            rendering = Rendering("cut", Pace(cuts=cuts))
            renders.append([[b.html for b in rendering.blocks(text[:end], growing=True)]
                            for end in range(step, len(text) + step, step)])
        assert renders[0] == renders[1]


def _with_long_blocks(k: int) -> tuple[str, str]:
    base = (Path(__file__).parent / "fixtures" / "long_answer.md").read_text()
    fence = "```python\n" + "".join(f"def f{i}(x):\n    return x * {i}  # the {i}th\n" for i in range(40 * k)) + "```\n"
    paragraph = " ".join(f"word{i} and *some* more" for i in range(80 * k)) + "\n"
    return "\n\n".join([base] * (k // 2) + [fence, paragraph] + [base] * (k - k // 2)), fence


@pytest.mark.parametrize("k", [1, 7])
def test_each_character_of_a_growing_answer_is_parsed_and_rendered_a_bounded_number_of_times(k):
    # ~3,000 and ~21,000 tokens with a fence of 40k lines and a paragraph of 80k phrases
    # without a break, streamed 60 characters a render: the same bound per character at
    # both sizes. Before pieces.py (the open block parsed whole at every render) it was
    # 21-27x parsed; a whole parse of the answer at every render would be ~700x.
    text, fence = _with_long_blocks(k)
    html = "".join(b.html for b in markdown.keyed(text, "final"))
    rendering = Rendering("long")
    with markdown.counting() as work:
        for end in range(60, len(text) + 60, 60):
            rendering.blocks(text[:end], growing=True)
    parsed, scanned, highlighted, rendered = work.parsed, work.scanned, work.highlighted, work.rendered
    assert parsed <= 12 * len(text), parsed / len(text)  # block parser, and the checks standing for it
    assert scanned <= 6 * len(text), scanned / len(text)  # the edge's label scans
    assert highlighted <= 4 * len(text), highlighted / len(text)  # code given to Pygments
    assert rendered <= 16 * len(html), rendered / len(html)  # HTML made, against the answer's
    if k > 1:  # past a chunk of lines (64, code.py) each line is lexed a bounded number of times
        assert highlighted <= 5 * len(fence), highlighted / len(fence)


_TOUCHED = [0]


class _Touched(str):
    """A text that counts the characters its own methods look at (a slice: its length; a
    search, compare or test: the whole text from where it starts)."""

    def _seen(self, n: int) -> None:
        _TOUCHED[0] += n

    def startswith(self, prefix, *args):
        self._seen(sum(map(len, prefix)) if isinstance(prefix, tuple) else len(prefix))
        return str.startswith(self, prefix, *args)

    def endswith(self, suffix, *args):
        self._seen(len(self))
        return str.endswith(self, suffix, *args)

    def find(self, sub, start=0, *args):
        self._seen(len(self) - (start or 0))
        return str.find(self, sub, start, *args)

    def rfind(self, sub, *args):
        self._seen(len(self))
        return str.rfind(self, sub, *args)

    def __contains__(self, sub):
        self._seen(len(self))
        return str.__contains__(self, sub)

    def __getitem__(self, at):
        part = str.__getitem__(self, at)
        self._seen(len(part))
        return part

    def __eq__(self, other):
        self._seen(len(self))
        return str.__eq__(self, other)

    def __ne__(self, other):
        self._seen(len(self))
        return str.__ne__(self, other)

    __hash__ = str.__hash__

    def _whole(name):  # noqa: N805 (a factory in the class body)
        def method(self, *args):
            self._seen(len(self))
            return getattr(str, name)(self, *args)
        return method

    replace, count, split, strip, rstrip, lstrip, splitlines = map(
        _whole, ("replace", "count", "split", "strip", "rstrip", "lstrip", "splitlines"))


def test_a_growing_render_looks_at_the_whole_answer_once():
    # Per render of a growing answer, the text as a whole is compared once with the last
    # one (a memcmp); the rest is the part after the head. Before: ~4 passes over the
    # whole answer per render (the CR and NUL tests, the source and guard compares, the
    # cut's copy), so a 20,000-token answer's renders cost more than 10x a 2,000-token one's.
    text = "\n\n".join([(Path(__file__).parent / "fixtures" / "long_answer.md").read_text()] * 6)
    touched = Rendering("touched")
    per_render = []
    for end in range(120, len(text), 120):
        before = _TOUCHED[0]
        touched.blocks(_Touched(text[:end]), growing=True)
        per_render.append((end, _TOUCHED[0] - before))
    late = [(end, n) for end, n in per_render if end > len(text) // 2]
    assert all(n <= end + 5_000 for end, n in late), max(n - end for end, n in late)
    # and with a CR in the answer (normalized: a copy each render, as before), the same render
    crlf = text.replace("\n", "\r\n")
    rendering = Rendering("crlf")
    for end in range(len(crlf) - 2_000, len(crlf), 40):
        got = [b.html for b in rendering.blocks(_Touched(crlf[:end]), growing=True)]
    whole = [b.html.replace('id="fresh-crlf-', 'id="crlf-')
             for b in markdown.keyed(crlf[:end], "fresh-crlf", growing=True)]
    assert got == whole


PLAIN = [
    # prose that grows by plain words, and what must stop the tip: links, emails, www.,
    # schemes, money and math, delimiters arriving, code, entities, pipes, lines
    "intro\n\n" + "words and more words, as plain as can be. " * 30 + "then *em* and **strong** end\n\nnext para",
    "see www.example.com and user@example.com or https://example.com/a?b=c then more words " * 8,
    "it costs $5 and then $10 a month, and $x$ is math, " * 10 + "\n\nand `code` or &amp; or a | pipe " * 5,
    "a trailing star * and _under_ and a [link](http://a.example) and [ref] words " * 6 + "\n\n[ref]: http://r.example\n",
    "para one\nsecond line of it\n===\n\nheading above, now " + "words " * 60 + "\n- a list\n- item " + "x " * 40,
    "ends at a close *here* and then words, " * 12 + "ending with a link [a](http://b.example) and words " * 5,
    "- one item of a tight list, " + "and more words " * 20 + "\n- two " + "x y " * 30 + "\n  - nested " + "z " * 40
    + "\n\n1. loose one\n\n2. loose two " + "w " * 40 + "\n\n> quoted words " + "q " * 40 + "\n> > deeper " + "d " * 30,
    "- [ ] a task " + "t " * 30 + "\n- [x] done " + "u " * 30 + "\n\nafter\n\n* star list " + "s " * 30 + " *em* " + "v " * 20,
    (Path(__file__).parent / "fixtures" / "long_answer.md").read_text(),
]


@pytest.mark.parametrize("text", PLAIN)
def test_a_paragraph_grown_by_plain_text_is_what_a_full_render_gives(text):
    # a growing render adds plain text to the last paragraph without a parse, the edge's
    # replay or a render (the tip, Pace.tips): the same blocks as the full growing render,
    # at every step
    for step in (7, 13, 40, 97):
        renders = []
        for tips in (True, False):
            rendering = Rendering("tip", Pace(tips=tips))
            renders.append([[b.html for b in rendering.blocks(text[:end], growing=True)]
                            for end in range(step, len(text) + step, step)])
        assert renders[0] == renders[1], step


def test_a_paragraph_growing_by_plain_words_is_not_parsed_or_rendered_again():
    # 40 characters at a time of a long plain paragraph: once it shows whole, each render
    # looks only at what was added (the tip). Without it, the paragraph (parsed, scanned,
    # rendered) once every ~sixteenth of its length (the cadence): here ~100,000
    # characters parsed and ~80,000 of HTML made
    text = "# A title\n\nSome *intro* text with `code`.\n\n" + (
        "Plain words of a long paragraph, as an answer often has them, one after another. " * 60)
    rendering = Rendering("plain")
    start = len(text) - 4_000
    for end in range(40, start, 40):
        rendering.blocks(text[:end], growing=True)
    with markdown.counting() as work:
        for end in range(start, len(text), 40):
            rendering.blocks(text[:end], growing=True)
    parsed, scanned, rendered = work.parsed, work.scanned, work.rendered
    assert parsed <= 4_000 and rendered <= 4_000, (parsed, rendered)
    assert scanned <= 2 * 4_000, scanned
