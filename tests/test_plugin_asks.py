"""A plugin's requests to the person, against an MCP server of ours that sends any schema and
any sampling request (tests/fakes/asking_server.py): forms Tabletalk cannot show, sampling it
refuses, a Stop and a restart while a request waits, and the call's silence limit."""
from __future__ import annotations

import json
import signal
import time

import httpx
import pytest

from app.plugins import asks as mcp_asks
from app.run.turn import MAY_HAVE_RUN
from tests.conftest import Served, csrf, idle, soup, start_chat, wait_for
from tests.fakes.asking_server import AskingMCPServer
from tests.fakes.openai_server import text, tool_call
from tests.test_agents_tools import agent_url

NAME = {"type": "object", "properties": {"name": {"type": "string", "title": "Your name"}}, "required": ["name"]}


@pytest.fixture
def server():
    with AskingMCPServer() as s:
        yield s


def plugged(client, server) -> None:
    url = agent_url(client)
    client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": server.url})


@pytest.fixture
def with_plugin(make_client, server):
    with make_client(CHAT_PRIVATE_PLUGINS="1", TABLETALK_PLUGIN_TIMEOUT="1") as client:
        plugged(client, server)
        yield client


def waiting(get, chat, kind="ask"):
    def shown():
        it = soup(get(chat)).select_one(f"article.{kind}")
        return it is not None and it.select_one(".state").text.startswith("waiting") and it
    return wait_for(shown, timeout=20)


def finished(get, chat):
    return wait_for(lambda: (p := soup(get(chat))).select_one('#status[data-running="0"]') and p, timeout=20)


@pytest.mark.parametrize("schema,why", [
    ({"type": "object", "properties": {"address": {"type": "object", "properties": {}}}},
     "the field 'address' is of a kind a form cannot ask for (object)"),
    ({"type": "object", "properties": {"when": {"type": "string", "format": "regex"}}},
     "the field 'when' asks for the format 'regex', which is not one MCP allows"),
    ({"type": "object", "properties": {}}, "it asks for no fields"),
    ({"type": "object", "properties": {"x": {"type": "string"}}, "required": ["y"]},
     "it requires a field it does not describe (y)"),
])
def test_a_form_tabletalk_cannot_show_is_refused_in_words(with_plugin, fake, server, schema, why):
    fake.script([tool_call("127_0_0_1_question", {"schema": json.dumps(schema)})], "It could not ask.")
    chat = start_chat(with_plugin, "ask me")
    page = finished(with_plugin.get, chat)
    said = f"127_0_0_1 asked for information in a form Tabletalk cannot show: {why}."
    item = page.select_one("article.ask")
    assert item.select_one(".state").text == "could not be shown" and item.select_one(".note").text == said
    assert item.select_one("input, select, button") is None
    assert page.select_one("article.call pre.output").text == f"refused: {said}", "the server was told why"
    assert server.declined == [said] and server.results == []


@pytest.mark.parametrize("extra,why", [
    ({"includeContext": "thisServer"}, "it asks for the conversation to be included, and Tabletalk does not "
                                       "share a conversation with its plugins"),
    ({"messages": [{"role": "user", "content": {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}}]},
     "it holds image content, and Tabletalk sends the model only text here"),
])
def test_sampling_tabletalk_cannot_answer_honestly_is_refused(with_plugin, fake, server, extra, why):
    request = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 20, **extra}
    fake.script([tool_call("127_0_0_1_words", {"request": json.dumps(request)})], "Refused.")
    chat = start_chat(with_plugin, "sample")
    page = finished(with_plugin.get, chat)
    said = f"127_0_0_1’s request for the model’s words was refused: {why}."
    assert page.select_one("article.sample .note").text == said
    assert page.select_one("article.call pre.output").text == f"refused: {said}"
    assert server.declined == [said] and server.results == []
    assert len(fake.streamed) == 2 and not [r for r in fake.requests if not r.get("stream")
                                            and r["messages"][-1]["content"] == "hi"], "the model was not asked"


