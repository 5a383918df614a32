"""The composer's model picker while a listed server is down: it says so, offers Refresh, and
shows the server's models by itself once it comes up (the runner lists again while one is
down; the picker asks for itself)."""
from __future__ import annotations

from tests.conftest import app_client, csrf, free_port, new_chat, soup, wait_for
from tests.fakes.openai_server import FakeModelServer, text


def test_a_server_that_comes_up_after_tabletalk_shows_in_the_picker_by_itself(monkeypatch, data):
    port = free_port()
    monkeypatch.setenv("TABLETALK_DATA", str(data))
    monkeypatch.setenv("AI_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("AI_MODEL", "")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)  # no Ollama at its default address: not listed
    with app_client(data) as client:
        chat = new_chat(client)
        page = soup(client.get(chat))
        picker = page.select_one("#composer #model-picker")
        assert picker.select_one("option[disabled]").text.startswith("AI_URL")
        refresh = picker.select_one("button.refresh-models")
        assert refresh["formaction"] == "/models/refresh" and refresh["value"] == chat
        poll = picker.select_one("[hx-get^='/models/picker']")
        assert poll["hx-trigger"] == "every 5s"
        with FakeModelServer(models={"late-model": 4096}, port=port) as late:
            late.plain_default = [text("Title")]
            # no request from the page: the runner lists again while a server is down
            wait_for(lambda: "late-model" in client.get("/models/picker").text, timeout=30, every=0.5)
            fresh = soup(client.get(f"/models/picker?model=late-model&next={chat}"))
            assert fresh.select_one("option[selected]")["value"] == "late-model"
            assert fresh.select_one("button.refresh-models") is None and fresh.select_one("[hx-trigger]") is None


def test_refresh_answers_a_script_with_the_picker_and_a_plain_form_with_the_page(client, fake):
    chat = new_chat(client)
    token = csrf(client, chat)
    plain = client.post("/models/refresh", data={"_csrf_token": token, "next": chat}, follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"] == chat
    scripted = client.post("/models/refresh?picker=1", data={"_csrf_token": token, "next": chat, "model": "other-model"},
                           headers={"HX-Request": "true"})
    assert scripted.status_code == 200
    assert soup(scripted).select_one("#model-picker option[selected]")["value"] == "other-model"


def test_in_the_browser_refresh_replaces_the_picker_and_sends_no_message(browser, data, env, monkeypatch):
    from tests.conftest import Served

    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    served = Served(data, {**env, "AI_URL": f"http://127.0.0.1:{free_port()}/v1"}).start()
    try:
        chat = served.empty_chat()
        with served.watched_page(browser) as page:
            page.goto(chat)
            page.fill("#text", "typed, not sent")
            with page.expect_response(lambda r: "/models/refresh" in r.url) as refreshed:
                page.click("button.refresh-models")
            assert refreshed.value.status == 200
            page.wait_for_selector("#model-picker button.refresh-models")  # still down: still offered
            assert page.input_value("#text") == "typed, not sent", "the page stayed, with what was typed"
            assert page.locator("#items .item").count() == 0, "no message was sent"
    finally:
        served.stop()


# --- what the picker says unpicked, and which models the Thinking picker is offered for (issue 36)


def test_unpicked_the_picker_names_the_model_that_answers(client, fake, data):
    from tests.conftest import rows

    chat = new_chat(client)
    first = soup(client.get(chat)).select_one("#composer select[name=model] option")
    assert first["value"] == "" and first.text == "fake-model (default)"
    agent = rows(data, "SELECT id FROM assistants")[0]["id"]
    url = f"/agents/{agent}"
    client.post(url, data={"_csrf_token": csrf(client, url), "name": "Assistant", "instructions": "",
                           "model": "other-model"})
    assert soup(client.get(chat)).select_one("#composer select[name=model] option").text == "other-model (the agent’s)"
    assert soup(client.get("/")).select_one("#composer select[name=model] option").text == "other-model (the agent’s)"
    refreshed = soup(client.get(f"/models/picker?model=&next={chat}&agent={agent}"))
    assert refreshed.select_one("option").text == "other-model (the agent’s)"


def test_the_thinking_picker_is_offered_for_a_model_listed_or_seen_thinking(client, fake, data):
    from tests.conftest import idle, rows, start_chat
    from tests.fakes.openai_server import reasoning

    def composer(chat):
        page = soup(client.get(chat))
        return page.select_one("#composer")

    fake.thinkers.add("other-model")  # its listing says it reasons
    client.post("/models/refresh", data={"_csrf_token": csrf(client)})
    chat = new_chat(client)
    form = composer(chat)
    assert form.select_one("select[name=thinking]").has_attr("hidden")  # fake-model: not known to think
    assert not form.select_one(".no-thinking").has_attr("hidden")
    assert form.select_one('option[value="other-model"]').has_attr("data-thinks")
    assert not form.select_one('option[value="fake-model"]').has_attr("data-thinks")
    # an answer of fake-model came with reasoning: from then on it is one that thinks
    fake.script([reasoning("Weighing it."), text("Weighed.")])
    chat = start_chat(client, "Think it over")
    idle(client, chat)
    assert rows(data, "SELECT model FROM model_limits WHERE thought = 1") == [{"model": "fake-model"}]
    form = composer(chat)
    assert not form.select_one("select[name=thinking]").has_attr("hidden")
    assert form.select_one(".no-thinking").has_attr("hidden")
    assert form.select_one('option[value="fake-model"]').has_attr("data-thinks")
    assert form.select_one('option[value=""]').has_attr("data-thinks"), "the default model thinks"
