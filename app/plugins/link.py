"""Reaching an MCP server: the guarded HTTP client, both transports, and why a connection failed.

Transport: Streamable HTTP first. A 4xx other than 401/403 to its POST is how a server that
only speaks the older SSE transport answers (405 from an `/sse` route, 404 elsewhere), so
then the same address is tried as an SSE endpoint, as the MCP spec's backwards-compatibility
section says (app/plugins/tools.py does that when it lists the tools).

Every connection is made by `netguard.guarded_client`, so a plugin address on this machine
or a private network is refused unless CHAT_PRIVATE_PLUGINS=1 (`private_ok`).

The secret (`plugin.secret`) is only ever put into the request header: it is not logged,
and no status or exception text contains it.
"""
from __future__ import annotations

import functools
import logging
import re
import time
from typing import Any
from collections.abc import Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import anyio
import httpx2

from app import netguard
from app.plugins import asks as mcp_asks, oauth_tokens as mcp_oauth_tokens, stdio as mcp_stdio
from app.plugins.attempt import Attempt
from app.plugins.errors import PluginError, leaves
from app.tables import Plugin

log = logging.getLogger(__name__)


def _not_a_parse_failure(record: logging.LogRecord) -> bool:
    """The mcp client logs "Error parsing SSE message" with a traceback when a message came
    for a call its caller has left (the reading end closed: a run cancelled mid-call, as a
    worker that lost its lease cancels its runs). Nothing failed to parse and nothing is
    lost (the call's outcome is the run's, in rows): that record is dropped, any other kept."""
    error = record.exc_info[1] if record.exc_info else None
    return not (record.getMessage() == "Error parsing SSE message"
                and isinstance(error, (anyio.ClosedResourceError, anyio.BrokenResourceError)))


logging.getLogger("mcp.client.streamable_http").addFilter(_not_a_parse_failure)

STREAMABLE, SSE, STDIO = "streamable-http", "sse", "stdio"
MAX_BYTES = 16 * 1024 * 1024  # one response (or one event) from a plugin; more is refused, not buffered
CONNECT_TIMEOUT = 10.0
# How long an open session's event stream may stay silent: sessions live long, and a call's
# own limit (its idle time, app/plugins/sessions.py) is what notices a server that went quiet.
STREAM_SILENCE = 3600.0


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


class Link:
    """An initialized MCP session on a plugin: the mcp package's ClientSession, with what it
    takes to go on in it from another process (`session_id`, `initialized`)."""

    def __init__(self, session: Any, watched: _Watched, attempt: Attempt, end: Any = None):
        self.session = session
        self._watched = watched
        self._end = end
        self.session_id = attempt.session_id or ""  # Streamable HTTP's Mcp-Session-Id ('' for none)
        result = session.initialize_result
        self.initialized = result.model_dump_json(by_alias=True, exclude_none=True) if result else ""

    @property
    def ended(self) -> bool:
        """Whether the server's side is gone (an SSE stream ended, a stdio server exited)."""
        return self._watched.ended

    @property
    def server_capabilities(self) -> Any:
        return self.session.server_capabilities

    async def list_tools(self, cursor: str | None = None) -> Any:
        import mcp_types as types
        return await self.session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))

    @property
    def instructions(self) -> str:
        """What the server says about using it (`instructions` in its `initialize` answer)."""
        result = self.session.initialize_result
        return (getattr(result, "instructions", None) or "") if result else ""

    @property
    def left_out(self) -> list[tuple[str, str]]:
        """The tools its listings left out, with why: (name, reason)."""
        return self._watched.attempt.left_out

    async def call_tool(self, name: str, arguments: dict[str, Any], progress_callback: Any = None) -> Any:
        return await self.session.call_tool(name, arguments, progress_callback=progress_callback)

    async def resume_call(self, name: str, arguments: dict[str, Any], token: str, progress_callback: Any = None,
                          seen: Callable[[str], Any] | None = None) -> Any:
        """Go on with a call sent by another process (or before a restart), in this same
        session: not sent again, its response stream resumed from the event `token`
        (Streamable HTTP's Last-Event-ID; the server replays what it sent after it).
        `seen` is told each event id read."""
        import mcp_types as types
        from mcp.shared.message import ClientMessageMetadata

        async def noted(event_id: str) -> None:
            if seen is not None:
                seen(event_id)

        request = types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))
        return await self.session.send_request(
            request, types.CallToolResult, progress_callback=progress_callback,
            metadata=ClientMessageMetadata(resumption_token=token, on_resumption_token_update=noted))

    async def list_prompts(self, cursor: str | None = None) -> Any:
        import mcp_types as types
        return await self.session.list_prompts(params=types.PaginatedRequestParams(cursor=cursor))

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> Any:
        return await self.session.get_prompt(name, arguments)

    async def list_resources(self, cursor: str | None = None) -> Any:
        import mcp_types as types
        return await self.session.list_resources(params=types.PaginatedRequestParams(cursor=cursor))

    async def read_resource(self, uri: str) -> Any:
        return await self.session.read_resource(uri)

    async def end(self) -> None:
        """End the session on the server (Streamable HTTP's DELETE): when it is closed for
        good, not when this process stops (another may go on in it)."""
        if self._end is not None:
            await self._end()


