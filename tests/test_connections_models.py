"""Who may use one model of a connection (docs/connections.md): the owner (or an admin) keeps
a model for chosen people on the Connections page; a member's pickers list only what both
the connection's rule and the model's allow them, and every other way to name the model (a
crafted form, Again, the agent's settings, the API, a turn) is refused in words."""
from __future__ import annotations

from app.accounts.rules import Accounts
from app.providers import connections as kinds
from app.providers.connections import OPENAI, Barred, may_use
from app.tables import assistant
from tests.conftest import COOKIE, csrf, idle, signed_in, soup, start_chat, store_of
from tests.fakes.openai_server import text
from tests.test_connections import KEY, PAGE, add, card, other, post  # noqa: F401 (the fixture)
from tests.test_openai_api import bearer, make_key, refusal

BIG, SMALL = "team:big-model", "team:small-model"


def offered(client) -> set[str]:
    return {m["id"] for g in client.get("/models").json()["groups"] for m in g["models"]}


def picker(client, path: str = "/") -> set[str]:
    return {o["value"] for o in soup(client.get(path)).select("#model-picker option") if o.get("value")}


def test_the_rule_on_both_engines(store):
    accounts = Accounts(store)
    owner = accounts.add("Ann", "hashed", owner=True)
    bea, cal, dan = (accounts.add(n, "hashed") for n in ("Bea", "Cal", "Dan"))
    k = store.add_connection("Team", "team", OPENAI, "http://127.0.0.1:9/v1", "")
    store.set_connection_tested(k, kinds.Tested(True, "Connected: 2 models.", ("big-model", "small-model")))
    store.set_connection_people(k, False, frozenset({bea.id, cal.id}))
    store.set_model_people(k, "big-model", False, frozenset({cal.id, owner.id}))
    assert store.connection(k).chosen == {"big-model": frozenset({cal.id})}, "the owner is never listed: always may"
    assert store.connections()[0].chosen == store.connection(k).chosen
    # the model's rule narrows the connection's: both must allow
    assert store.barred(bea.id) == Barred(frozenset(), frozenset({BIG}))
    assert store.barred(cal.id) == Barred()
    assert store.barred(dan.id) == Barred(frozenset({"team"}), frozenset({BIG}))
    assert store.barred(owner.id) == Barred() and store.barred(None).models == {BIG}
    assert not store.may_use(bea.id, BIG) and store.may_use(bea.id, SMALL) and store.may_use(bea.id, "")
    assert not may_use("team:big-model", Barred(models=frozenset({BIG}))) and may_use("big-model", Barred(
        models=frozenset({BIG}))), "a model of the environment's server is everyone's"
    store.set_model_people(k, "big-model", True, frozenset({cal.id}))
    assert store.connection(k).chosen == {} and store.barred(bea.id) == Barred()
    store.set_model_people(k, "big-model", False, frozenset())
    assert store.connection(k).chosen == {"big-model": frozenset()} and not store.may_use(cal.id, BIG)
    assert store.delete_connection(k) and store.barred(cal.id) == Barred(), "its rules go with it"


