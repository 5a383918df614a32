"""A real MCP server on loopback, for the plugin tests.

Built with the mcp package's own `MCPServer` and served by uvicorn on 127.0.0.1, so the
client under test speaks the wire protocol exactly as it would to a plugin on the internet:

    with FakeMCPServer() as server:                           # Streamable HTTP at /mcp
        ...point a plugin at server.url...
    with FakeMCPServer(transport="sse") as server:            # the older SSE transport, /sse
        ...
    with FakeMCPServer(require="Bearer s3cret") as server:    # 401 without that Authorization
        ...
    with FakeMCPServer(require="k3y", header="X-API-Key") as server:
        ...

Tools: `add(a, b)`, `echo(text)`, `slow(seconds, quiet=False)` (reports progress every tenth
of a second unless quiet), `fail()` (its result is an MCP error result), `peek()` (annotated read-only),
`store(key, value)` (annotated idempotent), `lines(count)` (numbered lines), `picture()` (an image part beside a text
part) and two tools whose names a Chat Completions API would reject as they are.

`FakeMCPServer(sessions_cap=2)` answers a third open session 503 "Too many open sessions"
(`server.cap.open`, `server.cap.deleted`: the sessions open, the DELETEs that ended one).

`NotMCPServer` is a plain web page server, for "this address is not an MCP server".

The server runs its own event loop in a daemon thread, so sync and async tests (with their
own loops) both reach it. `server.calls` counts tool calls that reached a tool (`server.echoed`
the texts `echo` was called with), and
`server.cancelled` the `slow` calls that were cut off before they finished.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

__all__ = ["FakeMCPServer", "HostileMCPServer", "NotMCPServer", "LONG_NAME", "free_port"]

# A tool name a plugin may use that no Chat Completions API accepts as it is (too long).
LONG_NAME = "summarise_" + "very_" * 14 + "long_documents"

# The smallest valid PNG (1x1, transparent): an image part with a known size.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
)


def free_port() -> int:
    """A port nothing listens on right now (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(server: "FakeMCPServer") -> MCPServer:
    mcp = MCPServer("fake-plugin", instructions="A test server.", log_level="WARNING")

    @mcp.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        server.calls += 1
        return a + b

    @mcp.tool(description="Say the text back.")
    def echo(text: str) -> str:
        server.calls += 1
        server.echoed.append(text)
        return text

    @mcp.tool(description="Wait some seconds, reporting progress.")
    async def slow(seconds: float, ctx: Context, quiet: bool = False) -> str:
        server.calls += 1
        steps = max(1, round(seconds * 10))
        try:
            for i in range(steps):
                if not quiet:
                    await ctx.report_progress(i, steps, f"step {i + 1} of {steps}")
                await asyncio.sleep(seconds / steps)
        except BaseException:
            server.cancelled += 1
            raise
        return f"waited {seconds:g} s"

    @mcp.tool(description="Always fails.")
    def fail() -> str:
        server.calls += 1
        # ToolError, not any exception: MCPServer hides a crash's own text from the client.
        raise ToolError("the disk is full")

    @mcp.tool(description="Look without touching.", annotations=ToolAnnotations(read_only_hint=True))
    def peek() -> str:
        server.calls += 1
        return "nothing changed"

    @mcp.tool(description="Set a key; twice is the same as once.",
              annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=False))
    def store(key: str, value: str) -> str:
        server.calls += 1
        server.stored[key] = value
        return "stored"

    @mcp.tool(description="Numbered lines, as many as asked.")
    def lines(count: int) -> str:
        server.calls += 1
        return "".join(f"line {i}\n" for i in range(1, count + 1))

    @mcp.tool(description="A picture and its caption.", structured_output=False)
    def picture() -> list[Any]:
        server.calls += 1
        return ["a tiny picture", Image(data=PNG, format="png")]

    @mcp.tool(name="weather.today (metric)", description="A name with dots, spaces and brackets.")
    def weather() -> str:
        server.calls += 1
        return "sunny"

    @mcp.tool(name=LONG_NAME, description="A name longer than 64 characters.")
    def long_named() -> str:
        server.calls += 1
        return "summarised"

    return mcp


class _RequireHeader:
    """ASGI middleware: 401 for any HTTP request whose `header` is not `value`."""

    def __init__(self, app, header: str, value: str):
        self.app, self.header, self.value = app, header.lower().encode(), value.encode()
        self.refused = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(self.header) != self.value:
            self.refused += 1
            body = b'{"error": "invalid_token", "error_description": "missing or wrong credentials"}'
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
            ]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


