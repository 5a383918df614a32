"""Plugins against a real MCP server on loopback (tests/fakes/mcp_server.py)."""
from __future__ import annotations

import asyncio
import gc
import logging
import re
import socket
import time

import pytest

from app.plugins.link import STREAMABLE
from app.plugins.sessions import Sessions
from app.plugins.tools import (NAME_LIMIT, PluginError, PluginRun, call, for_run, list_tools, masked, refresh,
                               tool_name)
from app.tables import Plugin, plugin
from app.tools import ToolContext
from tests.fakes.mcp_server import LONG_NAME, FakeMCPServer, NotMCPServer, free_port

VALID_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


@pytest.fixture(scope="module")
def streamable():
    with FakeMCPServer() as server:
        yield server


@pytest.fixture(scope="module")
def sse():
    with FakeMCPServer(transport="sse") as server:
        yield server


@pytest.fixture(scope="module")
def locked():
    with FakeMCPServer(require="Bearer s3cret") as server:
        yield server


@pytest.fixture(params=["streamable-http", "sse"])
def server(request, streamable, sse):
    return streamable if request.param == "streamable-http" else sse


async def tools_of(server: FakeMCPServer, **kw):
    listing = await list_tools(plugin(1, server.url, name="fake"), private_ok=True, **kw)
    assert listing.ok, listing.status
    return {t.name: t for t in given(listing.tools)}


def given(tools):
    """Listed tools given to a run of their own: sessions, and no rows."""
    return for_run(tools, PluginRun(Sessions()))


def context(**kw) -> ToolContext:
    return ToolContext(chat=1, agent=1, **kw)


# --- listing ---------------------------------------------------------------------------


async def test_lists_over_streamable_http(streamable):
    listing = await list_tools(plugin(1, streamable.url, name="fake"), private_ok=True)
    assert listing.status == "10 tools"
    assert listing.transport == "streamable-http"
    add = next(t for t in listing.tools if t.name == "fake_add")
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert set(add.parameters["properties"]) == {"a", "b"}
    assert listing.names["fake_add"] == "add"


async def test_falls_back_to_sse_for_an_sse_only_server(sse):
    listing = await list_tools(plugin(1, sse.url, name="fake"), private_ok=True)
    assert (listing.status, listing.transport) == ("10 tools", "sse")
    assert "fake_echo" in {t.name for t in listing.tools}


async def test_names_are_prefixed_and_fit_chat_completions(streamable):
    listing = await list_tools(plugin(1, streamable.url, name="My tools.v2"), private_ok=True)
    names = [t.name for t in listing.tools]
    assert all(VALID_NAME.fullmatch(n) for n in names), names
    assert all(n.startswith("My_tools_v2_") for n in names)
    assert len(set(names)) == len(names)
    # the mapping back to what the server calls its tools
    assert listing.names["My_tools_v2_weather_today_metric"] == "weather.today (metric)"
    long = next(n for n, original in listing.names.items() if original == LONG_NAME)
    assert len(long) <= NAME_LIMIT


def test_tool_name_cases():
    assert tool_name("github", "search_issues") == "github_search_issues"
    assert tool_name("a b", "c.d/e") == "a_b_c_d_e"
    taken = {tool_name("p", "x.y")}
    other = tool_name("p", "x_y", taken)  # sanitises to the same name: gets a hash instead
    assert other != "p_x_y" and other.startswith("p_x_y_") and VALID_NAME.fullmatch(other)
    long = tool_name("plugin", "t" * 200)
    assert len(long) == NAME_LIMIT and VALID_NAME.fullmatch(long)
    assert long != tool_name("plugin", "t" * 199)  # the hash keeps cut names apart


async def test_annotations_make_tools_idempotent(streamable):
    tools = await tools_of(streamable)
    assert tools["fake_peek"].idempotent  # readOnlyHint
    assert tools["fake_store"].idempotent  # idempotentHint
    assert not tools["fake_add"].idempotent  # no annotations: not idempotent


async def test_refresh_lists_enabled_plugins_concurrently(streamable, sse):
    mcp_tools = [
        Plugin(agent=1, name="one", address=streamable.url, id=1),
        Plugin(agent=1, name="two", address=sse.url, id=2),
        Plugin(agent=1, name="off", address=streamable.url, enabled=False, id=3),
        Plugin(agent=1, name="gone", address=f"http://127.0.0.1:{free_port()}/mcp", id=4),
    ]
    listings = await refresh(mcp_tools, private_ok=True)
    assert set(listings) == {1, 2, 4}
    assert listings[1].status == listings[2].status == "10 tools"
    assert listings[4].status == "unreachable"
    assert listings[2].tools[0].name.startswith("two_")