def test_a_model_kept_for_chosen_people_is_offered_to_them_alone(client, fake, other, data):
    add(client, name="Team", url=other.url, key=KEY)
    store = store_of(client)
    k = store.connection_named("Team")
    owner_cookie = client.cookies.get(COOKIE)
    bea, cal = signed_in(data, "Bea", owner=False), signed_in(data, "Cal", owner=False)
    people = {p.name: p.id for p in Accounts(store).all()}
    # the owner opens the model's form from its switch (a link: the same without script)
    link = card(client, "Team").select_one('a.model-rule-link[href*="big-model"]')
    assert "everyone" in link.text
    form = soup(client.get(link["href"])).select_one("form.model-rule")
    assert form.select_one('input[name="model"]')["value"] == "big-model"
    assert form.select_one('input[name="everyone"][value="1"]').has_attr("checked")
    r = post(client, f"{PAGE}/{k.id}/model", model="big-model", everyone="0", person=str(people["Bea"]))
    assert r.status_code == 303
    assert "Saved who may use “big-model” of “Team”." in soup(client.get(r.headers["location"])).select_one(".saved").text
    assert "for you and 1 chosen" in card(client, "Team").select_one('a.model-rule-link[href*="big-model"]').text
    assert post(client, f"{PAGE}/{k.id}/model", model="no-such-model", everyone="0").status_code == 404
    assert client.get(f"{PAGE}/{k.id}/model?name=no-such-model").status_code == 404
    assert {BIG, SMALL} <= offered(client) and {BIG, SMALL} <= picker(client), "the owner always may"
    client.cookies.set(COOKIE, bea)
    assert {BIG, SMALL} <= offered(client) and {BIG, SMALL} <= picker(client)
    assert client.get(f"{PAGE}/{k.id}/model?name=big-model").status_code == 403, "a member manages nothing"
    assert post(client, f"{PAGE}/{k.id}/model", model="big-model", everyone="1").status_code == 403
    # Cal: the small model only, in every picker of theirs
    client.cookies.set(COOKIE, cal)
    assert SMALL in offered(client) and BIG not in offered(client)
    assert SMALL in picker(client) and BIG not in picker(client)
    other.script(text("Small for Cal."))
    chat = start_chat(client, "hello", model=SMALL)
    assert "Small for Cal." in idle(client, chat).text
    assert BIG not in picker(client, chat)
    user = soup(client.get(chat)).select_one(".answer-actions a[aria-label='Again with another model']")["href"]
    assert BIG not in {o.get("value") for o in soup(client.get(user)).select("option")}
    cals_agent = store.default_agent(people["Cal"])
    assert BIG not in {o.get("value") for o in soup(client.get(f"/agents/{cals_agent.id}")).select("option")}
    # each crafted form is refused as a model that does not exist is, and keeps what was typed
    r = client.post("/c", data={"_csrf_token": csrf(client), "text": "my long message", "model": BIG})
    assert r.status_code == 400 and "There is no model “team:big-model”" in soup(r).select_one("#composer-error").text
    assert soup(r).select_one("#text").text == "my long message"
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "typed again", "model": BIG})
    assert r.status_code == 400 and soup(r).select_one("#text").text == "typed again"
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "x", "model": BIG},
                    headers={"HX-Request": "true"})
    assert r.status_code == 400 and "no model “team:big-model”" in r.text, "with script: the words, the text stays"
    r = client.post(chat + "/choice", data={"_csrf_token": csrf(client, chat), "model": BIG})
    assert r.status_code == 400 and store.conversation(int(chat.rsplit("/", 1)[1])).model == SMALL
    form = soup(client.get(user)).select_one("form.stack")
    r = client.post(form["action"], data={"_csrf_token": csrf(client, user), "model": BIG}, follow_redirects=False)
    assert r.status_code == 400 and "no model “team:big-model”" in r.text
    r = client.post(f"/agents/{cals_agent.id}", data={"_csrf_token": csrf(client, f"/agents/{cals_agent.id}"),
                                                     "name": cals_agent.name, "model": BIG})
    assert r.status_code == 400 and "There is no model “team:big-model” to choose now" in r.text
    assert store.agent(cals_agent.id).model == ""
    # a pick kept from before the owner's change: refused at the next send, in words, nothing sent
    store.set_choice(int(chat.rsplit("/", 1)[1]), BIG, "")
    before = len(other.requests)
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "again please"},
                    follow_redirects=False)
    assert r.status_code == 303, "a form without the picker keeps the conversation's pick"
    page = idle(client, chat)
    assert ("You may not use the model “team:big-model”: the owner keeps it for chosen people. Pick another model."
            in page.text) and len(other.requests) == before
    # the connection's rule narrows the model's too: kept for Bea alone, Cal loses the small one
    client.cookies.set(COOKIE, owner_cookie)
    post(client, f"{PAGE}/{k.id}/people", everyone="0", person=str(people["Bea"]))
    client.cookies.set(COOKIE, cal)
    assert not {m for m in offered(client) if m.startswith("team:")}
    client.cookies.set(COOKIE, bea)
    assert {BIG, SMALL} <= offered(client)
    # a model its server lists no more keeps its rule, shown so that it can be lifted
    client.cookies.set(COOKIE, owner_cookie)
    store.set_connection_tested(k.id, kinds.Tested(True, "Connected: 1 model.", ("small-model",)))
    kept = card(client, "Team").select_one(".unlisted-rules")
    assert "big-model" in kept.text and "for you and 1 chosen" in kept.select_one("a.model-rule-link").text
    assert post(client, f"{PAGE}/{k.id}/model", model="big-model", everyone="1").status_code == 303
    assert store.connection(k.id).chosen == {} and card(client, "Team").select_one(".unlisted-rules") is None


