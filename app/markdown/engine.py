"""The one configured MarkdownIt every render goes through, and its safety rules.

Why a module of its own: everything that decides what HTML a piece of Markdown can
become lives here, in one place to audit -- raw HTML off, only ``http:``/``https:``/
``mailto:`` links (with ``rel``/``target`` set), images rendered as links, linkify only
for schemes and ``www.``, Pygments highlighting of closed (and, growing, whole-line)
fences, and the cached inline parsing that keeps re-renders of a growing answer cheap.
``blocks`` (render/keyed), ``growing`` and ``scan`` all use ``MD`` from here; this
module imports none of them.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

from linkify_it import LinkifyIt
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml, unescapeAll
from markdown_it.rules_block.fence import fence as _fence_rule
from markdown_it.rules_block.state_block import StateBlock
from markdown_it.rules_core.linkify import linkify as _core_linkify
from markdown_it.rules_core.state_core import StateCore
from markdown_it.rules_core.text_join import text_join as _core_text_join
from markdown_it.token import Token

from .code import CODE_CLASS  # noqa: F401  (the package exports it from here)
from .code import code_block_html, highlight_growing, highlighted_html, lexer_of, plain_code
from .mathml import add_math

LINK_REL = "nofollow noopener noreferrer"
GROWING_KEY = "tabletalk.growing"  # env key: fences still streaming are highlighted
# (growing.py sets it in the env of a growing render; _render_fence reads it)


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
# (code.py: the code block's wrapper, Pygments' lexers and the highlight caches)

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

# Inline syntax parsed per text, counted in the characters markdown-it's inline rules act
# on. Prose has one or two in a hundred (the tests' long answer: 141 in 8,399), so this is
# ~1 MB of ordinary Markdown. Hostile text (a megabyte of `[`) costs markdown-it ~7 us a
# character; past the budget, inline content is shown as text instead (paragraphs in
# order, the same for a growing and a final render): a render stays well under a second
# whatever the model sends.
INLINE_BUDGET = 20_000
BUDGET_KEY = "tabletalk.inline_budget"  # env key: what is left of it
_SYNTAX_CHARS = "[]!*_~`<&\\$"


def syntax_cost(content: str) -> int:
    # the characters of _SYNTAX_CHARS, spelled out: a third faster than a generator over them
    c = content.count
    return (c("[") + c("]") + c("!") + c("*") + c("_") + c("~") + c("`") + c("<") + c("&") + c("\\")
            + c("$"))


def spend(tokens: Sequence[Token], left: int) -> int:
    """The budget left after the inline tokens of `tokens` (as `_inline_cached` spends it)."""
    for token in tokens:
        if token.type == "inline":
            cost = syntax_cost(token.content)
            if cost <= left:
                left -= cost
    return left


def _as_text(token: Token) -> list[Token]:
    text = Token("text", "", 0)
    text.content = token.content
    return [text]


def _inline_cached(state: StateCore) -> None:
    refs = state.env.get("references") if isinstance(state.env, dict) else None
    sig = repr(sorted(refs.items())) if refs else ""
    left = state.env.get(BUDGET_KEY, INLINE_BUDGET) if isinstance(state.env, dict) else INLINE_BUDGET
    fresh: list[Token] = []
    for token in state.tokens:
        if token.type != "inline":
            continue
        cost = syntax_cost(token.content)
        if cost > left:
            token.children = _as_text(token)
            continue
        left -= cost
        children = _INLINE_CACHE.get((sig, token.content))
        if children is not None:
            token.children = children
        else:
            token.children = []
            state.md.inline.parse(token.content, state.md, state.env, token.children)
            fresh.append(token)
    if isinstance(state.env, dict):
        state.env[BUDGET_KEY] = left
    if not fresh:
        return
    sub = StateCore("", state.md, state.env, fresh)
    _core_linkify(sub)
    _core_text_join(sub)
    if len(_INLINE_CACHE) + len(fresh) > _INLINE_CACHE_MAX:
        _INLINE_CACHE.clear()
    for token in fresh:
        _INLINE_CACHE[(sig, token.content)] = token.children or []


# --------------------------------------------------------------------------- task lists

_TASK = re.compile(r"\[([ xX])\][ \t]+")


def _tasks(state: StateCore) -> None:
    """`- [ ] x` / `- [x] y`: a list item whose paragraph starts so gets a disabled check
    box (GitHub's task lists). The inline children may be shared with the inline cache:
    they are replaced, never changed in place."""
    tokens = state.tokens
    for i in range(2, len(tokens)):
        token = tokens[i]
        if not (
            token.type == "inline"
            and tokens[i - 1].type == "paragraph_open"
            and tokens[i - 2].type == "list_item_open"
            and token.children
            and token.children[0].type == "text"
        ):
            continue
        first = token.children[0]
        m = _TASK.match(first.content)
        if m is None or not _TASK.match(token.content):
            continue
        box = Token("task_box", "input", 0)
        box.meta = {"done": m.group(1) != " "}
        rest = first.content[m.end():]
        token.children = [box, *([first.copy(content=rest)] if rest else []), *token.children[1:]]
        item = tokens[i - 2]
        item.attrSet("class", "task")
        for j in range(i - 3, -1, -1):
            if tokens[j].level == item.level - 1 and tokens[j].nesting == 1:
                tokens[j].attrSet("class", "tasks")
                break


def _render_task_box(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    if tokens[idx].meta.get("done"):
        return '<input type="checkbox" disabled checked aria-label="done"> '
    return '<input type="checkbox" disabled aria-label="to do"> '


# --------------------------------------------------------------------------- renderer


def _render_fence(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    token = tokens[idx]
    info = unescapeAll(token.info).strip() if token.info else ""
    lang = info.split(maxsplit=1)[0] if info else ""
    return code_block_html(lang, _fence_code(token, lang, env)) + "\n"


def _fence_code(token: Token, lang: str, env) -> str:
    if (
        lang
        and token.meta.get("streaming")
        and isinstance(env, dict)
        and env.get(GROWING_KEY)
        and lexer_of(lang.lower()) is not None
    ):
        # growing: the fence holds whole lines only (see _stable_fence), highlighted as
        # they come; highlighting is per line, so each new line is an append
        return highlight_growing(lang, token.content)
    if lang and token.content and not token.meta.get("streaming"):
        html = highlighted_html(lang, token.content)
        if html is not None:
            return html
    return plain_code(token.content)


def _render_code_block(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    return code_block_html("", plain_code(tokens[idx].content)) + "\n"


def _render_table_open(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    # a wide table scrolls sideways in a region the keyboard can reach
    return _TABLE_REGION + self.renderToken(tokens, idx, options, env)


def _render_table_close(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    return self.renderToken(tokens, idx, options, env) + "</div>\n"


_TABLE_REGION = '<div class="table-scroll" tabindex="0" role="region" aria-label="Table">'


def _render_link_open(self, tokens: Sequence[Token], idx: int, options, env) -> str:
    token = tokens[idx]
    if not token.attrGet("href"):
        # `[x]()`: markdown-it skips link validation for an empty destination. An <a> with
        # no href is inert text, and keeps the rule that every href is http(s) or mailto.
        return "<a>"
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
    md.add_render_rule("table_open", _render_table_open)
    md.add_render_rule("table_close", _render_table_close)
    md.core.ruler.after("inline", "tasks", _tasks)
    md.add_render_rule("task_box", _render_task_box)
    add_math(md)
    return md


MD = _make_md()


@functools.lru_cache(maxsize=64)
def task_counts(text: str) -> tuple[int, int]:
    """(done, all) of the task list items in the Markdown (`- [x] a` is done)."""
    boxes = [
        child
        for token in MD.parse(text or "")
        if token.type == "inline"
        for child in token.children or ()
        if child.type == "task_box"
    ]
    return sum(1 for box in boxes if box.meta.get("done")), len(boxes)


# --------------------------------------------------------------------------- blocks


def top_level(tokens: list[Token]) -> list[tuple[int, int]]:
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