class _SessionCap:
    """ASGI middleware: at most `cap` Streamable HTTP sessions open at once (a session opens
    with the answer that gives its Mcp-Session-Id and ends with its DELETE); a request for
    another is answered 503 in plain words, as servers with such a cap do."""

    def __init__(self, app, cap: int):
        self.app, self.cap = app, cap
        self.open: set[bytes] = set()
        self.deleted = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sid = dict(scope["headers"]).get(b"mcp-session-id")
        if scope["method"] == "DELETE" and sid:
            self.open.discard(sid)
            self.deleted += 1
        elif scope["method"] == "POST" and not sid and len(self.open) >= self.cap:
            body = b"Too many open sessions"
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return

        async def noted(message):
            if message["type"] == "http.response.start" and not sid:  # the answer that opens a session
                given = dict(message.get("headers", [])).get(b"mcp-session-id")
                if given and message["status"] < 400:
                    self.open.add(given)
            await send(message)

        await self.app(scope, receive, noted)


class _Served:
    """An ASGI app under uvicorn on 127.0.0.1, in a daemon thread with its own loop."""

    app: Any
    port: int = 0

    def start(self):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, log_config=None, log_level="warning", lifespan="auto", interface="asgi3",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=1,
        )
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [sock]}, daemon=True, name=f"fake-{self.port}"
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.005)
        self._socket = sock
        return self

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        self._thread.join(5)
        if self._thread.is_alive():  # an open stream held it: stop waiting for it
            self._uvicorn.force_exit = True
            self._thread.join(5)
        self._socket.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class FakeMCPServer(_Served):
    """An MCP server with the tools above, over Streamable HTTP or SSE.

    `require` is the value `header` must carry, else every request is answered 401.
    """

    def __init__(self, transport: str = "streamable-http", require: str | None = None,
                 header: str = "Authorization", sessions_cap: int | None = None):
        if transport not in ("streamable-http", "sse"):
            raise ValueError("transport is 'streamable-http' or 'sse'")
        self.transport = transport
        self.calls = 0
        self.cancelled = 0
        self.echoed: list[str] = []  # every text `echo` was called with, in order (a repeat shows twice)
        self.stored: dict[str, str] = {}
        self.mcp = build(self)
        app = self.mcp.streamable_http_app() if transport == "streamable-http" else self.mcp.sse_app()
        self.guard = _RequireHeader(app, header, require) if require is not None else None
        self.cap = _SessionCap(self.guard or app, sessions_cap) if sessions_cap is not None else None
        self.app = self.cap or self.guard or app

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "streamable-http" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def refused(self) -> int:
        """How many requests the header check answered 401."""
        return self.guard.refused if self.guard else 0


class HostileMCPServer(FakeMCPServer):
    """The fake's tools plus tools whose input schemas are hostile: `schemas` maps a tool
    name to the `inputSchema` it lists (a `$ref` to a loopback URL or a file, a pattern that
    backtracks ...). Each such tool is read-only (so a cut-off call would be run again) and
    counts its calls in `calls`, like the others. Tools may take the built-ins' names too.
    With `plants`, it also offers a prompt `plant` and a resource `note://plant` whose text
    is `plants` (words meant to be remembered)."""

    def __init__(self, schemas: dict[str, dict[str, Any]], outputs: dict[str, tuple[dict, dict]] | None = None,
                 plants: str | None = None, **kw):
        super().__init__(**kw)
        if plants is not None:
            self.mcp.prompt(name="plant", description="A prompt that plants words.")(lambda: plants)
            self.mcp.resource("note://plant", name="plant", mime_type="text/plain")(lambda: plants)
        for name, (output_schema, structured) in (outputs or {}).items():
            # a tool that lists `output_schema` and returns `structured` as its structured content
            def answering(structured=structured) -> CallToolResult:
                self.calls += 1
                return CallToolResult(content=[TextContent(text="structured")], structured_content=structured)

            self.mcp.tool(name=name, description="A tool with a hostile output schema.")(answering)
            listed = self.mcp._tool_manager.get_tool(name)
            listed.parameters = {"type": "object", "properties": {}}
            listed.fn_metadata.output_model = None
            listed.fn_metadata.output_schema = output_schema
        for name, schema in schemas.items():
            def hostile(name=name) -> str:
                self.calls += 1
                return f"{name} ran"

            self.mcp.tool(name=name, description="A tool with a hostile schema.",
                          annotations=ToolAnnotations(read_only_hint=True))(hostile)
            self.mcp._tool_manager.get_tool(name).parameters = schema


class NotMCPServer(_Served):
    """A web server that answers every request with the same small HTML page."""

    def __init__(self):
        self.app = self._page

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def _page(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b"<!doctype html><title>Hello</title><p>Just a web page."
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()),
        ]})
        await send({"type": "http.response.body", "body": body})
