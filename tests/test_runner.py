"""The runner against the fake model server: faults, stop, again, queue, titles, context."""
import time

import pytest

from tests.conftest import ENGINES, ask, csrf, free_port, idle, new_chat, on_both_engines, rows, soup, wait_for
from tests.fakes.openai_server import delay, drop, error, malformed, rate, stall, text, usage


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test of the runner on SQLite and on PostgreSQL (DATABASE_URL)."""
    return on_both_engines(request, env, monkeypatch)


def then_it_goes_on(client, chat, fake):
    fake.script("Back to normal.")
    ask(client, chat, "Still there?")
    page = idle(client, chat)
    assert page.select("article.text")[-1].get_text(strip=True) == "Back to normal."


# --- model faults: each an error in plain words; what was written stays; it goes on ------------


@pytest.mark.parametrize("script,says", [
    ([error(401)], "refused the key (401)"),
    ([error(404, "The model 'x' does not exist", code="model_not_found")], "does not know the model"),
    ([error(400, "context too long")], "turned the request down (400)"),
    ([text("Half an ans"), malformed()], "could not be read"),
    ([text("Half an ans"), drop()], "cut before the answer was finished"),
    ([text("Half an ans"), error(500, "overloaded")], "failed part way: “overloaded”"),
])
def test_a_model_fault_ends_in_an_error_item_and_keeps_what_was_written(client, fake, data, script, says):
    fake.script(script)
    chat = new_chat(client)
    ask(client, chat, "Hello")
    page = idle(client, chat)
    err = page.select_one("article.error .error")
    assert says in err.text and "Traceback" not in err.text
    if any(isinstance(getattr(s, "pieces", None), tuple) for s in script):
        assert page.select_one("article.text").get_text(strip=True) == "Half an ans"
    assert all(r["done"] for r in rows(data))
    then_it_goes_on(client, chat, fake)


def test_connection_refused(make_client):
    with make_client(AI_URL=f"http://127.0.0.1:{free_port()}/v1", AI_MODEL="fake-model") as client:
        chat = new_chat(client)
        ask(client, chat, "Anyone?")
        err = idle(client, chat).select_one("article.error .error")
        assert "Could not reach the model server" in err.text


def test_a_stall_is_given_up_after_the_timeout(make_client, fake):
    fake.script([stall(5), text("too late")])
    with make_client(TABLETALK_MODEL_TIMEOUT="0.5") as client:
        chat = new_chat(client)
        ask(client, chat, "Hello")
        err = idle(client, chat).select_one("article.error .error")
        assert "stopped sending anything" in err.text
        then_it_goes_on(client, chat, fake)


def test_busy_and_failing_servers_are_retried_with_backoff_and_shown(client, fake, data):
    fake.script(
        [error(429, headers={"retry-after-ms": "50"})],
        [error(503, headers={"retry-after-ms": "50"})],
        "Third time lucky.",
    )
    chat = new_chat(client)
    ask(client, chat, "Hello")
    page = idle(client, chat)
    assert page.select_one("article.text").get_text(strip=True) == "Third time lucky."
    notice = page.select_one("article.error.notice .error").text
    assert "failed (503)" in notice and "try 3 of 4" in notice
    assert len(fake.streamed) == 3


def test_retries_give_up_after_four_tries(client, fake):
    fake.script(*[[error(500, headers={"retry-after-ms": "20"})]] * 4)
    chat = new_chat(client)
    ask(client, chat, "Hello")
    page = idle(client, chat)
    final = [e.text for e in page.select("article.error:not(.notice) .error")]
    assert len(final) == 1 and "Gave up after 4 tries" in final[0]


# --- stop ---------------------------------------------------------------------------------------


def test_stop_ends_the_run_within_a_second_and_keeps_what_was_written(client, fake, data):
    fake.script([rate(20), text("word " * 400)])
    chat = new_chat(client)
    ask(client, chat, "Talk for a long time")
    wait_for(lambda: any(r["kind"] == "text" and len(r["text"]) > 20 for r in rows(data)))
    r = client.post(chat + "/stop", data={"_csrf_token": csrf(client)}, headers={"HX-Request": "true"})
    assert r.status_code == 204
    t = time.monotonic()
    idle(client, chat)
    assert time.monotonic() - t < 1.0
    written = [r for r in rows(data) if r["kind"] == "text"][0]["text"]
    time.sleep(0.3)
    assert [r for r in rows(data) if r["kind"] == "text"][0]["text"] == written, "nothing is written after stop"
    assert 20 < len(written) < len("word " * 400)
    assert all(r["done"] for r in rows(data))
    then_it_goes_on(client, chat, fake)


def test_stop_with_nothing_running_writes_nothing(client, data):
    chat = new_chat(client)
    client.post(chat + "/stop", data={"_csrf_token": csrf(client)})
    assert rows(data) == []


# --- again --------------------------------------------------------------------------------------


def test_again_makes_a_new_version_from_another_model_and_keeps_the_old(client, fake, data):
    fake.script("First version.", "Second version.")
    chat = new_chat(client)
    ask(client, chat, "Tell me")
    idle(client, chat)
    r = client.post(chat + "/retry", data={"_csrf_token": csrf(client), "model": "other-model"},
                    follow_redirects=False)
    assert r.status_code == 303
    page = wait_for(lambda: (p := idle(client, chat)).select_one(".answer-actions .pager") and p)
    assert [a.get_text(strip=True) for a in page.select("article.text")] == ["Second version."], \
        "only the current version is on the page"
    assert page.select_one(".answer-actions .pager .count").get_text() == "2 / 2"
    assert page.select_one(".answer-actions .meta").get_text().startswith("other-model")
    request = fake.streamed[-1]
    assert request["model"] == "other-model"
    assert request["messages"][-1] == {"role": "user", "content": "Tell me"}, "the old answer is not sent"
    # the pager goes back to the first version (a plain form: the #decide form's token)
    back = page.select_one('.answer-actions button[aria-label="Previous version"]')["formaction"]
    assert client.post(back, data={"_csrf_token": csrf(client, chat)}, follow_redirects=False).status_code == 303
    page = soup(client.get(chat))
    assert [a.get_text(strip=True) for a in page.select("article.text")] == ["First version."]
    assert page.select_one(".answer-actions .pager .count").get_text() == "1 / 2"
    # the next message's history holds the version chosen
    fake.script("ok")
    ask(client, chat, "And?")
    idle(client, chat)
    contents = [m["content"] for m in fake.streamed[-1]["messages"] if m["role"] == "assistant"]
    assert contents == ["First version."]


def test_again_with_nothing_to_redo_is_refused(client):
    chat = new_chat(client)
    r = client.post(chat + "/retry", data={"_csrf_token": csrf(client)})
    assert r.status_code == 400 and "no answer" in r.text
    r = client.post(chat + "/retry", data={"_csrf_token": csrf(client), "model": "ghost"})
    assert r.status_code == 400


# --- queue --------------------------------------------------------------------------------------


def test_messages_sent_during_a_run_are_queued_and_answered_in_order(client, fake, data):
    fake.script([delay(0.8), text("Answer one.")], "Answer two.", "Answer three.")
    chat = new_chat(client)
    ask(client, chat, "one")
    wait_for(lambda: len(fake.requests) >= 1)
    ask(client, chat, "two")
    ask(client, chat, "three")
    page = soup(client.get(chat))
    badges = [a.select_one(".badge") is not None for a in page.select("article.user")]
    assert badges == [False, True, True]
    page = idle(client, chat)
    texts = [a.select_one(".body").get_text(strip=True) for a in page.select("#items > article")]
    assert texts[0].endswith("one") and texts[1] == "Answer one."
    assert texts[2].endswith("two") and texts[3] == "Answer two."
    assert texts[5] == "Answer three."
    assert page.select(".badge") == []
    second = fake.streamed[1]["messages"]
    assert [m["content"] for m in second[1:]] == ["one", "Answer one.", "two"]


# --- title and context --------------------------------------------------------------------------


def test_after_the_first_answer_a_short_request_names_the_conversation(client, fake):
    fake.plain_default = [text('"Bread Without Yeast."')]
    fake.script("Use baking soda.")
    chat = new_chat(client)
    ask(client, chat, "how do i make bread without yeast")
    wait_for(lambda: soup(client.get(chat)).select_one("#title").text == "Bread Without Yeast")
    plain = [r for r in fake.requests if not r.get("stream")]
    assert len(plain) == 1 and "how do i make bread" in plain[0]["messages"][-1]["content"]
    assert soup(client.get("/")).select_one("#conversations a").text == "Bread Without Yeast"


def test_when_naming_fails_the_first_words_stay(client, fake):
    fake.plain_default = [error(500)]
    fake.script("Sure.")
    chat = new_chat(client)
    ask(client, chat, "first words of this chat")
    idle(client, chat)
    time.sleep(0.3)
    assert soup(client.get(chat)).select_one("#title").text == "first words of this chat"


def test_the_context_meter_shows_what_the_server_reported(client, fake, data):
    fake.script([text("Counted."), usage(1200, 34, cached_tokens=1000)])
    chat = new_chat(client)
    ask(client, chat, "count")
    page = wait_for(lambda: (p := idle(client, chat)).select_one("#status meter") and p)
    meter = page.select_one("#status meter")
    assert meter["value"] == "1234" and meter["max"] == "8192"
    assert "1,234 of 8,192 tokens" in page.select_one("#status .context").text
