"""Reaching an MCP server: the guarded HTTP client, both transports, and why a connection failed.

Transport: Streamable HTTP first. A 4xx other than 401/403 to its POST is how a server that
only speaks the older SSE transport answers (405 from an `/sse` route, 404 elsewhere), so
then the same address is tried as an SSE endpoint, as the MCP spec's backwards-compatibility
section says (app/plugins.py does that when it lists the tools).

Every connection is made by `netguard.guarded_client`, so a plugin address on this machine
or a private network is refused unless CHAT_PRIVATE_PLUGINS=1 (`private_ok`).

The secret (`plugin.secret`) is only ever put into the request header: it is not logged,
and no status or exception text contains it.
"""
from __future__ import annotations

import re
from typing import Any
from collections.abc import Iterable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import httpx2

from app import netguard
from app.tables import Plugin

STREAMABLE, SSE = "streamable-http", "sse"
MAX_BYTES = 16 * 1024 * 1024  # one response (or one event) from a plugin; more is refused, not buffered
CONNECT_TIMEOUT = 10.0
# How long an open session's event stream may stay silent: sessions live long, and a call's
# own limit (its idle time, app/mcp_sessions.py) is what notices a server that went quiet.
STREAM_SILENCE = 3600.0


class PluginError(Exception):
    """A plugin call that did not give a result; the message is for the model and people."""


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def headers(p: Plugin) -> dict[str, str]:
    """The plugin's secret header; `Bearer` is added to a bare Authorization secret.
    Raises PluginError (without the value) when the header cannot be sent."""
    secret = p.secret.strip()
    if not p.header.strip() or not secret:
        return {}
    header = p.header.strip()
    if not _TOKEN.fullmatch(header):
        raise PluginError(f"the header name {header!r} is not valid")
    if not secret.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in secret):
        raise PluginError("the secret has characters a header cannot carry")
    if header.lower() == "authorization" and " " not in secret:
        secret = f"Bearer {secret}"
    return {header: secret}


class Attempt:
    """A connection's HTTP statuses since the last `clear`, for telling failures apart."""

    def __init__(self) -> None:
        self.statuses: list[tuple[str, int]] = []
        self.errors: list[BaseException] = []  # what the transport met outside any request

    async def record(self, response: httpx2.Response) -> None:
        self.statuses.append((response.request.method, response.status_code))

    async def incoming(self, message: object) -> None:
        """The client's message handler: a transport's failure (a response over the size
        limit ...) arrives here as an exception, not on the call it ends."""
        if isinstance(message, BaseException):
            self.errors.append(message)

    def clear(self) -> None:
        self.statuses.clear()
        self.errors.clear()

    @property
    def auth_status(self) -> int | None:
        return next((s for _, s in self.statuses if s in (401, 403)), None)

    @property
    def failed_http(self) -> bool:
        return any(s >= 400 for _, s in self.statuses)

    @property
    def sse_only(self) -> bool:
        """Whether the POSTs met the 4xx with which a server says it only speaks SSE."""
        return any(m == "POST" and 400 <= s < 500 and s not in (401, 403) for m, s in self.statuses)

    @property
    def session_refused(self) -> bool:
        """Whether a POST met the 404 (the spec's word for an unknown session) or the 400 many
        servers answer instead: the session is gone, the request did not run."""
        return any(m == "POST" and s in (400, 404) for m, s in self.statuses)


@asynccontextmanager
async def connect(p: Plugin, transport: str, *, private_ok: bool, attempt: Attempt,
                  timeout: float = CONNECT_TIMEOUT, read_timeout: float = STREAM_SILENCE, **callbacks):
    """An initialized `mcp.Client` on the plugin, over `transport`, through the guard.
    `callbacks` go to the Client (logging_callback, message_handler ...)."""
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    sent = headers(p)
    hooks = {"response": [attempt.record]}

    def factory(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        # sse_client builds its own client through this factory: the guard applies to it too.
        return netguard.guarded_client(allow_private=private_ok, headers=headers, auth=auth,
                                       timeout=timeout or CONNECT_TIMEOUT, max_bytes=MAX_BYTES, event_hooks=hooks)

    if transport == SSE:
        stream = sse_client(p.address, headers=sent, timeout=timeout, sse_read_timeout=read_timeout,
                            httpx_client_factory=factory)
        async with Client(stream, cache=None, message_handler=attempt.incoming, **callbacks) as client:
            client.session.validate_tool_result = _unchecked
            yield client
        return
    async with factory(sent, httpx2.Timeout(timeout, read=read_timeout)) as http:
        stream = streamable_http_client(p.address, http_client=http, max_sse_event_size=MAX_BYTES)
        async with Client(stream, cache=None, message_handler=attempt.incoming, **callbacks) as client:
            client.session.validate_tool_result = _unchecked
            yield client


async def _unchecked(name: str, result: Any) -> None:
    """In place of the session's check of structured output against the tool's output
    schema: that check runs the plugin's patterns on `re`, on the event loop, against text
    the same plugin sent (a backtracking pattern stalled the worker). The result is read as
    text (structured content only as JSON text), so it has nothing to check for us."""


def private_ok(lifted: bool, owner: int | None, agent_person: int | None) -> bool:
    """CHAT_PRIVATE_PLUGINS (`lifted`) lifts the guard for the owner's agents only: the
    owner's private network is not every person's to reach."""
    return lifted and agent_person == owner


def leaves(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc


def why(exc: BaseException, attempt: Attempt, p: Plugin) -> str:
    """Why a connection failed, in the plain words of a plugin's status. The mcp transports
    raise from task groups, so the telling exception is a leaf of an ExceptionGroup."""
    found = [*leaves(exc), *(leaf for e in attempt.errors for leaf in leaves(e))]
    for leaf in found:
        if isinstance(leaf, netguard.Refused) and "larger than" in str(leaf):
            return (f"{p.name}’s answer was larger than {MAX_BYTES // (1024 * 1024)} MB, the most Tabletalk "
                    f"takes from a plugin, so it was not read")
        if isinstance(leaf, netguard.Refused | PluginError):
            return str(leaf)
    if status := attempt.auth_status:
        sent = p.secret.strip() and p.header.strip()
        return f"{status}: the server refused the secret" if sent else f"{status}: the server asks for a secret"
    if any(isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout | ConnectionRefusedError) for leaf in found):
        return "unreachable"
    if any(isinstance(leaf, TimeoutError | httpx2.TimeoutException) for leaf in found):
        return "timed out"
    if any(isinstance(leaf, httpx2.RemoteProtocolError | httpx2.ReadError | ConnectionError) for leaf in found):
        return "the connection was lost"
    return "not an MCP server"


def bad_address(address: str) -> str | None:
    try:
        parts = urlsplit(address)
    except ValueError:
        return "refused: the address is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "refused: a plugin's address is an http:// or https:// URL"
    return None
