"""The change feed: rows changed since a rev, wake-ups within and across processes.

One `Feed` per process. It reads the rows changed since the last rev it saw once per
wake-up, for all conversations at once, renders each conversation's changes once, and
hands the result to every follower of that conversation: a thousand followers of one
answer cost one query and one render, not a thousand. A write in this process wakes it at
once (`notify`); a write in another process is seen by one cheap `PRAGMA data_version`
look on this process's own feed connection, never one per follower: when the kernel tells
of a write to the WAL (walwatch.py), else polled every 25 ms (PostgreSQL: NOTIFY).

While the database cannot be reached the streams stay open: every follower is told so once
(a banner, `render_outage`), the feed looks again every OUTAGE_POLL_SECONDS, and once the
database answers it takes the banner away and sends what changed meanwhile, from its cursor
as always: no page has to reload, none misses a row.

An answer run in this process reaches the pages following it here faster than its rows:
the runner hands the feed each read of its text (`grew`, once a frame at most), and the
feed sends the pages in step the difference at once, with no rev (their cursor stays at
the last row they had). The rows stay the truth, written on the beat: a dispatch renders
a text growing here at the length the pages in step have (`current`), so what a page was
sent from memory is never sent again or skipped, and a page that catches up (a reconnect,
another worker) is sent whole elements until it has every text growing here.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import secrets
import socket
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..agent.pieces import SoFar
from ..store import Store, db as dbm
from ..beat import BEAT_SECONDS, FRAME_SECONDS, beat_at_or_after
from ..store.outage import WORDS, unavailable
from ..tables import Builtin, Conversation, Document, Item
from .followed import Followed
from .walwatch import WalWatch

log = logging.getLogger(__name__)

POLL_SECONDS = 0.025
# Without inotify (walwatch.py) and with no page following in this process, other
# processes' commits are looked for at the pace the runner scans (runner.SCAN_GAP_SECONDS),
# on its beats: the feed's only other listeners then (the runner's scans, a wait for
# approval, the built-in model's keeper) look no more often, and an idle worker wakes 10
# times a second, not 40. A page that starts following brings the 25 ms polls back at once
# (`follow`).
UNFOLLOWED_POLL_SECONDS = 0.1
# ... and once a second where the kernel tells of writes to the database (SQLite on Linux:
# feed/walwatch.py): the feed is woken by them, and this look only stands in for a write it
# was told of too early or not at all (a lost event). An idle worker then wakes a few times
# a second, not 13 (benchmarks/README.md, "Idle wake-ups").
TOLD_POLL_SECONDS = 1.0
# ... every 0.25 s while a page follows here: a write of another process is told of at once,
# and this look bounds the wait for one the feed took for its own process's (below). An open
# page cost 40 looks a second, and another worker's words waited for the next (25 ms).
TOLD_FOLLOWED_POLL_SECONDS = 0.25
# A write told of this soon after a commit of this process (`notify`) is taken for that
# commit's, whose notify woke the feed already: looked at again, it would wake it twice more
# for each beat's growth of an answer a page here follows.
OWN_WRITE_SECONDS = 0.01
KEEPALIVE_SECONDS = 15.0  # a comment on every idle stream, so proxies keep it open
FOLLOWER_BACKLOG = 256  # messages a slow follower may fall behind before it must resync
OUTAGE_POLL_SECONDS = 0.25  # how often the database is looked for while it cannot be reached
# The pages following one conversation here are sent at most this many frame messages a
# second in all (each page's message a write of its own, ~25 us): up to ~18 pages a frame
# each, and a conversation a hundred pages follow gets a frame every ~91 ms, its turn (its
# CPU was 3x the rows' path's at a frame each: benchmarks/README.md, "The fast path"; 1,100,
# not 1,000, keeps their delay's p99 within 100 ms: "Frames after their reads").
FANOUT_SENDS = 1100
# A frame goes once half a frame has passed since the last, not a whole one: the texts it
# sends are read once a frame, on a grid of their own (netguard/sockets.py), and a frame held
# to a whole frame after the last fell behind the reads by a fraction of a frame that it then
# kept (~8 ms at the median at 200 chunks a second: benchmarks/README.md, "Frames after their
# reads"). A page still gets at most a message a read.
FRAME_GAP_SECONDS = FRAME_SECONDS / 2
# The conversations followed here are marked as watched in the rows (Store.mark_watched) for
# WATCH_SECONDS, renewed every WATCH_RENEW_SECONDS while they are, a new one at the feed's
# next turn: the runner of their answer, in whatever worker or server, writes its growth on
# the beat while the mark holds, and once a second while it does not (run/writes.py).
WATCH_SECONDS = 5.0
WATCH_RENEW_SECONDS = 2.0

# (store, chat, changed items, changed conversation or None, deleted dom ids, what the pages
# in step have, brought up to date) -> one SSE message's HTML. The store reads through the
# feed's own connection, inside the snapshot being sent.
Render = Callable[[Store, int, list[Item], Conversation | None, list[str], Followed], str]
# (store, changed conversations, deleted dom ids) -> the conversation list's HTML
RenderList = Callable[[Store, list[Conversation], list[str]], str]
# (store, the built-in model's changed row, whose page) -> its fragment (app/builtin)
RenderBuiltin = Callable[[Store, Builtin, int | None], str]
# (store, documents whose reading changed, whose page) -> their fragments that person may see
RenderDocuments = Callable[[Store, list[Document], int | None], str]
# (texts read in this process: (item id, the text so far), what the pages in step have) ->
# the message that brings them up to those texts (Feed.grew)
RenderGrown = Callable[[list[tuple[int, str]], Followed], str]
# (what to tell a person of the database, "" once it answers again) -> every page's banner
RenderOutage = Callable[[str], str]


def encode(rev: int | None, html: str) -> bytes:
    """One SSE message: its id is the rev it brings the page to (None: no id, so the page's
    cursor, the Last-Event-ID it would reconnect with, stays where it was).

    Fields are written without the optional space after the colon (a live answer is ~190
    messages of ~40 characters each, so every byte of framing shows in the bytes a page
    receives); a line that itself begins with a space keeps it, since a reader drops one.

    A reader ends a line at CR, LF or CRLF: the HTML is split at all three (so a bare CR in
    a tool's output cannot start an `event:` or `id:` field of its own), which HTML reads
    alike (its parser turns CR and CRLF into LF anyway). A NUL, which HTML drops or replaces
    too, becomes U+FFFD."""
    lines = _LINE_BREAK.split(html.replace("\x00", "\ufffd"))
    data = "".join(f"data:{' ' if line[:1] == ' ' else ''}{line}\n" for line in lines)
    return (f"id:{int(rev)}\n" if rev is not None else "").encode() + f"{data}\n".encode()


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


KEEPALIVE = b": keep-alive\n\n"


def _done(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Follower:
    """One open stream: a small queue of encoded messages and a future to wake it.

    Kept small and cheap to wake: a thousand followers of one answer are a thousand of these
    (no task or timer per message; keep-alives come from the feed's own loop).
    """

    __slots__ = ("chat", "person", "session", "lists", "messages", "waiter", "behind", "fresh")

    def __init__(self, chat: int | None, person: int | None = None, session: str = "", lists: bool = False):
        self.chat = chat
        self.person = person  # whose page: a list follower gets that person's conversations only
        self.session = session  # the sign-in it was opened under: signing out ends the stream
        # A conversation's page also follows its person's list (the sidebar) in the same
        # stream: one stream a page, as browsers open at most six to a host over HTTP/1.1.
        self.lists = lists
        self.messages: deque[tuple[int | None, bytes]] = deque()
        self.waiter: asyncio.Future | None = None
        self.behind = False  # fell too far behind: end the stream, the browser resyncs
        # Caught up from the database, not from the feed: its page may be ahead of what
        # followers in step have, so its next message carries whole elements, not diffs.
        self.fresh = True

    def push(self, rev: int | None, data: bytes) -> None:
        """`rev`: the rev the message brings the page to (0: a keep-alive or a banner; None: one
        never left out as covered by the page's catch-up, stream.follow)."""
        if len(self.messages) >= FOLLOWER_BACKLOG:
            self.behind = True
        else:
            self.messages.append((rev, data))
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self) -> list[tuple[int | None, bytes]]:
        """Every message queued, waiting for one first; none when woken with nothing to send
        (closing, behind). All of them: what queued while the stream's task waited for its
        turn (a busy loop, a hundred followers of one answer) leaves in one write."""
        if not self.messages:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        taken = list(self.messages)
        self.messages.clear()
        return taken


class Watcher:
    """One API stream (docs/api.md) following a conversation's rows, not its fragments: each
    dispatch hands it the conversation's changed rows as read (never the texts the pages are
    sent, `Feed.current`) and the dom ids of those deleted, merged until it takes them.
    Nothing is rendered for it."""

    __slots__ = ("chat", "items", "gone", "waiter", "rev")

    def __init__(self, chat: int):
        self.chat = chat
        self.items: dict[int, Item] = {}
        self.gone: list[str] = []
        self.waiter: asyncio.Future | None = None
        self.rev = 0  # the rev the items handed over bring it to

    def push(self, rev: int, items: list[Item], gone: list[str]) -> None:
        for it in items:
            self.items[it.id] = it
        self.gone.extend(gone)
        self.rev = max(self.rev, rev)
        self.wake()

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def take(self) -> tuple[list[Item], list[str]]:
        items, gone = list(self.items.values()), self.gone
        self.items, self.gone = {}, []
        return items, gone

    async def wait(self, timeout: float) -> None:
        """Until something is handed over (or the feed closes), at most `timeout` seconds."""
        if self.items or self.gone:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait([self.waiter], timeout=timeout)
        finally:
            self.waiter = None


class Feed:
    def __init__(self, path: Path | str, render: Render | None = None, render_list: RenderList | None = None,
                 render_builtin: RenderBuiltin | None = None, render_outage: RenderOutage | None = None,
                 render_documents: RenderDocuments | None = None, render_grown: RenderGrown | None = None):
        self.db = dbm.connect(path)
        self.path = path
        self.store = Store(self.db)
        self.render = render
        self.render_list = render_list
        self.render_builtin = render_builtin
        self.render_outage = render_outage
        self.render_documents = render_documents
        self.render_grown = render_grown
        self.down = ""  # why the database cannot be reached now ("" while it answers)
        self.rev = self.store.rev()
        self.followers: dict[int | None, set[Follower]] = defaultdict(set)
        self.followed: dict[int, Followed] = {}  # per followed conversation: what pages in step have
        self.watchers: dict[int, set[Watcher]] = defaultdict(set)  # the API's streams, by conversation
        self.closed = False
        self._poked = False  # a commit in this process since the last dispatch
        # Where the kernel tells of writes to the database (`WalWatch`, SQLite on Linux): a
        # write told of since the last look (`_told`), and one told of that the look after
        # it did not see yet (`_settle`: looked for once more, POLL_SECONDS on).
        self._wal: WalWatch | None = None
        self._told = False
        self._settle = False
        self._own_at = 0.0  # when this process last committed (`notify`)
        self._waiter: asyncio.Future | None = None  # the run loop's rest, cut short by a commit
        self._tick: asyncio.Future | None = None  # done at the next dispatch (`next_change`)
        self._task: asyncio.Task | None = None
        # The text items growing in this process's runs that a page here follows: item id ->
        # (its conversation, its text as last read), until a dispatch finds the row done
        # (`grew`, `current`); those grown since the last frame; the next frame, and the last's time.
        self._grown: dict[int, tuple[int, SoFar]] = {}
        self._due: set[int] = set()
        self._frame: asyncio.Handle | None = None
        self._frame_at = 0.0  # (when it is due)
        self._framed = 0.0
        self._chat_framed: dict[int, float] = {}  # when each conversation's pages were last sent a frame
        self._marked: set[int] = set()  # the conversations marked watched at the last renewal (`_mark`)
        # Told when the last page here following a conversation whose text grows here leaves
        # (Runner.left): what was read of it is written, so a page that opens it again (a
        # reconnect) catches up from rows holding what the pages were shown from memory.
        self.left: Callable[[int], None] | None = None
        # this feed's name on its marks: a runner here asks for marks other than its own (`watched`)
        self.marker = f"{socket.gethostname()[:60]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._mark_at = 0.0  # when the marks are renewed next (0: at the feed's next turn, one is new)

    # --- wake-ups -------------------------------------------------------------------

    def notify(self) -> None:
        """A row was committed in this process."""
        self._poked = True
        self._own_at = time.monotonic()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def next_change(self) -> asyncio.Future:
        """Done once the feed has seen a change: one future every waiter shares (never cancel
        it; wait on it with asyncio.wait)."""
        if self._tick is None:
            self._tick = asyncio.get_running_loop().create_future()
        return self._tick

    def _ticked(self) -> None:
        tick, self._tick = self._tick, None
        if tick is not None and not tick.done():
            tick.set_result(None)

    async def changed(self, timeout: float) -> None:
        """Wait until the feed has seen a change (or `timeout` passes). asyncio.wait, not
        wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as it ends,
        and a stopped run must never miss its cancellation."""
        await asyncio.wait([self.next_change()], timeout=timeout)

    async def _rest(self, poll_at: float) -> bool:
        """Until a commit in this process (True) or `poll_at` (False). Polls are on the grid of
        POLL_SECONDS, the runner's beats among them (app/beat.py), at least POLL_SECONDS after
        the last look (UNFOLLOWED_POLL_SECONDS while no page follows here): a dispatch moves
        the next poll, so while an answer is written every beat the feed wakes only with it
        (followed, it polls at the runner's next read after a commit of this process, else at
        the half-beat). A future and a timer, not a task: this
        turns up to 40 times a second in every worker."""
        if self._poked or self._told:
            return self._poked
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_at(poll_at, _done, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        return self._poked

    def _written(self) -> None:
        """The kernel tells of a write to the database's WAL, by any process: look now, unless
        it is likely this process's own, just notified (OWN_WRITE_SECONDS)."""
        if time.monotonic() - self._own_at < OWN_WRITE_SECONDS:
            return
        self._told = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def start(self) -> None:
        if not dbm.postgres(self.db) and str(self.path) != ":memory:" and self.db.journal_mode == "wal":
            self._wal = WalWatch(self.path)
            if not self._wal.start(self._written):
                self._wal = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name="feed")

    async def _run(self) -> None:
        version = self._data_version()
        looked = time.monotonic()  # when the rows were last read or polled
        poked = False  # the last look was for a commit of this process
        keepalive_at = time.monotonic() + KEEPALIVE_SECONDS
        while not self.closed:
            self._mark()
            if time.monotonic() >= keepalive_at:  # one loop for every idle stream, not a timer each
                keepalive_at = time.monotonic() + KEEPALIVE_SECONDS
                for group in self.followers.values():
                    for f in group:
                        if not f.messages:
                            f.push(0, KEEPALIVE)
            if self._settle:  # a write told of, not yet seen
                poll_at = beat_at_or_after(looked + POLL_SECONDS - 0.001, POLL_SECONDS)
            elif self._wal is not None and self._wal.watching:  # this look stands in for an event missed
                every = TOLD_FOLLOWED_POLL_SECONDS if self.listened else TOLD_POLL_SECONDS
                poll_at = beat_at_or_after(looked + every - 0.001, BEAT_SECONDS)
            elif self.listened and poked:
                # This process wrote (the runner, after its reads on a beat): it will again at
                # its next read, a beat on, and the poll waits for that wake-up rather than
                # taking one of its own at the half-beat between (~60-100 us each, one a
                # message of a growing answer). Others' commits meanwhile come within a beat.
                poll_at = beat_at_or_after(looked + BEAT_SECONDS - POLL_SECONDS / 2, POLL_SECONDS)
            elif self.listened:
                poll_at = beat_at_or_after(looked + POLL_SECONDS - 0.001, POLL_SECONDS)
            else:
                poll_at = beat_at_or_after(looked + UNFOLLOWED_POLL_SECONDS - 0.001, BEAT_SECONDS)
            self._settle = False
            poked = await self._rest(poll_at)
            told, self._told = self._told, False
            try:
                # Read before the dispatch's snapshot: a commit after it changes the version again.
                seen = self._data_version()
            except Exception as e:
                if not (why := unavailable(e)):
                    raise
                self._unreachable(why)
                self._poked = False  # (what this process wrote before is read once it is back)
                await self._rest(time.monotonic() + OUTAGE_POLL_SECONDS)
                looked = time.monotonic()
                continue
            if self.down:
                self._answers()
                poked = True  # what changed meanwhile, at once
            looked = time.monotonic() if poked or told else poll_at
            if not poked and seen == version:
                # a write told of may not be visible yet (the WAL index is updated after it):
                # looked for once more (a write of this process's own, seen already, too)
                self._settle = told
                continue
            version = seen  # this dispatch covers this process's commits too: no second one
            self._poked = False
            before = self.rev
            try:
                self.dispatch()
            except Exception as e:
                if why := unavailable(e):
                    self._unreachable(why)
                    self._again(before)
                    version = -1
                else:  # a bad row must not stop every page following
                    log.exception("feed dispatch failed")
            self._ticked()

    def _data_version(self) -> int:
        return self.store.data_version()

    # --- the database unreachable ---------------------------------------------------

    def _unreachable(self, why: str) -> None:
        """Every page following is told, once an outage (the runner's scan says it in the log)."""
        if not self.down and self.render_outage is not None:
            self._tell_all(self.render_outage(WORDS))
        self.down = why

    def _answers(self) -> None:
        self.down = ""
        if self.render_outage is not None:
            self._tell_all(self.render_outage(""))

    def _tell_all(self, html: str) -> None:
        data = encode(None, html)
        for group in self.followers.values():
            for f in group:
                f.push(0, data)

    def _again(self, rev: int) -> None:
        """A dispatch failed on its way (the database went): the next one reads again from
        `rev`, and sends whole elements (a follower may have had part of this one: whole
        elements are the same whatever it has)."""
        self.rev = rev
        for group in self.followers.values():
            for f in group:
                f.fresh = True

    # --- following ------------------------------------------------------------------

    @property
    def listened(self) -> bool:
        """Whether a page or an API stream follows in this process: the feed polls at its
        quicker pace, and every commit wakes it."""
        return bool(self.followers or self.watchers)

    def watch(self, chat: int) -> Watcher:
        """An API stream follows `chat`'s rows from now on (read the rows after this)."""
        w = Watcher(chat)
        if chat not in self._marked:
            self._mark_at = 0.0
        if not self.listened:
            self.notify()  # the feed may rest for UNFOLLOWED_POLL_SECONDS: look now, then poll as followed
        self.watchers[chat].add(w)
        return w

    def unwatch(self, watcher: Watcher) -> None:
        group = self.watchers.get(watcher.chat)
        if group is not None:
            group.discard(watcher)
            if not group:
                del self.watchers[watcher.chat]

    def follow(self, chat: int | None, person: int | None = None, session: str = "", lists: bool = False) -> Follower:
        f = Follower(chat, person, session, lists)
        if chat is not None and chat not in self._marked:
            self._mark_at = 0.0
        if not self.listened:
            self.notify()  # the feed may rest for UNFOLLOWED_POLL_SECONDS: look now, then poll as followed
        self.followers[chat].add(f)
        if chat is not None:
            self.followed.setdefault(chat, Followed())
        return f

    def drop(self, session: str = "", person: int | None = None, keep: str = "") -> None:
        """End the streams opened under a session (signed out) or by a person (removed, or
        a new password: all but the session `keep`)."""
        for group in self.followers.values():
            for f in group:
                if (session and f.session == session) or (
                        person is not None and f.person == person and not (keep and f.session == keep)):
                    f.behind = True
                    f.wake()

    def unfollow(self, follower: Follower) -> None:
        group = self.followers.get(follower.chat)
        if group is not None:
            group.discard(follower)
            if not group:
                del self.followers[follower.chat]
                self.followed.pop(follower.chat, None)
                self._chat_framed.pop(follower.chat, None)
                growing = [i for i, (chat, _) in self._grown.items() if chat == follower.chat]
                for item in growing:
                    del self._grown[item]
                    self._due.discard(item)
                if growing and self.left is not None:  # (texts grow in conversations only)
                    self.left(follower.chat)

    # --- the fast path: growth read in this process, from memory -----------------------

    def follows(self, chat: int) -> bool:
        """Whether a page or an API stream in this process follows `chat`."""
        return chat in self.followers or chat in self.watchers

    def _mark(self) -> None:
        """Mark the conversations followed here as watched (WATCH_SECONDS): every
        WATCH_RENEW_SECONDS, and at once when one is new."""
        if time.monotonic() < self._mark_at:
            return
        chats = {c for c in self.followers if c is not None} | set(self.watchers)
        if not chats:
            return
        try:
            self.store.mark_watched(sorted(chats), WATCH_SECONDS, self.marker)
        except Exception as e:  # (the runner then writes once a second: what a page shows lags, nothing is lost)
            if not unavailable(e):
                log.exception("marking the followed conversations failed")
        self._marked = chats
        self._mark_at = time.monotonic() + WATCH_RENEW_SECONDS

    def in_rows(self, chat: int) -> bool:
        """Whether what follows `chat` here needs its growth in the rows on the beat: an API
        stream (it reads the rows), or a page that is not handed the words from memory: one
        catching up (it waits for the rows' next dispatch, `Follower.fresh`), or any while
        this feed has no fast path (`render_grown`)."""
        if chat in self.watchers:
            return True
        group = self.followers.get(chat)
        return bool(group) and (self.render_grown is None or any(f.fresh for f in group))

    def followed_here(self, chat: int) -> bool:
        """Whether a page in this process follows `chat` (its answer is read once a frame)."""
        return chat in self.followers

    def grew(self, chat: int, item: int, text: SoFar) -> None:
        """The runner read more of a growing text item: the pages following here are sent it
        within a frame (FRAME_SECONDS; less often for many pages, FANOUT_SENDS), the first
        read after a quiet frame at once."""
        if chat not in self.followers or self.render_grown is None:
            return
        self._grown[item] = (chat, text)
        self._due.add(item)
        self._schedule()

    def _schedule(self, not_before: float = 0.0) -> None:
        """The next frame: FRAME_GAP_SECONDS after the last at the earliest (and not before
        `not_before`: a conversation whose many pages had one too recently), or sooner than
        one scheduled for later (a text grew in another conversation meanwhile)."""
        loop = asyncio.get_running_loop()
        at = max(self._framed + FRAME_GAP_SECONDS, not_before)
        if self._frame is not None:
            if self._frame_at <= at:
                return
            self._frame.cancel()
        self._frame_at = at
        # call_soon: the other streams read on the same wake-up join this frame
        self._frame = loop.call_soon(self._send_frame) if at <= loop.time() else loop.call_at(at, self._send_frame)

    def current(self, items: list[Item]) -> list[Item]:
        """`items` (rows just read) with the text of those growing here as the pages in step
        have it: a dispatch neither takes back what a frame sent them nor sends ahead of the
        frames (which alone bring a text read here on, at their pace). A finished row ends its
        entry (the row is then all); a text the pages do not have yet is the row's."""
        if not self._grown:
            return items
        out = []
        for it in items:
            entry = self._grown.get(it.id)
            if entry is not None:
                if it.done:
                    del self._grown[it.id]
                    self._due.discard(it.id)
                else:
                    chat, text = entry
                    followed = self.followed.get(chat)
                    sent = followed.items.get(it.id) if followed is not None else None
                    if sent is not None and sent.length != len(it.text or "") and sent.length <= text.size:
                        it = replace(it, text=text.pieces.text(sent.length))
            out.append(it)
        return out

    def _send_frame(self) -> None:
        """One frame: each followed conversation's texts read since the last, as the difference
        from what its pages in step have (a page just caught up waits for the next dispatch,
        which sends it whole elements). A conversation whose pages had a frame too recently
        for their number (FANOUT_SENDS) keeps its texts for a later frame."""
        self._frame = None
        now = self._framed = asyncio.get_running_loop().time()
        due, self._due = self._due, set()
        by_chat: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for item in due:
            entry = self._grown.get(item)
            if entry is None or self.closed:
                continue
            chat, text = entry
            followed = self.followed.get(chat)
            # (a page has the item from the rows first, and its render; a row seen done ended the entry)
            sent = followed.items.get(item) if followed is not None else None
            if sent is not None and item in followed.renders and text.size > sent.length:
                by_chat[chat].append((item, str(text)))
        later = 0.0  # when the first conversation held back for its many pages may have its frame
        for chat, texts in by_chat.items():
            group = [f for f in self.followers.get(chat, ()) if not f.fresh]
            if not group:
                continue
            due = self._chat_framed.get(chat, -math.inf) + len(group) / FANOUT_SENDS
            if now < due - 0.001:
                self._due.update(item for item, _ in texts)  # too soon for so many pages
                later = min(later, due) if later else due
                continue
            self._chat_framed[chat] = now
            followed = self.followed[chat]
            for item, _ in texts:  # rendered once a frame: the frame bounds the renders, not the reveal grid
                followed.renders[item].free = True
            try:
                html = self.render_grown(texts, followed)
            except Exception:
                log.exception("feed frame failed")
                for f in group:  # what they have is not known: the next dispatch sends them whole elements
                    f.fresh = True
                continue
            if html:
                data = encode(None, html)
                for f in group:
                    f.push(None, data)
        if self._due:
            self._schedule(later)

    def dispatch(self) -> None:
        """Read what changed since the last rev seen and hand it to the followers."""
        with self.store.snapshot():  # one snapshot: the rev and the rows it covers agree
            if not self.listened:  # nobody to tell: a page opened later catches up from the rows
                self.rev = max(self.rev, self.store.rev())
                return
            # only the followed conversations' rows: with no page open, a busy worker reads nothing
            followed = list({c for c in self.followers if c is not None} | set(self.watchers))
            # the rev and which other families changed, in one statement: while an answer
            # grows, only its item did, and the reads that would find nothing are not made
            changed = self.store.changed_since(self.rev, followed)
            top = changed.rev
            if top <= self.rev:
                return
            rows = self.store.items_since(self.rev, upto=top, chats=followed) if followed else []
            items = self.current(rows)  # (what the pages are sent; an API stream takes the rows)
            convos = self.store.conversations_since(self.rev, upto=top) if changed.conversations else []
            # the context meter and the marker where the model's view starts
            contexts = self.store.contexts_since(self.rev, top, followed) if changed.contexts else []
            builtin = (self.store.builtin_since(self.rev, top) if self.render_builtin and changed.builtin
                       else None)
            documents = (self.store.documents_since(self.rev, top) if self.render_documents and changed.documents
                         else [])
            gone: dict[int, list[str]] = defaultdict(list)
            # tombstones of the lists (chat NULL): deleted conversations, and whose they were
            listed_gone: list[tuple[str, int | None]] = []
            for chat, dom, person in self.store.tombstones_since(self.rev, upto=top) if changed.tombstones else ():
                if chat is None:
                    listed_gone.append((dom, person))
                elif chat in self.followers or chat in self.watchers:
                    gone[chat].append(dom)
            self.rev = top
            by_chat: dict[int, list[Item]] = defaultdict(list)
            for it in items:
                by_chat[it.chat].append(it)
            rows_of: dict[int, list[Item]] = defaultdict(list)
            for it in rows:
                rows_of[it.chat].append(it)
            for chat, watching in self.watchers.items():
                if chat in rows_of or chat in gone:
                    for w in watching:
                        w.push(top, rows_of.get(chat, []), gone.get(chat, []))
            convo_of = {c.id: c for c in convos if c.id in self.followers}
            lists = self._lists(convos, listed_gone)  # person -> their list's changes
            told: set[Follower] = set()  # list-following conversation pages whose message carried them
            encoded: dict[tuple[str, str], bytes] = {}  # one encoding per distinct message

            def message(html: str, extra: str = "") -> bytes:
                if (html, extra) not in encoded:
                    encoded[(html, extra)] = encode(top, html + extra) if html or extra else b""
                return encoded[(html, extra)]

            if self.render:
                # (an API stream's conversation alone renders nothing: it takes the rows)
                for chat in (by_chat.keys() | convo_of.keys() | gone.keys() | set(contexts)) & self.followers.keys():
                    followed = self.followed.setdefault(chat, Followed())
                    if chat in contexts:  # the context meter moved: the renderer reads the state again
                        followed.state = None
                    changes = (self.store, chat, by_chat.get(chat, []), convo_of.get(chat), gone.get(chat, []))
                    group = tuple(self.followers.get(chat, ()))
                    # the diff is made (and encoded) once for every follower in step, and keeps
                    # `followed` current; a dispatch with nothing a page shows sends nothing.
                    # A follower that caught up from the database gets the difference from nothing.
                    diff = self.render(*changes, followed)
                    whole = self.render(*changes, followed.nothing()) if any(f.fresh for f in group) else ""
                    # A page that caught up is in step once it has every text growing here that
                    # the pages in step have (the frames send differences from those): a
                    # dispatch of other rows leaves it to the next that carries them too.
                    carried = {it.id for it in by_chat.get(chat, ())}
                    in_step = all(item in carried for item, (c, _) in self._grown.items()
                                  if c == chat and item in followed.items)
                    for f in group:
                        extra = lists.get(f.person, "") if f.lists else ""
                        if extra:
                            told.add(f)
                        data = message(whole if f.fresh else diff, extra)
                        if data:
                            # a page's first message from the feed is whole elements: never
                            # left out as covered by its catch-up (the texts read here may have
                            # grown since), so the pages in step all have what `followed` says
                            f.push(None if f.fresh else top, data)
                        f.fresh = f.fresh and not in_step
            if lists:
                # each person's list hears of their own conversations only, rendered once per person
                for chat, group in self.followers.items():
                    for f in group:
                        if (chat is None or (f.lists and f not in told)) and lists.get(f.person):
                            f.push(top, message("", lists[f.person]))
            if builtin is not None and self.render_builtin:
                # the built-in model's install and server: on every open page, its own message
                by_person: dict[int | None, str] = {}
                for group in self.followers.values():
                    for f in group:
                        if f.person not in by_person:
                            by_person[f.person] = self.render_builtin(self.store, builtin, f.person)
                        f.push(top, message(by_person[f.person]))
            if documents and self.render_documents:
                # documents being read: to the pages that are not a conversation's (a
                # collection's page shows them) of each person who may see them, and a
                # document attached to a message to the pages of its conversation
                shown: dict[tuple[int | None, int | None], str] = {}
                for chat, group in self.followers.items():
                    these = [d for d in documents if (d.collection is not None if chat is None else d.chat == chat)]
                    for f in group if these else ():
                        if (chat, f.person) not in shown:
                            shown[chat, f.person] = self.render_documents(self.store, these, f.person)
                        if shown[chat, f.person]:
                            f.push(top, message(shown[chat, f.person]))

    def _lists(self, convos: list[Conversation], listed_gone: list[tuple[str, int | None]]) -> dict[int | None, str]:
        """The list changes of each person with a page following their list."""
        if not (convos or listed_gone) or not self.render_list:
            return {}
        people = {f.person for chat, group in self.followers.items() for f in group if chat is None or f.lists}
        out: dict[int | None, str] = {}
        for person in people:
            mine = [c for c in convos if c.person == person]
            mine_gone = [dom for dom, p in listed_gone if p == person]
            if mine or mine_gone:
                out[person] = self.render_list(self.store, mine, mine_gone)
        return out

    def close(self) -> None:
        """End every stream (shutdown): followers wake and find the feed closed."""
        self.closed = True
        if self._frame is not None:
            self._frame.cancel()
            self._frame = None
        self._grown.clear()
        self._due.clear()
        for group in self.followers.values():
            for f in group:
                f.wake()
        for watching in self.watchers.values():
            for w in watching:
                w.wake()
        self.notify()
        self._ticked()

    async def aclose(self) -> None:
        self.close()
        if self._wal is not None:
            self._wal.close()
        if self._task:
            await asyncio.gather(self._task, return_exceptions=True)
        self.db.conn.close()
