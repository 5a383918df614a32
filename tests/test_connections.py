"""The Connections page, the app in this process: the owner adds a model server (a scripted
OpenAI-compatible one, an Ollama) and its models are offered at once and answer with its key;
a Test says what happened in the server's own terms; models are switched off, one is the
default; the key is never put in a page; the environment's servers show read-only; a member
is refused."""
from __future__ import annotations

import asyncio

import httpx2
import pytest

from app.accounts.rules import Accounts
from app.providers.connections import OLLAMA, OPENAI, check, prefix_for
from tests.conftest import COOKIE, ask, csrf, free_port, idle, signed_in, soup, start_chat, store_of
from tests.fakes.ollama_server import FakeOllama, ollama_model
from tests.fakes.openai_server import FakeModelServer, text
from tests.fakes.redirect_server import LoopbackServer

PAGE = "/settings/connections"
KEY = "sk-very-secret-4242"


class NotAModelServer(LoopbackServer):
    """A web page where a model list should be."""

    async def _answer(self, target, writer):
        page = b"<html><body>Welcome to my homepage</body></html>"
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/html\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(page) + page)
        await writer.drain()


@pytest.fixture
def other():
    """A second OpenAI-compatible server, which wants a key."""
    with FakeModelServer(models={"big-model": 32768, "small-model": 4096}, require_key=KEY) as server:
        yield server


def post(client, path: str, **fields):
    return client.post(path, data={"_csrf_token": csrf(client, PAGE), **fields}, follow_redirects=False)


def add(client, **fields):
    return post(client, PAGE, **{"kind": OPENAI, **fields})


def card(client, name: str):
    found = [c for c in soup(client.get(PAGE)).select("article.connection") if c.h3 and name in c.h3.text]
    assert found, f"no card for {name}"
    return found[0]


def test_the_owner_adds_a_server_its_models_answer_with_its_key_and_the_key_is_never_shown(client, fake, other):
    r = add(client, name="Team GPU", url=other.url + "/", key=KEY)
    assert r.status_code == 303 and "saved=" in r.headers["location"]
    store = store_of(client)
    k = store.connection_named("team gpu")
    assert k.prefix == "team-gpu" and k.url == other.url and k.key == KEY and k.tested == "Connected: 2 models."
    stored = store._one("SELECT key FROM connections WHERE id = ?", [k.id])[0]
    assert stored.startswith("sealed:v1:") and KEY not in stored
    page = client.get(r.headers["location"])
    assert "Saved “Team GPU”. Connected: 2 models." in soup(page).select_one(".saved").text
    assert [c.text.strip() for c in card(client, "Team GPU").select("fieldset.models label.choice")] == [
        "big-model", "small-model"]
    # offered at once, in its own group, beside the environment's server (AI_URL)
    models = client.get("/models").json()["groups"]
    assert {g["title"]: [m["id"] for m in g["models"]] for g in models}["Team GPU"] == [
        "team-gpu:big-model", "team-gpu:small-model"]
    assert any(o.get("value") == "team-gpu:big-model" for o in soup(client.get("/")).select("#model-picker option"))
    # a message for one of its models goes there, with the key
    other.script(text("From the team's GPU."))
    chat = start_chat(client, "hello", model="team-gpu:big-model")
    assert "From the team's GPU." in idle(client, chat).text
    assert other.requests[-1]["model"] == "big-model"
    assert other.request_headers[-1]["authorization"] == f"Bearer {KEY}"
    # the key is in no page, nor in the edit form; an empty field keeps it
    for path in (PAGE, f"{PAGE}/{k.id}/edit", "/", chat, "/models", "/people", "/account"):
        assert KEY not in client.get(path).text, path
    edit = soup(client.get(f"{PAGE}/{k.id}/edit"))
    assert edit.select_one('#edit ~ form input[name="key"]')["value"] == ""
    assert post(client, f"{PAGE}/{k.id}", name="Team GPU box", kind=OPENAI, url=other.url).status_code == 303
    k = store.connection(k.id)
    assert (k.name, k.prefix, k.key) == ("Team GPU box", "team-gpu", KEY), "renamed: the prefix and the key stay"
    post(client, f"{PAGE}/{k.id}", name="Team GPU box", kind=OPENAI, url=other.url, forget="1")
    assert store.connection(k.id).key == "" and "Wrong key" in store.connection(k.id).tested


def test_models_switched_off_leave_the_picker_and_the_default_is_the_owners_choice(client, fake, other):
    add(client, name="Team", url=other.url, key=KEY)
    store = store_of(client)
    k = store.connection_named("Team")
    assert post(client, f"{PAGE}/{k.id}/models", on="small-model").status_code == 303
    assert store.connection(k.id).off == ("big-model",)
    assert store.choice("team:big-model") is None and store.choice("team:small-model") is not None
    assert not card(client, "Team").select_one('input[value="big-model"]').has_attr("checked")
    assert post(client, f"{PAGE}/default", model="team:big-model").status_code == 400, "not offered now"
    assert post(client, f"{PAGE}/default", model="team:small-model").status_code == 303
    other.script(text("Small answers."))
    chat = start_chat(client, "hi")
    assert "Small answers." in idle(client, chat).text and other.requests[-1]["model"] == "small-model"
    assert soup(client.get(PAGE)).select_one('select[name="model"] option[selected]')["value"] == "team:small-model"
    # deleted: its models leave the picker, and the default falls back to the first listed
    assert post(client, f"{PAGE}/{k.id}/delete").status_code == 303
    assert store.connections() == [] and store.choice("team:small-model") is None
    fake.script(text("The environment's server again."))
    chat = start_chat(client, "and now?")
    assert "The environment's server again." in idle(client, chat).text


