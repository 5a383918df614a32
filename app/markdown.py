"""Safe Markdown -> HTML, split into keyed top-level blocks for the live feed.

Public API
----------
``render(text, growing=False) -> str``
    The whole Markdown as HTML (what ``MarkdownIt.render`` gives: every top-level block
    ends with ``"\\n"``). For places that need no ids (messages, skill bodies ...).
``keyed(text, key, growing=False) -> list[Block]``
    The same HTML cut into top-level blocks. Block ``n`` (from 0) has id ``f"{key}-{n}"``
    and its ``html`` is one wrapper element carrying that id::

        <div class="md" id="{key}-{n}">{the block's HTML}</div>

    with the ``"\\n"`` that ends the block dropped, so that joining the blocks leaves no
    text between them (htmx's upsert drops text nodes between elements). Precisely::

        "".join(b.html for b in keyed(t, k)) ==
        "".join(f'<div class="md" id="{k}-{n}">{part}</div>' ...)
        where render(t) == "".join(part + "\\n" for part in parts)

    A top-level block is a paragraph, heading, fence, indented code, hr, table,
    blockquote or a whole list (nested lists included). The text is parsed once with one
    env, so reference links defined later resolve in earlier blocks. Empty text -> [].

    ``growing=True`` (both functions): ``text`` is the start of an answer that is still
    streaming. The render is then of a slightly shorter text, closed at its very end
    (see "Growing text" below), so that each block's HTML is, as far as it can be, the
    HTML a longer text gives it minus something at its end: the feed can send appends.
    ``growing=False`` is the final render, exactly as before. The rules that keep the
    HTML safe are the same for both.
``block_changes(sent, blocks) -> Changes``  (a NamedTuple: changed, new, gone)
    What to send to a page that holds ``sent`` (id -> html) of this item: blocks whose
    html changed, blocks not sent yet, and sent ids that no longer exist.
``appended(old_html, new_html) -> str | None``
    The append path: when ``new_html`` is ``old_html`` with balanced HTML inserted just
    before one of the closing tags that end it, the inserted part, else None.
``append_at(old_html, new_html) -> tuple[int, str] | None`` and
``append_selector(block_id, depth) -> str``
    The same, plus where it goes: ``depth`` 0 is the block element, 1 its last element
    child, ...; the selector is ``[id="k-3"]>:last-child>...`` for a ``beforeend`` swap.

Growing text (``growing=True``; the details are above ``_growing_tokens``):

- a reveal grid: only the first ``REVEAL_STEP * (len(text) // REVEAL_STEP)`` characters
  (40: ~10 tokens, ~200 ms at 50 tokens/s) are rendered, so a follower gets at most one
  update per 40 characters however often the runner flushes (each update costs ~60
  bytes of wrapper: at ~10 characters a flush that alone was 2.3x the final HTML);
- the edge is stabilised: unclosed ``**`` / ``*`` / ``_`` / ``~~`` / inline code at the
  end are closed (``**bol`` -> ``<strong>bol</strong>``, so ``**bold**`` is an append
  inside it); a link or image waits from its ``[`` until its ``)`` (none is guessed),
  and so do a trailing bare URL or email (linkify), ``<autolink``, a delimiter run,
  ``\\``, ``!``, ``&entity``, a line of only block syntax (``-``, ``1.``, ``##``,
  ``>``, ``|---|``, fence markers), a table's header and partial rows, a reference
  definition being typed; a fence in a known language grows by whole lines,
  highlighted as they come, so its closing changes nothing;
- no close is skipped: where the render at the previous grid point showed an element
  open (auto-closed ``**bol``, a list item), this one stops at its close, and what
  follows comes one step later as an append after it.

What stays a re-send: a list turning loose (a blank line between items re-renders all
items with ``<p>``), a reference definition arriving at the end (the blocks that use it
change), a fence whose highlighting of earlier lines changes at its close (a
multi-line docstring), and the final render jumping past a close the last growing
render showed open (one re-send of the last block, at most). A follower sees the text
up to ~40 characters (plus what waits at the edge) later than the runner wrote it; an
answer shorter than that shows nothing until it is done (then the final render).

Speed: one module-level MarkdownIt; lexers and highlighted fences are cached, and so are
inline children (see ``_inline_cached``), so a flush of a growing answer re-parses the
blocks but re-does inline work only for the block that grew. ~8,000 chars (~2,000
tokens): ~2 ms per call warm, ~8.5 ms cold (first render, 10 fences to highlight).
``growing=True`` parses the block structure once, then only the last blocks again with
their edge changed: about what ``growing=False`` costs (~1 ms a render on average over
a streamed ~8,000-char answer, ~2.5 ms at its full length); a call for the same grid
point as a recent one is a cache hit (benchmarks/markdown_stream.py).

Safety: raw HTML is never passed through (``html=False``); only ``http:``, ``https:``
and ``mailto:`` links survive (any other destination leaves the Markdown as text);
every link gets ``rel="nofollow noopener noreferrer"`` and ``target="_blank"``; a
Markdown image becomes a link to its URL labelled with its alt text (never ``<img>``,
the page never fetches from another host). Bare domains are linkified only when they
start with ``www.`` (otherwise ``app.py`` or ``README.md`` -- ccTLDs -- became links).

Code: a *closed* fence whose language Pygments knows is highlighted on the server with
CSS classes (``static/code.css``). Unknown languages, indented code and a fence left
open at the very end of the text (the model is still streaming it) render as escaped
plain code in the same wrapper: ``<div class="hl"><pre><code>...</code></pre></div>``.
Keeping a streaming fence plain makes its HTML grow only at the end, so the feed can
append to it; it is highlighted once, when its closing fence arrives. With
``growing=True`` a streaming fence in a known language shows its whole lines,
highlighted (Pygments' HTML is per line, so it grows only at its end too).
"""

from __future__ import annotations

