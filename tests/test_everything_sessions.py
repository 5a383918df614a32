"""The MCP session a conversation has with a plugin is kept in a row, so another worker or a
restarted one goes on in it (server-everything over Streamable HTTP; its logging toggle lives
in the session: a call in the same session stops what the last one started)."""
from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from app.plugins.sessions import Sessions
from app.plugins.tools import PluginRun, for_run, list_tools
from app.tables import Assistant, plugin
from app.tools import ToolContext
from tests.fakes.everything import Everything

pytestmark = pytest.mark.process  # tests/marks.py


@pytest.fixture(scope="module")
def everything():
    with Everything("streamableHttp") as server:
        yield server


def setup(store, server):
    agent = store.add_agent(Assistant(name="a", instructions=""))
    p = store.add_plugin(plugin(agent.id, server.url, name="ev"))
    chat = store.new_conversation(agent.id)
    return p, chat.id


async def toggle_of(p):
    listing = await list_tools(p, private_ok=True)
    assert listing.ok, listing.status
    return {t.name: t for t in listing.tools}["ev_toggle-simulated-logging"]


async def toggled(toggle, sessions: Sessions, store, chat: int) -> str:
    """The toggle called in conversation `chat` by a run whose plugin calls are made in
    `sessions` (a worker's) and keep their rows in `store`."""
    [given] = for_run([toggle], PluginRun(sessions, store))
    return (await given.run({}, ToolContext(chat=chat, agent=None))).text


def session_of(text: str) -> str:
    return re.search(r"session (\S+)", text)[1]


async def test_another_worker_goes_on_in_the_same_session(store, everything):
    p, chat = setup(store, everything)
    toggle = await toggle_of(p)
    one, two = Sessions(), Sessions()  # two workers (or one, before and after a restart)
    try:
        first = await toggled(toggle, one, store, chat)
        assert first.startswith("Started simulated")
        await one.close_all()  # the worker stopped: the session is let go, not ended
        second = await toggled(toggle, two, store, chat)
        assert second.startswith("Stopped simulated"), second
        assert session_of(second) == session_of(first)
        assert (one.opened, two.opened, two.resumed) == (1, 0, 1), "no second handshake"
    finally:
        await one.close_all()
        await two.close_all()


async def test_a_session_the_server_forgot_is_opened_again_transparently(store, everything):
    p, chat = setup(store, everything)
    toggle = await toggle_of(p)
    one, two = Sessions(), Sessions()
    try:
        first = await toggled(toggle, one, store, chat)
        await one.close_all()
        await asyncio.to_thread(everything.restart)  # the server forgot every session
        again = await toggled(toggle, two, store, chat)
        assert again.startswith("Started simulated"), again
        assert session_of(again) != session_of(first)
        assert (two.resumed, two.opened) == (1, 1), "tried the kept one, then opened a new one"
        kept = store.mcp_session(chat, p.id, next(iter(two.open))[2])
        assert kept is not None and kept[0] == session_of(again), "the new session is the one kept"
    finally:
        await one.close_all()
        await two.close_all()


async def test_a_deleted_conversation_ends_its_session(store, everything):
    p, chat = setup(store, everything)
    toggle = await toggle_of(p)
    sessions = Sessions()
    try:
        first = await toggled(toggle, sessions, store, chat)
        key = next(iter(sessions.open))
        assert store.mcp_session(chat, p.id, key[2]) is not None

        def asked() -> int:  # a request in that session, as another client would make it
            return httpx.post(everything.url, headers={"mcp-session-id": session_of(first),
                                                       "accept": "application/json, text/event-stream",
                                                       "mcp-protocol-version": "2025-11-25"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code

        assert asked() == 200
        store.delete_conversation(chat)
        await sessions.sweep(store.existing)
        assert not sessions.open
        assert store.mcp_session(chat, p.id, key[2]) is None
        assert asked() in (400, 404), "the server was sent the DELETE: it knows the session no more"
    finally:
        await sessions.close_all()


def test_a_restarted_tabletalk_goes_on_in_the_servers_session(data, env, fake):
    """`tabletalk serve` stopped and started again between two messages: the second call is
    made in the session the first one opened (the toggle stops what the first started)."""
    import re as regex

    from tests.conftest import Served, soup, start_chat, wait_for
    from tests.fakes.openai_server import tool_call

    def finished(client, chat: str, calls: int):
        return wait_for(lambda: len((p := soup(client.get(chat))).select("article.call pre.output")) == calls and
                        p.select_one('#status[data-running="0"]') and p, timeout=30)

    with Everything("streamableHttp") as everything:
        settings = {**env, "CHAT_PRIVATE_PLUGINS": "1"}
        first = Served(data, settings).start()
        try:
            client = first.client(timeout=10, follow_redirects=True)
            token = regex.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
            agent = soup(client.get("/agents")).select_one(".agent-list a")["href"]
            client.post(agent + "/plugins", data={"_csrf_token": token, "name": "ev", "address": everything.url})
            fake.script([tool_call("ev_toggle-simulated-logging", {})], "On.")
            chat = start_chat(client, "logging on", token=token)
            on = finished(client, chat, 1).select("article.call pre.output")[0].text
            assert on.startswith("Started simulated")
        finally:
            first.stop()
        second = Served(data, settings).start()
        try:
            client = second.client(timeout=10, follow_redirects=True)
            token = regex.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
            fake.script([tool_call("ev_toggle-simulated-logging", {})], "Off.")
            client.post(chat + "/ask", data={"_csrf_token": token, "text": "and off", "when": "queue"})
            off = finished(client, chat, 2).select("article.call pre.output")[1].text
            assert off.startswith("Stopped simulated"), off
            assert session_of(off) == session_of(on)
        finally:
            second.stop()