# --- statuses --------------------------------------------------------------------------


async def test_loopback_is_refused_unless_private_plugins_are_allowed(streamable):
    listing = await list_tools(plugin(1, streamable.url), private_ok=False)
    assert listing.status.startswith("refused:")
    assert "loopback" in listing.status
    assert listing.tools == []
    sse_listing = await list_tools(plugin(1, streamable.url.replace("/mcp", "/sse")), private_ok=False)
    assert sse_listing.status.startswith("refused:")


async def test_unreachable_port():
    listing = await list_tools(plugin(1, f"http://127.0.0.1:{free_port()}/mcp"), private_ok=True)
    assert listing.status == "unreachable"


async def test_a_web_page_is_not_an_mcp_server():
    with NotMCPServer() as page:
        listing = await list_tools(plugin(1, page.url), private_ok=True)
    assert listing.status == "not an MCP server"


async def test_an_address_without_its_endpoint_says_where_servers_listen(streamable):
    bare = streamable.url.removesuffix("/mcp")
    listing = await list_tools(plugin(1, bare), private_ok=True)
    assert listing.status == ("not an MCP server (no MCP endpoint at this address: servers usually listen at "
                              "/mcp, or /sse for SSE)")


async def test_listings_end_their_sessions_and_a_cap_is_reported_in_the_servers_words():
    with FakeMCPServer(sessions_cap=2) as capped:
        p = plugin(1, capped.url, name="fake")
        for _ in range(5):
            assert (await list_tools(p, private_ok=True)).ok
        assert capped.cap.deleted == 5 and not capped.cap.open, "each listing's session was ended (DELETE)"
        sessions = Sessions()
        try:
            listing = await list_tools(p, private_ok=True)
            tools = {t.name: t for t in for_run(listing.tools, PluginRun(sessions))}
            for chat in (1, 2):  # two conversations hold the two sessions the server allows
                await tools["fake_add"].run({"a": 1, "b": 2}, ToolContext(chat=chat, agent=1))
            assert len(capped.cap.open) == 2
            full = await list_tools(p, private_ok=True)
            assert full.status == "503: Too many open sessions"
        finally:
            await sessions.close_all()