class _Watched:
    """A transport's read stream that notes when it ended (the server's side is gone), which
    the mcp package's session does not tell, and the transport's failures as they pass (the
    session hands those to its message handler later, in a task of its own)."""

    def __init__(self, stream: Any, attempt: Attempt):
        self.stream = stream
        self.attempt = attempt
        self.ended = False

    def _seen(self, item: Any) -> Any:
        if isinstance(item, BaseException):
            self.attempt.errors.append(item)
        elif isinstance(result := getattr(getattr(item, "message", None), "result", None), dict):
            _mend(result, self.attempt)
        return item

    async def __aenter__(self) -> _Watched:
        await self.stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        self.ended = True
        return await self.stream.__aexit__(*exc)

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            return self._seen(await self.stream.__anext__())
        except BaseException:
            self.ended = True
            raise

    async def receive(self) -> Any:
        try:
            return self._seen(await self.stream.receive())
        except BaseException:
            self.ended = True
            raise

    async def aclose(self) -> None:
        self.ended = True
        await self.stream.aclose()

    def close(self) -> None:
        self.ended = True
        self.stream.close()

    @property
    def last_context(self) -> Any:  # the sender's contextvars, which the dispatcher reads when there
        return getattr(self.stream, "last_context", None)


CONTENT_TYPES = ("text", "image", "audio", "resource_link", "resource")  # the content blocks MCP defines


def _mend(result: dict[str, Any], attempt: Attempt) -> None:
    """A server's result made readable in place, before the mcp package checks it whole (one
    bad part failed all of it: a plugin showed 0 tools for one malformed tool, a call failed
    for one block of an unknown type). A listing's tools that cannot be called are left out
    and named in `attempt.left_out` with why; a tool with an empty schema takes no arguments;
    a content block of a type MCP does not define becomes a text naming it."""
    import mcp_types as types
    from pydantic import ValidationError

    tools, content = result.get("tools"), result.get("content")
    if isinstance(tools, list):
        kept = []
        for tool in tools:
            name = str(tool.get("name", "?"))[:100] if isinstance(tool, dict) else "?"
            schema = tool.get("inputSchema") if isinstance(tool, dict) else None
            if isinstance(schema, dict) and not schema:
                tool["inputSchema"] = schema = {"type": "object", "properties": {}}
            if not isinstance(schema, dict):
                attempt.left_out.append((name, "it has no inputSchema"))
                continue
            if schema.get("type", "object") != "object":
                attempt.left_out.append((name, f"its inputSchema is of type {str(schema.get('type'))[:40]}, "
                                               f"not object: a call's arguments are an object"))
                continue
            try:
                types.Tool.model_validate(tool)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first.get("loc", ())) or "the definition"
                attempt.left_out.append((name, f"its definition is malformed ({where}: {first.get('msg', '')})"))
                continue
            kept.append(tool)
        result["tools"] = kept
    if isinstance(content, list):
        for i, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind not in CONTENT_TYPES:
                content[i] = {"type": "text",
                              "text": f"[a content block of type {str(kind)[:40]!r}, which MCP does not define: "
                                      f"left out]"}


