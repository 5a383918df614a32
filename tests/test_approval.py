"""Tools that wait for the person's approval, through the fake model server."""
import signal

import pytest

from app.store import db as dbm
from app.store import Store
from app.tables import asked
from tests.conftest import ENGINES, Served, csrf, database, on_both_engines, soup, start_chat, wait_for
from tests.fakes.openai_server import text, tool_call


@pytest.fixture(params=ENGINES)
def env(request, env, monkeypatch):
    """Each test here on SQLite and on PostgreSQL (DATABASE_URL)."""
    return on_both_engines(request, env, monkeypatch)

PLAN = "- [x] read the question\n- [ ] answer it"


def agent_waits_for(data, tools="update_plan"):
    db = dbm.connect(database(data))
    store = Store(db)
    store.update_agent(store.default_agent().id, approve=tools)
    db.conn.close()


def start_with_a_call(client, fake, data):
    agent_waits_for(data)
    fake.script([text("I'll make a plan."), tool_call("update_plan", {"plan": PLAN})], "Planned and done.")
    chat = start_chat(client, "Plan it")
    call = wait_for(lambda: soup(client.get(chat)).select_one("article.call:has(.state.approval)"))
    return chat, call


def test_a_call_waits_and_shows_its_input_and_buttons(client, fake, data):
    chat, call = start_with_a_call(client, fake, data)
    assert call.select_one(".state").text == "waiting for approval"
    assert '"plan": "- [x] read the question' in call.select_one("pre.input").text, "input as formatted JSON"
    buttons = call.select(".decide button")
    assert [(b["name"], b["value"]) for b in buttons] == [("decision", "approve"), ("decision", "decline")]
    assert all(b["form"] == "decide" and b["formaction"] == f"{chat}/calls/{call['id'][1:]}" for b in buttons)
    assert len(fake.streamed) == 1, "nothing runs and the model is not asked again while it waits"
    page = soup(client.get(chat))
    assert page.select_one('form#decide input[name="_csrf_token"]')["value"]


def test_approve_runs_the_tool_and_the_run_goes_on(client, fake, data):
    chat, call = start_with_a_call(client, fake, data)
    r = client.post(f"{chat}/calls/{call['id'][1:]}", data={"_csrf_token": csrf(client), "decision": "approve"},
                    follow_redirects=False)
    assert r.status_code == 303
    page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p)
    assert page.select_one("article.call .state").text == "done"
    items = page.select("#plan li")
    assert [li.get_text(" ", strip=True) for li in items] == ["read the question", "answer it"]
    # the steps are disabled check boxes, and the card says how far the plan is
    assert [li.input.has_attr("checked") for li in items] == [True, False]
    assert all(li.input["type"] == "checkbox" and li.input.has_attr("disabled") for li in items)
    assert page.select_one("#plan .who .state").get_text() == "1 of 2 done"
    assert page.select("article.text")[-1].get_text(strip=True) == "Planned and done."
    assert fake.streamed[1]["messages"][-1]["content"].startswith("Plan saved: 1 done, 1 to do.")


def test_decline_tells_the_model_and_the_run_goes_on(client, fake, data):
    chat, call = start_with_a_call(client, fake, data)
    client.post(f"{chat}/calls/{call['id'][1:]}", data={"_csrf_token": csrf(client), "decision": "decline"})
    page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p)
    assert page.select_one("article.call .state").text == "declined"
    assert page.select_one("#plan").get_text(strip=True) == ""
    assert fake.streamed[1]["messages"][-1] == {
        "role": "tool", "content": "The person declined this call.", "tool_call_id": fake.streamed[1]["messages"][-2]["tool_calls"][0]["id"]}


def test_stop_during_a_wait_ends_the_run(client, fake, data):
    chat, call = start_with_a_call(client, fake, data)
    client.post(chat + "/stop", data={"_csrf_token": csrf(client)})
    page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p)
    stopped = page.select_one("article.call")
    assert stopped.select_one(".state").text == "failed" and "Stopped by the person while waiting" in stopped.text
    assert stopped.select(".decide button") == []
    r = client.post(f"{chat}/calls/{call['id'][1:]}", data={"_csrf_token": csrf(client), "decision": "approve"})
    assert r.status_code == 409 and "no longer waiting" in r.text
    assert len(fake.streamed) == 1


@pytest.mark.parametrize("decision,call,status", [
    ("maybe", None, 400), ("", None, 400), ("approve", "99999", 404), ("approve", "x1", 404),
])
def test_bad_decisions(client, fake, data, decision, call, status):
    chat, waiting = start_with_a_call(client, fake, data)
    target = call or waiting["id"][1:]
    r = client.post(f"{chat}/calls/{target}", data={"_csrf_token": csrf(client), "decision": decision})
    assert r.status_code == status
    assert soup(client.get(chat)).select_one("article.call .state").text == "waiting for approval"


@pytest.mark.process
def test_a_wait_survives_a_restart(data, env, fake):
    first = Served(data, env).start()
    agent_waits_for(data)
    fake.script([tool_call("update_plan", {"plan": PLAN})], "Done after the restart.")
    db = dbm.connect(database(data))
    store = Store(db)
    chat = store.new_conversation(store.default_agent().id).id
    store.add(asked(chat, "plan"))
    waiting = wait_for(lambda: db.conn.execute("SELECT id FROM items WHERE state = 'approval'").fetchone())[0]
    first.signal(signal.SIGKILL)
    first.proc.wait(5)
    second = Served(data, env).start()
    try:
        import time
        time.sleep(1.0)
        assert store.item(waiting).state == "approval", "still waiting after the restart"
        assert len(fake.streamed) == 1
        store.update(waiting, state="approved")
        wait_for(lambda: db.conn.execute("SELECT done FROM items WHERE kind = 'user'").fetchone()[0] == 1, timeout=15)
        assert store.item(waiting).state == "done"
        assert [i.text for i in store.items(chat) if i.kind == "text"] == ["Done after the restart."]
        assert store.plan(chat).text == PLAN
    finally:
        second.stop()
        db.conn.close()


def test_without_javascript_a_page_waiting_for_a_decision_does_not_reload_itself(client, fake, data):
    chat, call = start_with_a_call(client, fake, data)
    page = soup(client.get(chat))
    assert page.select_one('meta[http-equiv="refresh"]') is None and page.select_one("iframe") is None
    assert "Waiting for your decision" in page.select_one("#status").text