import functools
import html as _html
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from linkify_it import LinkifyIt
from markdown_it import MarkdownIt
from markdown_it.common.utils import (
    escapeHtml,
    isPunctChar,
    isWhiteSpace,
    normalizeReference,
    unescapeAll,
)
from markdown_it.rules_block.fence import fence as _fence_rule
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.rules_core.linkify import linkify as _core_linkify
from markdown_it.rules_core.state_core import StateCore
from markdown_it.rules_core.text_join import text_join as _core_text_join
from markdown_it.token import Token
from pygments import highlight as _pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.util import ClassNotFound

__all__ = [
    "Block",
    "Changes",
    "render",
    "keyed",
    "block_changes",
    "appended",
    "append_at",
    "append_selector",
    "CODE_CLASS",
    "BLOCK_CLASS",
    "REVEAL_STEP",
]

CODE_CLASS = "hl"  # Pygments' cssclass; static/code.css styles `.hl`
BLOCK_CLASS = "md"
LINK_REL = "nofollow noopener noreferrer"


@dataclass(frozen=True, slots=True)
class Block:
    id: str
    html: str


class Changes(NamedTuple):
    changed: list[Block]
    new: list[Block]
    gone: list[str]


# --------------------------------------------------------------------------- links

# Checked on the *normalized* destination (entities decoded, then percent-encoded), so
# `jav&#x09;ascript:` arrives as `jav%09ascript:` and fails like every other scheme.
_SAFE_URL = re.compile(r"(?:https?://[^\s/?#\\]|mailto:[^\s])", re.IGNORECASE)
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f\\]")


def _validate_link(url: str) -> bool:
    return bool(_SAFE_URL.match(url)) and not _BAD_CHARS.search(url)


class _Linkify(LinkifyIt):
    """linkify-it, but a bare domain needs a `www.` prefix (like GitHub)."""

    def match(self, text: str):  # type: ignore[override]
        found = super().match(text)
        if not found:
            return found
        kept = [m for m in found if m.schema or m.raw.lower().startswith("www.")]
        return kept or None


# --------------------------------------------------------------------------- code

_FORMATTER = HtmlFormatter(cssclass=CODE_CLASS, wrapcode=True)


@functools.lru_cache(maxsize=256)
def _lexer(name: str):
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=True)
    except (ClassNotFound, ValueError, TypeError):
        return None


def _highlight(lang: str, code: str) -> str | None:
    """Highlighted HTML (no trailing newline), or None when Pygments has no lexer."""
    lexer = _lexer(lang.lower())
    if lexer is None:
        return None
    return _pygments_highlight(code, lexer, _FORMATTER).rstrip("\n")


_highlighted = functools.lru_cache(maxsize=512)(_highlight)
# a fence still streaming (growing renders) is highlighted again for each new line: its
# own cache, so that those prefixes do not push finished fences out of the one above
_highlighted_growing = functools.lru_cache(maxsize=128)(_highlight)


@functools.lru_cache(maxsize=64)
def _highlight_shell(lang: str) -> str:
    """What `_highlighted` wraps around the code, with no code in it."""
    html = _highlighted(lang, "\n") or _plain_code("")
    return html[: html.index("<code>") + 6] + html[html.rindex("</code>") :]


def _plain_code(code: str) -> str:
    return f'<div class="{CODE_CLASS}"><pre><code>{escapeHtml(code)}</code></pre></div>'


def _fence_closed(state: StateBlock, start: int, markup: str) -> bool:
    """Whether the fence that just ended at state.line had its closing marker."""
    last = state.line - 1
    if last <= start or state.is_code_block(last):
        return False
    pos = state.bMarks[last] + state.tShift[last]
    end = state.eMarks[last]
    line = state.src[pos:end]
    marker = markup[0]
    stripped = line.lstrip(marker)
    return len(line) - len(stripped) >= len(markup) and stripped.strip(" \t") == ""


