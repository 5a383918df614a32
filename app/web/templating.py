"""The templates: their environment (loaded once, their layout taken out, filters and
helpers) and a fragment's render; whole pages are render.py's.

Items and the feed's fragments are rendered in live.py, with the same templates, so a
live page and a fresh render of the same rows are the same DOM.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext

from ..branches import Step
from ..providers.catalog import shown_name
from ..tables import Item, chips, input_shown
from .ask_view import ask_view

ROOT = Path(__file__).resolve().parent.parent.parent
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"

# Templates are written one element a line, indented, and no line longer than 200
# characters (tests/test_templates.py). The line breaks and indentation that layout adds are
# not the page's: they are taken out once, when a template is compiled, so the page is the
# bytes the template written on one line gives:
# - between two tags (the end of an HTML tag, `%}` or `#}`, then `<`, `{%` or `{#`): nothing;
# - between an attribute's closing quote and a `{% if %}` that adds one (it carries its own
#   space): nothing;
# - between words of text, between a word and a tag after it, or between a tag's attributes
#   (not after `>`, `%}` or `#}`, not before `{%` or `{#`: there Jinja's trim_blocks and
#   lstrip_blocks act): one space, the one the break stands for;
# - between `%}` and an attribute (`name=`) in a tag: one space.
# Everything inside <pre> and <textarea> (not their start tags), and inside Jinja's own
# tags, stays as written.
_TEXT_ELEMENT = r"(?P<start><(?P<tag>pre|textarea)\b[^>]*>)(?P<text>.*?</(?P=tag)\s*>)"
_KEPT = r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}"
_BREAK = r"[ \t]*\n[ \t\r\n]*"
_BETWEEN_TAGS = rf"(?:(?:(?<=>)|(?<=%\}})|(?<=#\}})){_BREAK}(?=<|\{{%|\{{#)|(?<=\"){_BREAK}(?=\{{%))"
_IN_A_LINE = (rf"(?:(?<=[^\s>])(?<!%\}})(?<!#\}}){_BREAK}(?=[^\s<{{]|\{{\{{)|(?<=[^\s>}}]){_BREAK}(?=<)"
              rf"|(?<=%\}}){_BREAK}(?=[A-Za-z_:][-\w:.]*=))")
_LAYOUT = re.compile(f"{_TEXT_ELEMENT}|(?P<keep>{_KEPT})|(?P<none>{_BETWEEN_TAGS})|{_IN_A_LINE}", re.S | re.I)


def without_layout(source: str) -> str:
    """A template's source without the line breaks and indentation of its layout."""
    return _LAYOUT.sub(_without, source)


def _without(m: re.Match) -> str:
    if m.group("text") is not None:  # a <pre> or <textarea>: its start tag laid out, its text as written
        return without_layout(m.group("start")) + m.group("text")
    if m.group("keep") is not None:
        return m.group("keep")
    return "" if m.group("none") is not None else " "


class Layout(jinja2.ext.Extension):
    """Takes the templates' layout out as they are compiled (once per template and process)."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        return without_layout(source)


env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    extensions=[Layout],
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
    # templates change with the code, not while it serves: no stat of the file at every
    # render (the live feed renders a fragment per message of every followed answer)
    auto_reload=False,
)


def item_key(it: Item) -> str:
    """The order of an item on the page (`tables.order`): its turn, then its id, fixed width so
    any compare agrees. A steering message the model read sorts right after the item that was
    last when it read it: that item's key with its own id appended."""
    if it.read_after:
        return f"{it.turn:010d}-{it.read_after:010d}-{it.id:010d}"
    return f"{it.turn or it.id:010d}-{it.id:010d}"


def cut_key(start: int) -> str:
    """The place of the marker where the model's view starts: just before turn `start`."""
    return f"{start:010d}-{0:010d}"


def answer_key(turn: int) -> str:
    """The place of a turn's answer actions: after every item of the turn."""
    return f"{turn:010d}-{10**10 - 1}"


def isotime(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def shorttime(t: float) -> str:
    """When, as a person reads it; in UTC (the server does not know the reader's zone)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%-d %b %Y, %H:%M UTC")


def item_dom_id(it: Item) -> str:
    return f"i{it.id}"


def human_size(n: float) -> str:
    """A file's size as people read it: 980 B, 1.5 KB, 12 KB, 3.4 MB."""
    if n < 1000:
        return f"{int(n)} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1000
        if n < 999.5 or unit == "GB":
            return f"{n:.1f} {unit}" if n < 9.95 else f"{n:.0f} {unit}"
    return ""


def seconds(t: float) -> str:
    """How long the model reasoned: "4 s", "1 min 5 s" (at least 1 s)."""
    s = max(1, round(t))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"


def model_name(model_id: str) -> str:
    """A model id as a byline shows it: a model listed by its file's path by its file's name
    (`local:/…/SmolLM2-135M-Instruct.Q4_1.gguf` -> `local:SmolLM2-135M-Instruct.Q4_1`)."""
    where, colon, name = model_id.partition(":")
    return f"{where}:{shown_name(name)}" if colon else shown_name(model_id)


env.filters.update(isotime=isotime, shorttime=shorttime, model_name=model_name)
env.globals.update(item_key=item_key, cut_key=cut_key, answer_key=answer_key, item_dom_id=item_dom_id,
                   input_shown=input_shown,
                   chips=chips, human_size=human_size, seconds=seconds, ask_view=ask_view)


def fragment(name: str, **context: Any) -> str:
    return env.get_template(name).render(**context)


def removal(dom: str) -> str:
    """What takes the element with id `dom` off a page: an out-of-band delete (ids are ours:
    letters and digits, no quoting needed)."""
    return f'<div id="{dom}" hx-swap-oob="delete"></div>'


# --- what an item's rendering depends on ---------------------------------------------------


@dataclass(frozen=True)
class View:
    """What an item's rendering depends on beyond its own row."""

    running: int | None = None                  # the user item being answered now
    steps: dict[int, Step] = field(default_factory=dict)  # the current path's turns, by user item id
    files: dict[int, dict[str, Any]] = field(default_factory=dict)  # file rows the items name
    editing: int | None = None                  # the message opened for editing (?edit=, without script)
    gone: frozenset[int] = frozenset()          # passages the items cite whose document was deleted since
    documents: dict[int, Any] = field(default_factory=dict)  # attached files read as documents, by file id
    picks: dict[int, list] = field(default_factory=dict)  # messages' picks with "/", named, by item id
