"""Edits with branches, answer versions, and the actions on every message (issue 12).

Through the app in-process (plain forms, as a browser without JavaScript sends them) and
the fake model server: what the page shows, what the model is sent, what the rows hold.
"""
import json
import re

import pytest

from app.store import Store, db as dbm, schema
from app.store.schema import migrations
from tests.conftest import ask, csrf, idle, new_chat, rows, soup, wait_for
from tests.fakes.openai_server import delay, text


def sent_contents(request) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] != "system"]


def bodies(page) -> list[str]:
    return [a.select_one(".body").get_text(strip=True) for a in page.select("#items > article")]


def post_form(client, url: str, chat: str, **data):
    """A button of the page's #decide form, as a browser posts it without script."""
    return client.post(url, data={"_csrf_token": csrf(client, chat), **data}, follow_redirects=False)


def button(page, scope: str, label: str) -> str:
    found = page.select_one(f'{scope} button[aria-label="{label}"]')
    assert found is not None, f"no {label!r} in {scope}"
    assert not found.has_attr("disabled"), f"{label!r} is disabled"
    return found["formaction"]


def edit(client, chat: str, item_id: int, words: str):
    """Edit as without script: the ?edit= page's form, posted through #decide."""
    shown = soup(client.get(chat)).select_one(f"#i{item_id} .body").get_text()
    page = soup(client.get(f"{chat}?edit={item_id}"))
    box = page.select_one(f"#i{item_id} .edit textarea")
    assert box is not None and box["form"] == "decide" and box.get_text() == shown, "the message's text to edit"
    assert page.select_one(f"#i{item_id} .body") is None, "in place of the message"
    action = page.select_one(f"#i{item_id} .edit button")["formaction"]
    r = post_form(client, action, chat, text=words)
    assert r.status_code == 303, r.text
    return r


def user_ids(data) -> list[int]:
    return [r["id"] for r in rows(data) if r["kind"] == "user"]


def three_turns(client, fake):
    fake.script("Answer A.", "Answer B.", "Answer C.")
    chat = new_chat(client)
    for words in ("Message A", "Message B", "Message C"):
        ask(client, chat, words)
        idle(client, chat)
    return chat


def test_an_edit_in_the_middle_makes_a_branch_sent_with_its_own_path_only(client, fake, data):
    chat = three_turns(client, fake)
    a, b, c = user_ids(data)
    fake.script("Answer B2.")
    edit(client, chat, b, "Message B, edited")
    page = idle(client, chat)
    assert bodies(page) == ["Message A", "Answer A.", "Message B, edited", "Answer B2."]
    assert sent_contents(fake.streamed[-1]) == ["Message A", "Answer A.", "Message B, edited"], \
        "the model is sent the edited message's path, not the old branch"
    assert page.select_one(".message-actions .pager .count").get_text() == "2 / 2"
    assert len(rows(data)) == 8, "the old message and everything after it are kept"
    # the pager goes back: the old branch, whole, with what followed it
    post_form(client, button(page, ".message-actions", "Previous version"), chat)
    page = soup(client.get(chat))
    assert bodies(page) == ["Message A", "Answer A.", "Message B", "Answer B.", "Message C", "Answer C."]
    assert page.select_one(f"#i{b} .pager .count").get_text() == "1 / 2"
    # a message now follows the branch shown: its request holds that path
    fake.script("Answer D.")
    ask(client, chat, "Message D")
    idle(client, chat)
    assert sent_contents(fake.streamed[-1]) == ["Message A", "Answer A.", "Message B", "Answer B.", "Message C",
                                                "Answer C.", "Message D"]


