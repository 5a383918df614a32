"""Open MCP sessions: one per plugin per conversation, kept while they are used.

A stateful server (a browser driven over MCP, server-everything's per-session toggles)
keeps its state in its session, so every call a conversation makes to a plugin goes through
the same session, across the steps of a run and across runs. A session is:

- opened on the conversation's first call to the plugin (the handshake once, not per call);
- opened again, transparently, when it died (the server restarted, the connection closed)
  or the server no longer knows it (404, or the 400 many servers answer instead): a request
  refused that way did not run, so it is sent once more in the fresh session;
- closed (DELETE on Streamable HTTP, the stream dropped on SSE) when the conversation is
  deleted, when it was idle for IDLE_SECONDS, or when the process stops.

A session is held by a task of its own (the mcp client's task groups must be entered and
left in one task); calls run in the caller's task and reach it through the client.

Sessions are held open in this process's memory, keyed by conversation and by the plugin's
address, header and a hash of its secret: a changed secret opens a new one. A Streamable
HTTP session's id (Mcp-Session-Id) and the server's answer to `initialize` are also kept in
a row (`mcp_sessions`), so another worker answering the same conversation, or this one
after a restart, goes on in the same session without a new handshake; a server that no
longer knows it answers 404 and a new session is opened (and kept) in its place. SSE and
stdio sessions are their connection: they cannot be taken over.

Time: a call may go `limit` seconds without a word from the server (its answer or a
progress notification); each progress notification gives it `limit` seconds again, so a
long operation that reports progress is never cut off while a silent one is.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from app.plugins import resume as mcp_resume
from app.plugins.asks import Asker
from app.plugins.attempt import Attempt
from app.plugins.errors import PluginError, leaves
from app.plugins.link import CONNECT_TIMEOUT, STDIO, STREAMABLE, Link, connect, never_sent, why
from app.plugins.oauth_tokens import TokenRows
from app.tables import Plugin

if TYPE_CHECKING:
    import mcp_types as types

log = logging.getLogger(__name__)

IDLE_SECONDS = 600.0  # a session unused this long is closed


@dataclass
class Session:
    key: tuple
    chat: int
    plugin: Plugin
    transport: str
    loop: asyncio.AbstractEventLoop
    attempt: Attempt = field(default_factory=Attempt)
    client: Link | None = None
    task: asyncio.Task | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    used: float = field(default_factory=time.monotonic)
    failure: BaseException | None = None
    resumed: bool = False  # taken over from the row, not opened here
    store: Any = None  # where the session's row is kept (None: nowhere)
    end: bool = False  # when closed: ended on the server too (DELETE), not only let go here
    asker: Asker | None = None  # the run of the call in flight, for the server's requests

    @property
    def alive(self) -> bool:
        """Held open, and its stream not closed (an SSE stream ends when the server restarts,
        a stdio server may exit, while the session object lives on)."""
        if self.client is None or self.task is None or self.task.done():
            return False
        return not self.client.ended


def _key(p: Plugin, chat: int, transport: str) -> tuple:
    return chat, p.id, fingerprint(p, transport)


def fingerprint(p: Plugin, transport: str) -> str:
    """What reaching the plugin takes, hashed (a changed secret is another session)."""
    whole = "\0".join([p.address, p.header, p.secret, transport, p.command, *p.args, *(f"{k}={v}" for k, v in p.env)])
    return hashlib.sha256(whole.encode()).hexdigest()


class Sessions:
    """A worker's open sessions (app/serve/worker.py makes one and gives it to its runner).
    `opened` counts handshakes (for tests and the log)."""

    def __init__(self, idle: float = IDLE_SECONDS):
        self.idle = idle
        self.open: dict[tuple, Session] = {}
        # by id(): every session whose task has not ended, open or not (a close under way, its
        # closer cancelled since; an open given up): a stop waits for them all
        self._held: dict[int, Session] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self.opened = 0
        self.resumed = 0  # sessions taken over from a row

    async def session(self, p: Plugin, chat: int, transport: str, *, private_ok: bool, store: Any = None) -> Session:
        """The conversation's live session with the plugin: the one held here, else the one
        kept in the row (Streamable HTTP), else a new one (kept in the row)."""
        await self.sweep()
        key = _key(p, chat, transport)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            current = self.open.get(key)
            if current is not None and current.alive and current.loop is asyncio.get_running_loop():
                current.used = time.monotonic()
                return current
            if current is not None:
                await self._close(current)
            kept = None
            if store is not None and transport == STREAMABLE and p.id is not None:
                kept = store.mcp_session(chat, p.id, key[2])
            # a plugin's OAuth tokens are no conversation's: read and refreshed unfenced too
            fresh = await self._open(key, p, chat, transport, private_ok, kept,
                                     store.unfenced if store is not None else None)
            if kept is None and store is not None and p.id is not None and fresh.client is not None:
                sid = fresh.client.session_id
                if sid and len(sid) <= 1000 and sid.isascii() and sid.isprintable():
                    store.keep_mcp_session(chat, p.id, key[2], sid, fresh.client.initialized)
            # it outlives the run that opened it (a sweep closes it later): its rows are kept
            # through the store itself, not that run's view held to its lease (Store.fenced)
            fresh.store = store.unfenced if store is not None else None
            self.open[key] = fresh
            return fresh

    def live(self, p: Plugin, chat: int, transport: str) -> Session | None:
        """The conversation's session with the plugin held open here, if it is alive (nothing is opened)."""
        s = self.open.get(_key(p, chat, transport))
        if s is None or not s.alive or s.loop is not asyncio.get_running_loop():
            return None
        return s

    async def close_plugin(self, plugin: int) -> None:
        """Close this worker's sessions with a plugin (edited or refreshed: its processes or
        sessions are of how it was reached before), ended on the server too."""
        for s in [s for s in self.open.values() if s.plugin.id == plugin]:
            await self._close(s, end=True)

    async def _open(self, key: tuple, p: Plugin, chat: int, transport: str, private_ok: bool,
                    kept: tuple[str, str] | None = None, tokens: TokenRows | None = None) -> Session:
        s = Session(key, chat, p, transport, asyncio.get_running_loop(), resumed=kept is not None)
        ready: asyncio.Future = s.loop.create_future()
        s.task = s.loop.create_task(self._hold(s, private_ok, ready, kept, tokens), name=f"mcp-{p.name}-{chat}")
        self._held[id(s)] = s
        s.task.add_done_callback(lambda _: self._held.pop(id(s), None))
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancellation that
            # comes as the session is ready, and a run stopped then went on to make its call
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await asyncio.shield(ready)  # (shielded: the session's task sets it)
        except BaseException as exc:
            s.task.cancel()
            await asyncio.gather(s.task, return_exceptions=True)
            if isinstance(exc, TimeoutError | asyncio.TimeoutError):
                raise PluginError(f"The plugin {p.name} timed out.") from None
            if isinstance(exc, asyncio.CancelledError):
                raise
            reason = why(exc, s.attempt, p)
            raise PluginError(f"The plugin {p.name} {_BARE[reason]}." if reason in _BARE else reason) from None
        if kept is None:
            self.opened += 1
        else:
            self.resumed += 1
        return s

    async def _hold(self, s: Session, private_ok: bool, ready: asyncio.Future, kept: tuple[str, str] | None,
                    tokens: TokenRows | None) -> None:
        try:
            async with connect(s.plugin, s.transport, private_ok=private_ok, attempt=s.attempt,
                               resume=kept, asker=lambda: s.asker, tokens=tokens) as client:
                s.client = client
                ready.set_result(None)
                await s.closing.wait()
                if s.end:
                    with anyio.move_on_after(5):
                        await client.end()
        except BaseException as exc:  # the connection ended: the next call opens a new one
            if not ready.done():
                # cancelled (its run dropped: a lost lease, a Stop, a shutdown): nobody reads
                # `ready` any more, and a future's exception never read is logged as a traceback
                if isinstance(exc, asyncio.CancelledError):
                    ready.cancel()
                else:
                    ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                s.failure = exc
                log.info("plugin %s: session of conversation %s ended (%s)", s.plugin.name, s.chat,
                         type(exc).__name__)
        finally:
            s.client = None

    async def _close(self, s: Session, *, end: bool = False) -> None:
        """Let the session go here; with `end`, end it on the server too and forget its row."""
        if self.open.get(s.key) is s:
            del self.open[s.key]
        if end and s.store is not None and s.plugin.id is not None:
            try:
                s.store.forget_mcp_session(s.chat, s.plugin.id, s.client.session_id if s.client else None)
            except Exception:  # the conversation's rows may be gone with it
                log.info("forgetting the session of conversation %s failed", s.chat)
        if s.task is None or s.task.done() or s.loop is not asyncio.get_running_loop():
            return  # ended already, or of an event loop that is gone (tests)
        s.end = end
        s.closing.set()
        await _ended(s)

    async def drop(self, s: Session, *, refused: bool = False) -> None:
        """Let a broken session go; `refused`: the server no longer knows it, so its row goes too."""
        if refused and s.store is not None and s.plugin.id is not None:
            s.store.forget_mcp_session(s.chat, s.plugin.id)
        await self._close(s)

    async def close_chat(self, chat: int) -> None:
        for s in [s for s in self.open.values() if s.chat == chat]:
            await self._close(s, end=True)

    async def close_all(self) -> None:
        """Let every session go (the process stops): kept rows stay, for whoever goes on."""
        for s in list(self.open.values()):
            await self._close(s)
        # A close begun elsewhere took its session out of `open` at once, and its closer may
        # have been cancelled since (the runner's sweep, as the runner stops), an open given
        # up may still be ending: the stop waits for every such task too, or it would outlive
        # the worker's loop (seen: a deleted conversation's session in its DELETE at the stop).
        here = asyncio.get_running_loop()
        for s in [s for s in self._held.values() if s.loop is here]:
            s.closing.set()  # (its `end` as its closer set it)
            await _ended(s)

    async def sweep(self, alive: Callable[[set[int]], Iterable[int]] | None = None) -> None:
        """Close sessions idle too long, and those whose conversation is gone (`alive` tells
        which of some conversation ids still exist)."""
        now = time.monotonic()
        idle = [s for s in self.open.values() if now - s.used > self.idle]
        broken = [s for s in self.open.values() if s.task and s.task.done() and s not in idle]
        gone: list[Session] = []
        if alive is not None and self.open:
            kept = set(alive({s.chat for s in self.open.values()}))
            gone = [s for s in self.open.values() if s.chat not in kept and s not in idle and s not in broken]
        for s in broken:
            await self._close(s)
        for s in [*idle, *gone]:  # ended on the server too, unless another worker used it since
            await self._close(s, end=s in gone or not self._used_elsewhere(s))

    def _used_elsewhere(self, s: Session) -> bool:
        if s.store is None or s.plugin.id is None:
            return False
        try:
            used = s.store.mcp_session_used(s.chat, s.plugin.id)
        except Exception:
            return False
        return used is not None and time.time() - used < self.idle


