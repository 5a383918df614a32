"""Templates read like the page: one element a line, indented, no line past 200 characters;
the layout is taken out once, when a template is compiled (templating.without_layout), so a
page's bytes are those of the same template written on one line."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.web.templating import TEMPLATES, env, without_layout

# a start or end tag, a statement, a comment or an expression of Jinja
TOKEN = re.compile(r"\{#.*?#\}|\{%-?\s*(?P<word>\w+).*?-?%\}|\{\{.*?\}\}"
                   r"|<(?P<end>/?)[a-zA-Z][a-zA-Z0-9-]*(?:[^<>\"']|\"[^\"]*\"|'[^']*')*?/?>", re.S)
TEXT_ELEMENTS = re.compile(r"<(pre|textarea)\b.*?</\1\s*>", re.S | re.I)
# A line of a tag with many attributes or of a sentence breaks between attributes or words
# (one space on the page, as on one line), so nothing needs more: the code's own limit, with
# room for the indentation of a nested element
LINE_MAX = 200


def templates() -> list[Path]:
    return sorted(TEMPLATES.glob("*.html"))


def two_on_a_line(line: str) -> list[str]:
    """Where a line holds a tag (or statement) right after another with nothing between,
    which the layout would have put on a line of its own: a closer (`</a>`, `{% endif %}`)
    may follow what it closes."""
    line = TEXT_ELEMENTS.sub("<kept>", line)
    found, last = [], None
    for m in TOKEN.finditer(line):
        text = m.group(0)
        if last is not None and last.end() == m.start() and not last.group(0).startswith("{{") \
                and not text.startswith("{{"):
            closer = m.group("end") == "/" or (m.group("word") or "").startswith(("end", "else", "elif"))
            if not closer:
                found.append(line[max(0, m.start() - 40):m.start() + 40])
        last = m
    return found


@pytest.mark.parametrize("path", templates(), ids=lambda p: p.name)
def test_a_template_has_one_element_a_line(path: Path):
    lines = path.read_text().splitlines()
    crowded = [(n, where) for n, line in enumerate(lines, 1) for where in two_on_a_line(line)]
    assert crowded == [], f"{path.name}: put each on a line of its own: {crowded[:5]}"
    long = [(n, len(line)) for n, line in enumerate(lines, 1) if len(line) > LINE_MAX]
    assert long == [], f"{path.name}: lines longer than {LINE_MAX} characters (line, length): {long}"


def test_the_layout_is_taken_out_and_nothing_else():
    source = ('<ul>\n  <li>one</li>\n  {% if x %}\n    <li>two</li>\n  {% endif %}\n</ul>\n'
              '<p>Words\n  go on <a href="/">here</a> and\n  <a href="/b">there</a>, {{ n }}\n  times</p>\n'
              '<input name="a" value="{{ v }}"\n       {% if r %} required{% endif %}\n       title="t">\n'
              '<pre>  kept\n  <b>as is</b>\n</pre>\n<textarea rows="2"\n          cols="3">\n  typed\n</textarea>\n'
              '{{ value }}\n<i>x</i>{% if a\n      and b %}\nc{% endif %}')
    assert without_layout(source) == (
        '<ul><li>one</li>{% if x %}<li>two</li>{% endif %}</ul>'  # between tags: nothing
        '<p>Words go on <a href="/">here</a> and <a href="/b">there</a>, {{ n }} times</p>'  # words: a space
        '<input name="a" value="{{ v }}"{% if r %} required{% endif %} title="t">'  # attributes: as on one line
        '<pre>  kept\n  <b>as is</b>\n</pre><textarea rows="2" cols="3">\n  typed\n</textarea>'  # their text kept
        # after a tag and before an expression, and inside Jinja's tags: as written (Jinja's own
        # trim_blocks and lstrip_blocks act there, as they always did)
        '\n{{ value }}\n<i>x</i>{% if a\n      and b %}\nc{% endif %}')


def test_every_template_is_compiled_without_its_layout():
    """The environment compiles each template from its source with the layout out (once, at
    compile: the feed renders these fragments many times a second)."""
    for path in templates():
        source = path.read_text()
        assert env.preprocess(source, path.name) == without_layout(source), path.name