def test_again_on_an_earlier_answer_and_its_pager(client, fake, data):
    chat = three_turns(client, fake)
    a, b, c = user_ids(data)
    page = soup(client.get(chat))
    assert len(page.select(".answer-actions")) == 3, "every finished answer has its actions"
    fake.script("Answer A2.", "Answer A3.")
    for n in (2, 3):
        page = soup(client.get(chat))
        again = page.select_one(f"#a{a} button[aria-label^='Again']")["formaction"]
        assert post_form(client, again, chat).status_code == 303
        page = idle(client, chat)
        assert page.select_one(f"#a{a} .pager .count").get_text() == f"{n} / {n}"
    assert bodies(page) == ["Message A", "Answer A3."], "a new version of an early answer starts a branch there"
    assert sent_contents(fake.streamed[-1]) == ["Message A"]
    post_form(client, button(page, f"#a{a}", "Previous version"), chat)
    post_form(client, button(soup(client.get(chat)), f"#a{a}", "Previous version"), chat)
    page = soup(client.get(chat))
    assert page.select_one(f"#a{a} .pager .count").get_text() == "1 / 3"
    assert bodies(page) == ["Message A", "Answer A.", "Message B", "Answer B.", "Message C", "Answer C."], \
        "the first version's branch comes back with what followed it"
    assert page.select_one(f"#a{a} button[aria-label='Previous version']").has_attr("disabled")


def test_again_with_another_model_from_its_own_page(client, fake, data):
    fake.script("One.", "Two.")
    chat = new_chat(client)
    ask(client, chat, "Hi")
    page = idle(client, chat)
    link = page.select_one(".answer-actions a[aria-label='Again with another model']")["href"]
    form = soup(client.get(link)).select_one("form.stack")
    assert [o["value"] for o in form.select("option") if o.get("value")] == ["fake-model", "other-model"]
    r = client.post(form["action"], data={"_csrf_token": csrf(client, link), "model": "other-model"},
                    follow_redirects=False)
    assert r.status_code == 303
    page = idle(client, chat)
    assert fake.streamed[-1]["model"] == "other-model"
    assert page.select_one(".answer-actions .meta").get_text().startswith("other-model")
    assert page.select_one(".answer-actions time")["datetime"].endswith("Z")


def test_copy_serves_the_raw_text_of_a_message_and_of_an_answer(client, fake, data):
    fake.script("**Bold** start.")
    chat = new_chat(client)
    ask(client, chat, "  Keep <b>this</b>\n  exactly")
    page = idle(client, chat)
    copy = page.select_one(".message-actions a[aria-label='Copy message']")
    assert copy.has_attr("data-copy")
    r = client.get(copy["href"])
    assert r.headers["content-type"].startswith("text/plain") and r.text == "Keep <b>this</b>\n  exactly"
    r = client.get(page.select_one(".answer-actions a[aria-label='Copy answer']")["href"])
    assert r.text == "**Bold** start.", "the answer's Markdown, as written"
    assert client.get(f"{chat}/items/{user_ids(data)[0]}").status_code == 404
    assert client.get(f"{chat}/items/999999.txt").status_code == 404


def test_nothing_offers_an_action_it_cannot_take(client, fake, data):
    chat = new_chat(client)
    page = soup(client.get(chat))
    assert page.find(string=re.compile("Again")) is None, "an empty conversation offers no Again"
    assert page.select(".answer-actions, .message-actions") == []
    r = client.post(chat + "/retry", data={"_csrf_token": csrf(client)})
    assert r.status_code == 400
    # while an answer is written: no Edit on that message, no Again, and the server refuses both
    fake.script([delay(1.5), text("Slow.")])
    ask(client, chat, "Wait")
    wait_for(lambda: fake.requests)
    page = soup(client.get(chat))
    assert page.select(".answer-actions") == [], "no Again before the answer ended"
    assert page.select_one('#status[data-running="1"]') is not None
    assert "idle-only" in page.select_one("a[aria-label='Edit message']")["class"], "hidden while it runs"
    [user] = user_ids(data)
    assert post_form(client, f"{chat}/items/{user}/edit", chat, text="x").status_code == 409
    assert post_form(client, f"{chat}/answers/{user}/again", chat).status_code == 409
    assert post_form(client, f"{chat}/items/{user}/choose", chat).status_code == 409
    page = idle(client, chat)
    assert page.select_one("a[aria-label='Edit message']") is not None
    assert post_form(client, f"{chat}/items/{user}/edit", chat, text="   ").status_code == 400


