"""Plugins: MCP servers whose tools an agent may call.

`list_tools(plugin)` connects, lists the server's tools and wraps each one as our `Tool`,
named `{plugin}_{tool}`; its `status` says in plain words how many tools there are or why
they could not be read. `refresh(plugins)` does that for many plugins at once.

Transport: Streamable HTTP first. A 4xx other than 401/403 to its POST is how a server that
only speaks the older SSE transport answers (405 from an `/sse` route, 404 elsewhere), so
then the same address is tried as an SSE endpoint, as the MCP spec's backwards-compatibility
section says. The transport that worked is remembered by the listed tools.

Every connection is made by `netguard.guarded_client`, so a plugin address on this machine
or a private network is refused unless CHAT_PRIVATE_PLUGINS=1 (`private_ok`).

A tool call opens a fresh session, makes the one call and closes it: a plugin may restart
between calls, runs may live on different workers, and a session per call has no state to
go stale. The cost is the protocol handshake per call (one extra round trip with a
2026-era server, a few with an older one).

The secret (`plugin.secret`) is only ever put into the request header: it is not logged,
and no status or exception text contains it.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import httpx2

# The mcp package is imported when a plugin is first reached, not at start: it costs ~0.4 s
# of a restart, and a restarted server should resume its runs as soon as it can.
if TYPE_CHECKING:
    import mcp_types as types
    from mcp import Client

from app import netguard
from app.tables import Plugin
from app.tools import Context, Result, Source, Tool

__all__ = ["Listing", "PluginError", "call", "list_tools", "masked", "refresh", "tool_name"]

log = logging.getLogger(__name__)

STREAMABLE, SSE = "streamable-http", "sse"
NAME_LIMIT = 64  # the Chat Completions API's limit on a function name, [a-zA-Z0-9_-]
CALL_TIMEOUT = 60.0
MAX_PAGES = 20  # tools/list pages followed before the listing is called complete
MAX_BYTES = 16 * 1024 * 1024  # one response from a plugin; more is refused, not buffered


class PluginError(Exception):
    """A plugin call that did not give a result; the message is for the model and people."""


@dataclass(frozen=True)
class Listing:
    """A plugin's tools as the agent sees them, and its status in plain words."""

    tools: list[Tool]
    status: str
    transport: str = ""  # STREAMABLE or SSE when the listing worked
    names: dict[str, str] = field(default_factory=dict)  # our tool name -> the MCP tool's name

    @property
    def ok(self) -> bool:
        return bool(self.transport)


def masked(secret: str) -> str:
    """The secret as a page may show it: its last two characters, when that gives little away."""
    return "••••" + secret[-2:] if len(secret) >= 12 else "••••"


# --------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


def tool_name(plugin: str, tool: str, taken: Iterable[str] = ()) -> str:
    """`{plugin}_{tool}` as a Chat Completions function name: other characters become `_`,
    and a name that is too long or already taken ends in a hash of the original instead."""
    whole = f"{plugin}_{tool}"
    name = _NOT_NAME.sub("_", whole).strip("_") or "tool"
    taken = set(taken)
    if len(name) <= NAME_LIMIT and name not in taken:
        return name
    digest = hashlib.sha256(whole.encode()).hexdigest()
    for size in (8, 16, 64):
        candidate = f"{name[: NAME_LIMIT - size - 1].rstrip('_')}_{digest[:size]}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free name for {whole!r}")  # a sha256 clash: not in this universe


# --------------------------------------------------------------------------
# Connecting
# --------------------------------------------------------------------------

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _headers(p: Plugin) -> dict[str, str]:
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


class _Attempt:
    """One connection attempt: the HTTP statuses it met, for telling failures apart."""

    def __init__(self) -> None:
        self.statuses: list[tuple[str, int]] = []

    async def record(self, response: httpx2.Response) -> None:
        self.statuses.append((response.request.method, response.status_code))

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


