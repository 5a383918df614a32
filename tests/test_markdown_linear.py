"""Markdown rendering is linear in its input, growing or not: counts, not times.

The growing edge's scanner counts the characters it steps over (`scan.SCANNED`); a
growing render of hostile text (thousands of `[`, `![`, "[`", unmatched delimiters ...)
may step over each character a bounded number of times, the same bound at 1,000 and
at 8,000 repetitions. Before, `_link` scanned to the end from every `[`: 4,000 `[` cost
11-16 s a render.
"""
import pytest

from app import markdown
from app.markdown import blocks, scan

HOSTILE = ["[", "![", "[`", "`[", "[a](", "[a][", "[a](b ", "_a a* ", "*a _a ", "<a ", "` `` ", "\\[", "a_ "]
PER_CHAR = 40  # the replay of the last grid points scans the edge ~17 times, each linear


def scanned(text: str) -> int:
    blocks._GROWN.clear()
    scan._SCAN_CACHE.clear()
    before = scan.SCANNED[0]
    markdown.keyed(text, "k", growing=True)
    return scan.SCANNED[0] - before


@pytest.mark.parametrize("unit", HOSTILE)
def test_a_growing_render_scans_each_character_a_bounded_number_of_times(unit):
    small = "x " + unit * 1000 + " and some text at the end"
    large = "x " + unit * 8000 + " and some text at the end"
    counts = scanned(small), scanned(large)
    assert counts[0] <= PER_CHAR * len(small), counts
    assert counts[1] <= PER_CHAR * len(large), counts


def test_label_ends_are_found_once_for_nested_and_unclosed_brackets():
    text = scan._Text("[" * 5000 + "a" + "]" * 2500)
    before = scan.SCANNED[0]
    ends = [text.label_end(i) for i in range(5000)]
    assert scan.SCANNED[0] - before <= 2 * len(text.s)
    assert ends[2500] == 5000 + 1 + 2499 and ends[4999] == 5001 and ends[0] == -1
    # the same answers as a walk from each `[` alone
    for i in (0, 1, 2499, 2500, 3000, 4999):
        assert ends[i] == scan._Text(text.s).label_end(i)


def test_label_walks_skip_code_spans_and_escapes_like_before():
    for s, i, end in [
        ("[a `]` b]", 0, 8),
        ("[a \\] b]", 0, 7),
        ("[a [b] c]", 0, 8),
        ("[a [b] c]", 3, 5),
        ("[a `` ` `` ]", 0, 11),
        ("[a ` b", 0, -1),
    ]:
        assert scan._Text(s).label_end(i) == end, s


def test_runs_index_agrees_with_a_search():
    s = "a ` b `` c ``` d `` e ` f"
    text = scan._Text(s)
    for start in range(len(s)):
        if start and s[start - 1] == "`" and s[start] == "`":
            continue  # never asked inside a run
        for size in (1, 2, 3, 4):
            assert text.run(start, size) == scan._find_run(s, start, "`", size), (start, size)
