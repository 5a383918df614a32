"""Code blocks: their wrapper, Pygments' lexers, and highlighting (whole, or growing).

Why a module of its own: ``engine`` renders a fence through these; the growing render of
a long fence is highlighted a chunk of lines at a time, each chunk once, so a fence of
thousands of lines still streaming costs each render its last chunk, not all its lines.
"""

from __future__ import annotations

import functools

from markdown_it.common.utils import escapeHtml
from pygments import highlight as _pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

from . import counting

CODE_CLASS = "hl"  # Pygments' cssclass; static/code.css styles `.hl`

_FORMATTER = HtmlFormatter(cssclass=CODE_CLASS, wrapcode=True)
_PRE = '<pre tabindex="0">'  # focusable: a long line scrolls with the keyboard
_LANG_MAX = 32  # characters of a fence's language shown in its header


def _code_head(lang: str) -> str:
    """A code block's header: its language, and a Copy button (static/app.js copies the
    nearest <code>; class js-only hides it where script does not run)."""
    label = escapeHtml(lang[:_LANG_MAX]) if lang else ""
    return (
        f'<div class="code-head"><span class="lang">{label}</span>'
        '<button type="button" class="copy js-only" data-copy="code">Copy</button></div>'
    )


def code_block_html(lang: str, inner: str) -> str:
    """The wrapper every code block has: header, then the (highlighted or plain) code,
    last, so that a fence still streaming grows at the end of the block."""
    return f'<div class="code">{_code_head(lang)}{inner}</div>'


@functools.lru_cache(maxsize=256)
def lexer_of(name: str):
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=True)
    except (ClassNotFound, ValueError, TypeError):
        return None


def _highlight(lang: str, code: str) -> str | None:
    """Highlighted HTML (no trailing newline), or None when Pygments has no lexer."""
    lexer = lexer_of(lang.lower())
    if lexer is None:
        return None
    if counting.COUNTING:
        counting.add("highlighted", len(code))
    html = _pygments_highlight(code, lexer, _FORMATTER).rstrip("\n")
    return html.replace("<pre>", _PRE, 1)


highlighted_html = functools.lru_cache(maxsize=512)(_highlight)
# a fence still streaming (growing renders) is highlighted again for each new line: its
# own cache, so that those prefixes do not push finished fences out of the one above
_highlighted_growing = functools.lru_cache(maxsize=128)(_highlight)


@functools.lru_cache(maxsize=64)
def _highlight_shell(lang: str) -> str:
    """What `highlighted_html` wraps around the code, with no code in it."""
    html = highlighted_html(lang, "\n") or plain_code("")
    return html[: html.index("<code>") + 6] + html[html.rindex("</code>") :]


def plain_code(code: str) -> str:
    return f'<div class="{CODE_CLASS}">{_PRE}<code>{escapeHtml(code)}</code></pre></div>'


# A fence still streaming is highlighted in chunks of this many lines, each lexed from the
# lexer's start state and cached: a render re-lexes only the last chunk. One chunk is the
# whole highlight of the fence (the answers of the tests: byte for byte what a whole
# highlight gives); past it, a construct that spans a chunk's end (a string of many
# lines) may show highlighted otherwise until the fence closes, when it is highlighted
# whole and that block is sent again once.
FENCE_CHUNK = 64
_NOWRAP = HtmlFormatter(nowrap=True)


@functools.lru_cache(maxsize=1024)
def _chunk_html(lang: str, chunk: str) -> str:
    lexer = lexer_of(lang.lower())
    if counting.COUNTING:
        counting.add("highlighted", len(chunk))
    return _pygments_highlight(chunk, lexer, _NOWRAP) if lexer is not None else escapeHtml(chunk)


def highlight_growing(lang: str, code: str) -> str:
    """A streaming fence's code (whole lines, in a language Pygments knows) highlighted."""
    if not code:
        return _highlight_shell(lang)
    if code.count("\n", 0, len(code) - 1) < FENCE_CHUNK:
        return str(_highlighted_growing(lang, code))
    shell = _highlight_shell(lang)
    at = shell.index("<code>") + 6
    parts, start = [], 0
    while start < len(code):
        end = start
        for _ in range(FENCE_CHUNK):
            end = code.find("\n", end) + 1
            if not end:
                end = len(code)
                break
        parts.append(_chunk_html(lang, code[start:end]))
        start = end
    return shell[:at] + "".join(parts) + shell[at:]