@asynccontextmanager
async def _connect(p: Plugin, transport: str, *, private_ok: bool, attempt: _Attempt, timeout: float,
                   read_timeout: float):
    """An initialized `mcp.Client` on the plugin, over `transport`, through the guard."""
    from mcp import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    headers = _headers(p)
    hooks = {"response": [attempt.record]}

    def factory(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        # sse_client builds its own client through this factory: the guard applies to it too.
        return netguard.guarded_client(allow_private=private_ok, headers=headers, auth=auth,
                                       timeout=timeout or 10.0, max_bytes=MAX_BYTES, event_hooks=hooks)

    if transport == SSE:
        stream = sse_client(p.address, headers=headers, timeout=timeout, sse_read_timeout=read_timeout,
                            httpx_client_factory=factory)
        async with Client(stream, cache=None) as client:
            yield client
        return
    async with factory(headers, httpx2.Timeout(timeout, read=read_timeout)) as http:
        async with Client(streamable_http_client(p.address, http_client=http), cache=None) as client:
            yield client


def private_ok(lifted: bool, owner: int | None, agent_person: int | None) -> bool:
    """CHAT_PRIVATE_PLUGINS (`lifted`) lifts the guard for the owner's agents only: the
    owner's private network is not every person's to reach."""
    return lifted and agent_person == owner


def _leaves(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _why(exc: BaseException, attempt: _Attempt, p: Plugin) -> str:
    """Why a connection failed, in the plain words of a plugin's status. The mcp transports
    raise from task groups, so the telling exception is a leaf of an ExceptionGroup."""
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, netguard.Refused):
            return str(leaf)
        if isinstance(leaf, PluginError):
            return str(leaf)
    if status := attempt.auth_status:
        sent = p.secret.strip() and p.header.strip()
        return f"{status}: the server refused the secret" if sent else f"{status}: the server asks for a secret"
    if any(isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout | ConnectionError) for leaf in leaves):
        return "unreachable"
    if any(isinstance(leaf, TimeoutError | httpx2.TimeoutException) for leaf in leaves):
        return "timed out"
    return "not an MCP server"


def _bad_address(address: str) -> str | None:
    try:
        parts = urlsplit(address)
    except ValueError:
        return "refused: the address is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "refused: a plugin's address is an http:// or https:// URL"
    return None


# --------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------


async def list_tools(p: Plugin, *, private_ok: bool, timeout: float = 10,
                     call_timeout: float = CALL_TIMEOUT) -> Listing:
    """The plugin's tools as our Tools (`{p.name}_{tool}`), and its status: "3 tools", or
    why not ("refused: ...", "unreachable", "401: the server refused the secret",
    "timed out", "not an MCP server"). Never raises for the plugin's failures.
    `call_timeout` is how long each listed tool's call may take."""
    if bad := _bad_address(p.address):
        return Listing([], bad)
    status = "not an MCP server"
    deadline = anyio.current_time() + timeout  # one budget for both transports
    for transport in (STREAMABLE, SSE):
        attempt = _Attempt()
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                async with _connect(p, transport, private_ok=private_ok, attempt=attempt,
                                    timeout=timeout, read_timeout=timeout) as client:
                    found = await _all_tools(client)
        except Exception as exc:
            status = _why(exc, attempt, p)
            log.info("plugin %s over %s: %s (%s)", p.name, transport, status, type(exc).__name__)
            if transport == STREAMABLE and status == "not an MCP server" and attempt.sse_only:
                continue
            return Listing([], status)
        return _listing(p, found, transport, private_ok=private_ok, call_timeout=call_timeout)
    return Listing([], status)


async def _all_tools(client: Client) -> list[types.Tool]:
    found: list[types.Tool] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        found.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return found


def _listing(p: Plugin, found: list[types.Tool], transport: str, *, private_ok: bool,
             call_timeout: float) -> Listing:
    tools: list[Tool] = []
    names: dict[str, str] = {}
    for mcp_tool in found:
        name = tool_name(p.name, mcp_tool.name, names)
        names[name] = mcp_tool.name
        hints = mcp_tool.annotations
        schema = dict(mcp_tool.input_schema or {})
        schema.setdefault("type", "object")
        if schema["type"] == "object":
            schema.setdefault("properties", {})
        tools.append(Tool(
            name=name,
            description=(mcp_tool.description or mcp_tool.title or "").strip(),
            parameters=schema,
            run=_runner(p, mcp_tool.name, transport, private_ok=private_ok, timeout=call_timeout),
            idempotent=bool(hints and (hints.read_only_hint or hints.idempotent_hint)),
            dispatches=True,
        ))
    count = len(tools)
    return Listing(tools, f"{count} tool" if count == 1 else f"{count} tools", transport, names)