async def _ended(s: Session) -> None:
    """Wait for a session told to close to end (10 s at most, then it is cancelled, and its
    cancellation waited for: 5 s more at most). A task cancelled and not waited for was still
    pending when a stopping worker's loop ended (seen under load: the server's DELETE slow).
    asyncio.wait, not wait_for: it leaves the task running when the waiter is cancelled, and
    loses no cancellation that comes as the task ends (wait_for does, on Python 3.11)."""
    ended, _ = await asyncio.wait({s.task}, timeout=10)
    if not ended:
        s.task.cancel()
        await asyncio.wait({s.task}, timeout=5)


_BARE = {"unreachable": "is unreachable", "timed out": "timed out", "not an MCP server": "is not an MCP server",
         "the connection was lost": "lost the connection"}  # a status, as the model is told it


async def call_tool(p: Plugin, mcp_name: str, args: dict[str, Any], *, chat: int, transport: str,
                    private_ok: bool, limit: float, abort: asyncio.Event,
                    progressed: Callable[[float, float | None, str | None], Any],
                    sessions: Sessions, store: Any = None,
                    dispatched: Callable[[], Any] = lambda: None, asker: Asker | None = None,
                    resume: Mapping[str, str] | None = None) -> types.CallToolResult:
    """One tool call in the conversation's session with the plugin, one of `sessions`. Raises
    PluginError in plain words: stopped by the person, silent for `limit` s, the connection
    lost ... The server's elicitation and sampling requests during the call go to `asker`.
    With `resume` the call, sent before a restart, is taken up again, never sent
    (app/plugins/resume.py)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    for second in (False, True):
        if abort.is_set():
            raise PluginError("Stopped by the person before the call was made.")
        s = await sessions.session(p, chat, transport, private_ok=private_ok, store=store)
        if abort.is_set():  # stopped while the session was being opened: the call is not sent
            raise PluginError("Stopped by the person before the call was made.")
        s.attempt.clear()
        client = s.client
        assert client is not None
        heard = False

        async def progress(done: float, total: float | None, message: str | None) -> None:
            nonlocal heard
            heard = True
            silence.deadline = anyio.current_time() + limit
            await progressed(done, total, message)

        with anyio.CancelScope() as stop:
            watcher = asyncio.ensure_future(_cancel_when_set(abort, stop))
            s.asker = asker
            try:
                with anyio.CancelScope(deadline=anyio.current_time() + limit) as silence:
                    if asker is not None:  # a server waiting for the person's answer is not silent
                        asker.waiting = lambda on: setattr(silence, "deadline", math.inf if on
                                                           else anyio.current_time() + limit)
                    if asker is not None and transport == STREAMABLE:  # what taking it up after a restart needs
                        asker.resumable = lambda: ({"session": client.session_id, "token": s.attempt.primed}
                                                   if client.session_id and s.attempt.primed else None)
                    dispatched()  # the session is open: the call leaves now (it may run from here on)
                    if resume is not None:
                        result = await mcp_resume.take_up(client, mcp_name, args, resume, progress, asker)
                    else:
                        result = await client.call_tool(mcp_name, args, progress_callback=progress)
            except PluginError:
                raise
            except Exception as exc:
                if resume is not None:  # never sent again: it may have run
                    await sessions.drop(s)
                    log.info("plugin %s: taking up call %s failed (%s)", p.name, mcp_name, type(exc).__name__)
                    raise PluginError(mcp_resume.LOST.format(why=why(exc, s.attempt, p))) from None
                mcp_error = next((leaf for leaf in leaves(exc) if isinstance(leaf, MCPError)), None)
                if mcp_error is not None and mcp_error.code != CONNECTION_CLOSED:
                    if s.attempt.session_refused and not second:
                        log.info("plugin %s: the server no longer knows the session; opening a new one", p.name)
                        await sessions.drop(s, refused=True)
                        continue
                    if not s.attempt.failed_http:
                        raise PluginError(mcp_error.message or f"{mcp_name} was refused") from None
                await sessions.drop(s)  # its task has ended: what ended it tells what happened
                if s.failure is not None:
                    s.attempt.errors.append(s.failure)
                reason = why(exc, s.attempt, p)
                if transport == STDIO:  # the process ended: after it was given the call
                    said = f" Its last words on standard error: {s.attempt.stderr}" if s.attempt.stderr else ""
                    raise PluginError(f"The command of {p.name} ended during the call: it may or may not have "
                                      f"finished.{said}") from None
                if reason == "unreachable" and never_sent(exc, s.attempt):
                    raise PluginError(f"The plugin {p.name} is unreachable: the call was not sent.") from None
                if reason in ("not an MCP server", "the connection was lost", "unreachable"):
                    raise PluginError(f"The connection to {p.name} was lost during the call: it may or may "
                                      f"not have finished.") from None
                raise PluginError(reason) from None
            finally:
                watcher.cancel()
                s.asker = None
        s.used = time.monotonic()
        if s.store is not None and s.client is not None and s.client.session_id:
            try:
                s.store.touch_mcp_session(chat, p.id, s.client.session_id)
            except Exception:  # a conversation deleted meanwhile
                log.info("keeping the session of conversation %s in use failed", chat)
        if stop.cancelled_caught:
            raise PluginError("Stopped by the person while the plugin was working.")
        if silence.cancelled_caught:
            raise PluginError(f"{p.name} sent nothing for {limit:g} s "
                              f"({'after its last progress report' if heard else 'after the call'}), "
                              f"so the call was given up.")
        return result
    raise PluginError(f"{p.name} refused the session twice")  # pragma: no cover


async def _cancel_when_set(event: asyncio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
