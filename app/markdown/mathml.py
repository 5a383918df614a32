"""Math in Markdown: the delimiters, and LaTeX -> MathML that only holds MathML.

Why a module of its own: math is the one place where another library (latex2mathml)
writes HTML for the page, so what it may write is decided here, in one place to audit.
Its output is never passed through: it is parsed and rebuilt from an allow-list of
MathML elements and attributes (no ``href``, ``style``, ``class``, no foreign element, no
comment); anything else, an input over ``MATH_MAX`` characters or nested deeper than
``MATH_DEPTH`` braces, and every exception latex2mathml raises, becomes the formula's
source in a ``<code class="math-source">`` instead.

Delimiters (``add_math`` wires them into a MarkdownIt):

- ``$…$`` inline and ``$$…$$`` (its own lines: a display block; inside a paragraph:
  display math in the line) through mdit-py-plugins' dollarmath, with no space inside the
  dollars and no digit outside them, so ``$5 and $10`` stays text; no blank line inside
  ``$$`` (as in LaTeX);
- ``\\(…\\)`` inline and ``\\[…\\]`` (its own lines: a display block; inside a paragraph:
  display math in the line), rules of this module: a closer is looked for at most
  ``MATH_MAX`` characters on, so a text full of openers stays linear.

The math rules run before markdown-it's backslash escapes, so ``\\,`` reaches LaTeX.
Display math sits in a focusable region (``tabindex="0"``, ``role="region"``) that
scrolls sideways when the formula is wider than the answer.
"""

from __future__ import annotations

import functools
import html
import re
from html.parser import HTMLParser
from typing import Sequence

from latex2mathml.converter import convert as _latex2mathml
from markdown_it import MarkdownIt
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.rules_inline.state_inline import StateInline
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.dollarmath.index import math_inline_dollar

MATH_MAX = 2000  # characters of LaTeX in one formula; longer ones show as source
MATH_DEPTH = 40  # nested braces in one formula; deeper ones show as source
_OUT_MAX = 64 * 1024  # characters of MathML one formula may become

# MathML Core's presentation elements (no <maction>, no <annotation-xml>: it can hold HTML)
ELEMENTS = frozenset(
    "math mrow mi mn mo ms mtext mspace msub msup msubsup munder mover munderover mfrac"
    " msqrt mroot mstyle merror mpadded mphantom mtable mtr mtd mmultiscripts mprescripts"
    " none menclose semantics annotation".split()
)
ATTRIBUTES = frozenset(
    "mathvariant mathcolor mathbackground mathsize displaystyle scriptlevel stretchy fence"
    " separator form lspace rspace minsize maxsize largeop movablelimits symmetric accent"
    " accentunder linethickness width height depth voffset columnalign rowalign"
    " columnspacing rowspacing columnlines rowlines frame framespacing equalrows"
    " equalcolumns notation columnspan rowspan dir align linebreak".split()
)
# values: words, numbers, lengths, #colours; no ':' (no scheme), no quotes, no parens
_VALUE = re.compile(r"[-+#.%a-zA-Z0-9 ]{0,64}")
_REGION = 'tabindex="0" role="region" aria-label="Formula"'


class _Unsafe(Exception):
    """latex2mathml wrote something that is not allow-listed MathML."""


