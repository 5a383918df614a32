"""Safe Markdown -> HTML, split into keyed top-level blocks for the live feed.

Public API
----------
``render(text) -> str``
    The whole Markdown as HTML (what ``MarkdownIt.render`` gives: every top-level block
    ends with ``"\\n"``). For places that need no ids (messages, skill bodies ...).
``keyed(text, key) -> list[Block]``
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

Speed: one module-level MarkdownIt; lexers and highlighted fences are cached, and so are
inline children (see ``_inline_cached``), so a flush of a growing answer re-parses the
blocks but re-does inline work only for the block that grew. ~8,000 chars (~2,000
tokens): ~2 ms per call warm, ~8.5 ms cold (first render, 10 fences to highlight).

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
append to it; it is highlighted once, when its closing fence arrives.
"""

from __future__ import annotations

import functools
import html as _html
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from linkify_it import LinkifyIt
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml, unescapeAll
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


@functools.lru_cache(maxsize=512)
def _highlighted(lang: str, code: str) -> str | None:
    """Highlighted HTML (no trailing newline), or None when Pygments has no lexer."""
    lexer = _lexer(lang.lower())
    if lexer is None:
        return None
    return _pygments_highlight(code, lexer, _FORMATTER).rstrip("\n")


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


def render(text: str) -> str:
    """Safe HTML for the whole Markdown text (no ids)."""
    return _md.render(text or "")


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


def keyed(text: str, key: str) -> list[Block]:
    """Top-level blocks of the Markdown, block n with id f"{key}-{n}"."""
    if not text:
        return []
    env: dict[str, Any] = {}
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
    return blocks


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