def test_an_ollama_is_listed_by_its_own_catalog(client):
    with FakeOllama({"llama3.2:3b": ollama_model(131072, num_ctx=8192),
                     "nomic-embed-text": ollama_model(2048, embedding=True)}) as ollama:
        r = add(client, name="Desk Ollama", kind=OLLAMA, url=ollama.host + f":{ollama.port}")
        assert r.status_code == 303
        store = store_of(client)
        k = store.connection_named("Desk Ollama")
        assert k.url == ollama.address and k.tested == "Connected: 2 models."
        choice = store.choice("desk-ollama:llama3.2:3b")
        assert choice is not None and choice.window == 8192 and choice.group == "Desk Ollama"
        assert store.choice("desk-ollama:nomic-embed-text") is None, "a model that only embeds cannot chat"
        ollama.script(text("Hi from Ollama."))
        chat = start_chat(client, "hello", model="desk-ollama:llama3.2:3b")
        assert "Hi from Ollama." in idle(client, chat).text and ollama.requests[-1]["model"] == "llama3.2:3b"


def test_the_environments_servers_show_read_only(client, fake):
    page = soup(client.get(PAGE))
    envs = page.select("article.from-environment")
    assert [e.h3.text.split()[0:2] for e in envs] == [["Model", "server"]]
    assert "AI_URL" in envs[0].text and "fake-model" in envs[0].text and "from the environment" in envs[0].text
    assert not envs[0].select("form"), "read-only"
    assert add(client, name="model server", url=fake.url).status_code == 400, "the environment's group name is taken"


def test_bad_input_gets_clear_words_and_the_form_keeps_what_was_typed(client, other):
    r = add(client, name="", url=other.url)
    assert r.status_code == 400 and "Give the connection a name" in soup(r).select_one("#add ~ p.problem").text
    r = add(client, name="Box", url="ftp://example.org")
    assert r.status_code == 400 and "http(s) URL" in r.text
    assert soup(r).select_one('#add ~ form input[name="name"]')["value"] == "Box"
    assert add(client, name="Box", url=f"http://user:{KEY}@127.0.0.1:1/v1").status_code == 400
    add(client, name="Box", url=other.url, key=KEY)
    assert "already" in add(client, name="box", url=other.url).text


def test_test_says_what_happened_in_the_servers_own_terms(other):
    async def words(kind, url, key=""):
        async with httpx2.AsyncClient() as http:
            return (await check(http, kind, url, key)).words

    async def all_of() -> list[str]:
        with FakeOllama({"m": ollama_model()}) as ollama, NotAModelServer() as page:
            dead = f"http://127.0.0.1:{free_port()}/v1"
            return [await words(OPENAI, other.url, KEY), await words(OPENAI, dead), await words(OPENAI, other.url, "nope"),
                    await words(OPENAI, other.url), await words(OPENAI, ollama.address), await words(OPENAI, page.origin),
                    await words(OLLAMA, other.url.removesuffix("/v1"), KEY), await words(OLLAMA, ollama.address)]

    ok, dead, wrong, none, no_v1, html, not_ollama, ollama = asyncio.run(all_of())
    assert ok == "Connected: 2 models."
    assert dead.startswith("Unreachable: nothing answers at 127.0.0.1:")
    assert wrong.startswith("Wrong key: the server refused the key (401).") and "Incorrect API key" in wrong
    assert none.startswith("Wrong key: the server refused a key (401).")
    assert no_v1.startswith("Not an OpenAI-compatible server: GET /models answered 404.") and "end in /v1" in no_v1
    assert html == f"Not an OpenAI-compatible server: what 127.0.0.1:{html.split(':')[2].split()[0]} answered is not an OpenAI model list at /models."
    assert not_ollama.startswith("Not an Ollama: GET /api/tags answered 404.")
    assert ollama == "Connected: 1 model."


def test_a_failed_test_is_kept_and_shown_and_test_again_reads_it_anew(client, other):
    add(client, name="Later", url=other.url, key="wrong")
    store = store_of(client)
    k = store.connection_named("Later")
    assert card(client, "Later").select_one(".tested.problem").text.startswith("Wrong key")
    assert [c.id for c in store.choices() if c.group == "Later"] == ["!connection:later"], "down: one row says why"
    post(client, f"{PAGE}/{k.id}", name="Later", kind=OPENAI, url=other.url, key=KEY)
    assert card(client, "Later").select_one(".tested.ok").text == "Connected: 2 models."
    assert post(client, f"{PAGE}/{k.id}/test").status_code == 303


