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

Sessions live in this process's memory, keyed by conversation and by the plugin's address,
header and a hash of its secret: a changed secret opens a new one. Another worker answering
the same conversation later opens its own; a server that keeps a session id for a client
that does not come back ends it by its own timeout.

Time: a call may go `limit` seconds without a word from the server (its answer or a
progress notification); each progress notification gives it `limit` seconds again, so a
long operation that reports progress is never cut off while a silent one is.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from app.mcp_link import CONNECT_TIMEOUT, Attempt, PluginError, connect, leaves, why
from app.tables import Plugin

if TYPE_CHECKING:
    import mcp_types as types
    from mcp import Client

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
    client: Client | None = None
    task: asyncio.Task | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    used: float = field(default_factory=time.monotonic)
    failure: BaseException | None = None

    @property
    def alive(self) -> bool:
        """Held open, and its stream not closed (an SSE stream ends when the server restarts,
        while the client object lives on)."""
        if self.client is None or self.task is None or self.task.done():
            return False
        dispatcher = getattr(self.client.session, "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)


def _key(p: Plugin, chat: int, transport: str) -> tuple:
    secret = hashlib.sha256(p.secret.encode()).hexdigest()
    return chat, p.id, p.address, p.header, secret, transport


class Sessions:
    """This process's open sessions. `opened` counts handshakes (for tests and the log)."""

    def __init__(self, idle: float = IDLE_SECONDS):
        self.idle = idle
        self.open: dict[tuple, Session] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self.opened = 0

    async def session(self, p: Plugin, chat: int, transport: str, *, private_ok: bool) -> Session:
        """The conversation's live session with the plugin, opened when there is none."""
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
            fresh = await self._open(key, p, chat, transport, private_ok)
            self.open[key] = fresh
            return fresh

    async def _open(self, key: tuple, p: Plugin, chat: int, transport: str, private_ok: bool) -> Session:
        s = Session(key, chat, p, transport, asyncio.get_running_loop())
        ready: asyncio.Future = s.loop.create_future()
        s.task = s.loop.create_task(self._hold(s, private_ok, ready), name=f"mcp-{p.name}-{chat}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), CONNECT_TIMEOUT)
        except BaseException as exc:
            s.task.cancel()
            await asyncio.gather(s.task, return_exceptions=True)
            if isinstance(exc, TimeoutError | asyncio.TimeoutError):
                raise PluginError(f"{p.name}: timed out") from None
            if isinstance(exc, asyncio.CancelledError):
                raise
            reason = why(exc, s.attempt, p)
            raise PluginError(f"{p.name}: {reason}" if reason in _BARE else reason) from None
        self.opened += 1
        return s

    async def _hold(self, s: Session, private_ok: bool, ready: asyncio.Future) -> None:
        try:
            async with connect(s.plugin, s.transport, private_ok=private_ok, attempt=s.attempt) as client:
                s.client = client
                ready.set_result(None)
                await s.closing.wait()
        except BaseException as exc:  # the connection ended: the next call opens a new one
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                s.failure = exc
                log.info("plugin %s: session of conversation %s ended (%s)", s.plugin.name, s.chat,
                         type(exc).__name__)
        finally:
            s.client = None

    async def _close(self, s: Session) -> None:
        if self.open.get(s.key) is s:
            del self.open[s.key]
        if s.task is None or s.task.done() or s.loop is not asyncio.get_running_loop():
            return  # ended already, or of an event loop that is gone (tests)
        s.closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(s.task), 5)
        except (TimeoutError, asyncio.TimeoutError):
            s.task.cancel()
        except Exception:
            pass

    async def drop(self, s: Session) -> None:
        await self._close(s)

    async def close_chat(self, chat: int) -> None:
        for s in [s for s in self.open.values() if s.chat == chat]:
            await self._close(s)

    async def close_all(self) -> None:
        for s in list(self.open.values()):
            await self._close(s)

    async def sweep(self, alive: Callable[[set[int]], Iterable[int]] | None = None) -> None:
        """Close sessions idle too long, and those whose conversation is gone (`alive` tells
        which of some conversation ids still exist)."""
        now = time.monotonic()
        stale = [s for s in self.open.values() if now - s.used > self.idle or (s.task and s.task.done())]
        if alive is not None and self.open:
            kept = set(alive({s.chat for s in self.open.values()}))
            stale += [s for s in self.open.values() if s.chat not in kept and s not in stale]
        for s in stale:
            await self._close(s)


_BARE = ("unreachable", "timed out", "not an MCP server", "the connection was lost")

pool = Sessions()  # this process's sessions (every worker is a process of its own)


async def call_tool(p: Plugin, mcp_name: str, args: dict[str, Any], *, chat: int, transport: str,
                    private_ok: bool, limit: float, abort: asyncio.Event,
                    progressed: Callable[[float, float | None, str | None], Any],
                    sessions: Sessions | None = None,
                    dispatched: Callable[[], Any] = lambda: None) -> types.CallToolResult:
    """One tool call in the conversation's session with the plugin. Raises PluginError in
    plain words: stopped by the person, silent for `limit` s, the connection lost ..."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    sessions = sessions or pool
    for second in (False, True):
        if abort.is_set():
            raise PluginError("Stopped by the person before the call was made.")
        s = await sessions.session(p, chat, transport, private_ok=private_ok)
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
            try:
                with anyio.CancelScope(deadline=anyio.current_time() + limit) as silence:
                    dispatched()  # the session is open: the call leaves now (it may run from here on)
                    result = await client.call_tool(mcp_name, args, progress_callback=progress)
            except Exception as exc:
                mcp_error = next((leaf for leaf in leaves(exc) if isinstance(leaf, MCPError)), None)
                if mcp_error is not None and mcp_error.code != CONNECTION_CLOSED:
                    if s.attempt.session_refused and not second:
                        log.info("plugin %s: the server no longer knows the session; opening a new one", p.name)
                        await sessions.drop(s)
                        continue
                    if not s.attempt.failed_http:
                        raise PluginError(mcp_error.message or f"{mcp_name} was refused") from None
                await sessions.drop(s)  # its task has ended: what ended it tells what happened
                if s.failure is not None:
                    s.attempt.errors.append(s.failure)
                reason = why(exc, s.attempt, p)
                if reason in ("not an MCP server", "the connection was lost", "unreachable"):
                    raise PluginError(f"The connection to {p.name} was lost during the call: it may or may "
                                      f"not have finished.") from None
                raise PluginError(reason) from None
            finally:
                watcher.cancel()
        s.used = time.monotonic()
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
