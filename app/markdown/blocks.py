"""The render entry points: ``render`` (whole HTML), ``keyed`` (id'd blocks) and
``Rendering`` (one text's renders as it grows, each going on from the last).

Why a module of its own: this is what the pages call. It parses with the one safe
MarkdownIt (``engine``), asks ``growing`` and ``incremental`` for the blocks of a streaming
answer, and cuts the HTML into top-level ``Block``s wrapped in
``<div class="md" id="{key}-{n}">``. What one text's last renders found is kept by its
``Rendering``, which whoever follows the text holds (the feed: app/feed/followed.py), not
by this module: ``keyed`` renders with a fresh one.
"""

from __future__ import annotations

import html as _html
from dataclasses import dataclass
from typing import Any

from . import counting
from .engine import MD, top_level
from .growing import PACE, Pace, growing_tokens
from .incremental import Head, growing_inner, growing_source, growing_view

BLOCK_CLASS = "md"
MARK_SECONDS = 0.25  # a stream's pace is measured over the last quarter to half second


@dataclass(frozen=True, slots=True)
class Block:
    id: str
    html: str


def render(text: str, growing: bool = False, pace: Pace = PACE) -> str:
    """Safe HTML for the whole Markdown text (no ids). `growing`: see `keyed`."""
    if not growing:
        return MD.render(text or "")
    env: dict[str, Any] = {}
    tokens = growing_tokens(growing_source(text or "", pace), env, pace=pace)
    return MD.renderer.render(tokens, MD.options, env)


def keyed(text: str, key: str, growing: bool = False, pace: Pace = PACE) -> list[Block]:
    """Top-level blocks of the Markdown, block n with id f"{key}-{n}".

    `growing=True`: `text` is the start of an answer still streaming; its edge is
    stabilised (see "Growing text" in the package docstring) so that each block's HTML is,
    as far as possible, what a longer text gives it with something inserted at its end.
    A text rendered again and again as it grows is rendered through one `Rendering`.
    """
    return Rendering(key, pace).blocks(text, growing)


