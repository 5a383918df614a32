"""Two people: person B walks every route, and the live feeds, against person A's data and
gets 404 each time, exactly as for rows that do not exist; nothing of A's changes.

The peers' holes this guards against: a live stream anyone could follow by its id, another
person's conversation continued by its id, another person's files read by id.
"""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.store import db as dbm
from app.store import Store
from app.accounts.api_keys import ApiKeys
from app.tables import Person, plugin
from tests.conftest import database, COOKIE, Served, csrf, signed_in, soup, start_chat, wait_for
from tests.fakes.openai_server import text, tool_call

SECRET_WORD = "zanzibarquux"  # A's words: B must never see them anywhere


def a_snapshot(data: Path, a: int) -> dict[str, list]:
    """Everything of A's, to compare before and after B's attempts."""
    db = dbm.connect(database(data))
    try:
        q = lambda sql: [tuple(r) for r in db.conn.execute(sql, [a]).fetchall()]  # noqa: E731
        return {
            "conversations": q("SELECT id, title, agent FROM conversations WHERE person = ?"),
            "items": q("SELECT items.id, kind, text, state, done FROM items JOIN conversations c ON c.id = chat "
                       "WHERE c.person = ? AND kind != 'retry' ORDER BY items.id"),
            "agents": q("SELECT id, name, instructions, model, tools, approve FROM assistants WHERE person = ?"),
            "plugins": q("SELECT p.id, p.name, p.enabled FROM plugins p JOIN assistants a ON a.id = p.agent "
                         "WHERE a.person = ?"),
            "memories": q("SELECT m.id, m.text FROM memories m JOIN assistants a ON a.id = m.agent WHERE a.person = ?"),
            "keys": q("SELECT id, name FROM api_keys WHERE person = ?"),
            "files": q("SELECT id, name FROM files WHERE person = ?"),
            "collections": q("SELECT id, name, description, shared FROM collections WHERE person = ?"),
            "documents": q("SELECT id, name, state, pages_read FROM documents WHERE person = ?"),
            "passages": q("SELECT p.id, p.text FROM passages p JOIN documents d ON d.id = p.document "
                          "WHERE d.person = ?"),
        }
    finally:
        db.conn.close()


@pytest.fixture
def two(client, fake, data):
    """A (the owner, signed in on `client`) with a conversation, an answer, a call waiting for
    approval, a second agent with a plugin and a memory, and an uploaded file; B with a
    conversation of their own. Returns the ids."""
    db = dbm.connect(database(data))
    store = Store(db)
    a = store.owner()
    agent = store.default_agent(a)
    store.update_agent(agent.id, approve="update_plan")
    fake.script([text(f"The {SECRET_WORD} answer."), tool_call("update_plan", {"plan": "- [ ] x"})], "Done.")
    chat = start_chat(client, f"Tell me about {SECRET_WORD}",
                      files={"file": ("notes.txt", f"{SECRET_WORD} notes".encode(), "text/plain")})
    chat_id = int(chat.rsplit("/", 1)[1])
    wait_for(lambda: db.conn.execute("SELECT 1 FROM items WHERE chat = ? AND kind = 'call' AND state = 'approval'",
                                     [chat_id]).fetchone())
    call = db.conn.execute("SELECT id FROM items WHERE chat = ? AND kind = 'call'", [chat_id]).fetchone()[0]
    user_item = db.conn.execute("SELECT id FROM items WHERE chat = ? AND kind = 'user'", [chat_id]).fetchone()[0]
    file_id = db.conn.execute("SELECT id FROM files WHERE person = ?", [a]).fetchone()[0]
    from app.tables import item  # a plugin's question to A, waiting (app/plugins/asks.py)
    asked = store.add(item("ask", chat_id, f"{SECRET_WORD}?", turn=user_item, name="a_plugin", state="waiting",
                           input='{"schema": {"type": "object", "properties": {"x": {"type": "string"}}}}'))
    other = store.add_agent(store.default_agent(a).__class__(name="A's researcher", instructions=SECRET_WORD, person=a))
    p = store.add_plugin(plugin(other.id, "http://127.0.0.1:9/mcp", name="a_plugin"))
    memory = store.add_memory(other.id, f"A likes {SECRET_WORD}")
    collection = store.add_collection(a, f"A's {SECRET_WORD} manuals")  # and a document read into a passage
    kept = store.add_file("manual.md", f"# {SECRET_WORD}".encode(), person=a)
    document = store.add_document(a, kept, "manual.md", collection=collection, kind="markdown", state="ready")
    with store.write() as w:
        passage = w.conn.execute("INSERT INTO passages (document, page, n, heading, text) VALUES (?, 1, 0, '', ?) "
                                 "RETURNING id", [document, f"All about {SECRET_WORD}."]).fetchone()[0]
    b_token = signed_in(data, "Bea", owner=False)
    b = db.conn.execute("SELECT id FROM people WHERE name = 'Bea'").fetchone()[0]
    b_agent = store.default_agent(b)
    b_chat = store.new_conversation(b_agent.id, "B's own", person=b).id
    b_key, _ = ApiKeys(store).make(Person("Bea", id=b), "B's key")
    _, a_key = ApiKeys(store).make(Person("A", owner=True, id=a), f"A's {SECRET_WORD} key")  # the API's routes take a key, not a cookie
    connection = store.add_connection("A's server", "a-server", "openai", "http://127.0.0.1:9/v1", f"A's {SECRET_WORD}")
    invitation = store.add_invitation("a" * 64, admin=False, note=f"A's {SECRET_WORD} friend", made_by=a,
                                      at=time.time(), expires=time.time() + 3600)
    db.conn.close()
    return {"connection": connection, "invitation": invitation, "a": a, "b": b, "b_token": b_token, "b_key": b_key, "chat": chat_id, "call": call, "item": user_item, "file": file_id,
            "agent": other.id, "a_default_agent": agent.id, "plugin": p.id, "memory": memory,
            "b_agent": b_agent.id, "b_chat": b_chat, "person": a, "ask": asked.id,
            "collection": collection, "document": document, "passage": passage, "key": a_key}


