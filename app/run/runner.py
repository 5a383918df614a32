"""The background runner that answers what people write: scheduling and leases.

Started with every worker (app/serve/worker.py). Work is found from rows, never from memory
(store/runs.py: a `user` item not done, a `retry` or `stop` not handled). A conversation
is answered by one worker at a time, the one holding its lease in `runs`; the lease is
renewed while it works and taken over once it expires. Within a conversation the pending
items are handled one at a time, in order: each by a Turn (turn.py) that turn_setup.py makes,
which turns the agent loop's events into rows through the runner's one write buffer
(writes.py). After a conversation's first answer titles.py names it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import socket
import time
from dataclasses import dataclass

from .. import agent as loop
from . import space
from ..plugins.sessions import Sessions
from ..beat import BEAT_SECONDS, FRAME_SECONDS, beat_at_or_after
from ..config import Config
from ..feed.dispatch import Feed
from ..providers.client import Providers
from ..store import Store, db as dbm
from ..store.rows import LeaseLost
from ..store.outage import Outage, unavailable
from ..tables import Item, item
from .choices import relist_forever
from .naming import name_conversation
from .turn import Stopped, Turn
from .turn_setup import TurnSetup
from .writes import UNWATCHED_SECONDS, Writes

log = logging.getLogger(__name__)

LEASE_SECONDS = 10.0  # the default of TABLETALK_LEASE_SECONDS (config.lease_seconds)
IDLE_SCAN_SECONDS = 1.0   # a full scan for pending work, at least this often
SCAN_GAP_SECONDS = 0.1    # the least time between two scans
# How stale the runner's knowledge that nobody elsewhere follows a conversation may be: a page
# that begins to follow one in another worker sees its growth on the beat within this, and
# its catch-up lags the rows' last write (UNWATCHED_SECONDS at most) meanwhile.
WATCH_CHECK_SECONDS = 0.25
TAKE_PER_SCAN = 64        # on PostgreSQL, the most new conversations one scan leases (others share the rest)
STOP_GRACE_SECONDS = 5.0  # a running tool told of a stop has this long to end itself
FAILED = ("This answer failed on our side and was stopped (the error is in the server's log). "
          "Send the message again to retry.")


@dataclass
class Run:
    """One conversation being answered by this worker."""

    chat: int
    store: Store  # the store as this run writes it: every write held to its lease (Store.fenced)
    task: asyncio.Task | None = None
    turn: Turn | None = None  # the turn being answered
    gone: bool = False  # its conversation was deleted
    halting: bool = False  # the person stopped it: its tools are being told
    full: bool = False  # ended because the disk is full
    # Its lease went to another worker, or a write found the database unreachable: it ends
    # here writing nothing more, as at shutdown; whoever holds the lease next goes on from
    # the last complete step.
    lost: bool = False


class Runner(space.DiskFull):
    def __init__(self, config: Config, store: Store, feed: Feed, providers: Providers, sessions: Sessions):
        self.config = config
        self.store = store
        self.feed = feed
        self.providers = providers
        self.sessions = sessions  # the worker's plugin sessions: its turns' calls, swept here
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        if feed is not None:
            feed.left = self.left
        self.lease_seconds = config.lease_seconds
        self.shared = bool(config.database_url)  # other servers' runners scan the same rows
        self.renew_seconds = config.lease_seconds / 3  # two renewals may fail before the lease goes
        self.runs: dict[int, Run] = {}
        # every turn's growing text, written once a beat (once a second while nobody follows it)
        self.writes = Writes(store, full=self.disk_full, quiet=None if dbm.postgres(store.db) else self.quiet,
                             owner=self.owner, watched=self.watched)
        self._watched: dict[tuple[int, bool], tuple[float, bool]] = {}  # (chat, others' only) -> (when read, followed)
        self.turn_setup = TurnSetup(config, store, providers, sessions)
        self.stopping = False
        self._wake: asyncio.Future | None = None  # done: scan again at once (a run ended)
        self._scanned = 0  # the rev the last scan read up to
        self._more = False  # the last scan left pending work to others: the next reads it all again
        self._tasks: list[asyncio.Task] = []
        self._side: set[asyncio.Task] = set()
        self.reserve = space.Reserve(config.data)
        self.full = False  # the disk was found full; no run starts until the reserve is back
        self.outage = Outage()  # the database unreachable: said every few seconds by the scan

    # --- the main loop --------------------------------------------------------------

    def start(self) -> None:
        self.reserve.ensure()
        loop_ = asyncio.get_running_loop()
        self._tasks = [
            loop_.create_task(self._scan_forever(), name="runner-scan"),
            loop_.create_task(self._renew_forever(), name="runner-renew"),
            loop_.create_task(relist_forever(self.store, self.providers), name="runner-relist"),
        ]

    async def stop(self) -> None:
        """Shutdown: leave every run as rows, release the leases so another process resumes them."""
        self.stopping = True
        for run in list(self.runs.values()):
            if run.task:
                run.task.cancel()
        await asyncio.gather(*(r.task for r in self.runs.values() if r.task), return_exceptions=True)
        for t in [*self._tasks, *self._side]:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._side, return_exceptions=True)
        self.writes.close()

    def quiet(self) -> bool:
        """Whether a write of growing text need not wake the feed at once: no page follows in
        this process (a dispatch would read nothing), and on SQLite the feed's own poll of
        `PRAGMA data_version` sees the commit by itself within UNFOLLOWED_POLL_SECONDS, on the
        beat the runner's scan looks too. A page that starts following wakes the feed itself
        (Feed.follow) and the next write wakes it again. During an unfollowed answer the
        feed then wakes 10 times a second, not 20 (once per write)."""
        return not self.feed.listened

    def watched(self, chat: int, handed: bool = False) -> bool:
        """Whether `chat`'s growth must reach the rows on the beat: a page or an API stream
        follows it here, or in any worker or server (as the rows' marks say, read at most
        every WATCH_CHECK_SECONDS; this worker's own outlive its last page by a few seconds,
        so a page that comes back, a reconnect, finds rows that went on). A text `handed` to
        the pages here from memory as it is read (Feed.grew) is not needed in the rows by
        pages in step with it: while only such pages follow, it is written once a second, as
        for nobody (at 50 chunks a second, its writes and their dispatches were a third of
        the answer's CPU: benchmarks/README.md, "Pages here in step"), unless a page or an
        API stream elsewhere follows too (marks but this worker's); an API stream or a page
        catching up here reads the rows (Feed.in_rows)."""
        if self.feed.in_rows(chat) if handed else self.feed.follows(chat):
            return True
        others = handed and self.feed.followed_here(chat)  # pages here in step: only other feeds' marks
        now = time.monotonic()
        seen = self._watched.get((chat, others))
        if seen is None or now - seen[0] >= WATCH_CHECK_SECONDS:
            try:
                seen = (now, bool(self.store.watched([chat], besides=self.feed.marker if others else None)))
            except Exception as e:
                if not unavailable(e):
                    raise
                seen = (now, True)  # (as before marks: on the beat; the write says the outage)
            if len(self._watched) > 1024:
                self._watched = {k: v for k, v in self._watched.items() if k[0] in self.runs}
            self._watched[(chat, others)] = seen
        return seen[1]

    def left(self, chat: int) -> None:
        """The last page here following `chat` left while its text grew here: what was read
        is written now. Those pages were handed the words from memory while the rows had them
        once a second (`watched`); a page opening it again (a reconnect: the same page, its
        stream cut) catches up from the rows, and would show less than it had."""
        if chat not in self.runs or self.stopping:
            return
        try:
            self.writes.flush()
        except Exception as e:  # (the runs' next write says it: an outage, a full disk)
            if not unavailable(e) and not space.is_full(e):
                log.exception("writing a text its last page left failed")

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _scan_forever(self) -> None:
        full_at = 0.0
        clock = asyncio.get_running_loop()
        while not self.stopping:
            started = time.monotonic()
            self._wake = clock.create_future()  # a run that ends from now on asks for a scan
            full = started >= full_at or self._more
            try:
                if not self.full or self.recovered():
                    self.scan(full)
                if line := self.outage.answered():
                    log.warning(line)
            except Exception as e:
                if space.is_full(e):
                    self.disk_full()
                elif why := unavailable(e):
                    if line := self.outage.failed(why):
                        log.warning(line)
                else:
                    log.exception("runner scan failed")
            if full:
                full_at = started + IDLE_SCAN_SECONDS
            # Every commit wakes the feed, and a busy worker commits 20+ times a second: look
            # at most every SCAN_GAP (a run that ended asks for the next at once), on a beat
            # (app/beat.py). The gap is waited first and the change after it, so the commits
            # within the gap (the beats' writes) do not wake this loop only to wait again.
            # Futures, not tasks: this loop turns ten times a second while answers grow.
            # With nothing running here the change is waited first: a commit seldom comes
            # within the gap, and an idle worker woke at each gap's end only to wait again.
            changed = self.feed.next_change()  # done at the first dispatch from now on
            idle = SCAN_GAP_SECONDS if self._more else IDLE_SCAN_SECONDS
            gap_end = beat_at_or_after(started + SCAN_GAP_SECONDS)
            gap_first = bool(self.runs) or self._more
            if gap_first and (gap := gap_end - time.monotonic()) > 0:
                await asyncio.wait([self._wake], timeout=gap)
            rest = started + idle - time.monotonic()
            if rest > 0 and not self._wake.done() and not changed.done():
                await asyncio.wait([changed, self._wake], timeout=rest, return_when=asyncio.FIRST_COMPLETED)
            if not gap_first and (gap := gap_end - time.monotonic()) > 0 and not self._wake.done():
                await asyncio.wait([self._wake], timeout=gap)

    def scan(self, full: bool = True) -> None:
        """Start a run for each conversation with pending work that no live worker holds.

        A full scan reads every pending row (once a second, and at start: a lease that
        expired in another worker is found this way); in between, only rows changed since
        the last scan are read (a busy worker's hundreds of running conversations are not
        read again on every commit)."""
        top = self.store.rev()  # before reading: what commits later is seen by the next scan
        since = 0 if full else self._scanned
        if not full and self.writes.mine(since, top):
            self._scanned = top  # only this runner's growing text since the last scan: nothing to read
            return
        # A run whose conversation was deleted (in any worker) ends quietly.
        if self.runs:
            gone = set(self.runs) - self.store.existing(set(self.runs)) if full else self.store.deleted_since(since)
            for chat in gone:
                self.drop(chat)
        pending = self.store.pending_since(since, self.owner)
        self._scanned = top
        self.writes.forget(top)  # a full scan too (on PostgreSQL every scan may be one)
        wanted: dict[int, None] = {}  # conversations to lease, oldest first
        for chat, kind in pending:
            run = self.runs.get(chat)
            if run is not None:
                if kind == "stop":
                    self.halt(run)
                continue
            wanted[chat] = None
        chats = list(wanted)
        self._more = False
        if self.shared and len(chats) > TAKE_PER_SCAN:
            # Other servers see the same rows at the same moment: each takes a share in an
            # order of its own (not all racing for the oldest, nor one taking every one), and
            # the next scan, a full one, the rest that nobody took.
            chats = random.sample(chats, TAKE_PER_SCAN)
            self._more = True
        taken = self.lease_many(chats)
        for chat in wanted:
            if chat in taken:
                run = self.runs[chat] = Run(chat, self.store.fenced(chat, self.owner))
                run.task = asyncio.get_running_loop().create_task(self._answer(run), name=f"run-{chat}")

    def drop(self, chat: int) -> None:
        """The conversation was deleted: its run in this worker, if any, ends at once and
        quietly (no rows are left to mark), before anything else happens on this event loop,
        so its in-flight step cannot write into a conversation made next (SQLite may give it
        the same id). The pages that delete call it; other workers' scans see the tombstone."""
        run = self.runs.get(chat)
        if run is not None and run.task is not None and not run.task.done():
            run.gone = True
            run.task.cancel()

    def halt(self, run: Run) -> None:
        """The person stopped the run: the run ends where it is, what was written stays. A tool
        running now is told first (Turn.halt) and may end itself, up to STOP_GRACE_SECONDS;
        a model stream, a wait for approval or setup is cancelled at once."""
        if run.halting or run.task is None or run.task.done():
            return
        run.halting = True
        if run.turn is None or run.turn.idle.is_set():
            run.task.cancel()
        else:
            self.side(self._halted(run, run.turn, run.task))

    async def _halted(self, run: Run, turn: Turn, task: asyncio.Task) -> None:
        try:
            await turn.halt(STOP_GRACE_SECONDS)
        finally:
            if not task.done():
                task.cancel()  # the tool did not end itself in time, or the run is past it already

    # --- leases ---------------------------------------------------------------------

    def lease(self, chat: int) -> bool:
        return self.store.lease(chat, self.owner, self.lease_seconds)

    def lease_many(self, chats: list[int]) -> set[int]:
        return self.store.lease_many(chats, self.owner, self.lease_seconds)

    def release(self, chat: int) -> None:
        self.store.release(chat, self.owner)

    async def _renew_forever(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.renew_seconds)
            try:  # plugin sessions of deleted conversations, and idle ones, are closed
                await self.sessions.sweep(self.store.existing)
            except Exception as e:
                if not unavailable(e):  # (the scan says an outage)
                    log.exception("closing plugin sessions failed")
            if not self.runs:
                continue
            chats = list(self.runs)
            try:
                held = self.store.renew(self.owner, chats, self.lease_seconds)
                gone = {chat for chat in chats if chat not in held and self.store.conversation(chat) is None}
            except Exception as e:
                if space.is_full(e):
                    self.disk_full()
                elif not unavailable(e):
                    log.exception("renewing the leases failed")
                continue
            for chat in chats:
                run = self.runs.get(chat)
                if chat not in held and run and run.task and not run.gone and not run.lost:
                    if chat in gone:
                        run.gone = True  # deleted: its lease went with it
                    else:
                        # Held up past its lease (a paused process, a stalled loop): another
                        # worker took it and answers it from the last complete step. This run
                        # ends as at shutdown, marking nothing (its writes would fail anyway).
                        run.lost = True
                        log.warning("lost the lease on conversation %s (held up past TABLETALK_LEASE_SECONDS): "
                                    "another worker answers it; its run here ends, writing nothing", chat)
                    run.task.cancel()

    # --- answering ------------------------------------------------------------------

    async def _answer(self, run: Run) -> None:
        try:
            while not self.stopping:
                pending = self.store.next_pending(run.chat)
                if pending is None:
                    break
                if pending.kind == "stop":
                    run.store.update(pending.id, done=True)  # nothing is running: nothing to stop
                    continue
                user = pending if pending.kind == "user" else self.store.item(pending.turn)
                if user is None or user.kind != "user":
                    run.store.update(pending.id, done=True)  # a retry of nothing
                    continue
                run.turn = None
                try:
                    await self._turn(run, user, retry=pending if pending.kind == "retry" else None)
                except Stopped:
                    raise
                except Exception as e:
                    if self._cut(e):
                        raise  # nothing of it is written: it resumes where the rows say
                    # A bug, not the model's or a tool's failure (those are rows already): the
                    # turn ends with an error item instead of being taken up again, and again.
                    log.exception("the turn of item %s in conversation %s failed", user.id, run.chat)
                    self._failed(run, user)
                if pending.kind == "user":
                    self.side(name_conversation(self.store, self.providers, run.chat, user, run.turn.model))
                with run.store.write():
                    run.store.update(pending.id, done=True)
                    if pending.kind == "retry" and not user.done:
                        run.store.update(user.id, done=True)
        except (asyncio.CancelledError, Stopped):
            if not run.lost:  # (lost: its lease is another's; that worker goes on, this one writes nothing)
                self._closing(run, self.ended_full if run.full else self._cancelled)
        except Exception as e:
            if space.is_full(e):
                self.disk_full()
                self._closing(run, self.ended_full)
            elif self._cut(e):
                self._dropped(run, e)
            else:
                log.exception("run of conversation %s failed", run.chat)
        finally:
            try:
                self.writes.flush()
            except Exception as e:
                if not unavailable(e):
                    log.exception("writing growing text failed")
            self.runs.pop(run.chat, None)
            try:
                self.release(run.chat)
            except Exception as e:
                if not unavailable(e):  # it expires by itself; the scan says an outage
                    log.exception("releasing the lease of %s failed", run.chat)
            self._wake_up()  # more work may have arrived while this run held the lease

    def _closing(self, run: Run, end) -> None:
        """`end(run)`: what a stop or a full disk leaves in the rows; nothing, when even that
        finds the lease another's or the database unreachable."""
        try:
            end(run)
        except Exception as e:
            if not self._cut(e):
                raise
            self._dropped(run, e)

    @staticmethod
    def _cut(e: BaseException) -> bool:
        """Whether a run's write failed for want of its lease or of the database: the run ends
        writing nothing more (never as a failure of the answer), and whoever holds the lease
        next goes on from the last complete step the rows hold."""
        return isinstance(e, LeaseLost) or bool(unavailable(e))

    def _dropped(self, run: Run, e: BaseException) -> None:
        run.lost = True
        if isinstance(e, LeaseLost):
            if not run.gone:
                log.warning("lost the lease on conversation %s (held up past TABLETALK_LEASE_SECONDS): another "
                            "worker answers it; its run here ends, writing nothing", run.chat)
        else:
            log.warning("conversation %s: a write failed (%s); its answer resumes from its last complete step when "
                        "the database answers", run.chat, unavailable(e))

    def _failed(self, run: Run, user: Item) -> None:
        self.writes.flush()
        if run.turn is not None:
            run.turn.stopped()
        run.store.add(item("error", run.chat, FAILED, turn=user.id, state="failed", done=True,
                           model=run.turn.model if run.turn else ""))

    def _cancelled(self, run: Run) -> None:
        """A stop: keep what was written and mark it done. At shutdown, or for a deleted
        conversation, nothing is marked (the next start resumes the rows; none are left)."""
        self.writes.flush()
        if self.stopping or run.turn is None or run.gone:
            return
        run.turn.stopped()
        self._mark_done(run)

    def _mark_done(self, run: Run) -> None:
        """The turn's question (or retry) and any stop asked meanwhile are handled."""
        stops = self.store.unhandled_stops(run.chat)
        with run.store.write():
            for item_id in [run.turn.user.id, *stops]:
                run.store.update(item_id, done=True)
            if run.turn.retry is not None:
                run.store.update(run.turn.retry.id, done=True)

    async def _turn(self, run: Run, user: Item, retry: Item | None) -> None:
        # a document attached to the message (a PDF, a Word file) is read first (run/ingest.py),
        # so that the answer is made from all of it; a Stop meanwhile ends the wait
        while user.file_ids and self.store.attached_reading(run.chat, user.file_ids):
            await self.feed.changed(1.0)
        turn = run.turn = await self.turn_setup.turn(run.chat, user, retry, self.writes, changed=self.feed.changed,
                                                     store=run.store, grew=self.feed.grew)
        run.store.update(user.id)  # it is answered now, no longer queued: pages re-render it
        if why := self.turn_setup.unready(turn.model, run.chat):
            turn.emit(loop.Failed(why))
        else:
            await turn.run(self.providers.stream_fn(turn.model, thinking=turn.thinking or None,
                                                    every=lambda: self._read_every(run.chat)))
        self.writes.flush()

    def _read_every(self, chat: int) -> float:
        """How often the model's stream for `chat` is read (asked at each wait): once a frame
        while a page here follows (it is handed the words from memory), once a beat while one
        follows elsewhere (it reads the rows, written on the beat), once a second while nobody
        follows (its growth is written once a second: each read of a slow model's chunk as it
        came was a wake-up of the worker, most of what such an answer cost)."""
        if self.feed.followed_here(chat):
            return FRAME_SECONDS
        return BEAT_SECONDS if self.watched(chat) else UNWATCHED_SECONDS

    def side(self, work) -> None:
        """Work beside a run (naming a conversation): never holds the run up, ends at shutdown.
        Its failure loses nothing (the first words stay the title): a bug is logged with its
        traceback, an outage is not (the scan says that one)."""
        task = asyncio.get_running_loop().create_task(work)
        self._side.add(task)
        task.add_done_callback(self._side_ended)

    def _side_ended(self, task: asyncio.Task) -> None:
        self._side.discard(task)
        if task.cancelled() or (e := task.exception()) is None or unavailable(e):
            return
        log.error("work beside a run failed", exc_info=e)