def test_sampling_respects_max_tokens_and_the_system_prompt(with_plugin, fake, server):
    fake.plain_default = lambda body: [text("Short." if body.get("max_tokens") == 7 else "A fitting title")]
    request = {"messages": [{"role": "user", "content": {"type": "text", "text": "one word"}}],
               "systemPrompt": "Answer in one word.", "maxTokens": 7}
    fake.script([tool_call("127_0_0_1_words", {"request": json.dumps(request)})], "Got it.")
    chat = start_chat(with_plugin, "sample")
    item = waiting(with_plugin.get, chat, "sample")
    with_plugin.post(f"{chat}/asks/{item['id'][1:]}", data={"_csrf_token": csrf(with_plugin, chat), "action": "approve"})
    finished(with_plugin.get, chat)
    sent = [r for r in fake.requests if not r.get("stream") and r.get("max_tokens") == 7]
    assert sent and sent[0]["messages"] == [{"role": "system", "content": "Answer in one word."},
                                            {"role": "user", "content": "one word"}]
    assert server.results[0]["content"] == {"type": "text", "text": "Short."}


def test_a_wait_for_the_person_does_not_count_as_the_servers_silence(with_plugin, fake, server):
    """TABLETALK_PLUGIN_TIMEOUT is 1 s here: the person takes longer, and the call still ends well."""
    fake.script([tool_call("127_0_0_1_question", {"schema": json.dumps(NAME)})], "Thanks.")
    chat = start_chat(with_plugin, "ask me")
    item = waiting(with_plugin.get, chat)
    time.sleep(2.5)
    with_plugin.post(f"{chat}/asks/{item['id'][1:]}", data={"_csrf_token": csrf(with_plugin, chat),
                                                            "action": "accept", f"a{item['id'][1:]}-f0": "Ada"})
    page = finished(with_plugin.get, chat)
    assert page.select_one("article.call .state").text == "done"
    assert server.results == [{"action": "accept", "content": {"name": "Ada"}}]


def test_stop_while_a_question_waits(with_plugin, fake, server):
    fake.script([tool_call("127_0_0_1_question", {"schema": json.dumps(NAME)})], "never said")
    chat = start_chat(with_plugin, "ask me")
    item = waiting(with_plugin.get, chat)
    with_plugin.post(chat + "/stop", data={"_csrf_token": csrf(with_plugin, chat)})
    page = finished(with_plugin.get, chat)
    ask = page.select_one("article.ask")
    assert ask.select_one(".state").text == "not answered"
    assert ask.select_one(".note").text == "Stopped by the person before it was answered."
    assert ask.select_one("input, button") is None
    assert page.select_one("article.call .state").text == "failed"
    r = with_plugin.post(f"{chat}/asks/{item['id'][1:]}", data={"_csrf_token": csrf(with_plugin, chat),
                                                                "action": "accept"})
    assert r.status_code == 409


@pytest.mark.process
def test_a_restart_while_a_question_waits_says_the_question_was_lost(data, env, fake, server):
    served = Served(data, {**env, "CHAT_PRIVATE_PLUGINS": "1"}).start()
    try:
        with served.client() as c:
            plugged(c, server)
            fake.script([tool_call("127_0_0_1_question", {"schema": json.dumps(NAME)})], "The question was lost.")
            r = c.post("/c", data={"_csrf_token": csrf(c), "text": "ask me"})
            assert r.status_code == 303, r.text
            chat = r.headers["location"]
            item = waiting(c.get, chat)
            served.signal(signal.SIGKILL)
            served.proc.wait()
            served.start()
            page = finished(c.get, chat)
        ask = page.select_one(f"article#{item['id']}")
        assert ask.select_one(".state").text == "not answered"
        assert ask.select_one(".note").text == mcp_asks.ENDED["lost"]
        assert page.select_one("article.call pre.output").text == MAY_HAVE_RUN
        assert [m for m in fake.streamed[-1]["messages"] if m["role"] == "tool"][-1]["content"] == MAY_HAVE_RUN
    finally:
        served.stop()


def test_what_a_plugin_writes_into_its_question_is_text_never_markup(with_plugin, fake, server):
    hostile = "<img src=x onerror=alert(1)><script>alert(2)</script>"
    schema = {"type": "object", "properties": {"x": {"type": "string", "title": hostile, "description": hostile,
                                                     "default": '"><script>alert(3)</script>'},
                                               "y": {"type": "string", "enum": [hostile]}}}
    fake.script([tool_call("127_0_0_1_question", {"schema": json.dumps(schema), "message": hostile})], "Done.")
    chat = start_chat(with_plugin, "ask me")
    item = waiting(with_plugin.get, chat)
    assert item.select("script, img") == []
    assert item.select_one(".ask-message").text == hostile
    assert item.select_one("label").text == hostile and item.select_one("input")["value"] == '"><script>alert(3)</script>'
    assert item.select_one("option:not([value=''])")["value"] == hostile