async def refresh(plugins: Iterable[Plugin], *, private_ok: bool, timeout: float = 10) -> dict[int | None, Listing]:
    """Every enabled plugin's listing, by plugin id, read concurrently."""
    enabled = [p for p in plugins if p.enabled]
    listings = await asyncio.gather(*(list_tools(p, private_ok=private_ok, timeout=timeout) for p in enabled))
    return {p.id: listing for p, listing in zip(enabled, listings)}


# --------------------------------------------------------------------------
# Calling
# --------------------------------------------------------------------------


def _runner(p: Plugin, mcp_name: str, transport: str, *, private_ok: bool, timeout: float):
    async def run(args: dict[str, Any], ctx: Context) -> Result:
        return await call(p, mcp_name, args, ctx, transport=transport, private_ok=private_ok, timeout=timeout)

    return run


async def call(p: Plugin, mcp_name: str, args: dict[str, Any], ctx: Context, *, transport: str = STREAMABLE,
               private_ok: bool, timeout: float = CALL_TIMEOUT) -> Result:
    """Call one MCP tool in a session of its own. Raises PluginError with the server's text
    for an error result, and with a plain reason for a timeout, a failed connection or
    `ctx.abort` (which cancels the call at once)."""
    if ctx.abort.is_set():
        raise PluginError("stopped before the call was made")

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        text = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
        try:
            ctx.progress(text)
        except Exception:  # a broken progress sink must not fail the call
            log.exception("progress of %s_%s", p.name, mcp_name)

    from mcp.shared.exceptions import MCPError

    attempt = _Attempt()
    with anyio.CancelScope() as stop:
        watcher = asyncio.ensure_future(_cancel_when_set(ctx.abort, stop))
        try:
            with anyio.fail_after(timeout):
                async with _connect(p, transport, private_ok=private_ok, attempt=attempt,
                                    timeout=min(timeout, 10), read_timeout=timeout + 5) as client:
                    ctx.dispatched()  # the session is open: the call leaves now
                    result = await client.call_tool(mcp_name, args, progress_callback=progressed)
        except TimeoutError:
            raise PluginError(f"{p.name} did not answer within {timeout:g} s") from None
        except Exception as exc:
            # A JSON-RPC error (unknown tool, bad arguments ...) is the server's own word; the
            # transport also turns an HTTP error into one, which _why explains better.
            if not attempt.failed_http:
                for leaf in _leaves(exc):
                    if isinstance(leaf, MCPError):
                        raise PluginError(leaf.message or f"{mcp_name} was refused") from None
            why = _why(exc, attempt, p)
            raise PluginError(f"{p.name}: {why}" if why in ("unreachable", "timed out", "not an MCP server")
                              else why) from None
        finally:
            watcher.cancel()
    if stop.cancelled_caught:
        raise PluginError("stopped while the plugin was working")
    text, sources = _content(result)
    if result.is_error:
        raise PluginError(text or f"{mcp_name} failed without saying why")
    return Result(text=text, sources=sources)


async def _cancel_when_set(event: asyncio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


def _content(result: types.CallToolResult) -> tuple[str, tuple[Source, ...]]:
    import mcp_types as types

    """The result as text for the model: text parts as they are, other parts summarised."""
    parts: list[str] = []
    sources: list[Source] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            parts.append(f"[image: {block.mime_type}, {_size(block.data)} bytes]")
        elif isinstance(block, types.AudioContent):
            parts.append(f"[audio: {block.mime_type}, {_size(block.data)} bytes]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[link: {block.title or block.name} {block.uri}]")
            if str(block.uri).startswith(("http://", "https://")):
                sources.append(Source(str(block.uri), block.title or block.name))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource: {resource.uri}, {resource.mime_type or 'binary'}, "
                             f"{_size(resource.blob)} bytes]")
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), tuple(sources)