def test_the_api_lists_and_answers_only_agents_whose_model_the_person_may_use(client, fake, other, data):
    add(client, name="Team", url=other.url, key=KEY)
    store = store_of(client)
    k = store.connection_named("Team")
    owner_key = make_key(client)
    owner = store.default_agent(Accounts(store).all()[0].id)
    store.update_agent(owner.id, model=BIG)
    post(client, f"{PAGE}/{k.id}/model", model="big-model", everyone="0")
    client.cookies.set(COOKIE, signed_in(data, "Cal", owner=False))
    cal_key = make_key(client, "cal's")
    cal = store.default_agent(next(p.id for p in Accounts(store).all() if p.name == "Cal"))
    second = store.add_agent(assistant(name="Second", person=cal.person)).id
    store.update_agent(cal.id, model=BIG)  # set while it was everyone's
    listed = [m["id"] for m in client.get("/v1/models", headers=bearer(cal_key)).json()["data"]]
    assert listed == [f"agent-{second}"], "the agent set to the model kept from Cal is left out"
    before = len(other.requests)
    r = client.post("/v1/chat/completions", headers=bearer(cal_key),
                    json={"model": f"agent-{cal.id}", "messages": [{"role": "user", "content": "Hi"}]})
    error = refusal(r, 403, "model_not_allowed")
    assert error["type"] == "permission_error" and "“team:big-model”" in error["message"] and error["param"] == "model"
    assert len(other.requests) == before and not store.conversations(cal.person), "nothing written, nothing sent"
    # the owner always may
    assert f"agent-{owner.id}" in [m["id"] for m in client.get("/v1/models", headers=bearer(owner_key)).json()["data"]]
    other.script(text("For the owner."))
    r = client.post("/v1/chat/completions", headers=bearer(owner_key),
                    json={"model": f"agent-{owner.id}", "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "For the owner."


def test_a_model_kept_from_an_admin_is_the_owners_alone_to_change(client, other, data):
    add(client, name="Team", url=other.url, key=KEY)
    store = store_of(client)
    k = store.connection_named("Team")
    admin, owner = signed_in(data, "Ada", owner=False), client.cookies.get(COOKIE)
    people = Accounts(store)
    ada = next(p for p in people.all() if p.name == "Ada")
    people.set_role(ada.id, "admin")
    post(client, f"{PAGE}/{k.id}/model", model="big-model", everyone="0")
    client.cookies.set(COOKIE, admin)
    switches = card(client, "Team")
    assert "kept from you" in switches.select_one(".model-switch:has(input[value='big-model'])").text
    assert switches.select_one('a.model-rule-link[href*="big-model"]') is None
    assert switches.select_one('a.model-rule-link[href*="small-model"]') is not None, "the rest an admin manages"
    r = client.get(f"{PAGE}/{k.id}/model?name=big-model")
    assert r.status_code == 403 and "only the owner changes who may use it" in r.text
    r = client.post(f"{PAGE}/{k.id}/model", data={"_csrf_token": csrf(client, PAGE), "model": "big-model",
                                                   "everyone": "0", "person": str(ada.id)}, follow_redirects=False)
    assert r.status_code == 403 and store.connection(k.id).chosen == {"big-model": frozenset()}
    assert post(client, f"{PAGE}/{k.id}/model", model="small-model", everyone="0",
                person=str(ada.id)).status_code == 303
    assert store.connection(k.id).chosen["small-model"] == {ada.id}
    # the owner may always use a model kept for chosen people: "you" to the owner, not to an admin
    assert "for the owner and 1 chosen" in card(client, "Team").select_one('a.model-rule-link[href*="small-model"]').text
    form = soup(client.get(f"{PAGE}/{k.id}/model?name=small-model")).select_one("form.model-rule")
    assert "The owner and the people ticked" in form.text and "You and" not in form.text
    client.cookies.set(COOKIE, owner)
    assert "for you alone" in card(client, "Team").select_one('a.model-rule-link[href*="big-model"]').text