def test_branches_survive_a_restart_search_finds_any_branch_export_has_the_current_path(make_client, fake, data):
    fake.script("Old answer about otters.", "New answer about badgers.")
    with make_client() as client:
        chat = new_chat(client)
        ask(client, chat, "Tell me about otters")
        idle(client, chat)
        [first] = user_ids(data)
        edit(client, chat, first, "Tell me about badgers")
        before = idle(client, chat).select_one("#items").decode()
    with make_client() as client:  # a new app on the same data folder: the rows are the branches
        page = soup(client.get(chat))
        assert page.select_one("#items").decode() == before
        assert bodies(page) == ["Tell me about badgers", "New answer about badgers."]
        hits = soup(client.get("/search?q=otters"))
        assert hits.select_one("#results a")["href"].startswith(chat), "text of a branch not shown is found"
        md = client.get(chat + "/export.md").text
        assert "badgers" in md and "otters" not in md, "Markdown: the current path"
        exported = json.loads(client.get(chat + "/export.json").text)
        texts = [it["text"] for it in exported["items"]]
        assert "Tell me about otters" in texts and "Tell me about badgers" in texts, "JSON: every branch"
        assert {it["parent"] for it in exported["items"] if it["kind"] == "user"} == {0}


def test_a_switch_is_a_write_the_feed_sends_as_the_whole_list(store):
    from app.feed.followed import Followed
    from app.tables import item
    from app.web import live

    chat = store.new_conversation(store.default_agent().id).id
    user = store.ask(chat, "Hi")
    store.add(item("text", chat, "One.", turn=user.id, done=True))
    store.update(user.id, done=True)
    store.again(store.item(user.id))
    store.add(item("text", chat, "Two.", turn=user.id, done=True))
    sent = Followed()
    live.chat_changes(store, chat, store.items_since(0), None, [], sent)  # followers in step: this page
    rev = store.rev()
    store.choose_answer(store.item(user.id), user.id)  # the pager, in another tab
    for followers in (sent, None):  # in step, and one that just caught up from the database
        message = live.chat_changes(store, chat, store.items_since(rev), None, [], followers)
        assert '<hx-partial hx-target="#items" hx-swap="innerHTML">' in message
        assert "One." in message and "Two." not in message and "1 / 2" in message
    rev = store.rev()
    store.ask(chat, "Next")  # a message at the end of the path: only what is new
    message = live.chat_changes(store, chat, store.items_since(rev), None, [], sent)
    assert 'hx-swap="innerHTML"' not in message and "Next" in message


def test_m011_gives_a_linear_conversation_its_parents(tmp_path):
    db = dbm.connect(tmp_path / "old.db")
    at = [m.__name__ for m in migrations.MIGRATIONS].index("m011_branches")
    m011 = migrations.MIGRATIONS.pop(at)  # a database from before it (the others applied)
    try:
        schema.migrate(db)
    finally:
        migrations.MIGRATIONS.insert(at, m011)
    db.conn.execute("INSERT INTO conversations (id, title, created, updated) VALUES (1, 't', 0, 0)")
    for id, kind, turn in [(1, "user", 1), (2, "text", 1), (3, "retry", 1), (4, "text", 1), (5, "user", 5),
                           (6, "user", 5), (7, "text", 5), (8, "user", 8)]:
        db.conn.execute("INSERT INTO items (id, chat, kind, turn, text, done, created, updated, rev) "
                        "VALUES (?, 1, ?, ?, ?, 1, 0, 0, ?)", [id, kind, turn, f"t{id}", id])
    db.conn.execute("UPDATE items SET steer = 1, read_after = 5 WHERE id = 6")
    schema.migrate(db)
    got = {r[0]: r[1] for r in db.conn.execute("SELECT id, parent FROM items WHERE kind = 'user'")}
    assert got == {1: 0, 5: 3, 6: 0, 8: 5}, "each turn follows the newest version of the one before"
    store = Store(db)
    assert [it.id for it in store.path_items(1)] == [1, 4, 5, 6, 7, 8]
