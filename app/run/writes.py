"""The write buffer: growing text reaches its row at most once a beat (~50 ms), in one
transaction for every run at once; once a second while nobody follows its conversation.

One `Writes` per runner, shared by every Turn it runs: a turn buffers what grows (`grow`)
and writes what is pending (`flush`) before anything that must follow it in the rows (a
step's end, a tool's dispatch, a stop).
"""
from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import space
from ..agent.pieces import SoFar
from ..beat import BEAT_SECONDS, PHASE_SECONDS, beat_at_or_after, next_beat
from ..store.outage import unavailable
from ..store.runs import CHUNK_CHARS, Chunked

log = logging.getLogger(__name__)

TICK_SECONDS = BEAT_SECONDS  # growing text is written at most once a beat (model streams are read on it too)
# ... and at most once a second while no page or API stream follows its conversation anywhere,
# or only pages here, handed it from memory (`watched`): growth is written only to be shown (a
# step cut off is made again whole, its growth deleted), and an answer nobody follows cost a
# write transaction for every chunk of a slow model (10 a second), most of its CPU
# (benchmarks/README.md, "Unfollowed answers").
UNWATCHED_SECONDS = 1.0


class Writes:
    def __init__(self, store: Any, full: Callable[[], None] | None = None,
                 quiet: Callable[[], bool] | None = None, owner: str | None = None,
                 watched: Callable[[int, bool], bool] | None = None):
        self.store = store
        # Whether a conversation's growth must reach the rows on the beat (Runner.watched: a
        # page or an API stream follows it, and, for a text handed to the pages here from
        # memory, one that reads the rows): otherwise it is written once a second
        # (UNWATCHED_SECONDS). None: every text on the beat (tests).
        self.watched = watched
        self._slow: set[int] = set()  # the pending items whose conversation nobody follows
        # The runner's lease owner: growth is written only for conversations it still holds,
        # checked in the write's own transaction (Runs.grow_items). None: every item (tests).
        self.owner = owner
        # True while the feed need not be woken by these writes (Runner.quiet: no page follows
        # in this process, on SQLite): it sees them at its next poll, as another process's.
        self.quiet = quiet
        # A write failed for want of space: what grew since the last tick is lost (what was
        # written stays), and `full` ends the runs in words (Runner.disk_full). Without it
        # the error is raised.
        self.full = full
        self.pending: dict[int, dict[str, Any]] = {}  # item id -> columns to write at the next tick
        self._flushed = 0.0  # when growth was last written
        self._flush_at: asyncio.Handle | None = None  # the write of what is pending, scheduled
        self._flush_when = 0.0  # (its time)
        # (last rev, revs taken) of each write of growth, newest last, until `mine` is asked
        # past them: a scan that finds only these since its last one has nothing to read
        self._wrote: list[tuple[int, int]] = []
        # item id -> (the growing text last written, by a weak reference; its characters written)
        self._written: dict[int, tuple[weakref.ref, int]] = {}
        # item id -> when its growth was last written: an item is written at most once a beat,
        # though its stream may be read once a frame (a page here follows it: Feed.grew)
        self._wrote_at: dict[int, float] = {}

    def grow(self, item_id: int, chat: int | None = None, handed: bool = False, **values: Any) -> None:
        """Buffer columns of an item (`text`, `output`) of conversation `chat` for the next
        tick (without `chat`: on the beat). `handed`: the pages here are handed this growth
        from memory as it is read (Feed.grew), so they need not find it in the rows."""
        self.pending.setdefault(item_id, {}).update(values)
        now = time.monotonic()
        if chat is not None and self.watched is not None and not self.watched(chat, handed):
            self._slow.add(item_id)
        else:
            self._slow.discard(item_id)
        due = self._due(item_id, now)
        if self._flush_at is not None:
            if self._flush_when <= due:
                # A busy loop can hold the scheduled write back when many streams have data
                # buffered: write here too once a tick is due, so it still writes every ~50 ms.
                if now - self._flushed >= TICK_SECONDS and item_id not in self._slow:
                    self.flush(due_only=True)
                return
            self._flush_at.cancel()  # due before the write scheduled (a page began to follow it)
        self._schedule(due, now)

    def _due(self, item_id: int, now: float) -> float:
        """When a pending item's growth may be written. No timer while nothing grows. The
        first growth in a beat (the streams read what came at the beat: asyncnet.pace) is
        written once every stream woken with it has run, in one transaction; a later one at
        the next phase (beat.PHASES)."""
        beat = next_beat(now, PHASE_SECONDS)
        last = self._wrote_at.get(item_id)
        if self._resting(item_id, now):
            return max(beat, beat_at_or_after(last + UNWATCHED_SECONDS - 0.001, PHASE_SECONDS))
        if last is not None and now - last < TICK_SECONDS - PHASE_SECONDS / 2:
            # written less than a beat ago (its stream read once a frame): a beat after that write
            return max(beat, beat_at_or_after(last + TICK_SECONDS - 0.001, PHASE_SECONDS))
        if self._flushed < beat - PHASE_SECONDS:
            return now
        return beat

    def _resting(self, item_id: int, now: float) -> bool:
        """Whether a text nobody follows was written less than UNWATCHED_SECONDS ago."""
        last = self._wrote_at.get(item_id)
        return item_id in self._slow and last is not None and now - last < UNWATCHED_SECONDS - PHASE_SECONDS / 2

    def _schedule(self, due: float, now: float) -> None:
        loop = asyncio.get_running_loop()
        self._flush_when = due
        self._flush_at = loop.call_soon(self._scheduled) if due <= now else loop.call_at(due, self._scheduled)

    def flush(self, due_only: bool = False) -> None:
        """Write everything buffered now, every run's at once (`due_only`: but the texts
        nobody follows that were written less than UNWATCHED_SECONDS ago)."""
        if not self.pending:
            return
        now = time.monotonic()
        pending, self.pending = self.pending, {}
        if due_only and self._slow:
            for item_id in [i for i in pending if self._resting(i, now)]:
                self.pending[item_id] = pending.pop(item_id)
            if self.pending and self._flush_at is None:
                self._schedule(min(self._due(i, now) for i in self.pending), now)
            if not pending:
                return
        self._flushed = now
        self._slow -= set(pending)
        for item_id, values in pending.items():
            if "text" in values:
                values["text"] = self._gain(item_id, values["text"])
        try:
            asked = list(pending)
            last = self.store.grow_items(pending, notify=not (self.quiet is not None and self.quiet()),
                                         owner=self.owner)
            if last:
                self._wrote.append((last, len(pending)))
            if len(self._wrote_at) > 1024:  # those not written for two seconds are done or stopped
                self._wrote_at = {k: t for k, t in self._wrote_at.items() if self._flushed - t < 2 * UNWATCHED_SECONDS}
            for item_id in pending:
                self._wrote_at[item_id] = self._flushed
            for item_id in set(asked) - set(pending):  # its lease is another's: that owner writes it whole
                self._written.pop(item_id, None)
        except Exception as e:
            for item_id in pending:  # what reached the rows is not known: the next write is whole
                self._written.pop(item_id, None)
            if not space.is_full(e) or self.full is None:
                raise
            self.full()

    def _gain(self, item_id: int, text: Any) -> Any:
        """What to write of a growing text: its chunks from the one the last write of this
        buffer ended in (`Chunked`), or all of them, fresh (its first write past one chunk, a
        takeover: a runner that did not write its start). A text of one chunk or less, or of
        another kind, is written whole into its row, one statement as before (most answers
        of a busy server are short: runs.py's 500 of 200 tokens)."""
        known = self._written.get(item_id)
        if isinstance(text, SoFar) and text.size > CHUNK_CHARS:
            if known is not None and known[0]() is text.pieces and text.size >= known[1]:
                first, fresh = known[1] // CHUNK_CHARS, False
            else:
                first, fresh = 0, True
                if len(self._written) > 1024:  # the texts of finished answers are gone: forget them
                    self._written = {k: v for k, v in self._written.items() if v[0]() is not None}
            self._written[item_id] = (weakref.ref(text.pieces), text.size)
            return Chunked(first, text.since(first * CHUNK_CHARS), fresh)
        if known is not None:
            del self._written[item_id]
        return text

    def mine(self, since: int, top: int) -> bool:
        """Whether every rev after `since` up to `top` was taken by these writes (revs have no
        holes: docs/postgres.md), so rows changed since are only growing text and outputs
        (never pending work, a tombstone or a lease). Forgets the writes up to `since`."""
        self.forget(since)
        taken = sum(min(last, top) - max(last - n, since) for last, n in self._wrote if last - n < top)
        return taken == top - since

    def forget(self, upto: int) -> None:
        """The writes up to rev `upto` are past: a scan read up to it."""
        if self._wrote and self._wrote[0][0] <= upto:
            self._wrote = [w for w in self._wrote if w[0] > upto]

    def clear(self) -> None:
        """Forget what is buffered (the disk is full: it could not be written)."""
        self.pending.clear()

    def close(self) -> None:
        """Shutdown: no write is scheduled any more; what is buffered is written now."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        self.flush()

    def _scheduled(self) -> None:
        self._flush_at = None
        try:
            self.flush(due_only=True)
        except Exception as e:
            # The database unreachable: what grew is written whole by the step's end, or the
            # step is made again once it is back (the runner's scan says the outage).
            if not unavailable(e):
                log.exception("writing growing text failed")