def _session_class() -> type:
    from mcp.client.session import ClientSession

    class McpClientSession(ClientSession):  # the mcp package's, as Tabletalk uses it (sessions.py holds one)
        async def validate_tool_result(self, name: str, result: Any) -> None:
            """Not done: the check of structured output against the tool's output schema runs
            the plugin's patterns on `re`, on the event loop, against text the same plugin sent
            (a backtracking pattern stalled the worker). The result is read as text
            (structured content only as JSON text), so it has nothing to check for us."""

        def _build_capabilities(self, version: str) -> Any:  # elicitation in form mode only
            return mcp_asks.declared(super()._build_capabilities(version))

    return McpClientSession


# The client capabilities every connection declares, as the callbacks that answer them
# (`sampling_callback`, `elicitation_callback`, `list_roots_callback`: the mcp package
# declares a capability exactly when its callback is given). The same for the tool listing
# and for a conversation's session: a server lists tools by what its client declared
# (server-everything hides its sampling, elicitation and roots tools from a client that
# declares none), so a listing that declared less would hide tools the session can run.
# A session's own callbacks (`connect(**callbacks)`, which know its conversation) replace
# these defaults, which answer where no conversation is (the listing). Roots are not
# declared: Tabletalk shares no folders with a plugin.
DECLARED: dict[str, Any] = mcp_asks.callbacks(lambda: None)  # elicitation (form mode) and sampling (app/plugins/asks.py)


def declared() -> set[str]:
    """The capabilities `initialize` declares: sampling, elicitation, roots (those given)."""
    names = {"sampling_callback": "sampling", "elicitation_callback": "elicitation", "list_roots_callback": "roots"}
    return {names[k] for k in DECLARED if k in names}


