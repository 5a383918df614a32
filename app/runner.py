"""`serve`: the background runner that answers what people write.

Started by the app's lifespan in every worker. Work is found from rows, never from
memory: a `user` item not done, a `retry` or `stop` not handled. A conversation is
answered by one worker at a time, the one holding its lease in `runs`; the lease is
renewed while it works and taken over once it expires. Within a conversation the pending
items are handled one at a time, in order. The agent loop's events become rows; growing
text is written at most every 50 ms, in one transaction per tick for every run at once.
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

from . import agent as loop
from . import mcp_sessions, plugins, space
from . import db as dbm
from .beat import BEAT_SECONDS, beat_at_or_after, next_beat
from .config import Config
from .feed import Feed
from .history import takes_images
from .providers.client import Providers, no_model
from .store import Store, first_words
from .tables import Assistant, Item, item
from .tools import Tool, allowed, chosen, names
from .tools.builtin import builtin_tools
from .turn import Turn

log = logging.getLogger(__name__)

LEASE_SECONDS = 10.0
RENEW_SECONDS = 3.0
TICK_SECONDS = BEAT_SECONDS  # growing text is written at most once a beat (model streams are read on it too)
IDLE_SCAN_SECONDS = 1.0   # a full scan for pending work, at least this often
SCAN_GAP_SECONDS = 0.1    # the least time between two scans
FAILED = ("This answer failed on our side and was stopped (the error is in the server's log). "
          "Send the message again to retry.")
TITLE_PROMPT = ("Name this conversation in at most six words, in the language it is written in. "
                "Answer with the name only: no quotes, no full stop.")


def clean_title(raw: str) -> str:
    """A model's suggested title, made fit for the list: one line, no quotes or Markdown."""
    line = next((ln for ln in raw.strip().splitlines() if ln.strip()), "")
    line = line.strip().strip("#*_`\"'“”‘’ ").removeprefix("Title:").strip().rstrip(".").strip()
    return line[:80]


@dataclass
class Run:
    """One conversation being answered by this worker."""

    chat: int
    task: asyncio.Task | None = None
    turn: Turn | None = None  # the turn being answered
    gone: bool = False  # its conversation was deleted
    full: bool = False  # ended because the disk is full