# Field values B sends with each POST: what a page of A's would have sent, so a missing check
# would have let it through.
FORM = {"text": "continue A's conversation", "decision": "approve", "model": "", "name": "taken over",
        "instructions": "now mine", "action": "delete", "address": "http://127.0.0.1:9/", "use": "update_plan",
        "shown": "update_plan", "approve": "", "thinking": ""}


def routes_with_ids(app) -> list[tuple[str, str]]:
    """(method, path template) of every route that names a row by id."""
    out = []
    for route in app.routes:
        if "{" not in route.path or route.path.startswith("/static"):
            continue
        for method in sorted(getattr(route, "methods", set()) - {"HEAD", "OPTIONS"}):
            out.append((method, route.path))
    return out


def fill(template: str, ids: dict) -> list[str]:
    """The paths B tries for a route: A's ids everywhere; and where a row is named under
    another (a call in a conversation, a plugin or memory of an agent), A's row under B's own."""
    a = {"chat": ids["chat"], "call": ids["call"], "agent_id": ids["agent"], "plugin_id": ids["plugin"],
         "memory_id": ids["memory"], "file": ids["file"], "person_id": ids["person"],
         "item": ids["item"], "head": ids["item"], "name": f"{ids['item']}.txt", "ask": ids["ask"],
         "collection_id": ids["collection"], "document_id": ids["document"], "passage_id": ids["passage"],
         "key": ids["key"], "connection_id": ids["connection"], "invitation_id": ids["invitation"]}
    paths = [re.sub(r"\{(\w+):\w+\}", lambda m: str(a[m.group(1)]), template)]
    if re.search(r"\{(call|plugin_id|memory_id|item|head|name|ask):", template):
        mixed = dict(a, chat=ids["b_chat"], agent_id=ids["b_agent"])
        paths.append(re.sub(r"\{(\w+):\w+\}", lambda m: str(mixed[m.group(1)]), template))
    return paths


MANAGED = ("/people/", "/settings/connections/")  # the owner's and the admins' pages (docs/people.md)