@asynccontextmanager
async def connect(p: Plugin, transport: str, *, private_ok: bool, attempt: Attempt,
                  timeout: float = CONNECT_TIMEOUT, read_timeout: float = STREAM_SILENCE,
                  resume: tuple[str, str] | None = None, asker: Callable[[], Any] = lambda: None,
                  auth: httpx2.Auth | None = None, tokens: mcp_oauth_tokens.TokenRows | None = None,
                  **callbacks):
    """An initialized `Link` on the plugin, over `transport`, through the guard (a stdio
    plugin is its command, started here and stopped on leaving). `resume` is a Streamable HTTP
    session to go on in (its id and the server's `initialize` answer, JSON), without a new
    handshake; a server that no longer knows it answers 404 (`attempt.session_refused`).
    `callbacks` go to the session (elicitation_callback, sampling_callback ...): the
    capabilities `initialize` declares are exactly those it has callbacks for. The server's
    elicitation and sampling requests go to `asker()` (app/plugins/asks.py; None: refused).
    `auth` signs the requests (an OAuth flow under way); else a plugin connected with OAuth
    sends the tokens kept in `tokens` (app/plugins/oauth_tokens.py; None: none are sent)."""
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    sent = headers(p)
    if auth is None and tokens is not None and p.kind != "stdio":
        auth = mcp_oauth_tokens.auth_for(p, tokens)
    signed = auth
    hooks = {"response": [attempt.record]}

    def factory(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
        # sse_client builds its own client through this factory: the guard applies to it too.
        return netguard.guarded_client(allow_private=private_ok, headers=headers, auth=auth or signed,
                                       timeout=timeout or CONNECT_TIMEOUT, max_bytes=MAX_BYTES, event_hooks=hooks)

    async def heard(message: Any) -> None:  # the server's notifications outside any call
        if getattr(message, "method", None) == "notifications/tools/list_changed" and p.id is not None:
            tools_changed[p.id] = time.time()

    @asynccontextmanager
    async def linked(streams: tuple[Any, Any], end: Any = None):
        read, write = streams
        watched = _Watched(read, attempt)
        options = {"message_handler": heard, **DECLARED, **mcp_asks.callbacks(asker), **callbacks}
        async with _session_class()(watched, write, **options) as s:
            if resume is not None and transport == STREAMABLE:
                import mcp_types as types
                s.adopt(types.InitializeResult.model_validate_json(resume[1]))
                attempt.session_id = resume[0]
            else:
                await s.initialize()
            yield Link(s, watched, attempt, end)

    if transport == STDIO:
        async with mcp_stdio.streams(p, attempt) as streams, linked(streams) as link:
            yield link
        return
    if transport == SSE:
        _sse_event_limit()
        async with sse_client(p.address, headers=sent, timeout=timeout, sse_read_timeout=read_timeout,
                              httpx_client_factory=factory) as streams, linked(streams) as link:
            yield link
        return
    if resume is not None:
        sent = {**sent, "mcp-session-id": resume[0]}
    async with factory(sent, httpx2.Timeout(timeout, read=read_timeout)) as http:
        made: list[Link] = []

        async def end() -> None:
            if made and made[0].session_id:
                await _delete(http, p.address, made[0])

        async with streamable_http_client(p.address, http_client=http, max_sse_event_size=MAX_BYTES,
                                          terminate_on_close=False) as streams, linked(streams, end) as link:
            made.append(link)
            yield link


def _sse_event_limit() -> None:
    """The mcp package's SSE client reads events of at most 1 MiB (about 0.5 MB of text when
    `structuredContent` repeats it) and takes no limit, as its Streamable HTTP client does
    (`max_sse_event_size`): its helper that opens the event stream is given ours, MAX_BYTES,
    so the 16 MB a plugin may send holds on both transports."""
    import mcp.client.sse as sse

    if not isinstance(sse.sse_within_origin, functools.partial):
        sse.sse_within_origin = functools.partial(sse.sse_within_origin, max_event_size=MAX_BYTES)


async def _delete(http: httpx2.AsyncClient, address: str, link: Link) -> None:
    """The DELETE that ends a Streamable HTTP session (a server that does not allow it answers 405)."""
    sent = {"mcp-session-id": link.session_id}
    if version := link.session.protocol_version:
        sent["mcp-protocol-version"] = version
    try:
        await http.delete(address, headers=sent)
    except Exception as exc:  # ending is a courtesy: the server's own timeout ends it too
        log.info("ending the session at %s failed (%s)", address, type(exc).__name__)


# When each plugin (by id) last said its tools changed (`notifications/tools/list_changed`, on
# any session of this process): a listing read before that is old (app/plugins/tools.py).
tools_changed: dict[int, float] = {}


def private_ok(lifted: bool, owner: int | None, agent_person: int | None) -> bool:
    """CHAT_PRIVATE_PLUGINS (`lifted`) lifts the guard for the owner's agents only: the
    owner's private network is not every person's to reach."""
    return lifted and agent_person == owner


def why(exc: BaseException, attempt: Attempt, p: Plugin) -> str:
    """Why a connection failed, in the plain words of a plugin's status. The mcp transports
    raise from task groups, so the telling exception is a leaf of an ExceptionGroup."""
    found = [*leaves(exc), *(leaf for e in attempt.errors for leaf in leaves(e))]
    if p.kind == "stdio":
        if started := next((leaf for leaf in found if isinstance(leaf, mcp_stdio.StdioError)), None):
            return str(started)
        said = f": {attempt.stderr}" if attempt.stderr else ""
        if any(isinstance(leaf, TimeoutError) for leaf in found):
            return f"timed out{said}"
        if refused := _refused(found, attempt):
            return refused
        return f"the command ended without answering as an MCP server{said}"
    for leaf in found:
        if isinstance(leaf, mcp_oauth_tokens.NeedsSignIn):  # the stored tokens stopped working
            return "401: connect with OAuth again"
        if (isinstance(leaf, netguard.Refused) and "larger than" in str(leaf)) or (
                isinstance(leaf, httpx2.SSEError) and "byte limit" in str(leaf)):
            return too_large(p)
        if isinstance(leaf, netguard.Refused | PluginError):
            return str(leaf)
    if status := attempt.auth_status:
        sent = p.secret.strip() and p.header.strip()
        if status == 401 and attempt.oauth and not sent:
            return "401: the server asks you to sign in: connect with OAuth"
        return f"{status}: the server refused the secret" if sent else f"{status}: the server asks for a secret"
    if any(isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout | ConnectionRefusedError) for leaf in found):
        return "unreachable"
    if any(isinstance(leaf, TimeoutError | httpx2.TimeoutException) for leaf in found):
        return "timed out"
    if any(isinstance(leaf, httpx2.RemoteProtocolError | httpx2.ReadError | ConnectionError) for leaf in found):
        return "the connection was lost"
    if refused := _refused(found, attempt):
        return refused
    return "not an MCP server"