def test_prefixes_are_plain_and_unique():
    assert prefix_for("Team GPU", set()) == "team-gpu"
    assert prefix_for("Café Münster!", set()) == "cafe-munster"
    assert prefix_for("local", set()) == "local-2"
    assert prefix_for("Team GPU", {"team-gpu"}) == "team-gpu-2"
    assert prefix_for("日本", set()) == "server"


def test_a_member_is_refused_the_page_and_every_form(client, other, data):
    add(client, name="Team", url=other.url, key=KEY)
    k = store_of(client).connection_named("Team")
    token = csrf(client, PAGE)
    client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
    r = client.get(PAGE)
    assert r.status_code == 403 and "manage people and connections" in r.text, "refused in words"
    assert client.get(f"{PAGE}/{k.id}/edit").status_code == 403
    for path, fields in ((PAGE, {"name": "Mine", "kind": OPENAI, "url": other.url}), (f"{PAGE}/{k.id}/delete", {}),
                         (f"{PAGE}/{k.id}", {"name": "Mine", "kind": OPENAI, "url": other.url}),
                         (f"{PAGE}/{k.id}/test", {}), (f"{PAGE}/{k.id}/models", {}), (f"{PAGE}/default", {"model": ""})):
        r = client.post(path, data={"_csrf_token": csrf(client, "/"), **fields}, follow_redirects=False)
        assert r.status_code == 403 and "manage people and connections" in r.text, path
    assert "Connections" not in soup(client.get("/")).select_one("nav.main").text
    assert [c.name for c in store_of(client).connections()] == ["Team"] and token


def test_the_rows_on_both_engines(store):
    from app.providers.connections import Tested

    added = store.add_connection("Team GPU", "team-gpu", OPENAI, "http://127.0.0.1:9/v1", KEY)
    assert store.connection_named("TEAM gpu").id == added and store.connection(added).key == KEY
    store.set_connection_tested(added, Tested(True, "Connected: 2 models.", ("a", "b")))
    store.set_models_off(added, ("a",))
    store.change_connection(added, "Team", OLLAMA, "http://127.0.0.1:11434", None)
    k = store.connection(added)
    assert (k.name, k.kind, k.key, k.listed, k.off, k.tested) == ("Team", OLLAMA, KEY, ("a", "b"), ("a",),
                                                                  "Connected: 2 models.")
    store.set_connection_tested(added, Tested(False, "Unreachable: nothing answers."))
    assert store.connection(added).listed == ("a", "b"), "a failed Test keeps what was listed"
    store.change_connection(added, "Team", OLLAMA, "http://127.0.0.1:11434", "")
    assert not store.connection(added).has_key
    store.set_default_model("team-gpu:b")
    assert store.default_model() == "team-gpu:b"
    assert store.delete_connection(added) and store.connections() == []


def test_a_connection_kept_for_chosen_people_is_offered_and_answered_to_them_alone(client, fake, other, data):
    add(client, name="Team", url=other.url, key=KEY)
    store = store_of(client)
    k = store.connection_named("Team")
    owner_cookie = client.cookies.get(COOKIE)
    bea, cal = signed_in(data, "Bea", owner=False), signed_in(data, "Cal", owner=False)
    people = {p.name: p.id for p in Accounts(store).all()}
    # Cal's agent was set to one of its models while it was everyone's
    store.update_agent(store.default_agent(people["Cal"]).id, model="team:big-model")
    r = post(client, f"{PAGE}/{k.id}/people", everyone="0", person=str(people["Bea"]))
    assert r.status_code == 303 and store.connection(k.id).people == {people["Bea"]}
    assert "for you and 1 chosen" in card(client, "Team").text
    assert store.choice("team:big-model") is not None, "the list itself keeps them"

    def offered() -> set[str]:
        return {m["id"] for g in client.get("/models").json()["groups"] for m in g["models"]}

    assert "team:big-model" in offered(), "the owner always may"
    client.cookies.set(COOKIE, bea)
    assert "team:big-model" in offered()
    assert any(o.get("value") == "team:big-model" for o in soup(client.get("/")).select("#model-picker option"))
    client.cookies.set(COOKIE, cal)
    assert not {m for m in offered() if m.startswith("team:")}
    assert not [o for o in soup(client.get("/")).select("#model-picker option") if o.get("value", "").startswith("team:")]
    # a crafted form is refused as for a model that does not exist
    r = client.post("/c", data={"_csrf_token": csrf(client), "text": "hi", "model": "team:big-model"},
                    follow_redirects=False)
    assert r.status_code == 400 and "no model “team:big-model”" in r.text
    # the agent set before: its turn is refused in words, and nothing reaches the team's server
    before = len(other.requests)
    chat = start_chat(client, "hello")
    page = idle(client, chat)
    assert "You may not use the model “team:big-model”" in page.text and len(other.requests) == before
    # back to everyone: Cal's agent answers with it
    client.cookies.set(COOKIE, owner_cookie)
    post(client, f"{PAGE}/{k.id}/people", everyone="1")
    client.cookies.set(COOKIE, cal)
    other.script(text("Now for Cal too."))
    assert "Now for Cal too." in idle(client, start_chat(client, "again")).text
