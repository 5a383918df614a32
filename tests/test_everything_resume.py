"""A restart of Tabletalk while server-everything's question waits for the person, over
Streamable HTTP: the server keeps its events, so the call is taken up again in the same
session (its stream read again from its first event, the call never sent twice), the question
still waits, and the answer given after the restart reaches the server and ends the call
with the server's text. Over SSE the question lived in the connection: it is lost."""
from __future__ import annotations

import signal
from contextlib import closing

import pytest

from app.plugins import asks as mcp_asks
from app.plugins.resume import LOST
from app.run.turn import MAY_HAVE_RUN
from tests.conftest import Served, csrf, soup, wait_for
from tests.fakes.everything import Everything
from tests.fakes.openai_server import tool_call
from tests.test_agents_tools import agent_url
from tests.test_everything_asks import ELICIT, call_output, names, waiting

pytestmark = pytest.mark.process  # tests/marks.py


def started(served, everything, fake):
    c = served.client()
    url = agent_url(c)
    c.post(url + "/plugins", data={"_csrf_token": csrf(c, url), "address": everything.url})
    fake.script([tool_call(ELICIT, {})], "Thanks, Ada.")
    r = c.post("/c", data={"_csrf_token": csrf(c), "text": "ask me things"})
    assert r.status_code == 303, r.text
    return c, r.headers["location"]


def killed_and_started(served) -> None:
    served.signal(signal.SIGKILL)
    served.proc.wait()
    served.start()


def test_the_question_survives_a_restart_and_the_answer_reaches_the_server(data, env, fake):
    with Everything("streamableHttp") as everything:
        served = Served(data, {**env, "CHAT_PRIVATE_PLUGINS": "1"}).start()
        try:
            c, chat = started(served, everything, fake)
            with closing(c):
                _, before = waiting(c, chat)
                killed_and_started(served)
                page, item = waiting(c, chat)
                assert item["id"] == before["id"], "the same item goes on waiting"
                assert len(page.select("article.ask")) == 1
                fields = names(item)
                r = c.post(f"{chat}/asks/{item['id'][1:]}", follow_redirects=False, data={
                    "_csrf_token": csrf(c, chat), "action": "accept", fields["String"]: "Ada Lovelace",
                    fields["Boolean"]: "on", fields["String with email format"]: "ada@example.org"})
                assert r.status_code == 303, soup(r).select(".field-error")
                output = call_output(c, chat)
                assert "✅ User provided the requested information!" in output, output
                assert "- Name: Ada Lovelace" in output and "- Email: ada@example.org" in output
                page = wait_for(lambda: (p := soup(c.get(chat))).select_one('#status[data-running="0"]') and p,
                                timeout=30)
                assert page.select_one("article.call .state").text == "done"
                assert page.select_one("article.ask .state").text == "answered"
                told = [m for m in fake.streamed[-1]["messages"] if m["role"] == "tool"][-1]["content"]
                assert "Name: Ada Lovelace" in told
                assert sum(1 for m in fake.streamed[-1]["messages"] if m["role"] == "tool") == 1
        finally:
            served.stop()


def test_over_sse_the_question_is_lost_with_its_connection(data, env, fake):
    with Everything("sse") as everything:
        served = Served(data, {**env, "CHAT_PRIVATE_PLUGINS": "1"}).start()
        try:
            c, chat = started(served, everything, fake)
            with closing(c):
                waiting(c, chat)
                killed_and_started(served)
                page = wait_for(lambda: (p := soup(c.get(chat))).select_one('#status[data-running="0"]') and p,
                                timeout=30)
            assert page.select_one("article.ask .note").text == mcp_asks.ENDED["lost"]
            assert page.select_one("article.call pre.output").text == MAY_HAVE_RUN
            assert LOST not in page.text
        finally:
            served.stop()