def _fence(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    count = len(state.tokens)
    if not _fence_rule(state, start, end, silent):
        return False
    if not silent and len(state.tokens) > count:
        token = state.tokens[-1]
        # Unclosed and running to the end of the text: the model is still writing it.
        token.meta["streaming"] = state.line >= len(state.bMarks) - 1 and not (
            _fence_closed(state, start, token.markup)
        )
    return True


# --------------------------------------------------------------------------- inline cache

# keyed() re-parses a growing answer on every flush, and inline parsing + linkify is
# about half of the time. An inline token's children depend only on its content and on
# the reference definitions, so the finished children (after linkify and text_join)
# are cached by (references, content) and shared. The renderer only ever sets the same
# rel/target attributes on them again, so sharing is safe.
_INLINE_CACHE: dict[tuple[str, str], list[Token]] = {}
_INLINE_CACHE_MAX = 4096


def _inline_cached(state: StateCore) -> None:
    refs = state.env.get("references") if isinstance(state.env, dict) else None
    sig = repr(sorted(refs.items())) if refs else ""
    fresh: list[Token] = []
    for token in state.tokens:
        if token.type != "inline":
            continue
        children = _INLINE_CACHE.get((sig, token.content))
        if children is not None:
            token.children = children
        else:
            token.children = []
            state.md.inline.parse(token.content, state.md, state.env, token.children)
            fresh.append(token)
    if not fresh:
        return
    sub = StateCore("", state.md, state.env, fresh)
    _core_linkify(sub)
    _core_text_join(sub)
    if len(_INLINE_CACHE) + len(fresh) > _INLINE_CACHE_MAX:
        _INLINE_CACHE.clear()
    for token in fresh:
        _INLINE_CACHE[(sig, token.content)] = token.children or []


# --------------------------------------------------------------------------- renderer


def _render_fence(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    token = tokens[idx]
    info = unescapeAll(token.info).strip() if token.info else ""
    lang = info.split(maxsplit=1)[0] if info else ""
    if (
        lang
        and token.meta.get("streaming")
        and isinstance(env, dict)
        and env.get(_GROWING)
        and _lexer(lang.lower()) is not None
    ):
        # growing: the fence holds whole lines only (see _stable_fence), highlighted as
        # they come; highlighting is per line, so each new line is an append
        if not token.content:
            return _highlight_shell(lang) + "\n"
        return str(_highlighted_growing(lang, token.content)) + "\n"
    if lang and token.content and not token.meta.get("streaming"):
        html = _highlighted(lang, token.content)
        if html is not None:
            return html + "\n"
    return _plain_code(token.content) + "\n"


def _render_code_block(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    return _plain_code(tokens[idx].content) + "\n"


def _render_link_open(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    token = tokens[idx]
    token.attrSet("rel", LINK_REL)
    token.attrSet("target", "_blank")
    return self.renderToken(tokens, idx, options, env)


def _inside_link(tokens: Sequence[Token], idx: int) -> bool:
    depth = 0
    for i in range(idx - 1, -1, -1):
        kind = tokens[i].type
        if kind == "link_close":
            depth += 1
        elif kind == "link_open":
            if depth == 0:
                return True
            depth -= 1
    return False


def _render_image(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = self.renderInlineAsText(token.children or [], options, env)
    label = escapeHtml(alt or src)
    if _inside_link(tokens, idx):  # no <a> inside <a>
        return f'<span class="md-image">{label}</span>'
    title = token.attrGet("title")
    title_attr = f' title="{escapeHtml(str(title))}"' if title else ""
    return (
        f'<a href="{escapeHtml(src)}"{title_attr} rel="{LINK_REL}" target="_blank"'
        f' class="md-image">{label}</a>'
    )


def _make_md() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": True, "typographer": False},
    )
    md.options["html"] = False  # always, whatever the preset says
    md.enable(["linkify", "table", "strikethrough"])
    md.linkify = _Linkify(options={"fuzzy_link": True, "fuzzy_email": True, "fuzzy_ip": False})
    md.validateLink = _validate_link  # type: ignore[method-assign]
    md.block.ruler.at(
        "fence", _fence, {"alt": ["paragraph", "reference", "blockquote", "list"]}
    )
    # inline parsing, linkify and text_join happen (cached) in one core rule
    md.core.ruler.at("inline", _inline_cached)
    md.core.ruler.disable(["linkify", "text_join"])
    md.add_render_rule("fence", _render_fence)
    md.add_render_rule("code_block", _render_code_block)
    md.add_render_rule("link_open", _render_link_open)
    md.add_render_rule("image", _render_image)
    return md


_md = _make_md()


# --------------------------------------------------------------------------- render


def render(text: str, growing: bool = False) -> str:
    """Safe HTML for the whole Markdown text (no ids). `growing`: see `keyed`."""
    if not growing:
        return _md.render(text or "")
    env: dict[str, Any] = {}
    tokens = _growing_tokens(_growing_source(text or ""), env)
    return _md.renderer.render(tokens, _md.options, env)


def _top_level(tokens: list[Token]) -> list[tuple[int, int]]:
    """[start, end) token ranges of the top-level blocks."""
    spans = []
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        if token.nesting == 1:
            j = i + 1
            while j < n and not (tokens[j].level == token.level and tokens[j].nesting == -1):
                j += 1
            spans.append((i, j + 1))
            i = j + 1
        else:
            spans.append((i, i + 1))
            i += 1
    return spans


def keyed(text: str, key: str, growing: bool = False) -> list[Block]:
    """Top-level blocks of the Markdown, block n with id f"{key}-{n}".

    `growing=True`: `text` is the start of an answer still streaming; its edge is
    stabilised (see "Growing text" in the module docstring) so that each block's HTML is,
    as far as possible, what a longer text gives it with something inserted at its end.
    """
    if not text:
        return []
    env: dict[str, Any] = {}
    if growing:
        src = _growing_source(text)
        # the flushes between two grid points all render the same text: once
        found = _GROWN.get((src, key, REVEAL_STEP))
        if found is not None:
            return list(found)
        tokens = _growing_tokens(src, env)
    else:
        tokens = _md.parse(text, env)
    renderer = _md.renderer
    options = _md.options
    safe_key = _html.escape(key, quote=True)
    blocks = []
    for n, (start, end) in enumerate(_top_level(tokens)):
        inner = renderer.render(tokens[start:end], options, env)
        if inner.endswith("\n"):
            inner = inner[:-1]
        blocks.append(
            Block(
                f"{key}-{n}",
                f'<div class="{BLOCK_CLASS}" id="{safe_key}-{n}">{inner}</div>',
            )
        )
    if growing:
        if len(_GROWN) >= _GROWN_MAX:
            _GROWN.pop(next(iter(_GROWN)))
        _GROWN[(src, key, REVEAL_STEP)] = tuple(blocks)
    return blocks


# --------------------------------------------------------------------------- growing
#
# keyed(text, key, growing=True) renders the start of an answer that is still streaming.
# The feed sends a changed block as an append (only what was added at its end) when the
# block's new HTML is its old HTML with something inserted before one of its closing
# tags; anything else re-sends the whole block. Each message also costs ~60 bytes of
# wrapper. So the growing render renders a slightly shorter (and at its very end closed)
# text, chosen so that what it shows now is what the longer text will show, plus more:
#
# 1. Reveal grid. Only the first REVEAL_STEP * floor(len / REVEAL_STEP) characters are
#    rendered, so a follower gets one update per REVEAL_STEP characters (40 characters
#    = ~10 tokens, ~200 ms at 50 tokens/s) however often the runner flushes: at ~10
#    characters a flush, the ~60 bytes each append costs would be twice the HTML it
#    carries. REVEAL_STEP <= 1: no grid (and no replay, see 3).
# 2. The edge (the end of the last top-level block) is stabilised:
#    - a trailing line made only of block syntax (`-`, `1.`, `##`, `>`, "```",
#      `|---|:-` ...) waits: it may become a list item, heading, hr, fence, table or
#      setext heading; so do the lines of a table being started (`| a | b |` before its
#      delimiter row), a table's body row until it is complete, a reference definition
#      being typed, and a fence's opening line until its newline;
#    - in a fence whose language Pygments knows, the partial last line waits: whole
#      lines are highlighted as they come (highlighting is per line), so the fence grows
#      by appends and its closing changes nothing; in other fences only a partial line
#      of fence characters (a closing fence arriving) waits;
#    - inline, at the end of the last paragraph or heading: unclosed `**`, `*`, `_`,
#      `~~` and inline code are closed (`**bol` renders as `<strong>bol</strong>`, and
#      `**bold**` is then an append inside it); a link or image whose `](url)` has not
#      all arrived waits from its `[` (no link is ever guessed or completed), as do a
#      trailing `<autolink`, a bare URL / email / `www.` word (linkify would give it an
#      href that changes as it grows), a trailing delimiter run, `\`, `!` or `&entity`.
# 3. No close skipped. A render whose change spans the close of an element that the
#    previous render showed open (`**bol` -> `**bold** and`, a list item ending and the
#    next starting) is not an append. The previous render was this function at the
#    previous grid point: replaying the last _LOOKBACK grid points (each stops at the
#    first close after the one before, or where its edge held back) gives where it
#    stopped, and this render stops at the first close of an element open there; what
#    follows comes one grid step later, as an append after it. (The replay starts from
#    an assumption and skips the block rules of 2, so it can miss; then that block is
#    re-sent once.)
#
# Only the end of the text changes: it is cut back (nothing before the cut differs) and
# closers are added. The blocks before the region (the last blocks, from the one where
# the replay starts) are the full parse's; those in it are parsed again from its first
# line. The changed text goes through the same safe renderer: cutting text or adding
# `*`, `_`, `~` or "`" cannot produce raw HTML or a link that the text does not have.

REVEAL_STEP = 40  # characters a growing render moves on by (the reveal grid)
_LOOKBACK = 16  # grid points replayed to find the previous render's edge
_LINK_HOLD = 400  # a pending link waits while its `[` is at most this far from the end
_GROWING = "tabletalk.growing"  # env key: fences still streaming are highlighted
_INF = 1 << 60
_RAW = "raw"  # an end that keeps its trailing newline (inside a fence)

_ASCII_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_NEWLINES = re.compile(r"\r\n?")
_SYNTAX_LINE = re.compile(r"[ \t>]*[-+*_=#|:`~.)0-9 \t]*")
_DEF_LINE = re.compile(r" {0,3}\[(?:[^\]\\]|\\.)*(?:\](?::.*)?)?")
_FENCE_CHARS = re.compile(r"[ \t>]*(?:`*|~*)[ \t]*")
_AUTOLINK = re.compile(
    r"<(?:[a-zA-Z][a-zA-Z0-9+.\-]{1,31}:[^<>\x00-\x20]*"
    r"|[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*)>"
)
_AUTOLINK_START = re.compile(r"<[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~:@-]*")
_ENTITY_START = re.compile(r"&(?:#[xX]?[0-9a-fA-F]{0,8}|[A-Za-z][A-Za-z0-9]{0,31})?")
_URL_STARTS = ("http://", "https://", "mailto:", "www.")
_TABLE_INNER = frozenset(("thead_open", "tbody_open", "tr_open", "th_open", "td_open"))

Mark = tuple[int, int, Any]  # (opens at, closes at or _INF, how to end there)


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer("\n", text))]


def _block_tokens(src: str, env: dict[str, Any]) -> list[Token]:
    tokens: list[Token] = []
    _md.block.parse(src, _md, env, tokens)
    return tokens


def _finish(tokens: list[Token], env: dict[str, Any]) -> list[Token]:
    """The core rules after `block` (inline, cached) on block tokens."""
    state = StateCore("", _md, env, tokens)
    for rule in _md.core.ruler.__rules__:
        if rule.enabled and rule.name not in ("normalize", "block"):
            rule.fn(state)
    return state.tokens


_GROWN: dict[tuple[str, str, int], tuple[Block, ...]] = {}  # (source, key, grid) -> blocks
_GROWN_MAX = 64


def _growing_source(text: str) -> str:
    """The text a growing render starts from: normalized (as markdown-it does) and cut
    to the last grid point."""
    src = _NEWLINES.sub("\n", text).replace("\0", "\ufffd")
    grid = REVEAL_STEP if REVEAL_STEP > 1 else 0
    return src[: len(src) - len(src) % grid] if grid else src


def _growing_tokens(src: str, env: dict[str, Any]) -> list[Token]:
    """Tokens of `src` (see _growing_source) as the growing render shows it."""
    grid = REVEAL_STEP if REVEAL_STEP > 1 else 0
    limit = len(src)  # this render's grid point
    env[_GROWING] = True
    tokens = _block_tokens(src, env)
    spans = _top_level(tokens)
    starts = _line_starts(src)
    last_map = tokens[spans[-1][0]].map if spans else None
    end_line = last_map[1] if last_map else 0
    done = False  # the last block is complete: nothing at its end waits
    if src[starts[end_line]:].strip() if end_line < len(starts) else False:
        # After the last block: reference definitions (they make no tokens). The last
        # line of one may still be typed (a partial URL would resolve earlier links to
        # it, a partial title turns it into a paragraph): it waits.
        done = True
        if not src.endswith("\n"):
            src = src[: src.rfind("\n") + 1]
            env.clear()
            env[_GROWING] = True
            tokens = _block_tokens(src, env)
            spans = _top_level(tokens)
            starts = _line_starts(src)
    if not spans:
        return _finish(tokens, env)
    # the region: the top-level blocks from the one holding the look-back window's start
    reach = len(src) - grid * _LOOKBACK
    first = len(spans) - 1
    while first > 0 and starts[(tokens[spans[first][0]].map or [0])[0]] > reach:
        first -= 1
    at = spans[first][0]
    line = (tokens[at].map or [0])[0]
    origin = starts[line]
    region = src[origin:]
    toks = tokens[at:]
    for token in toks:
        if token.map:
            token.map = [token.map[0] - line, token.map[1] - line]
    stable = _stable_region(region, toks, env, grid, limit - origin, done)
    if stable != region:
        tokens = tokens[:at] + (_block_tokens(stable, env) if stable.strip() else [])
    return _finish(tokens, env)


def _stable_region(
    region: str, toks: list[Token], env: dict[str, Any], grid: int, limit: int, done: bool
) -> str:
    """`region` (whole top-level blocks running to the end of the text, their block
    tokens `toks` with maps counted from its first line) as the growing render shows it.
    `limit` is this render's grid point in the region (its end, or after it when the
    definitions that end the text were cut: then `done`, its last block is complete),
    the previous render's is `grid` characters before."""
    refs = env.get("references") or {}
    starts = _line_starts(region)
    spans = _top_level(toks)
    first, stop = spans[-1]
    end, how, edge = (
        (len(region.rstrip()), None, None)
        if done
        else _edge_end(region, starts, toks[first:stop], refs)
    )
    previous = limit - grid
    if grid and previous > 0:
        marks, edges = _marks(region, starts, toks, refs, edge)
        point, steps = previous, 1
        while point - grid > 0 and steps < _LOOKBACK:
            point -= grid
            steps += 1
        # replay: what the renders at the last grid points showed (the oldest one is
        # assumed to have stopped at no close)
        shown = _held_at(region, point, edges, refs)
        while point < previous:
            point += grid
            shown = min(_first_close(marks, shown)[0], _held_at(region, point, edges, refs))
        close, close_how = _first_close(marks, shown)
        if close < end:
            end, how = close, close_how
    return _assemble(region, end, how, refs)


def _held_at(region: str, at: int, edges: list[_Edge], refs: dict[str, Any]) -> int:
    """Where the render of region[:at] stopped, as far as its edge's inline content
    and a trailing syntax line tell (what `_edge_end` does, without the block rules)."""
    shown = len(region[:at].rstrip())
    for edge in edges:
        pos = edge.from_text(shown)
        if pos is not None:
            content = edge.content[:pos]
            hold = _scan(content, refs, True)[1]
            back = edge.to_text(len(content[:hold].rstrip()))
            if back is not None:
                shown = back
            break
    line = region.rfind("\n", 0, shown) + 1
    if _SYNTAX_LINE.fullmatch(region, line, shown):
        shown = len(region[:line].rstrip())
    return shown


def _first_close(marks: list[Mark], at: int) -> tuple[int, Any]:
    """The first close of an element that is open at `at` (shown auto-closed there)."""
    best: tuple[int, Any] = (_INF, None)
    for opens, closes, how in marks:
        if opens < at < closes < best[0]:
            best = (closes, how)
    return best


def _assemble(region: str, end: int, how: Any, refs: dict[str, Any]) -> str:
    if how is _RAW:
        return region[:end]
    if how is None:
        return region[:end].rstrip()
    edge, pos = how
    body = edge.content[:pos].rstrip()
    at = edge.to_text(len(body))
    if at is None:
        return region[:end].rstrip()
    out = region[:at] + _closers(body, refs) if body else region[:at].rstrip()
    # a cut inside a line can leave only its syntax (`  -` of a list item whose text
    # waits): that would be a setext underline, an empty item ...; it waits too
    line = out.rfind("\n") + 1
    while _SYNTAX_LINE.fullmatch(out, line):
        out = out[:line].rstrip()
        if not out:
            break
        line = out.rfind("\n") + 1
    return out


def _marks(
    region: str, starts: list[int], toks: list[Token], refs: dict[str, Any], edge: _Edge | None
) -> tuple[list[Mark], list[_Edge]]:
    """Every element in the region that can be shown open (auto-closed, or growing at
    the end) and then close: inline elements, list items, lists and paragraphs and
    fences in containers. Top-level blocks are not: each is its own item on the page.
    And the inline contents (table cells aside), as _Edge maps."""
    marks: list[Mark] = []
    edges: list[_Edge] = []
    for i, token in enumerate(toks):
        if token.map is None:
            continue
        if token.type == "inline":
            if i > 0 and toks[i - 1].type in ("th_open", "td_open"):
                continue  # tables show whole rows
            if edge is not None and edge.token is token:
                this = edge
            else:
                this = _Edge(region, starts, token)
            edges.append(this)
            spans = _scan(token.content, refs, this is edge)[0]
            for opens, closes in spans:
                o = this.to_text(opens)
                c = this.to_text(closes) if closes < _INF else _INF
                if o is not None and c is not None:
                    marks.append((o, c, (this, closes) if closes < _INF else None))
        elif token.level > 0 and (
            (token.nesting == 1 and token.type not in _TABLE_INNER and not token.hidden)
            or token.type in ("fence", "code_block", "hr")
        ):
            end = token.map[1]
            closes = len(region[: starts[end]].rstrip()) if end < len(starts) else _INF
            marks.append((starts[token.map[0]], closes, None))
    return marks, edges


def _edge_end(
    region: str, starts: list[int], toks: list[Token], refs: dict[str, Any]
) -> tuple[int, Any, _Edge | None]:
    """Where the last top-level block (`toks`) stops showing: (position in region, how
    to end there: None = cut, _RAW = cut keeping the newline, (edge, content position)
    = cut inside the edge's inline content and close what is open, the edge)."""
    leaf_at = -1
    for i in range(len(toks) - 1, -1, -1):
        if toks[i].nesting == 0 and toks[i].map is not None:
            leaf_at = i
            break
    leaf = toks[leaf_at] if leaf_at >= 0 else None
    if leaf is not None and leaf.type == "fence" and leaf.meta.get("streaming"):
        return (*_fence_end(region, starts, leaf), None)
    text = region.rstrip()
    if not text:
        return 0, None, None
    line_done = "\n" in region[len(text):]
    last = text.count("\n")
    covers = leaf is not None and leaf.map is not None and leaf.map[1] > last
    if leaf is not None and covers and leaf.type != "inline":
        return len(text), None, None  # a closed fence, indented code, an hr
    table = next((t for t in toks if t.type == "table_open" and t.map and t.map[1] > last), None)
    if table is not None:
        return _table_end(text, starts, toks, table, line_done), None, None
    opener = toks[leaf_at - 1].type if covers and leaf_at > 0 else ""
    paragraph = opener == "paragraph_open"

    # whole trailing lines that wait
    cut, k = len(text), last
    if _SYNTAX_LINE.fullmatch(text[starts[k]:]):
        cut, k = starts[k], k - 1
    if paragraph and leaf is not None and leaf.map and k >= leaf.map[0]:
        if k == leaf.map[0] and _DEF_LINE.fullmatch(text[starts[k]:cut].rstrip("\n")):
            cut = starts[k]  # a reference definition being typed
        # a table's header row (and delimiter row) being typed: the table comes whole
        while k >= max(leaf.map[0], last - 1) and (
            text[starts[k]:cut].lstrip(" \t>").startswith("|")
        ):
            cut, k = starts[k], k - 1

    if leaf is None or not covers or leaf.type != "inline" or not leaf.map:
        return len(text[:cut].rstrip()), None, None
    edge = _Edge(region, starts, leaf)
    content = edge.prefix(cut, len(text))
    if not content:
        return len(text[:cut].rstrip()), None, edge
    hold = _scan(content, refs, True)[1]
    kept = len(content[:hold].rstrip())
    at = edge.to_text(kept)
    if at is None:
        return len(text[:cut].rstrip()), None, edge
    return at, (edge, kept), edge


class _Edge:
    """Positions in an inline token's content <-> positions in the region's text."""

    __slots__ = ("content", "first", "lines", "starts", "token")

    def __init__(self, region: str, starts: list[int], token: Token) -> None:
        self.token = token
        self.content = token.content
        self.first = token.map[0] if token.map else 0
        self.starts = starts
        self.lines: list[tuple[int, int | None, int]] = []  # content start, text start, length
        offset = 0
        for i, part in enumerate(self.content.split("\n")):
            j = self.first + i
            base = None
            if j < len(starts):
                stop = starts[j + 1] - 1 if j + 1 < len(starts) else len(region)
                k = region.rfind(part, starts[j], stop)
                if k >= 0:
                    base = k
            self.lines.append((offset, base, len(part)))
            offset += len(part) + 1

    def to_text(self, pos: int) -> int | None:
        for start, base, length in self.lines:
            if start <= pos <= start + length:
                return None if base is None else base + pos - start
        return None

    def from_text(self, at: int) -> int | None:
        for start, base, length in self.lines:
            if base is not None and base <= at <= base + length:
                return start + at - base
        return None

    def prefix(self, cut: int, size: int) -> str | None:
        """The content before text position `cut` (a line start, or `size`: all)."""
        if cut >= size:
            return self.content
        if cut not in self.starts:
            return None
        i = self.starts.index(cut) - self.first
        if i <= 0:
            return ""
        if i >= len(self.lines):
            return self.content
        return self.content[: self.lines[i][0] - 1]


def _fence_end(region: str, starts: list[int], fence: Token) -> tuple[int, Any]:
    """A fence still open at the end: whole lines only when it is highlighted."""
    opening = starts[fence.map[0]] if fence.map and fence.map[0] < len(starts) else 0
    if "\n" not in region[opening:]:
        return len(region[:opening].rstrip()), None  # its info string is being typed
    last = region.rfind("\n") + 1
    partial = region[last:]
    if not partial:
        return len(region), _RAW
    info = unescapeAll(fence.info).strip() if fence.info else ""
    lang = info.split(maxsplit=1)[0] if info else ""
    if (lang and _lexer(lang.lower()) is not None) or _FENCE_CHARS.fullmatch(partial):
        return last, _RAW
    return len(region), _RAW


def _table_end(
    text: str, starts: list[int], toks: list[Token], table: Token, line_done: bool
) -> int:
    """A table at the end shows once its delimiter row is done, then row by row."""
    if line_done or table.map is None:
        return len(text)
    last = text.count("\n")
    top = table.map[0]
    if last <= top + 1:
        return len(text[: starts[top]].rstrip())
    columns = 0
    for t in toks[toks.index(table):]:
        if t.type == "th_open":
            columns += 1
        elif t.type == "thead_close":
            break
    row = text[starts[last]:].strip()
    pipes = len(re.findall(r"(?<!\\)\|", row))
    if row.endswith("|") and not row.endswith("\\|") and pipes - row.startswith("|") >= columns:
        return len(text)
    return len(text[: starts[last]].rstrip())


# ------------------------------------------------------------------ growing: inline scan


def _ws(ch: str | None) -> bool:
    return ch is None or isWhiteSpace(ord(ch))


def _punct(ch: str | None) -> bool:
    return ch is not None and (ch in _ASCII_PUNCT or isPunctChar(ch))


def _find_run(s: str, start: int, char: str, size: int) -> int:
    """Start of the first run of exactly `size` `char`s at or after `start`, or -1."""
    n = len(s)
    i = s.find(char, start)
    while i >= 0:
        j = i
        while j < n and s[j] == char:
            j += 1
        if j - i == size:
            return i
        i = s.find(char, j)
    return -1


def _skip_space(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in " \t\n":
        pos += 1
    return pos


_OK, _PENDING, _NO = 0, 1, 2


def _inline_link(s: str, pos: int) -> tuple[int, int]:
    """At `(` after `]`: (_OK, end) for a whole valid `(dest "title")`, (_PENDING, 0)
    while it may still become one, (_NO, 0) when it cannot."""
    n = len(s)
    pos = _skip_space(s, pos + 1)
    if pos >= n:
        return _PENDING, 0
    if s[pos] == ")":
        return _OK, pos + 1
    dest = _md.helpers.parseLinkDestination(s, pos, n)
    if not dest.ok:
        if s[pos] == "<":
            return (_NO, 0) if re.search(r"[\n<>]", s[pos + 1 :]) else (_PENDING, 0)
        return _PENDING, 0
    if dest.pos >= n:
        return _PENDING, 0
    if not _md.validateLink(_md.normalizeLink(dest.str)):
        return _NO, 0
    after = _skip_space(s, dest.pos)
    if after >= n:
        return _PENDING, 0
    if s[after] == ")":
        return _OK, after + 1
    if after == dest.pos or s[after] not in "\"'(":
        return _NO, 0
    title = _md.helpers.parseLinkTitle(s, after, n)
    if not title.ok:
        return (_PENDING, 0) if title.can_continue else (_NO, 0)
    after = _skip_space(s, title.pos)
    if after >= n:
        return _PENDING, 0
    return (_OK, after + 1) if s[after] == ")" else (_NO, 0)


def _link(s: str, i: int, refs: dict[str, Any]) -> tuple[int, int]:
    """At `[`: (_OK, end) for a whole link, (_PENDING, 0) or (_NO, 0)."""
    n = len(s)
    depth, k = 0, i + 1
    while k < n:
        ch = s[k]
        if ch == "\\":
            k += 2
            continue
        if ch == "`":
            j = k
            while j < n and s[j] == "`":
                j += 1
            close = _find_run(s, j, "`", j - k)
            k = close + (j - k) if close >= 0 else j
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            if depth == 0:
                break
            depth -= 1
        k += 1
    if k >= n:
        return _PENDING, 0
    label_end, after = k, k + 1
    if after >= n:
        return _PENDING, 0
    if s[after] == "(":
        state, end = _inline_link(s, after)
        if state != _NO:
            return state, end
    if refs:
        if s[after] == "[":
            close = s.find("]", after + 1)
            if close < 0:
                return _PENDING, 0
            label = s[after + 1 : close] or s[i + 1 : label_end]
            if normalizeReference(label) in refs:
                return _OK, close + 1
            return _NO, 0
        if normalizeReference(s[i + 1 : label_end]) in refs:
            return _OK, label_end + 1
    return _NO, 0


class _Delim:
    __slots__ = ("char", "count", "size", "pos", "opens", "closes")

    def __init__(self, char: str, count: int, pos: int, opens: bool, closes: bool) -> None:
        self.char, self.count, self.size, self.pos = char, count, count, pos
        self.opens, self.closes = opens, closes


_SCAN_CACHE: dict[tuple[str, bool, tuple[str, ...]], tuple] = {}


def _scan(
    s: str, refs: dict[str, Any], edge: bool
) -> tuple[list[tuple[int, int]], int, list[_Delim], int]:
    """A light pass over inline Markdown after markdown-it's rules (code spans first,
    links, autolinks, flanking delimiter runs, the rule of 3).

    Returns (spans: (start, end) of each inline element, end _INF when still open at
    the end; hold: where a construct still being typed at the end starts, len(s) if
    none; the emphasis openers open at the end; the backtick count of a code span open
    at the end, or 0). With `edge` False the end of `s` is its end (nothing pending)."""
    key = (s, edge, tuple(refs) if refs else ())
    found = _SCAN_CACHE.get(key)
    if found is None:
        found = _scan_uncached(s, refs, edge)
        if len(_SCAN_CACHE) > 2048:
            _SCAN_CACHE.clear()
        _SCAN_CACHE[key] = found
    return found


def _scan_uncached(
    s: str, refs: dict[str, Any], edge: bool
) -> tuple[list[tuple[int, int]], int, list[_Delim], int]:
    n = len(s)
    spans: list[tuple[int, int]] = []
    stack: list[_Delim] = []
    hold, code = n, 0
    i = 0
    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 >= n:
                if edge:
                    hold = i
                break
            i += 2 if s[i + 1] in _ASCII_PUNCT else 1
            continue
        if c == "`":
            j = i
            while j < n and s[j] == "`":
                j += 1
            close = _find_run(s, j, "`", j - i)
            if close >= 0:
                spans.append((i, close + j - i))
                i = close + j - i
                continue
            if edge and j >= n:
                hold = i  # the run may grow
                break
            code = j - i
            spans.append((i, _INF))
            if edge:  # backticks at the end may be the closing run, arriving
                t = n
                while t > j and s[t - 1] == "`":
                    t -= 1
                if t < n:
                    hold = t
            break
        if c in "*_~":
            j = i
            while j < n and s[j] == c:
                j += 1
            if edge and j >= n:
                hold = i  # opener or closer: the next character tells
                break
            count = j - i
            start = i
            if c == "~":
                start += count % 2
                count -= count % 2
                if not count:
                    i = j
                    continue
            prev = s[i - 1] if i > 0 else None
            nxt = s[j] if j < n else None
            left = not _ws(nxt) and (not _punct(nxt) or _ws(prev) or _punct(prev))
            right = not _ws(prev) and (not _punct(prev) or _ws(nxt) or _punct(nxt))
            if c == "_":
                opens = left and (not right or _punct(prev))
                closes = right and (not left or _punct(nxt))
            else:
                opens, closes = left, right
            if closes:
                used = 0
                while count > 0:
                    at = _opener(stack, c, j - i, opens)
                    if at < 0:
                        break
                    op = stack[at]
                    use = 2 if c == "~" or (op.count >= 2 and count >= 2) else 1
                    op.count -= use
                    count -= use
                    used += use
                    spans.append((op.pos + op.count, start + used))
                    del stack[at + 1 :]
                    if op.count <= 0:
                        del stack[at]
                start += used
            if count > 0 and opens:
                stack.append(_Delim(c, count, start, opens, closes))
            i = j
            continue
        if c == "!" and edge and i + 1 >= n:
            hold = i
            break
        if c == "[":
            state, end = _link(s, i, refs)
            if state == _OK:
                spans.append((i, end))
                i = end
                continue
            if state == _PENDING and edge:
                begin = i - 1 if i > 0 and s[i - 1] == "!" else i
                if n - begin <= _LINK_HOLD:
                    hold = begin
                    spans.append((begin, _INF))
                    break
            i += 1
            continue
        if c == "<":
            m = _AUTOLINK.match(s, i)
            if m:
                spans.append((i, m.end()))
                i = m.end()
                continue
            if edge and _AUTOLINK_START.fullmatch(s, i):
                hold = i
                break
            i += 1
            continue
        if c == "&" and edge and _ENTITY_START.fullmatch(s, i):
            hold = i
            break
        i += 1
    if edge and hold == n and not code:
        k = n
        while k > 0 and not s[k - 1].isspace():
            k -= 1
        k = max(k, max((e for _, e in spans if e < _INF), default=0))
        word = s[k:].lstrip("([{*_~\"'<").lower()
        if word and (
            "://" in word
            or "www." in word
            or "@" in word
            or any(start.startswith(word) for start in _URL_STARTS)
        ):
            hold = k  # linkify would give it an href that changes as it grows
    spans.extend((op.pos, _INF) for op in stack)
    return spans, hold, stack, code


def _opener(stack: list[_Delim], char: str, size: int, closer_opens: bool) -> int:
    for at in range(len(stack) - 1, -1, -1):
        op = stack[at]
        if op.char != char:
            continue
        if (
            char != "~"
            and (op.closes or closer_opens)
            and (op.size + size) % 3 == 0
            and (op.size % 3 or size % 3)
        ):
            continue
        return at
    return -1


def _closers(s: str, refs: dict[str, Any]) -> str:
    """What closes the inline code and emphasis left open at the end of `s`."""
    _, _, stack, code = _scan(s, refs, False)
    out = "`" * code
    for op in reversed(stack):
        if op.count > 0:
            out += op.char * op.count
    return out



# --------------------------------------------------------------------------- changes


def block_changes(sent: dict[str, str], blocks: list[Block]) -> Changes:
    """(changed, new, gone) of `blocks` against what a page holds (`sent`: id -> html).

    `changed` keeps the order of `blocks`, `new` too (ids ascending), `gone` the order of
    `sent`. The caller updates `sent` after sending.
    """
    changed: list[Block] = []
    new: list[Block] = []
    for block in blocks:
        old = sent.get(block.id)
        if old is None:
            new.append(block)
        elif old != block.html:
            changed.append(block)
    ids = {block.id for block in blocks}
    gone = [id_ for id_ in sent if id_ not in ids]
    return Changes(changed, new, gone)


_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)\b[^>]*?(/?)>")
_CLOSE_TAG = re.compile(r"</[A-Za-z][A-Za-z0-9-]*\s*>")
_VOID = frozenset(
    "area base br col embed hr img input link meta source track wbr".split()
)


def _balanced(fragment: str) -> bool:
    stack: list[str] = []
    for m in _TAG.finditer(fragment):
        closing, name, self_closing = m.group(1), m.group(2).lower(), m.group(3)
        if closing:
            if not stack or stack.pop() != name:
                return False
        elif name not in _VOID and not self_closing:
            stack.append(name)
    return not stack


def _closing_run(html: str) -> list[int]:
    """Start offsets of the closing tags that end `html` (only whitespace between),
    innermost first."""
    starts: list[int] = []
    end = len(html)
    while True:
        stripped = html[:end].rstrip()
        if not stripped.endswith(">"):
            break
        lt = stripped.rfind("<")
        if lt < 0 or not _CLOSE_TAG.fullmatch(stripped, lt):
            break
        starts.append(lt)
        end = lt
    starts.reverse()
    return starts


def append_at(old_html: str, new_html: str) -> tuple[int, str] | None:
    """(depth, inserted) when `new_html` is `old_html` with balanced HTML `inserted`
    placed just before one of the closing tags that end `old_html`, else None.

    `depth` says into which element it goes: 0 = the block element itself, 1 = its last
    element child, 2 = that one's last element child ... (the element closed by the
    first closing tag after the insertion point is always a last child). The deepest
    fitting point is chosen. See `append_selector`.
    """
    grown = len(new_html) - len(old_html)
    if grown <= 0:
        return None
    starts = _closing_run(old_html)
    for number, at in enumerate(starts):
        if (
            new_html.startswith(old_html[:at])
            and new_html.endswith(old_html[at:])
        ):
            inserted = new_html[at : at + grown]
            if _balanced(inserted):
                return len(starts) - 1 - number, inserted
    return None


def appended(old_html: str, new_html: str) -> str | None:
    """The HTML inserted into `old_html` to give `new_html` (see `append_at`), or None
    when the block changed otherwise (or not at all)."""
    found = append_at(old_html, new_html)
    return None if found is None else found[1]


def append_selector(block_id: str, depth: int) -> str:
    """CSS selector of the element an append at `depth` goes into, e.g.
    `[id="k-3"]>:last-child>:last-child` (an attribute selector, so any id is valid)."""
    quoted = block_id.replace("\\", "\\\\").replace('"', '\\"')
    return f'[id="{quoted}"]' + ">:last-child" * depth
