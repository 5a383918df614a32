"""Conversations that use server-everything (npm, the MCP reference server) through the app:
what a person sees on the page, and what the model is told."""
from __future__ import annotations

import pytest

from tests.conftest import ask, csrf, idle, soup, start_chat, wait_for
from tests.fakes.everything import Everything
from tests.fakes.openai_server import text, tool_call
from tests.test_agents_tools import agent_url


@pytest.fixture(params=["streamableHttp", "sse"])
def everything(request):
    with Everything(request.param) as server:
        yield server


@pytest.fixture
def with_plugin(make_client, everything):
    with make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": everything.url})
        yield client


def calls(page) -> list:
    return page.select("article.call")


def test_the_servers_session_lasts_from_one_run_to_the_next(with_plugin, fake):
    client = with_plugin
    toggle = "127_0_0_1_toggle-simulated-logging"
    fake.script([tool_call(toggle, {})], "Logging is on.")
    chat = start_chat(client, "turn logging on")
    page = wait_for(lambda: len(calls(p := idle(client, chat))) == 1 and p)
    first = calls(page)[0].select_one("pre.output").text
    assert first.startswith("Started simulated")
    fake.script([tool_call(toggle, {})], "Logging is off.")
    ask(client, chat, "and off again")
    page = wait_for(lambda: len(calls(p := idle(client, chat))) == 2 and p)
    second = calls(page)[1].select_one("pre.output").text
    assert second.startswith("Stopped simulated"), second
    assert first.split("session ")[1].split()[0] == second.split("session ")[1].split()[0]


def test_stop_during_progress_says_it_was_stopped_by_the_person(with_plugin, fake):
    client = with_plugin
    fake.script([tool_call("127_0_0_1_trigger-long-running-operation", {"duration": 30, "steps": 30})],
                "never said")
    chat = start_chat(client, "take your time")
    wait_for(lambda: (c := soup(client.get(chat)).select_one("article.call pre.output")) and "/30" in c.text,
             timeout=15)
    r = client.post(chat + "/stop", data={"_csrf_token": csrf(client)}, headers={"HX-Request": "true"})
    assert r.status_code == 204
    call = calls(idle(client, chat))[0]
    assert call.select_one(".state").text == "failed"
    assert call.select_one("pre.output").text == "Stopped by the person before it finished."
    fake.script([text("Understood.")])
    ask(client, chat, "what happened?")
    idle(client, chat)
    told = [m for m in fake.streamed[-1]["messages"] if m["role"] == "tool"]
    assert told[-1]["content"] == "Stopped by the person before it finished."