def test_b_gets_404_for_every_route_naming_a_row_of_as(client, two, data):
    app = client.app
    before = a_snapshot(data, two["a"])
    assert all(before[k] for k in before), f"A has something of every kind: {before}"
    client.cookies.set(COOKIE, two["b_token"])
    token = csrf(client)
    tried = []
    for method, template in routes_with_ids(app):
        if template.startswith("/skills/"):
            continue  # skills are shared by everyone's agents, not anyone's rows
        for path in fill(template, two):
            if path.startswith("/v1/"):
                r = client.request(method, path, headers={"Authorization": f"Bearer {two['b_key']}"})
            elif method == "GET":
                r = client.get(path, follow_redirects=False)
            else:
                r = client.post(path, data={"_csrf_token": token, **FORM},
                                files={"file": ("x.txt", b"x", "text/plain")} if path.endswith("/ask") else None,
                                follow_redirects=False)
            tried.append((method, path))
            assert SECRET_WORD not in r.text
            if template.startswith(MANAGED):  # a member is refused these before any id is read: nothing of A's
                assert r.status_code == 403 and ("manage people and connections" in r.text
                                                 or "owner of this Tabletalk only" in r.text), f"{method} {path}"
                continue
            assert r.status_code == 404, f"{method} {path} answered {r.status_code}: {r.text[:200]}"
            assert "No such" in r.text or "Not found" in r.text, "the same answer as for a row that does not exist"
    assert len(tried) >= 20, tried
    assert {p.split("/")[1] for _, p in tried} >= {"c", "agents", "files", "people", "knowledge"}
    assert a_snapshot(data, two["a"]) == before, "nothing of A's changed"


def test_a_rows_missing_and_a_rows_of_another_person_look_the_same(client, two):
    client.cookies.set(COOKIE, two["b_token"])
    for kind, own, missing in [("c", two["chat"], 999_999), ("agents", two["agent"], 999_999),
                               ("files", two["file"], 999_999)]:
        theirs, none = client.get(f"/{kind}/{own}"), client.get(f"/{kind}/{missing}")
        assert (theirs.status_code, theirs.text) == (none.status_code, none.text), kind


def test_b_sees_none_of_as_data_in_lists_search_or_the_home_page(client, two):
    client.cookies.set(COOKIE, two["b_token"])
    for path in ["/", "/agents", f"/search?q={SECRET_WORD}", f"/agents/{two['b_agent']}?tab=plugins",
                 f"/agents/{two['b_agent']}?tab=memory", f"/agents/{two['b_agent']}?tab=knowledge", "/knowledge",
                 f"/c/{two['b_chat']}", "/skills", "/account"]:
        r = client.get(path)
        assert r.status_code == 200, path
        shown = (r.text.replace(f"{SECRET_WORD} · Search", "").replace(f'value="{SECRET_WORD}"', "")  # the query echoed
                 .replace(f"No conversation holds all of “{SECRET_WORD}”", ""))
        assert SECRET_WORD not in shown and "A's researcher" not in shown, path
        assert f'href="/c/{two["chat"]}"' not in r.text, path
    assert [a["href"] for a in soup(client.get("/")).select("#conversations a.open")] == [f"/c/{two['b_chat']}"]
    page = soup(client.get("/"))
    assert [o["value"] for o in page.select("select[name=agent] option")] in ([], [str(two["b_agent"])])


def test_b_cannot_start_a_conversation_with_as_agent(client, two, data):
    client.cookies.set(COOKIE, two["b_token"])
    r = client.post("/c", data={"_csrf_token": csrf(client), "agent": str(two["agent"])}, follow_redirects=False)
    assert r.status_code == 400 and "no such agent" in r.text
    db = dbm.connect(database(data))
    assert db.conn.execute("SELECT count(*) FROM conversations WHERE agent = ? AND person = ?",
                           [two["agent"], two["b"]]).fetchone()[0] == 0
    db.conn.close()


def test_a_run_of_bs_whose_agent_is_gone_never_borrows_as_agent(client, two, fake, data):
    """With its agent deleted a conversation is answered by its person's first agent, never by
    another person's (whose instructions and memories are theirs)."""
    db = dbm.connect(database(data))
    store = Store(db)
    b_agent = store.add_agent(store.default_agent(two["b"]).__class__(name="B2", instructions="B2 speaks", person=two["b"]))
    chat = store.new_conversation(b_agent.id, person=two["b"]).id
    store.delete_agent(b_agent.id)
    fake.script([text("ok")])
    client.cookies.set(COOKIE, two["b_token"])
    client.post(f"/c/{chat}/ask", data={"_csrf_token": csrf(client), "text": "who are you"})
    wait_for(lambda: len(fake.streamed) >= 1 and any(m["role"] == "user" and m["content"] == "who are you"
                                                     for m in fake.streamed[-1]["messages"]))
    system = [m["content"] for m in fake.streamed[-1]["messages"] if m["role"] == "system"]
    assert all(SECRET_WORD not in s for s in system), "not A's memories"
    db.conn.close()


