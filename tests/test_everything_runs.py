"""Conversations that use server-everything (npm, the MCP reference server) through the app:
what a person sees on the page, and what the model is told."""
from __future__ import annotations

import pytest

from tests.conftest import ask, csrf, idle, soup, start_chat, wait_for
from tests.fakes.openai_server import text, tool_call

pytestmark = pytest.mark.process  # tests/marks.py



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
    assert call.select_one("pre.output").text == ("Stopped by the person after it was sent to its tool, "
                                                  "before a result came back: it may have run.")
    fake.script([text("Understood.")])
    ask(client, chat, "what happened?")
    idle(client, chat)
    told = [m for m in fake.streamed[-1]["messages"] if m["role"] == "tool"]
    assert told[-1]["content"] == ("Stopped by the person after it was sent to its tool, "
                                   "before a result came back: it may have run.")


def finished_call(client, chat):
    return wait_for(lambda: (c := calls(p := idle(client, chat))) and c[0].select_one(".state").text == "done" and p)


def test_an_image_from_a_tool_is_shown_kept_as_a_file_and_sent_to_the_model(with_plugin, fake):
    client = with_plugin
    fake.script([tool_call("127_0_0_1_get-tiny-image", {})], "That is the MCP logo.")
    chat = start_chat(client, "show me the logo")
    page = finished_call(client, chat)
    img = page.select_one("article.call p.file img")
    assert img is not None and img["src"].startswith("/files/")
    served = client.get(img["src"])
    assert served.headers["content-type"] == "image/png" and len(served.content) == 4033
    output = page.select_one("article.call pre.output").text
    assert "[image: image/png, 4,033 bytes, shown to the person and attached below]" in output
    sent = fake.streamed[1]["messages"]
    assert sent[-2]["role"] == "tool" and "Here's the image you requested" in sent[-2]["content"]
    image_url = [p for p in sent[-1]["content"] if p["type"] == "image_url"][0]["image_url"]["url"]
    assert sent[-1]["role"] == "user" and image_url.startswith("data:image/png;base64,iVBORw0KGgo")


@pytest.mark.parametrize("kind,page_says,model_is_told", [
    ("success", "Operation completed successfully", "for the person only"),  # audience: user
    ("debug", "4,033 bytes, shown to the person", "Debug: Cache hit ratio 0.95"),  # audience: assistant
    ("error", "Error: Operation failed", "Error: Operation failed"),          # both
])
def test_audience_annotations_are_respected(with_plugin, fake, kind, page_says, model_is_told):
    client = with_plugin
    fake.script([tool_call("127_0_0_1_get-annotated-message", {"messageType": kind, "includeImage": True})],
                "Noted.")
    chat = start_chat(client, "annotate")
    page = finished_call(client, chat)
    assert page_says in page.select_one("article.call pre.output").text
    assert page.select_one("article.call p.file img") is not None, "the image is for the person"
    sent = fake.streamed[1]["messages"]
    tool = [m for m in sent if m["role"] == "tool"][-1]["content"]
    assert model_is_told in tool
    assert not any(isinstance(m["content"], list) for m in sent), "the person's image is not sent"
    if kind == "success":
        assert "Operation completed" not in tool
    if kind == "debug":
        assert "Debug:" not in page.select_one("article.call pre.output").text


def test_deleting_the_conversation_closes_its_plugin_session(with_plugin, fake):
    client = with_plugin
    sessions = client.app.state.tabletalk.sessions  # the worker's
    fake.script([tool_call("127_0_0_1_toggle-simulated-logging", {})], "On.")
    chat = start_chat(client, "logging on")
    finished_call(client, chat)
    number = int(chat.rsplit("/", 1)[1])
    assert [s.chat for s in sessions.open.values()].count(number) == 1
    r = client.post(chat + "/delete", data={"_csrf_token": csrf(client)}, follow_redirects=False)
    assert r.status_code == 303
    wait_for(lambda: number not in {s.chat for s in sessions.open.values()}, timeout=10)
