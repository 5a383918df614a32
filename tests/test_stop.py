"""Stop reaches the running tool through the abort it watches (ToolContext.abort): the tool
ends itself (a plugin's server hears the cancel), and the turn ends as stopped, with no
other call or model step."""
import asyncio

from app.agent import Delta
from app.run.turn import STOPPED, STOPPED_SENT, Stopped, Turn
from app.run.writes import Writes
from app.tools import Tool
from tests.conftest import ask, csrf, idle, new_chat, rows, wait_for
from tests.test_agents_tools import agent_url
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import tool_call

SLOW = "127_0_0_1_slow"  # the fake MCP server's `slow(seconds)`, as the plugin offers it


def test_stop_during_a_plugin_call_cancels_it_at_the_server_and_ends_the_run(make_client, fake, data):
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        agent = agent_url(client)
        client.post(agent + "/plugins", data={"_csrf_token": csrf(client, agent), "address": mcp.url})
        fake.script([tool_call(SLOW, {"seconds": 60}), tool_call(SLOW, {"seconds": 60})])
        chat = new_chat(client)
        ask(client, chat, "Wait a long time")
        wait_for(lambda: rows(data, "SELECT 1 FROM items WHERE kind = 'call' AND state = 'running' AND dispatched = 1"))
        wait_for(lambda: mcp.calls == 1)
        r = client.post(chat + "/stop", data={"_csrf_token": csrf(client)}, headers={"HX-Request": "true"})
        assert r.status_code == 204
        idle(client, chat)
        calls = rows(data, "SELECT state, output, done FROM items WHERE kind = 'call' ORDER BY id")
        assert calls == [{"state": "failed", "output": STOPPED_SENT, "done": 1},
                         {"state": "failed", "output": STOPPED, "done": 1}], \
            "the stop says the call may have run; the step's second call never started"
        wait_for(lambda: mcp.cancelled == 1)  # the server was told, and cut its work off
        assert mcp.calls == 1, "no other call after the stop"
        assert len(fake.streamed) == 1, "no other model step after the stop"
        assert all(r["done"] for r in rows(data))
        # The plugin's session is still good: the next run calls it again.
        fake.script([tool_call(SLOW, {"seconds": 0.1})], "Done now.")
        ask(client, chat, "Try a short one")
        idle(client, chat)
        assert rows(data, "SELECT output FROM items WHERE kind = 'call' ORDER BY id DESC LIMIT 1") == [
            {"output": "waited 0.1 s"}]


def test_a_turn_told_to_stop_lets_its_tool_end_itself_then_ends_as_stopped(store):
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Wait for it")
    heard: list[str] = []
    started = asyncio.Event()

    async def waits(args, ctx):
        started.set()
        await ctx.abort.wait()  # as fetch_page and plugin calls do
        heard.append("abort")
        raise RuntimeError("stopped by the person")

    requests = []

    async def stream(messages, tools):
        requests.append(messages)
        yield Delta(call_index=0, call_id="a", call_name="waits", call_arguments="{}")
        yield Delta(call_index=1, call_id="b", call_name="waits", call_arguments="{}")

    turn = Turn(store, Writes(store), chat, user, store.default_agent(), "m",
                tools=[Tool("waits", "Waits until stopped", {"type": "object"}, waits)])

    async def main():
        task = asyncio.create_task(turn.run(stream))
        await started.wait()
        assert not turn.idle.is_set(), "a tool is running"
        await turn.halt(grace=30)
        assert heard == ["abort"] and turn.idle.is_set(), "the tool heard the stop and ended itself"
        try:
            await task
        except Stopped:
            return "stopped"

    assert asyncio.run(main()) == "stopped"
    assert len(requests) == 1, "no model step after the stop"
    assert heard == ["abort"], "the step's second call was not made"
    turn.stopped()
    calls = [it for it in store.items(chat) if it.kind == "call"]
    assert [(c.state, c.done) for c in calls] == [("failed", True), ("failed", True)]
    assert calls[0].output == STOPPED_SENT, "it was sent to its tool: it may have run"
    assert calls[1].output == STOPPED, "never started"
