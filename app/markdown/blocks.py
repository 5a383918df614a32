"""The render entry points: ``render`` (whole HTML) and ``keyed`` (id'd blocks).

Why a module of its own: this is what the pages call. It parses with the one safe
MarkdownIt (``engine``), asks ``growing`` for the tokens of a streaming answer, and cuts
the HTML into top-level ``Block``s wrapped in ``<div class="md" id="{key}-{n}">``,
with a small cache of recent growing renders (``_GROWN``).
"""

from __future__ import annotations

import html as _html
from dataclasses import dataclass
from typing import Any

from .engine import MD, top_level
from .growing import growing_tokens, reveal_step
from .incremental import growing_inner, growing_source, growing_view

BLOCK_CLASS = "md"


@dataclass(frozen=True, slots=True)
class Block:
    id: str
    html: str


# (key, len(source), grid) -> (the text whose start the source is, blocks): not the source
# itself in the key, whose hash would be a pass over the whole answer at every render (and
# the check is most often the key's last text by identity, see keyed)
_GROWN: dict[tuple[str, int, int], tuple[str, tuple[Block, ...]]] = {}
_GROWN_MAX = 64
# Per key, the blocks of its last growing render. The blocks before its last few are final
# (incremental._Head keeps their inner HTML, the same string objects render after render):
# their Blocks are kept too, so a render makes only its changed blocks, and comparing the
# rest with what a page has (diff.block_changes) is a pointer check, not a copy and a
# compare of the whole answer's HTML at every flush.
_FINAL: dict[str, tuple[str, tuple[Block, ...]]] = {}  # key -> (text, blocks) of its last final render
_FINAL_MAX = 64
_WRAPPED: dict[str, tuple[list[str], list[Block]]] = {}  # key -> (inner HTML, blocks)
_WRAPPED_MAX = 256


def render(text: str, growing: bool = False) -> str:
    """Safe HTML for the whole Markdown text (no ids). `growing`: see `keyed`."""
    if not growing:
        return MD.render(text or "")
    env: dict[str, Any] = {}
    tokens = growing_tokens(growing_source(text or ""), env)
    return MD.renderer.render(tokens, MD.options, env)


def _block(key: str, safe_key: str, n: int, inner: str) -> Block:
    return Block(f"{key}-{n}", f'<div class="{BLOCK_CLASS}" id="{safe_key}-{n}">{inner}</div>')


def _wrapped(parts: list[str], key: str, safe_key: str) -> list[Block]:
    """`parts` as Blocks, reusing the key's last ones up to the first whose inner HTML is
    not the same string (or an equal one, before the last few)."""
    inners, blocks = _WRAPPED.pop(key, None) or ([], [])
    limit = min(len(inners), len(parts))
    # the head's blocks are the same strings as last time: one comparison in C (a pointer
    # check each), then the last few one by one
    same = max(0, limit - 8)
    if inners[:same] != parts[:same]:
        same = 0
    while same < limit and inners[same] is parts[same]:
        same += 1
    blocks = blocks[:same] + [_block(key, safe_key, n, parts[n]) for n in range(same, len(parts))]
    if len(_WRAPPED) >= _WRAPPED_MAX:
        _WRAPPED.pop(next(iter(_WRAPPED)))
    _WRAPPED[key] = (parts, blocks)  # (re)inserted last: the dict's order is its age
    return list(blocks)


def keyed(text: str, key: str, growing: bool = False) -> list[Block]:
    """Top-level blocks of the Markdown, block n with id f"{key}-{n}".

    `growing=True`: `text` is the start of an answer still streaming; its edge is
    stabilised (see "Growing text" in the package docstring) so that each block's HTML is,
    as far as possible, what a longer text gives it with something inserted at its end.
    """
    if not text:
        return []
    safe_key = _html.escape(key, quote=True)
    if growing:
        # only the blocks from the key's last open one on are parsed again (growing.py)
        view = growing_view(text, key)
        # the flushes between two grid points all render the same text: once. The same
        # text when it is the one kept (the key's last render, which this one extends:
        # then no compare of the whole answer) or equal to it up to the cut
        found = _GROWN.get((key, view.cut, reveal_step()))
        if found is not None and (found[0] is view.text or (view.raw is not None and found[0] is view.raw)
                                  or found[0][:view.cut] == view.text[:view.cut]):
            return list(found[1])
        parts = growing_inner(view, key)
    else:
        # a finished answer is rendered by the feed's message, for a page that just caught
        # up, and for the words a screen reader hears (web/live.announcement): once
        final = _FINAL.pop(key, None)
        if final is not None and final[0] == text:
            _FINAL[key] = final
            return list(final[1])
        env: dict[str, Any] = {}
        tokens = MD.parse(text, env)
        renderer = MD.renderer
        options = MD.options
        parts = []
        for start, end in top_level(tokens):
            inner = renderer.render(tokens[start:end], options, env)
            parts.append(inner[:-1] if inner.endswith("\n") else inner)
    if growing:
        blocks = _wrapped(parts, key, safe_key)
    else:
        blocks = [_block(key, safe_key, n, inner) for n, inner in enumerate(parts)]
        if len(_FINAL) >= _FINAL_MAX:
            _FINAL.pop(next(iter(_FINAL)))
        _FINAL[key] = (text, tuple(blocks))
    if growing:
        if len(_GROWN) >= _GROWN_MAX:
            _GROWN.pop(next(iter(_GROWN)))
        _GROWN[(key, view.cut, reveal_step())] = (view.text, tuple(blocks))
    return blocks