class _Rebuild(HTMLParser):
    """MathML rebuilt from what latex2mathml wrote: allowed elements and attributes only,
    text escaped again, every element closed explicitly."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ELEMENTS or (tag == "math") != (not self.open):
            raise _Unsafe(tag)
        kept = "".join(
            f' {name}="{html.escape(value, quote=True)}"'
            for name, value in attrs
            if name in ATTRIBUTES and value is not None and _VALUE.fullmatch(value)
        )
        self.out.append(f"<{tag}{kept}>")
        self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open.pop() != tag:
            raise _Unsafe(f"/{tag}")
        self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if not self.open:
            if data.strip():
                raise _Unsafe("text outside <math>")
            return
        self.out.append(html.escape(data, quote=False))

    def _refuse(self, data: str) -> None:
        raise _Unsafe(data[:20])

    handle_comment = handle_decl = handle_pi = unknown_decl = _refuse  # type: ignore[assignment]


def _depth(latex: str) -> int:
    deepest = depth = 0
    for ch in latex:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth -= 1
    return deepest


def _source(latex: str) -> str:
    return f'<code class="math-source">{html.escape(latex, quote=False)}</code>'


@functools.lru_cache(maxsize=1024)
def to_mathml(latex: str, display: bool) -> str:
    """Safe HTML for one formula: allow-listed MathML, or its source as code."""
    latex = latex.strip()
    if not latex or len(latex) > MATH_MAX or _depth(latex) > MATH_DEPTH:
        return _source(latex)
    try:
        written = _latex2mathml(latex, display="block" if display else "inline")
        if len(written) > _OUT_MAX:
            return _source(latex)
        rebuilt = _Rebuild()
        rebuilt.feed(written)
        rebuilt.close()
    except Exception:  # latex2mathml's own errors, recursion, and _Unsafe alike
        return _source(latex)
    if rebuilt.open or not rebuilt.out or rebuilt.out[0] != "<math>":
        return _source(latex)
    mode = "block" if display else "inline"
    return f'<math display="{mode}">' + "".join(rebuilt.out[1:])


# --------------------------------------------------------------------------- rules

# `$5 and $10`: a space inside the dollars, or a digit outside them, makes no math
_DOLLAR = {"allow_space": False, "allow_digits": False, "double_inline": True}
# the inline rule as the MarkdownIt has it (scan.py asks it where math ends)
dollar_inline = math_inline_dollar(False, False, True)


def bracket_inline(state: StateInline, silent: bool) -> bool:
    """``\\(…\\)`` (inline) and ``\\[…\\]`` (display, in the line)."""
    src, pos = state.src, state.pos
    if src[pos] != "\\" or pos + 1 >= state.posMax or src[pos + 1] not in "([":
        return False
    display = src[pos + 1] == "["
    close = "\\]" if display else "\\)"
    end = src.find(close, pos + 2, min(state.posMax, pos + 2 + MATH_MAX + len(close)))
    if end < 0 or not src[pos + 2 : end].strip():
        return False
    if not silent:
        token = state.push("math_inline_double" if display else "math_inline", "math", 0)
        token.content = src[pos + 2 : end]
        token.markup = "\\[" if display else "\\("
    state.pos = end + 2
    return True


def _bracket_block(state: StateBlock, start: int, end_line: int, silent: bool) -> bool:
    """``\\[`` opening a line and ``\\]`` ending one (no blank line between): a display
    block. A ``\\]`` with more text after it on its line leaves it all to the paragraph."""
    if state.is_code_block(start):
        return False
    pos = state.bMarks[start] + state.tShift[start]
    if not state.src.startswith("\\[", pos):
        return False
    line, first = start, pos + 2
    while line < end_line:
        begin = first if line == start else state.bMarks[line] + state.tShift[line]
        text = state.src[begin : state.eMarks[line]]
        if line > start and not text.strip():
            return False
        closes = text.find("\\]")
        if closes >= 0:
            if text[closes + 2 :].strip():
                return False
            break
        if state.eMarks[line] - pos > MATH_MAX:
            return False
        line += 1
    else:
        return False
    if silent:
        return True
    parts = []
    for n in range(start, line + 1):
        begin = first if n == start else state.bMarks[n] + state.tShift[n]
        parts.append(state.src[begin : state.eMarks[n]])
    body = "\n".join(parts)
    token = state.push("math_block", "math", 0)
    token.block = True
    token.content = body[: body.rfind("\\]")]
    token.markup = "\\["
    token.map = [start, line + 1]
    state.line = line + 1
    return True


# --------------------------------------------------------------------------- render


def _inline(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    return to_mathml(tokens[idx].content, False)


def _inline_display(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    # inside a paragraph: phrasing content, a <span> shown as a block
    return f'<span class="math-display" {_REGION}>{to_mathml(tokens[idx].content, True)}</span>'


def _block(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    return f'<div class="math-display" {_REGION}>{to_mathml(tokens[idx].content, True)}</div>\n'


def add_math(md: MarkdownIt) -> None:
    dollarmath_plugin(
        md,
        allow_labels=False,  # `$$ x $$ (1)` would render an <a href="#1">
        allow_blank_lines=False,  # as in LaTeX (and an unclosed `$$` stays a paragraph)
        **_DOLLAR,
    )
    md.inline.ruler.before("escape", "math_brackets", bracket_inline)
    md.block.ruler.before(
        "fence", "math_block_brackets", _bracket_block,
        {"alt": ["paragraph", "reference", "blockquote", "list"]},
    )
    md.add_render_rule("math_inline", _inline)
    md.add_render_rule("math_inline_double", _inline_display)
    md.add_render_rule("math_block", _block)