def test_b_cannot_give_as_collection_to_bs_agent_nor_search_it_through_the_tool(client, two, fake, data):
    """B's agent's Knowledge tab refuses A's collection; and with it in B's agent's row anyway
    (as a collection shared once and no longer), search_knowledge in B's conversation, which
    B's own collection makes offered, finds B's passages and never A's."""
    client.cookies.set(COOKIE, two["b_token"])
    r = client.post(f"/agents/{two['b_agent']}/knowledge", follow_redirects=False,
                    data={"_csrf_token": csrf(client), "collection": str(two["collection"])})
    assert r.status_code == 400 and SECRET_WORD not in r.text
    db = dbm.connect(database(data))
    store = Store(db)
    assert store.agent_collections(two["b_agent"]) == []
    own = store.add_collection(two["b"], "B's notes")
    kept = store.add_file("b.md", b"# notes", person=two["b"])
    document = store.add_document(two["b"], kept, "b.md", collection=own, kind="markdown", state="ready")
    with store.write() as w:
        w.conn.execute("INSERT INTO passages (document, page, n, heading, text) VALUES (?, 1, 0, '', ?)",
                       [document, f"B's page about {SECRET_WORD[::-1]} and manuals."])
        w.conn.execute("INSERT INTO agent_collections (agent, collection) VALUES (?, ?), (?, ?)",
                       [two["b_agent"], own, two["b_agent"], two["collection"]])
    fake.reset()  # (A's answer after an approval that never comes)
    fake.script([tool_call("search_knowledge", {"query": f"{SECRET_WORD} {SECRET_WORD[::-1]} manuals"})], "done")
    client.post(f"/c/{two['b_chat']}/ask", data={"_csrf_token": csrf(client), "text": "look it up"})
    wait_for(lambda: db.conn.execute("SELECT 1 FROM items WHERE chat = ? AND kind = 'call' AND state = 'done'",
                                     [two["b_chat"]]).fetchone())
    output = db.conn.execute("SELECT output FROM items WHERE chat = ? AND kind = 'call'", [two["b_chat"]]).fetchone()[0]
    assert SECRET_WORD[::-1] in output, "the tool ran over B's own collection"
    assert SECRET_WORD not in output.replace(SECRET_WORD[::-1], ""), "and found nothing of A's"
    page = client.get(f"/c/{two['b_chat']}").text
    assert f"/knowledge/passages/{two['passage']}" not in page and f"A's {SECRET_WORD} manuals" not in page
    db.conn.close()


@pytest.mark.process
def test_bs_live_feeds_carry_nothing_of_as(served: Served, fake):
    """B's list feed hears of B's conversations only; A's conversation feed is 404 for B."""
    a = served.client(timeout=10, follow_redirects=True)
    b_token = signed_in(served.data, "Bea", owner=False)
    b_cookies = {COOKIE: b_token}
    a_chat = start_chat(a, "A's first")
    r = httpx.get(f"{served.url}{a_chat}/events?since=0", cookies=b_cookies, timeout=5)
    assert r.status_code == 404 and "No such conversation" in r.text
    received = bytearray()
    connected = threading.Event()

    def follow():
        with httpx.stream("GET", f"{served.url}/events?since=0", cookies=b_cookies, timeout=30) as r:
            for chunk in r.iter_bytes():
                connected.set()
                received.extend(chunk)
                if b"B-marker" in received:
                    return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert connected.wait(10)
    # A works: a new conversation, a title from a message, one deleted
    fake.plain_default = [text(f"{SECRET_WORD} title")]
    fake.script([text("answer")])
    a_new = start_chat(a, f"{SECRET_WORD} question")
    a.post(a_chat + "/delete", data={"_csrf_token": csrf(a)})
    time.sleep(1.0)
    # then B makes one, so the stream has something to carry and ends
    b = httpx.Client(base_url=served.url, cookies=b_cookies, timeout=10, follow_redirects=True)
    start_chat(b, "B-marker")
    t.join(15)
    body = received.decode()
    assert "B-marker" in body
    assert SECRET_WORD not in body
    for path in (a_chat, a_new):
        assert f"c{path.rsplit('/', 1)[1]}\"" not in body, f"nothing about A's {path}, not even its deletion"
