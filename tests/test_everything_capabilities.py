"""What `initialize` declares, seen from server-everything (npm), which lists its sampling,
elicitation and roots tools only to a client that declares those capabilities."""
from __future__ import annotations

import pytest

from app.plugins import link as mcp_link
from app.plugins.sessions import Sessions
from app.plugins.tools import PluginRun, for_run, list_tools
from app.tables import plugin
from app.tools import ToolContext
from tests.fakes.everything import Everything

pytestmark = pytest.mark.process  # tests/marks.py

BY_CAPABILITY = {"sampling": {"trigger-sampling-request"}, "roots": {"get-roots-list"},
                 "elicitation": {"trigger-elicitation-request"}}  # form mode; URL mode is never declared


@pytest.fixture(scope="module", params=["streamableHttp", "sse"])
def everything(request):
    with Everything(request.param) as server:
        yield server


async def test_the_tools_listed_follow_exactly_the_capabilities_declared(everything):
    declared = mcp_link.declared()
    assert "roots" not in declared, "Tabletalk shares no folders with a plugin"
    listing = await list_tools(plugin(1, everything.url, name="ev"), private_ok=True)
    listed = {t.name.removeprefix("ev_") for t in listing.tools}
    for capability, tools in BY_CAPABILITY.items():
        if capability in declared:
            assert tools <= listed, (capability, sorted(listed))
        else:
            assert not tools & listed, f"{capability} is not declared, so the server hides {tools & listed}"
    assert {"echo", "get-sum", "toggle-simulated-logging"} <= listed
    assert "trigger-url-elicitation" not in listed, "elicitation is declared in form mode only"


async def test_a_conversations_session_sees_the_tools_the_listing_showed(everything):
    """The listing's connection and a conversation's session declare the same, so no tool
    the agent is offered is hidden from the session that calls it, nor the other way."""
    listing = await list_tools(plugin(1, everything.url, name="ev"), private_ok=True)
    sessions = Sessions()
    try:
        [first] = for_run(listing.tools[:1], PluginRun(sessions))
        await first.run({"message": "x"} if first.name == "ev_echo" else {}, ToolContext(chat=1, agent=1))
        held = next(iter(sessions.open.values()))
        seen = {t.name for t in (await held.client.list_tools()).tools}
        assert seen == set(listing.names.values()) | {"simulate-research-query"}
    finally:
        await sessions.close_all()
