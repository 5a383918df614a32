"""Steering a run: a message sent "now" reaches the model at the run's next step boundary; a
queued one waits for the run to end. Both are rows, so both survive a restart."""
import json

import pytest

from app.tables import asked, item
from app.agent import Delta
from app.run.turn import Turn
from app.run.writes import Writes
from tests.conftest import ENGINES, ask, csrf, idle, new_chat, on_both_engines, rows, soup, wait_for
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import text, tool_call


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test here on SQLite and on PostgreSQL (DATABASE_URL)."""
    return on_both_engines(request, env, monkeypatch)

SLOW = "127_0_0_1_slow"  # the fake MCP server's `slow(seconds)`, as the plugin offers it


def test_sent_now_during_a_tool_call_reaches_the_very_next_request_and_queued_waits(make_client, fake, data):
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        agent = soup(client.get("/agents")).select_one(".agent-list a")["href"]
        client.post(agent + "/plugins", data={"_csrf_token": csrf(client, agent), "address": mcp.url})
        fake.script([text("Let me wait."), tool_call(SLOW, {"seconds": 1.5})], "Waited, and noted the otters.",
                    "Beavers build dams.")
        chat = new_chat(client)
        assert ask(client, chat, "Wait a moment").status_code == 303
        wait_for(lambda: rows(data, "SELECT 1 FROM items WHERE kind = 'call' AND state = 'running'"))
        page = soup(client.get(chat))
        assert page.select_one("#composer button.now:not([hidden])") is not None, "offered while a run goes"
        assert ask(client, chat, "Also: otters", when="now").status_code == 303
        assert ask(client, chat, "Later: beavers", when="queue").status_code == 303
        badges = [b.text for b in soup(client.get(chat)).select("article.user .badge")]
        assert badges == ["sent now: read at the next step", "queued"]
        page = idle(client, chat)
        second = fake.streamed[1]["messages"]
        assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
        assert second[-2]["content"] == "waited 1.5 s" and second[-1]["content"] == "Also: otters", \
            "after the running call finished, before the next step"
        assert "beavers" not in json.dumps(second), "the queued message waits for the run"
        third = fake.streamed[2]["messages"]
        assert [(m["role"], m["content"]) for m in third[1:] if m["role"] == "user"] == [
            ("user", "Wait a moment"), ("user", "Also: otters"), ("user", "Later: beavers")]
        assert third[1:len(second)] == second[1:], "the history sends the steering message where the model saw it"
        # The page: the message sent now stands in the answer where the model read it.
        kinds = [("steer" if "steer" in a["class"] else a["class"][1],
                  a.select_one(".body").get_text(strip=True) if a.select_one(".body") else "")
                 for a in page.select("#items > article")]
        assert [k for k, _ in kinds] == ["user", "text", "call", "steer", "text", "user", "text"]
        assert kinds[3][1] == "Also: otters" and kinds[5][1] == "Later: beavers"
        assert "during the answer" in page.select_one("article.steer .who").text
        assert page.select(".badge") == []
        assert len(fake.streamed) == 3


def test_sent_now_with_nothing_running_is_just_a_message(client, fake, data):
    fake.script("Hello.")
    chat = new_chat(client)
    assert ask(client, chat, "Hi", when="now").status_code == 303
    idle(client, chat)
    assert rows(data, "SELECT steer, done FROM items WHERE kind = 'user'") == [{"steer": 0, "done": 1}]


@pytest.mark.parametrize("when", ["later", "NOW ", "1", "x" * 30])
def test_a_bad_when_is_a_clear_400_and_writes_nothing(client, data, when):
    chat = new_chat(client)
    r = ask(client, chat, "Hi", ok=False, when=when)
    assert r.status_code in (400, 413) and ("queue or now" in r.text or "too long" in r.text)
    assert rows(data, "SELECT id FROM items") == []


def test_sent_now_survives_a_restart_and_is_read_at_the_first_step_boundary(store):
    """The rows of a run cut off by a restart during a tool call, with a message sent now
    meanwhile: the resumed run finishes the call and gives the model the message next."""
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Look it up")
    store.add(item("text", chat, "Looking.", turn=user.id, done=True))
    call = store.add(item("call", chat, turn=user.id, name="lookup", input="{}", state="running"))
    steer = store.add(asked(chat, "Only Norway, please", steer=True))
    from app.tools import Result, Tool

    async def lookup(args, ctx):
        return Result("found it")

    requests = []

    async def stream(messages, tools):
        requests.append(messages)
        yield Delta(text="Norway only: found it.")

    turn = Turn(store, Writes(store), chat, user, store.default_agent(), "m",
                tools=[Tool("lookup", "", {"type": "object"}, lookup, idempotent=True)])
    import asyncio
    asyncio.run(turn.run(stream))
    assert len(requests) == 1
    assert [(m.role, m.content) for m in requests[0][1:]] == [
        ("user", "Look it up"), ("assistant", "Looking."), ("tool", "found it"), ("user", "Only Norway, please")]
    read = store.item(steer.id)
    assert read.done and read.turn == user.id and read.read_after == call.id


def test_a_message_read_after_the_final_step_is_answered_after_a_restart(store):
    """The model had finished when it read the message; the process died before the next
    step. The resumed turn is not finished: the model answers the message."""
    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Name a river")
    steer = store.add(asked(chat, "In Scotland", steer=True))  # sent while the answer streamed
    final = store.add(item("text", chat, "The Danube.", turn=user.id, done=True))
    store.read_steers([steer.id], user.id)
    assert store.item(steer.id).read_after == final.id
    requests = []

    async def stream(messages, tools):
        requests.append(messages)
        yield Delta(text="The Tay.")

    import asyncio
    asyncio.run(Turn(store, Writes(store), chat, user, store.default_agent(), "m").run(stream))
    assert [m.content for m in requests[0][1:]] == ["Name a river", "The Danube.", "In Scotland"]


def test_again_after_steering_redoes_the_turn_without_the_old_versions_message(make_client, fake, data):
    with FakeMCPServer() as mcp, make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        agent = soup(client.get("/agents")).select_one(".agent-list a")["href"]
        client.post(agent + "/plugins", data={"_csrf_token": csrf(client, agent), "address": mcp.url})
        fake.script([tool_call(SLOW, {"seconds": 1.0})], "Done, with otters.", "A fresh answer.")
        chat = new_chat(client)
        ask(client, chat, "Wait a moment")
        wait_for(lambda: rows(data, "SELECT 1 FROM items WHERE kind = 'call' AND state = 'running'"))
        ask(client, chat, "Also: otters", when="now")
        idle(client, chat)
        r = client.post(chat + "/retry", data={"_csrf_token": csrf(client)}, follow_redirects=False)
        assert r.status_code == 303
        page = idle(client, chat)
        assert [m["content"] for m in fake.streamed[2]["messages"][1:]] == ["Wait a moment"], \
            "again answers the turn's own message; what was sent into the old answer went with it"
        assert page.select_one("article.steer") is None, "it belongs to the earlier version, not shown now"
        back = page.select_one('.answer-actions button[aria-label="Previous version"]')["formaction"]
        client.post(back, data={"_csrf_token": csrf(client, chat)})
        assert soup(client.get(chat)).select_one("article.steer") is not None, "there with its version"
        page = soup(client.get(chat + "?x"))
        client.post(page.select_one('.answer-actions button[aria-label="Next version"]')["formaction"],
                    data={"_csrf_token": csrf(client, chat)})
        page = soup(client.get(chat))
        assert page.select("article.text")[-1].get_text(strip=True) == "A fresh answer."