class Rendering:
    """One text's renders (an answer's Markdown, as it grows and once it is done), each
    going on from what the last one found.

    A growing render parses only from the last one's head on (incremental.py), makes only
    the blocks that changed (the others are the same `Block` objects render after render,
    so comparing them with what a page has is a pointer check: diff.changes_since), and
    the renders between two grid points are one; a finished text is rendered once (the
    feed's message, a page that just caught up and the screen reader's announcement share
    it). Nothing is kept between two texts but through a `Rendering`: whoever follows the
    text holds it, and drops it with the text."""

    __slots__ = ("key", "pace", "free", "_safe_key", "_head", "_grown", "_wrapped", "_final", "_marks", "_length")

    def __init__(self, key: str, pace: Pace = PACE) -> None:
        self.key = key  # block n's id is f"{key}-{n}" (an item's dom id)
        self.pace = pace
        # Every growing render shows all it can, whatever the pace: set by whoever renders
        # the text at most once a frame (the feed's pages following the run in its own
        # process, Feed.grew), where the frame, not the reveal grid, bounds the renders.
        self.free = False
        self._safe_key = _html.escape(key, quote=True)
        self._head: Head | None = None  # what the last growing render found final
        # the last growing render: (its cut, the text whose start it rendered, its blocks).
        # Not the source itself, whose compare would be a pass over the whole answer at
        # every render: the check is most often the text by identity, see `blocks`
        self._grown: tuple[int, str, tuple[Block, ...]] | None = None
        # the last growing render's blocks' inner HTML, and the blocks made of them: those
        # before its last few are the head's, the same string objects render after render,
        # so their Blocks are kept too and a render makes only its changed blocks
        self._wrapped: tuple[list[str], list[Block]] = ([], [])
        self._final: tuple[str, tuple[Block, ...]] | None = None  # (text, blocks) of the final render
        # the stream's pace: (when, how long the text was) at the last two marks, a quarter
        # second or more apart (`_slow`)
        self._marks: tuple[float, int, float, int] | None = None
        self._length = -1  # the length of the text of the last growing render

    @property
    def finished(self) -> bool:
        """Whether the last render was the final one (of a text that is done)."""
        return self._final is not None

    def blocks(self, text: str, growing: bool = False, now: float | None = None) -> list[Block]:
        """`keyed(text, self.key, growing)`, from what the last renders found. `now` (a
        monotonic clock's seconds), given at each growing render, measures the stream's
        pace: a slow one shows all it can at each render instead of on the reveal grid."""
        if not text:
            return []
        if not growing:
            return self._finished(text)
        # The same text renders the same whatever the time: the feed and a page catching up
        # render one text in one dispatch, and the page then takes the feed's next appends
        return self._growing(text, self.free or (
            now is not None and len(text) != self._length and self._slow(len(text), now)))

    def _slow(self, length: int, now: float) -> bool:
        """Whether the text grows by fewer than `pace.slow` grid steps a second, measured
        from a mark a quarter to half a second old (the first renders: since the first)."""
        marks = self._marks
        if marks is None:
            self._marks = (now, length, now, length)
            return False
        then, was, mark, at = marks
        if now - mark >= MARK_SECONDS:
            self._marks = (mark, at, now, length)
        elapsed = now - then
        return elapsed > 0 and length - was < self.pace.slow * self.pace.grid * elapsed

    def _growing(self, text: str, slow: bool = False) -> list[Block]:
        # only the blocks from the last open one on are parsed again (incremental.py)
        self._length = len(text)
        view = growing_view(text, self._head, self.pace, slow)
        # the flushes between two grid points all render the same text: once. The same
        # text when it is the one kept (the last render's, which this one extends: then
        # no compare of the whole answer) or equal to it up to the cut
        found = self._grown
        if found is not None and found[0] == view.cut and (
                found[1] is view.text or (view.raw is not None and found[1] is view.raw)
                or found[1][:view.cut] == view.text[:view.cut]):
            return list(found[2])
        if counting.COUNTING:
            counting.add("renders", 1)
        parts, self._head = growing_inner(view, self._head, self.pace)
        blocks = self._wrap(parts)
        self._grown = (view.cut, view.text, tuple(blocks))
        self._final = None
        return blocks

    def _wrap(self, parts: list[str]) -> list[Block]:
        """`parts` as Blocks, reusing the last ones up to the first whose inner HTML is not
        the same string (or an equal one, before the last few)."""
        inners, blocks = self._wrapped
        limit = min(len(inners), len(parts))
        # the head's blocks are the same strings as last time: one comparison in C (a
        # pointer check each), then the last few one by one
        same = max(0, limit - 8)
        if inners[:same] != parts[:same]:
            same = 0
        while same < limit and inners[same] is parts[same]:
            same += 1
        blocks = blocks[:same] + [self._block(n, parts[n]) for n in range(same, len(parts))]
        self._wrapped = (parts, blocks)
        return list(blocks)

    def _finished(self, text: str) -> list[Block]:
        final = self._final
        if final is not None and final[0] == text:
            return list(final[1])
        if counting.COUNTING:
            counting.add("finals", 1)
        env: dict[str, Any] = {}
        tokens = MD.parse(text, env)
        renderer = MD.renderer
        options = MD.options
        blocks = []
        for n, (start, end) in enumerate(top_level(tokens)):
            inner = renderer.render(tokens[start:end], options, env)
            blocks.append(self._block(n, inner[:-1] if inner.endswith("\n") else inner))
        # the text is done: what its growing renders kept is not needed again
        self._head, self._grown, self._wrapped = None, None, ([], [])
        self._final = (text, tuple(blocks))
        return blocks

    def _block(self, n: int, inner: str) -> Block:
        return Block(f"{self.key}-{n}", f'<div class="{BLOCK_CLASS}" id="{self._safe_key}-{n}">{inner}</div>')
