"""Tabletalk's plugins against the MCP project's reference server, server-everything (npm),
over Streamable HTTP and SSE (tests/fakes/everything.py; installed by `make npm-tools`)."""
from __future__ import annotations

import asyncio
import re

import pytest

from app.plugins.sessions import Sessions
from app.plugins.tools import PluginError, PluginRun, for_run, list_tools
from app.tables import plugin
from app.tools import ToolContext
from tests.fakes.everything import Everything

pytestmark = pytest.mark.process  # tests/marks.py

TRANSPORTS = {"streamableHttp": "streamable-http", "sse": "sse"}


@pytest.fixture(scope="module", params=list(TRANSPORTS))
def everything(request):
    with Everything(request.param) as server:
        yield server


async def tools_of(server: Everything, sessions: Sessions | None = None, **kw):
    """The server's tools, given to a run whose calls are made in `sessions`."""
    listing = await list_tools(plugin(1, server.url, name="ev"), private_ok=True, **kw)
    assert listing.ok, listing.status
    assert listing.transport == TRANSPORTS[server.transport]
    return {t.name: t for t in for_run(listing.tools, PluginRun(sessions or Sessions()))}


def context(chat: int = 1, **kw) -> ToolContext:
    return ToolContext(chat=chat, agent=1, **kw)


async def test_lists_its_tools(everything):
    tools = await tools_of(everything)
    assert {"ev_echo", "ev_get-sum", "ev_get-tiny-image", "ev_trigger-long-running-operation",
            "ev_toggle-simulated-logging"} <= set(tools)
    assert tools["ev_echo"].description


async def test_echo_and_sum(everything):
    sessions = Sessions()
    tools = await tools_of(everything, sessions=sessions)
    try:
        assert (await tools["ev_echo"].run({"message": "héllo"}, context())).text == "Echo: héllo"
        summed = await tools["ev_get-sum"].run({"a": 2, "b": 40}, context())
        assert "42" in summed.text
    finally:
        await sessions.close_all()


async def test_one_session_per_conversation_keeps_the_servers_state(everything):
    """The logging toggle lives in the server's session: the second call in the same
    conversation stops what the first started, in the same session; another conversation
    has a session of its own."""
    sessions = Sessions()
    tools = await tools_of(everything, sessions=sessions)
    toggle = tools["ev_toggle-simulated-logging"]
    try:
        first = (await toggle.run({}, context(chat=1))).text
        second = (await toggle.run({}, context(chat=1))).text
        other = (await toggle.run({}, context(chat=2))).text
        assert first.startswith("Started simulated")
        assert second.startswith("Stopped simulated")
        session = re.search(r"session (\S+)", first)[1]
        assert re.search(r"session (\S+)", second)[1] == session
        assert other.startswith("Started simulated") and session not in other
        assert sessions.opened == 2
        await sessions.close_chat(1)  # the conversation was deleted
        again = (await toggle.run({}, context(chat=1))).text
        assert again.startswith("Started simulated") and session not in again
        assert sessions.opened == 3
    finally:
        await sessions.close_all()


async def test_a_restarted_server_gets_a_new_session_transparently(everything):
    sessions = Sessions()
    tools = await tools_of(everything, sessions=sessions)
    toggle = tools["ev_toggle-simulated-logging"]
    try:
        assert (await toggle.run({}, context())).text.startswith("Started")
        await asyncio.to_thread(everything.restart)  # every session it held is gone
        assert (await toggle.run({}, context())).text.startswith("Started")
        assert sessions.opened == 2
        assert (await toggle.run({}, context())).text.startswith("Stopped")
    finally:
        await sessions.close_all()


async def test_a_long_operation_reports_progress_past_the_limit(everything):
    """A 1.5 s operation in 5 steps under a 0.6 s limit: each progress report gives it 0.6 s
    again, so it finishes; the person saw every step."""
    sessions = Sessions()
    tools = await tools_of(everything, call_timeout=0.6, sessions=sessions)
    seen: list[str] = []
    try:
        result = await tools["ev_trigger-long-running-operation"].run(
            {"duration": 1.5, "steps": 5}, context(progress=seen.append))
        assert result.text.startswith("Long running operation completed")
        assert seen == ["1/5", "2/5", "3/5", "4/5", "5/5"]
        with pytest.raises(PluginError, match=r"ev sent nothing for 0.6 s"):
            await tools["ev_trigger-long-running-operation"].run({"duration": 3, "steps": 1}, context())
    finally:
        await sessions.close_all()


async def test_defaults_count_as_present(everything):
    """Its schema gives `duration` and `steps` defaults: a call without them is not refused."""
    from app.tools.arguments import problem as schema_problem

    tools = await tools_of(everything)
    assert schema_problem({}, tools["ev_trigger-long-running-operation"].parameters) is None


async def test_resource_links(everything):
    sessions = Sessions()
    tools = await tools_of(everything, sessions=sessions)
    try:
        result = await tools["ev_get-resource-links"].run({"count": 2}, context())
        assert "Here are 2 resource links" in result.text
        assert "demo://resource/static/document/" in result.text or "demo://" in result.text
    finally:
        await sessions.close_all()


async def test_tools_that_must_run_as_tasks_are_not_offered(everything):
    """simulate-research-query declares taskSupport "required": a plain call always fails."""
    tools = await tools_of(everything)
    assert "ev_simulate-research-query" not in tools


async def test_a_server_killed_mid_call_is_a_lost_connection(everything):
    sessions = Sessions()
    tools = await tools_of(everything, sessions=sessions)
    seen: list[str] = []

    async def kill_after_first_progress():
        while not seen:
            await asyncio.sleep(0.02)
        everything.process.kill()

    killer = asyncio.ensure_future(kill_after_first_progress())
    try:
        with pytest.raises(PluginError) as failed:
            await tools["ev_trigger-long-running-operation"].run({"duration": 20, "steps": 20},
                                                                 context(progress=seen.append))
        assert str(failed.value) == "The connection to ev was lost during the call: it may or may not have finished."
    finally:
        killer.cancel()
        await sessions.close_all()
        await asyncio.to_thread(everything.restart)  # for the tests after this one