class Runner(space.DiskFull):
    def __init__(self, config: Config, store: Store, feed: Feed, providers: Providers):
        self.config = config
        self.store = store
        self.feed = feed
        self.providers = providers
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.runs: dict[int, Run] = {}
        self.pending: dict[int, dict[str, Any]] = {}  # item id -> columns to write at the next tick
        self.stopping = False
        self._wake: asyncio.Future | None = None  # done: scan again at once (a run ended)
        self._scanned = 0  # the rev the last scan read up to
        self._tasks: list[asyncio.Task] = []
        self._side: set[asyncio.Task] = set()
        self._flushed = 0.0  # when growth was last written
        self._flush_at: asyncio.Handle | None = None  # the write of what is pending, scheduled
        self.reserve = space.Reserve(config.data)
        self.full = False  # the disk was found full; no run starts until the reserve is back

    # --- the main loop --------------------------------------------------------------

    def start(self) -> None:
        self.reserve.ensure()
        loop_ = asyncio.get_running_loop()
        self._tasks = [
            loop_.create_task(self._scan_forever(), name="runner-scan"),
            loop_.create_task(self._renew_forever(), name="runner-renew"),
            loop_.create_task(self.providers.relist_forever(self.store), name="runner-relist"),
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
        if self._flush_at is not None:
            self._flush_at.cancel()
        self.flush()
        await mcp_sessions.pool.close_all()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _scan_forever(self) -> None:
        full_at = 0.0
        clock = asyncio.get_running_loop()
        while not self.stopping:
            started = time.monotonic()
            self._wake = clock.create_future()  # a run that ends from now on asks for a scan
            full = started >= full_at
            try:
                if not self.full or self.recovered():
                    self.scan(full)
            except Exception as e:
                if space.is_full(e):
                    self.disk_full()
                else:
                    log.exception("runner scan failed")
            if full:
                full_at = started + IDLE_SCAN_SECONDS
            # futures, not tasks: this loop turns ten times a second while answers grow
            await asyncio.wait([self.feed.next_change(), self._wake], timeout=IDLE_SCAN_SECONDS,
                               return_when=asyncio.FIRST_COMPLETED)
            if not self._wake.done():
                # Every commit wakes the feed, and a busy worker commits 20+ times a second:
                # look at most every SCAN_GAP (a run that ended asks for the next at once),
                # on a beat (app/beat.py).
                now = time.monotonic()
                gap = beat_at_or_after(started + SCAN_GAP_SECONDS) - now
                if gap > 0:
                    await asyncio.sleep(gap)

    def scan(self, full: bool = True) -> None:
        """Start a run for each conversation with pending work that no live worker holds.

        A full scan reads every pending row (once a second, and at start: a lease that
        expired in another worker is found this way); in between, only rows changed since
        the last scan are read (a busy worker's hundreds of running conversations are not
        read again on every commit)."""
        top = self.store.rev()  # before reading: what commits later is seen by the next scan
        since = 0 if full else self._scanned
        # A run whose conversation was deleted (in any worker) ends quietly.
        if self.runs:
            if full:
                marks = ",".join("?" * len(self.runs))
                alive = {r[0] for r in self.store.all(f"SELECT id FROM conversations WHERE id IN ({marks})",
                                                      list(self.runs))}
                gone = set(self.runs) - alive
            else:
                gone = {r[0] for r in self.store.all(
                    "SELECT chat FROM tombstones WHERE rev > ? AND chat IS NOT NULL AND dom = 'c' || chat", [since])}
            for chat in gone:
                run = self.runs.get(chat)
                if run is not None and run.task and not run.task.done():
                    run.gone = True
                    run.task.cancel()
        rows = self.store.all(
            "SELECT chat, kind FROM items WHERE done = 0 AND kind IN ('user','retry','stop') AND rev > ? ORDER BY id",
            [since])
        self._scanned = top
        for row in rows:
            chat, kind = row["chat"], row["kind"]
            run = self.runs.get(chat)
            if run is not None:
                if kind == "stop" and run.task and not run.task.done():
                    run.task.cancel()  # the run ends where it is; what was written stays
                continue
            if self.lease(chat):
                run = self.runs[chat] = Run(chat)
                run.task = asyncio.get_running_loop().create_task(self._answer(run), name=f"run-{chat}")

    # --- leases ---------------------------------------------------------------------

    def lease(self, chat: int) -> bool:
        t = dbm.now()
        with dbm.write(self.store.db) as db:
            if db.conn.execute("SELECT 1 FROM conversations WHERE id = ?", [chat]).fetchone() is None:
                return False  # deleted as the scan read it
            cur = db.conn.execute(
                """INSERT INTO runs (chat, owner, expires) VALUES (?, ?, ?)
                   ON CONFLICT (chat) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
                   WHERE runs.expires < ? OR runs.owner = excluded.owner""",
                [chat, self.owner, t + LEASE_SECONDS, t],
            )
            return cur.rowcount == 1

    def release(self, chat: int) -> None:
        with dbm.write(self.store.db) as db:
            db.conn.execute("DELETE FROM runs WHERE chat = ? AND owner = ?", [chat, self.owner])

    async def _renew_forever(self) -> None:
        while not self.stopping:
            await asyncio.sleep(RENEW_SECONDS)
            try:  # plugin sessions of deleted conversations, and idle ones, are closed
                await mcp_sessions.pool.sweep(self.store.existing)
            except Exception:
                log.exception("closing plugin sessions failed")
            if not self.runs:
                continue
            chats = list(self.runs)
            marks = ",".join("?" * len(chats))
            try:
                with dbm.write(self.store.db) as db:
                    db.conn.execute(
                        f"UPDATE runs SET expires = ? WHERE owner = ? AND chat IN ({marks})",
                        [dbm.now() + LEASE_SECONDS, self.owner, *chats],
                    )
                    held = {r[0] for r in db.conn.execute(
                        f"SELECT chat FROM runs WHERE owner = ? AND chat IN ({marks})", [self.owner, *chats])}
            except Exception as e:
                if space.is_full(e):
                    self.disk_full()
                else:
                    log.exception("renewing the leases failed")
                continue
            for chat in chats:
                run = self.runs.get(chat)
                if chat not in held and run and run.task and not run.gone:
                    if self.store.conversation(chat) is None:
                        run.gone = True  # deleted: its lease went with it
                    else:
                        log.warning("lost the lease on conversation %s; another worker answers it", chat)
                    run.task.cancel()

    # --- batched writes of growing text ---------------------------------------------

    def flush(self) -> None:
        """Write every run's pending growth in one transaction: one rev range, one prepared
        statement per set of columns (hundreds of answers grow at once)."""
        if not self.pending:
            return
        self._flushed = time.monotonic()
        pending, self.pending = self.pending, {}
        t = dbm.now()
        by_columns: dict[tuple[str, ...], list[list[Any]]] = {}
        try:
            with self.store.write() as db:
                top = dbm.bump(db, len(pending))
                for rev, (item_id, values) in enumerate(pending.items(), start=top - len(pending) + 1):
                    by_columns.setdefault(tuple(values), []).append([*values.values(), t, rev, item_id])
                for columns, rows in by_columns.items():
                    sets = "".join(f"{k} = ?, " for k in columns)
                    db.conn.executemany(f"UPDATE items SET {sets}updated = ?, rev = ? WHERE id = ?", rows)
        except Exception as e:
            if not space.is_full(e):
                raise
            self.disk_full()  # what grew since the last tick is lost; what was written stays

    def grow(self, item_id: int, **values: Any) -> None:
        self.pending.setdefault(item_id, {}).update(values)
        now = time.monotonic()
        if self._flush_at is not None:
            # A busy loop can hold the scheduled write back when many streams have data
            # buffered: write here too once a tick is due, so it still writes every ~50 ms.
            if now - self._flushed >= TICK_SECONDS:
                self.flush()
            return
        # No timer while nothing grows. The first growth in a beat (the streams read what
        # came at the beat: asyncnet.pace) is written once every stream woken with it has
        # run, in one transaction; a later one at the next beat.
        loop = asyncio.get_running_loop()
        beat = next_beat(now)
        if self._flushed < beat - BEAT_SECONDS:
            self._flush_at = loop.call_soon(self._scheduled_flush)
        else:
            self._flush_at = loop.call_at(beat, self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_at = None
        try:
            self.flush()
        except Exception:
            log.exception("runner flush failed")

    # --- answering ------------------------------------------------------------------

    async def _answer(self, run: Run) -> None:
        try:
            while not self.stopping:
                row = self.store.one(
                    "SELECT * FROM items WHERE chat = ? AND done = 0 AND kind IN ('user','retry','stop') "
                    "ORDER BY id LIMIT 1", [run.chat])
                if row is None:
                    break
                pending = Item.from_row(row)
                if pending.kind == "stop":
                    self.store.update(pending.id, done=True)  # nothing is running: nothing to stop
                    continue
                user = pending if pending.kind == "user" else self.store.item(pending.turn)
                if user is None or user.kind != "user":
                    self.store.update(pending.id, done=True)  # a retry of nothing
                    continue
                run.turn = None
                try:
                    await self._turn(run, user, retry=pending if pending.kind == "retry" else None)
                except Exception:
                    # A bug, not the model's or a tool's failure (those are rows already): the
                    # turn ends with an error item instead of being taken up again, and again.
                    log.exception("the turn of item %s in conversation %s failed", user.id, run.chat)
                    self._failed(run, user)
                if pending.kind == "user":
                    self.side(self.name_conversation(run.chat, user, run.turn.model))
                with self.store.write():
                    self.store.update(pending.id, done=True)
                    if pending.kind == "retry" and not user.done:
                        self.store.update(user.id, done=True)
        except asyncio.CancelledError:
            if run.full:
                self.ended_full(run)
            else:
                self._cancelled(run)
        except Exception as e:
            if space.is_full(e):
                self.disk_full()
                self.ended_full(run)
            else:
                log.exception("run of conversation %s failed", run.chat)
        finally:
            self.flush()
            self.runs.pop(run.chat, None)
            try:
                self.release(run.chat)
            except Exception:
                log.exception("releasing the lease of %s failed", run.chat)
            self._wake_up()  # more work may have arrived while this run held the lease

    def _failed(self, run: Run, user: Item) -> None:
        self.flush()
        if run.turn is not None:
            run.turn.stopped()
        self.store.add(item("error", run.chat, FAILED, turn=user.id, state="failed", done=True,
                            model=run.turn.model if run.turn else ""))

    def _cancelled(self, run: Run) -> None:
        """A stop (or a lost lease, or shutdown): keep what was written and mark it done."""
        self.flush()
        if self.stopping or run.turn is None or run.gone:
            return  # shutdown: the rows stay pending and the next start resumes them; or no rows left
        run.turn.stopped()
        self._mark_done(run)

    def _mark_done(self, run: Run) -> None:
        """The turn's question (or retry) and any stop asked meanwhile are handled."""
        stops = [r[0] for r in self.store.all(
            "SELECT id FROM items WHERE chat = ? AND kind = 'stop' AND done = 0", [run.chat])]
        with self.store.write():
            for item_id in [run.turn.user.id, *stops]:
                self.store.update(item_id, done=True)
            if run.turn.retry is not None:
                self.store.update(run.turn.retry.id, done=True)

    async def _turn(self, run: Run, user: Item, retry: Item | None) -> None:
        convo = self.store.conversation(run.chat)
        agent = self.store.agent(convo.agent) if convo and convo.agent else None
        agent = agent or self.store.default_agent(convo.person if convo else None)  # never another person's
        # Again without a model, and a message without one, take the conversation's pick
        # (what its composer shows now), then the message's, then the agent's.
        def pick(asked: str, sticky: str, default: str) -> str:
            return ((sticky or asked) if retry else (asked or sticky)) or default

        model = (retry.model if retry else "") or pick(user.model, convo.model if convo else "",
                                                       agent.model if agent else "")
        model = model or await self.default_model()
        tools = await self.tools_for(agent)
        # by identity: a tool that only shows a name approval was set for does not get it
        approve = {t.name for t in tools if agent and chosen(t, names(agent.approve))}
        turn = run.turn = Turn(self.store, self.grow, self.flush, run.chat, user, agent, model, retry=retry,
                               tools=tools, approve=approve,
                               changed=self.feed.changed, window=self.window_of(model),
                               share=self.config.context_share, images=self.images_for(model),
                               limits=lambda: (self.window_of(model), self.images_for(model)))
        self.store.update(user.id)  # it is answered now, no longer queued: pages re-render it
        if not self.providers.configured:
            turn.emit(loop.Failed("No model server is set up: start Ollama, or start Tabletalk with AI_URL "
                                  "(an OpenAI-compatible server) or AI_ACCOUNTS set (see the README)."))
        elif not model:
            turn.emit(loop.Failed(no_model(self.store.choices())))
        else:
            thinking = pick(user.thinking, convo.thinking if convo else "", agent.thinking if agent else "")
            await turn.run(self.providers.stream_fn(model, thinking=thinking or None))
        self.flush()

    def side(self, work) -> None:
        """Work beside a run (naming a conversation): never holds the run up, ends at shutdown."""
        task = asyncio.get_running_loop().create_task(work)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def name_conversation(self, chat: int, user: Item, model: str) -> None:
        """After the first answer a short request names the conversation; on failure the first words stay."""
        convo = self.store.conversation(chat)
        first = self.store.one("SELECT min(id) FROM items WHERE chat = ? AND kind = 'user'", [chat])[0]
        if convo is None or first != user.id or convo.title != first_words(user.text) or not model:
            return
        answer = "".join(r[0] for r in self.store.all(
            "SELECT text FROM items WHERE turn = ? AND kind = 'text' ORDER BY id", [user.id]))
        if not answer.strip():
            return
        try:
            title = await self.providers.complete(model, [
                loop.Message("system", TITLE_PROMPT),
                loop.Message("user", f"{user.text[:2000]}\n\n---\n\n{answer[:2000]}"),
            ], max_tokens=30)
        except loop.ModelError:
            return
        title = clean_title(title)
        if title and (now := self.store.conversation(chat)) is not None and now.title == convo.title:
            self.store.set_title(chat, title)

    async def tools_for(self, agent: Assistant | None) -> list[Tool]:
        """The tools this agent may use now: built-in ones, then its enabled plugins' (listed
        afresh at each run, which also refreshes each plugin's status)."""
        found = builtin_tools()
        taken = {t.name for t in found}
        if agent is not None and agent.id is not None:
            found.extend(await plugins.agent_tools(self.store, self.config, agent, taken))
        return allowed(found, agent.tools if agent else "")

    async def default_model(self) -> str:
        """AI_MODEL; else the first model the server at AI_URL lists, else this computer's, else an account's."""
        if self.config.ai_model:
            return self.config.ai_model
        return self.providers.preferred(self.store.choices()) or self.providers.preferred(await self.providers.choices())

    def images_for(self, model: str) -> bool:
        """Whether `model` is sent attached images: unless its model list says it reads none."""
        choice = self.store.choice(model)
        return takes_images(choice.tags if choice else ()) and self.store.limits(model).images

    def window_of(self, model: str) -> int:
        """The window a server's error taught (providers/limits.py), else the listed one, else the setting."""
        row = self.store.one("SELECT window FROM choices WHERE id = ?", [model])
        return self.store.limits(model).window or (row[0] if row and row[0] else None) or self.config.context_window

    async def refresh_choices(self) -> None:
        """The model list, read at start and on demand (POST /models/refresh): every provider's
        models; one that is down is a row saying so and keeps none of its old models."""
        self.store.replace_choices(await self.providers.choices())
