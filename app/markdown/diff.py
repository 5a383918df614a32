"""What to send a page that holds some blocks: block diffs and the append path.

Why a module of its own: it compares HTML already rendered (``Block``s) and knows
nothing of Markdown. ``block_changes`` says which blocks changed, are new or are gone;
``append_at`` tells when a changed block is its old HTML with balanced HTML inserted
before one of its closing tags, and at which depth, so the feed can send only that (the
page's `grow` extension appends it to the element that many last children down).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .blocks import Block


class BlockChanges(NamedTuple):
    changed: list[Block]
    new: list[Block]
    gone: list[str]


def block_changes(sent: dict[str, str], blocks: list[Block]) -> BlockChanges:
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
    return BlockChanges(changed, new, gone)


# Blocks before the last few of a growing render are the same objects render after render
# (blocks.Rendering keeps them): `changes_since` checks them with one list comparison (a pointer check
# each, in C) and diffs only the last _TAIL by id.
_TAIL = 8


def changes_since(old: tuple[Block, ...], new: tuple[Block, ...]) -> tuple[BlockChanges, dict[str, str]]:
    """`block_changes` of `new` against the blocks a page holds (`old`, as sent), and the
    html of the old blocks that changed by id (for `append_at`). Linear only in C over the
    blocks both share at the start: the cost of a followed answer's message does not grow
    with the answer."""
    k = max(0, min(len(old), len(new)) - _TAIL)
    if old[:k] != new[:k]:  # another render of the same text (a new head): compare all
        k = 0
    sent = {b.id: b.html for b in old[k:]}
    return block_changes(sent, list(new[k:])), sent


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
    fitting point is chosen.
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