async def test_a_silent_server_times_out():
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        listing = await list_tools(plugin(1, f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"),
                                   private_ok=True, timeout=0.5)
    assert listing.status == "timed out"
    assert time.monotonic() - started < 3


async def test_not_an_http_address():
    listing = await list_tools(plugin(1, "file:///etc/passwd", name="x"), private_ok=True)
    assert listing.status.startswith("refused:")


async def test_the_secret_is_sent_and_never_shown(locked, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "s3cret"
    wrong = "wr0ng-t0ken-7781"

    missing = await list_tools(plugin(1, locked.url, name="locked"), private_ok=True)
    assert missing.status.startswith("401:")

    refused = await list_tools(plugin(1, locked.url, "Authorization", wrong, name="locked"), private_ok=True)
    assert refused.status == "401: the server refused the secret"

    # a bare secret on Authorization goes out as a Bearer token
    accepted = await list_tools(plugin(1, locked.url, "Authorization", secret, name="locked"), private_ok=True)
    assert accepted.status == "10 tools"
    add = next(t for t in given(accepted.tools) if t.name == "locked_add")
    assert (await add.run({"a": 1, "b": 1}, context())).text == "2"

    with pytest.raises(PluginError) as failed:
        await call(plugin(1, locked.url, "Authorization", wrong), "add", {"a": 1, "b": 1}, context(),
                   PluginRun(Sessions()), private_ok=True)
    assert str(failed.value) == "401: the server refused the secret"

    seen = " ".join([missing.status, refused.status, accepted.status, str(failed.value),
                     repr(failed.value), caplog.text])
    assert wrong not in seen and secret not in seen
    assert caplog.records  # the check above looked at something


async def test_a_custom_header_over_sse():
    with FakeMCPServer(transport="sse", require="k3y-4-sse", header="X-API-Key") as server:
        without = await list_tools(plugin(1, server.url), private_ok=True)
        assert without.status.startswith("401:")
        listing = await list_tools(plugin(1, server.url, "X-API-Key", "k3y-4-sse"), private_ok=True)
        assert (listing.status, listing.transport) == ("10 tools", "sse")
        assert "k3y" not in without.status


def test_masked():
    assert masked("") == "••••"
    assert masked("short") == "••••"
    assert masked("sk-1234567890abcdef") == "••••ef"
    assert "1234" not in masked("sk-1234567890abcdef")


# --- calls -----------------------------------------------------------------------------


async def test_call_round_trip(server):
    tools = await tools_of(server)
    result = await tools["fake_add"].run({"a": 2, "b": 3}, context())
    assert result.text == "5"
    assert (await tools["fake_echo"].run({"text": "héllo"}, context())).text == "héllo"


async def test_names_with_odd_characters_call_the_right_tool(streamable):
    tools = await tools_of(streamable)
    assert (await tools["fake_weather_today_metric"].run({}, context())).text == "sunny"
    long = next(t for t in tools.values() if "summarise" in t.name)
    assert (await long.run({}, context())).text == "summarised"


async def test_an_error_result_raises_with_the_servers_text(server):
    tools = await tools_of(server)
    with pytest.raises(PluginError, match="the disk is full"):
        await tools["fake_fail"].run({}, context())


async def test_bad_arguments_raise_with_the_servers_text(streamable):
    tools = await tools_of(streamable)
    with pytest.raises(PluginError, match="add"):
        await tools["fake_add"].run({"a": "two"}, context())


async def test_images_are_summarised(streamable):
    tools = await tools_of(streamable)
    result = await tools["fake_picture"].run({}, context())
    assert result.text == "a tiny picture\n[image: image/png, 67 bytes]"


async def test_progress_reaches_the_context(server):
    tools = await tools_of(server)
    seen: list[str] = []
    result = await tools["fake_slow"].run({"seconds": 0.3}, context(progress=seen.append))
    assert result.text == "waited 0.3 s"
    assert seen == ["step 1 of 3", "step 2 of 3", "step 3 of 3"]


async def test_abort_cancels_a_slow_call_promptly(server):
    tools = await tools_of(server)
    ctx = context()
    cancelled_before = server.cancelled
    ctx.progress = lambda text: ctx.abort.set()  # Stop once the tool is running (its first progress report)
    started = time.monotonic()
    with pytest.raises(PluginError, match="Stopped by the person"):
        await tools["fake_slow"].run({"seconds": 20}, ctx)
    # Cut off, not run to its end: a bound far from both the ~0.1 s it takes and the call's
    # 20 s, so a loaded machine cannot fail it (1.5 s once did) and a call left running would.
    assert time.monotonic() - started < 10
    for _ in range(100):  # the server hears of it too
        if server.cancelled > cancelled_before:
            break
        await asyncio.sleep(0.02)
    assert server.cancelled > cancelled_before


async def test_an_aborted_context_does_not_call(streamable):
    tools = await tools_of(streamable)
    ctx = context()
    ctx.abort.set()
    calls = streamable.calls
    with pytest.raises(PluginError, match="Stopped by the person"):
        await tools["fake_add"].run({"a": 1, "b": 2}, ctx)
    assert streamable.calls == calls


async def test_a_silent_call_times_out(streamable):
    tools = await tools_of(streamable, call_timeout=0.4)
    started = time.monotonic()
    with pytest.raises(PluginError, match=r"fake sent nothing for 0.4 s \(after the call\)"):
        await tools["fake_slow"].run({"seconds": 20, "quiet": True}, context())
    assert time.monotonic() - started < 3


async def test_progress_extends_the_limit(streamable):
    """The limit is idle time: a call reporting progress (every 0.1 s) runs past it, three
    times over. (A limit of 0.4 s saw a 0.4 s gap between two reports once, a fresh clone's
    make test beside a CPU burner: 1 s is ten reports' room.)"""
    tools = await tools_of(streamable, call_timeout=1.0)
    seen: list[str] = []
    result = await tools["fake_slow"].run({"seconds": 3.0}, context(progress=seen.append))
    assert result.text == "waited 3 s"
    assert len(seen) == 30


async def test_a_call_to_a_plugin_that_went_away():
    with FakeMCPServer() as server:
        tools = await tools_of(server)
    with pytest.raises(PluginError, match="unreachable"):
        await tools["fake_add"].run({"a": 1, "b": 2}, context())


async def test_a_server_down_between_two_calls_says_the_call_was_not_sent():
    with FakeMCPServer() as server:
        tools = await tools_of(server)
        assert (await tools["fake_add"].run({"a": 1, "b": 2}, context())).text == "3"
    with pytest.raises(PluginError) as refused:
        await tools["fake_add"].run({"a": 1, "b": 2}, context())
    assert str(refused.value) == "The plugin fake is unreachable: the call was not sent."


async def test_a_plugin_that_stopped_answering_holds_no_message_up():
    """Listed once, then silent (a socket that accepts and never answers, on its port): the
    next run waits about a second and offers the tools it listed before; once its listing
    timed out it is not asked again for a while, and its status says why and since when."""
    from app.plugins import tools as mcp_tools

    with FakeMCPServer() as server:
        p = Plugin(agent=1, name="hangs", address=server.url, id=77)
        assert (await refresh([p], private_ok=True))[77].status == "10 tools"
        port = server.port
    with socket.socket() as silent:
        silent.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        silent.bind(("127.0.0.1", port))
        silent.listen()
        started = time.monotonic()
        slow = (await refresh([p], private_ok=True, timeout=2))[77]
        assert time.monotonic() - started < 1.8
        assert slow.status.startswith("slow to answer (") and slow.status.endswith("its 10 tools as listed before")
        assert len(slow.tools) == 10
        await asyncio.gather(*mcp_tools._pending.values())  # the listing under way times out
        started = time.monotonic()
        down = (await refresh([p], private_ok=True, timeout=2))[77]
        assert time.monotonic() - started < 0.2, "not asked again"
        assert down.status.startswith("timed out (") and len(down.tools) == 10


def test_a_property_with_a_default_is_not_required_by_our_check():
    """Playwright MCP's browser_take_screenshot lists `scale` as required with a default;
    the server accepts a call without it, so our check must too; a real miss still counts."""
    from app.tools.arguments import problem as schema_problem
    from app.plugins.tools import defaults_optional

    given = {"type": "object", "required": ["type", "scale"],
             "properties": {"type": {"type": "string", "default": "png"},
                            "scale": {"type": "string", "enum": ["css", "device"], "default": "css"},
                            "clip": {"type": "object", "required": ["x", "y"],
                                     "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0}}}}}
    schema = defaults_optional(given)
    assert schema_problem({"type": "png"}, given) == "'scale' is a required property"
    assert schema_problem({"type": "png"}, schema) is None
    assert schema_problem({}, schema) is None
    assert schema_problem({"clip": {}}, schema) == "clip: 'x' is a required property"
    assert schema_problem({"scale": "huge"}, schema).startswith("scale: 'huge' is not one of")
    assert given["required"] == ["type", "scale"], "the listed schema is left as it was"


async def test_a_result_over_the_size_limit_says_so(streamable):
    """1,600,000 numbered lines are about 19 MB: more than a plugin may send."""
    tools = await tools_of(streamable)
    with pytest.raises(PluginError) as failed:
        await tools["fake_lines"].run({"count": 1_600_000}, context())
    assert str(failed.value) == ("fake’s answer was larger than 16 MB, the most Tabletalk takes from a plugin, "
                                 "so it was not read")
    assert (await tools["fake_add"].run({"a": 1, "b": 1}, context())).text == "2", "the next call works"


async def test_over_sse_a_result_may_be_as_large_as_over_streamable_http(sse):
    """The mcp package's SSE client stops at 1 MiB events: 200,000 lines are about 2.3 MB."""
    tools = await tools_of(sse)
    assert len((await tools["fake_lines"].run({"count": 200_000}, context())).text) > 2_000_000
    with pytest.raises(PluginError) as failed:
        await tools["fake_lines"].run({"count": 1_600_000}, context())
    assert str(failed.value) == ("fake’s answer was larger than 16 MB, the most Tabletalk takes from a plugin, "
                                 "so it was not read")


async def test_a_plugin_down_from_the_start_holds_up_only_the_first_message(monkeypatch):
    from app.plugins import tools as mcp_tools

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        p = Plugin(agent=1, name="dead", address=f"http://127.0.0.1:{silent.getsockname()[1]}/mcp", id=78)
        first = (await refresh([p], private_ok=True, timeout=0.5))[78]
        assert first.status == "timed out" and first.tools == []
        key = mcp_tools._identity(p, True)
        mcp_tools._down[key] = (time.monotonic() - 1, "timed out")  # its 60 s are over
        started = time.monotonic()
        later = (await refresh([p], private_ok=True, timeout=5))[78]
        assert time.monotonic() - started < 2.5, "asked again, but waited on for a second only"
        assert later.status.startswith("timed out (") and later.tools == []
        for task in list(mcp_tools._pending.values()):
            task.cancel()


async def test_a_run_cancelled_while_its_plugin_connects_leaves_no_unretrieved_failure():
    """A run dropped while a plugin's session is being opened (its lease lost, a Stop, a
    shutdown): the session's task ends with it, and nothing is left for asyncio to report
    as "Future exception was never retrieved" (a traceback in the server's log)."""
    accepted = asyncio.Event()

    async def silent(reader, writer):  # takes the connection, never answers
        accepted.set()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    reported: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    sessions = Sessions()
    try:
        opening = asyncio.create_task(sessions.session(plugin(1, url), 1, STREAMABLE, private_ok=True))
        await asyncio.wait_for(accepted.wait(), 10)
        await asyncio.sleep(0.1)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        del opening
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        assert [c.get("message") for c in reported] == []
    finally:
        loop.set_exception_handler(None)
        await sessions.close_all()
        server.close()
        await server.wait_closed()


async def test_a_run_cancelled_as_its_plugins_session_becomes_ready_stays_cancelled(streamable):
    """The run's cancellation (a Stop, a lost lease, a worker stopping) in the very step the
    session it waits for is ready: the run ends there and does not go on to make its call
    (asyncio.wait_for, on Python 3.11, returned the session instead). The session goes too."""
    sessions = Sessions()
    opening = asyncio.create_task(sessions.session(plugin(1, streamable.url), 1, STREAMABLE, private_ok=True))
    await asyncio.sleep(0)  # the opener is waiting now, and the session's task made
    holding = next(t for t in asyncio.all_tasks() if t.get_name().startswith("mcp-"))
    # the future the session's task sets once it is open: its argument, read from its frame
    ready = holding.get_coro().cr_frame.f_locals["ready"]
    ready.add_done_callback(lambda _: opening.cancel())
    try:
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert holding.done() and not sessions.open
    finally:
        await sessions.close_all()


async def test_a_close_cancelled_as_its_session_ends_stays_cancelled(streamable):
    """Whoever waits for a session to end (the runner's sweep) and is cancelled in the very
    step it ends is cancelled still: it does not go on as if nothing had been asked of it."""
    sessions = Sessions()
    s = await sessions.session(plugin(1, streamable.url), 1, STREAMABLE, private_ok=True)
    sweeping = asyncio.create_task(sessions.sweep(lambda chats: []))  # its conversation is gone
    s.task.add_done_callback(lambda _: sweeping.cancel())
    try:
        with pytest.raises(asyncio.CancelledError):
            await sweeping
    finally:
        await sessions.close_all()


async def test_a_stop_waits_for_the_session_a_cancelled_sweep_was_ending(streamable):
    """The runner's sweep ends a deleted conversation's session (the DELETE, then the mcp
    client's exit) and is cancelled as the runner stops: the stop's close_all still waits for
    that session's task, which would otherwise outlive the worker's event loop."""
    sessions = Sessions()
    s = await sessions.session(plugin(1, streamable.url), 1, STREAMABLE, private_ok=True)
    sweeping = asyncio.create_task(sessions.sweep(lambda chats: []))
    await asyncio.sleep(0)  # the sweep waits for the session to end now
    assert not sessions.open and not s.task.done()
    sweeping.cancel()
    await asyncio.gather(sweeping, return_exceptions=True)
    await sessions.close_all()
    assert s.task.done()


def test_a_message_for_a_call_its_caller_left_is_no_traceback_but_a_bad_message_still_is(caplog):
    """The mcp client's "Error parsing SSE message" with a traceback, when the reading end is
    closed (a run cancelled mid-call: a worker that lost its lease), is dropped (the chaos
    pause test read it as a failure in the log); a message that does not parse still says so."""
    import anyio
    from httpx2 import ServerSentEvent
    from mcp.client.streamable_http import StreamableHTTPTransport

    import app.plugins.link  # noqa: F401  (its filter on the mcp client's logger)

    async def handle(data: str, close: bool) -> None:
        writer, reader = anyio.create_memory_object_stream(1)
        if close:
            reader.close()
        try:
            await StreamableHTTPTransport("http://127.0.0.1:9/mcp")._handle_sse_event(
                ServerSentEvent(data=data), writer)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            writer.close()
            reader.close()

    message = '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}'
    with caplog.at_level(logging.DEBUG, logger="mcp.client.streamable_http"):
        asyncio.run(handle(message, close=True))
        # the client's records only: a fake server of an earlier test (a thread of this
        # process) may log its own as this runs
        said = [r for r in caplog.records if r.name.startswith("mcp.client") and r.levelno >= logging.WARNING]
        assert not said, caplog.text
        asyncio.run(handle("{not json", close=False))
        assert [r for r in caplog.records if r.getMessage() == "Error parsing SSE message" and r.exc_info]