def never_sent(exc: BaseException, attempt: Attempt) -> bool:
    """Whether a request failed only to connect (refused, or no connection in time): nothing
    reached the server. A connection that broke after it was made may have carried it."""
    unasked = {id(e) for e in attempt.unasked}
    found = [leaf for leaf in [*leaves(exc), *(leaf for e in attempt.errors for leaf in leaves(e))]
             if id(leaf) not in unasked]
    connecting = (httpx2.ConnectError, httpx2.ConnectTimeout, ConnectionRefusedError)
    broken = (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError, httpx2.ReadTimeout,
              httpx2.WriteTimeout, ConnectionResetError, BrokenPipeError)
    return (any(isinstance(leaf, connecting) for leaf in found)
            and not any(isinstance(leaf, broken) for leaf in found))


# The mcp client's own words for an HTTP error without a JSON-RPC body: the body is quoted instead.
_STAND_INS = ("Server returned an error response", "Not Found", "Session terminated", "Unexpected content type",
              "server answered a request with 202")


def _refused(found: list[BaseException], attempt: Attempt) -> str:
    """The server's own words for an HTTP error status or a JSON-RPC error ('' when neither):
    "503: Too many open sessions", "the server answered with an error: Unsupported protocol"."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    error = next((leaf for leaf in found if isinstance(leaf, MCPError) and leaf.code != CONNECTION_CLOSED), None)
    status = next((s for _, s in attempt.statuses if s >= 400), None)
    words = error.message if error is not None and not error.message.startswith(_STAND_INS) else attempt.said
    if status is not None and words and (status >= 500 or status == 429 or words is not attempt.said):
        return f"{status}: {_short(words)}"  # (another 4xx without JSON-RPC may be an SSE server's: tried next)
    if status is None and error is not None and words:
        return f"the server answered with an error: {_short(words)}"
    return ""


def _short(words: str) -> str:
    text = " ".join(words.split())
    return text if len(text) <= 300 else text[:299] + "…"


def where(address: str) -> str:
    """A hint for an address without the path where MCP servers usually listen, for a status
    "not an MCP server"."""
    try:
        path = urlsplit(address).path.rstrip("/")
    except ValueError:
        return ""
    if path in ("",):
        return " (no MCP endpoint at this address: servers usually listen at /mcp, or /sse for SSE)"
    if not path.endswith(("/mcp", "/sse")):
        return " (servers usually listen at /mcp, or /sse for SSE)"
    return ""


def too_large(p: Plugin) -> str:
    return (f"{p.name}’s answer was larger than {MAX_BYTES // (1024 * 1024)} MB, the most Tabletalk "
            f"takes from a plugin, so it was not read")


def bad_address(address: str) -> str | None:
    try:
        parts = urlsplit(address)
    except ValueError:
        return "refused: the address is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "refused: a plugin's address is an http:// or https:// URL"
    return None
