"""Whole conversations: search (FTS5), delete (live off the list), export (Markdown, JSON)."""
import json
import re
import threading
import time
from email.message import Message as Header
from urllib.parse import unquote

import httpx
import pytest
from bs4 import BeautifulSoup

from app.store import Store, db as dbm, schema
from app.store.schema import migrations
from app import export
from app.web import live, search, sidebar
from app.feed.dispatch import Feed, encode
from app.tables import Conversation, Item, item
from tests.conftest import csrf, database_of, new_chat, rows, soup, sse_value, start_chat, texts, wait_for
from tests.fakes.openai_server import rate, reasoning, stall, text

HOSTILE = ['"', '""', "'", "AND", "OR", "NOT", "a AND", "AND OR NOT", "*", "**", "a*", "*a", "NEAR(",
           "NEAR(a b", "NEAR(a b, 2)", "col:term", "title:x", "text:", "{title text}:x", "^x", "-x", "+x",
           "(", ")", "((a)", "a)", '"unbalanced', 'a"b"c', "a OR", "x" * 10_000, "a\x00b", "\x00", "\u0000\u0001",
           "\ud800", "🙂", "☃ ☂", "日本語", "Ǆ ﬁ", "\u200b", "%", "%00", "a' OR '1'='1", "; DROP TABLE items; --",
           "<script>", "   ", ""]


# --- the store, on each engine (conftest's `store`) -----------------------------------------


def answer(store, chat, user, words, done=True):
    return store.add(item("text", chat, words, turn=user.id, done=done))


def found(store, query):
    return [h.chat for h in search.find(store, query, store.owner())]


def test_search_finds_titles_messages_and_finished_answers(store):
    a = store.new_conversation(1, "Holiday in Lisbon")
    q = store.ask(a.id, "Where should we eat tonight?")
    answer(store, a.id, q, "Try the pastéis de nata near the river.")
    b = store.new_conversation(1, "Taxes")
    store.ask(b.id, "Lisbon rent receipts")
    assert found(store, "lisbon") == [b.id, a.id], "newest first"
    assert found(store, "tonight") == [a.id]
    assert found(store, "pasteis") == [a.id], "diacritics fold"
    assert found(store, "past*") == [a.id], "a trailing * is a prefix"
    assert found(store, "holiday nata") == [a.id], "every word, across the title and the answers"
    assert found(store, "holiday receipts") == []


def test_a_growing_answer_is_indexed_when_it_is_done_and_follows_edits(store):
    c = store.new_conversation(1, "")
    q = store.ask(c.id, "hi")
    grows = answer(store, c.id, q, "half of a sentence about zebras", done=False)
    assert found(store, "zebras") == []
    store.update(grows.id, text="a whole sentence about giraffes", done=True)
    assert found(store, "giraffes") == [c.id] and found(store, "zebras") == []
    store.delete_items([grows.id])
    assert found(store, "giraffes") == []
    store.set_title(c.id, "Okapi facts")
    assert found(store, "okapi") == [c.id] and found(store, "hi") == [c.id]
    store.set_title(c.id, "Other")
    assert found(store, "okapi") == []


def test_other_kinds_are_not_indexed(store):
    c = store.new_conversation(1, "t")
    q = store.ask(c.id, "hi")
    for kind in ("reasoning", "error", "plan"):
        store.add(item(kind, c.id, f"secret{kind}", turn=q.id, done=True))
    store.add(item("call", c.id, turn=q.id, name="fetch", input='{"q": "secretcall"}', output="secretcall", done=True))
    assert all(found(store, f"secret{kind}") == [] for kind in ("reasoning", "error", "plan", "call"))


def test_the_migration_indexes_what_was_there_before_it(tmp_path):
    db = dbm.connect(tmp_path / "old.db")
    before = [fn for fn in migrations.MIGRATIONS if fn.__name__ < "m005_search"]
    db.conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)")
    for fn in before:
        with dbm.write(db):
            fn(db)
            db.conn.execute("INSERT INTO migrations VALUES (?, ?)", [fn.__name__, 0])
    # rows as the schema of that time had them (today's Store writes today's columns)
    with dbm.write(db):
        db.conn.execute("INSERT INTO conversations (id, agent, title, created, updated, rev) "
                        "VALUES (1, 1, 'Ancient title', 0, 0, 1)")
        for id_, kind, text, done in [(1, "user", "an old question", 1), (2, "text", "an old answer", 1),
                                      (3, "text", "cut off mid", 0)]:
            db.conn.execute("INSERT INTO items (id, chat, turn, kind, text, done, created, updated, rev) "
                            "VALUES (?, 1, 1, ?, ?, ?, 0, 0, ?)", [id_, kind, text, done, id_ + 1])
    old = Store(db)
    c = old.conversation(1)
    assert "m005_search" in schema.migrate(db)
    assert found(old, "ancient") == found(old, "question") == found(old, "answer") == [c.id]
    assert found(old, "mid") == []


@pytest.mark.parametrize("query", HOSTILE)
def test_no_query_is_an_error(store, query):
    c = store.new_conversation(1, "AND OR NOT NEAR title text")
    store.ask(c.id, 'col:term "quoted" (paren) a*b x' + "x" * 50)
    for term in search.terms(query):
        assert term.startswith('"') and term.rstrip("*").endswith('"')
    search.find(store, query, store.owner())  # never raises


def test_operators_are_only_words(store):
    c = store.new_conversation(1, "cats AND dogs")
    store.ask(c.id, "NEAR the river")
    assert found(store, "AND") == [c.id]
    assert found(store, "NEAR(") == [c.id]
    assert found(store, "cats NOT") == []
    assert found(store, "title:cats") == [], "a column filter is a phrase, 'title cats', which is not there"


def test_snippets_mark_the_hits_and_escape_everything_else(store):
    c = store.new_conversation(1, "<b>bold</b> title")
    store.ask(c.id, 'see <script>alert("x")</script> & <img src=x onerror=alert(1)> here')
    [hit] = search.find(store, "script bold", store.owner())
    assert str(hit.title) == "&lt;b&gt;<mark>bold</mark>&lt;/b&gt; title"
    html = str(hit.snippet)
    assert "<mark>script</mark>" in html and "<script" not in html and "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert str(search.marked(f"a{search.MARKS[0]}<b>{search.MARKS[1]}c{search.MARKS[1]}")) == "a<mark>&lt;b&gt;</mark>c"


# --- export: pure functions over rows ------------------------------------------------------


def rows_of_a_conversation():
    convo = Conversation(agent=1, title="Plans: \"big\"\nones / small ✓", id=7, created=1.0, updated=2.0)
    items = [
        Item("user", 7, "How do I list files?", id=1, turn=1, done=True),
        Item("text", 7, "First try.", id=2, turn=1, done=True),
        Item("retry", 7, id=3, turn=1, done=True, model="other"),
        Item("reasoning", 7, "They want ls.\nSimple.", id=4, turn=1, done=True),
        Item("call", 7, name="shell", input='{"cmd": "ls -la"}', output="a.txt\n```\nb.txt", state="done",
             id=5, turn=1, done=True),
        Item("error", 7, "Trying again in 2 s", id=6, turn=1, done=True),  # a notice, not an error
        Item("text", 7, "Use `ls -la`.", id=8, turn=1, done=True),
        Item("user", 7, "And hidden ones?", id=9, turn=9, done=True, parent=3),
        Item("error", 7, "The model server refused the key (401).", state="failed", id=10, turn=9, done=True),
    ]
    return convo, items


def test_markdown_has_each_turn_the_newest_answer_folded_reasoning_calls_and_errors():
    convo, items = rows_of_a_conversation()
    md = export.to_markdown(convo, items, "Helper")
    assert md.startswith('# Plans: "big" ones / small ✓\n')
    assert md.count("## You") == 2 and md.count("## Helper") == 2
    assert "How do I list files?" in md and "Use `ls -la`." in md and "And hidden ones?" in md
    assert "First try." not in md, "only the newest version"
    assert "> **Reasoning**\n>\n> They want ls.\n> Simple." in md
    assert '```json\n{\n  "cmd": "ls -la"\n}\n```' in md
    assert "````\na.txt\n```\nb.txt\n````" in md, "a fence longer than any inside the output"
    assert "> **Error:** The model server refused the key (401)." in md
    assert "Trying again" not in md
    assert md.index("How do I list files?") < md.index("They want ls") < md.index("Use `ls -la`.") \
        < md.index("And hidden ones?")


def test_json_has_every_row_and_a_format_version():
    convo, items = rows_of_a_conversation()
    data = json.loads(json.dumps(export.to_json(convo, items, exported=3.0)))
    assert data["format"] == "tabletalk.conversation" and data["version"] == 1 and data["exported"] == 3.0
    assert data["conversation"]["title"] == convo.title
    assert [Item(**row) for row in data["items"]] == items, "every version, every column, round-trips"


@pytest.mark.parametrize("title,plain", [
    ('He said "hi"\r\nContent-Type: text/html', "He-said-hi-Content-Type-text-html.md"),
    ("../../etc/passwd", "etc-passwd.md"),
    ("a\\b/c:d*e?f<g>h|i", "a-b-c-d-e-f-g-h-i.md"),
    ("Café ☕ über", "Cafe-uber.md"),
    ("日本語のタイトル", "conversation-7.md"),
    ("", "conversation-7.md"),
    ("...", "conversation-7.md"),
    ("x" * 500, "x" * 60 + ".md"),
])
def test_file_names_are_safe_for_any_title(title, plain):
    convo = Conversation(agent=None, title=title, id=7)
    assert export.filename(convo, "md") == plain
    value = export.content_disposition(convo, "md")
    assert re.fullmatch(r"[\x20-\x7e]+", value), "one line of ASCII"
    header = Header()
    header["content-disposition"] = value
    assert header.get_param("filename", header="content-disposition") == plain
    full = export.filename(convo, "md", ascii_only=False)
    assert "/" not in full and "\\" not in full and '"' not in full and "\n" not in full and ".." not in full
    if full != plain:
        assert unquote(value.split("filename*=UTF-8''")[1]) == full


# --- pages -----------------------------------------------------------------------------------


def conversation_with_an_answer(client, fake, words="Tell me about otters <script>x</script>",
                                reply="Otters hold hands while they sleep.") -> str:
    fake.script([reasoning("hmm"), text(reply)])
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": words})
    wait_for(lambda: soup(client.get(chat)).select_one('#status[data-running="0"]')
             and soup(client.get(chat)).select_one("article.text .state.done"))
    return chat


def db_rows(data, sql, params=()):
    return [tuple(r.values()) for r in rows(data, sql, params)]


def test_the_list_has_a_search_form_that_works_without_javascript(client):
    form = soup(client.get("/")).select_one('form[action="/search"]')
    assert form["method"] == "get" and form.select_one('input[name="q"]') is not None
    page = soup(client.get("/search"))
    assert page.select_one('form[action="/search"] input[name="q"]') is not None
    assert page.select("#results li") == []


def test_search_page_finds_by_title_message_and_answer(client, fake):
    fake.plain_default = [text("Aquatic mammals")]
    chat = conversation_with_an_answer(client, fake)
    wait_for(lambda: "Aquatic mammals" in client.get(chat).text)
    fake.plain_default = [text("Something else")]
    other = new_chat(client)
    client.post(other + "/ask", data={"_csrf_token": csrf(client), "text": "nothing to see"})
    for query in ["otters", "hands sleep", "aquatic"]:  # message, answer, the model-made title
        page = soup(wait_for(lambda: (r := client.get("/search", params={"q": query})).status_code == 200
                             and "<mark>" in r.text and r))
        links = [a["href"] for a in page.select("#results li a")]
        assert len(links) == 1 and links[0].startswith(chat), query
        assert page.select_one("#results mark") is not None
    page = soup(client.get("/search", params={"q": "script"}))
    snippet = page.select_one("#results .snippet")
    assert "<script>x</script>" in snippet.text and snippet.select("script") == []
    assert page.select_one("main input[name=q]")["value"] == "script"
    assert "No conversation holds" in client.get("/search", params={"q": "walrus"}).text


def test_hostile_queries_never_500(client):
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": 'AND "NEAR(" col:term <script>'})
    for query in HOSTILE:
        if query == "\ud800":
            query = "\ufffd"  # no client can send a lone surrogate; the raw bytes are in the next test
        r = client.get("/search", params={"q": query})
        assert r.status_code == 200, (query[:40], r.text)
        assert "<script>" not in r.text.split("<main", 1)[1]


def test_odd_query_strings_never_500(client):
    for raw in ["q=%00", "q=%ff%fe", "q=%ED%A0%80", "q=a&q=b", "q", "q=" + "%22" * 5000, "q=%F0%9F%99%82"]:
        assert client.get("/search?" + raw).status_code < 500, raw


def test_delete_asks_first_then_removes_the_conversation_its_items_and_its_index(client, fake, data):
    chat = conversation_with_an_answer(client, fake)
    chat_id = int(chat.rsplit("/", 1)[1])
    assert soup(client.get(chat)).select_one(f'a[href="{chat}/delete"]').text == "Delete…"
    page = soup(client.get(chat + "/delete"))
    form = page.select_one(f'form[action="{chat}/delete"][method="post"]')
    assert form is not None and "cannot be undone" in page.text
    assert db_rows(data, "SELECT count(*) FROM items WHERE chat = ?", [chat_id])[0][0] == 3, "asking deleted nothing"
    assert client.post(chat + "/delete", data={}).status_code == 403, "the form needs its CSRF token"
    r = client.post(chat + "/delete", data={"_csrf_token": csrf(client)}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert client.get(chat).status_code == 404
    assert db_rows(data, "SELECT count(*) FROM items WHERE chat = ?", [chat_id])[0][0] == 0
    assert db_rows(data, "SELECT count(*) FROM conversations WHERE id = ?", [chat_id])[0][0] == 0
    assert db_rows(data, "SELECT count(*) FROM search WHERE chat = ?", [chat_id])[0][0] == 0
    assert db_rows(data, "SELECT chat, dom FROM tombstones WHERE dom = ?", [f"c{chat_id}"]) == \
        [(None, f"c{chat_id}"), (chat_id, f"c{chat_id}")]
    assert soup(client.get("/")).select(f"#c{chat_id}") == []
    assert soup(client.get("/search", params={"q": "otters"})).select("#results li") == []
    assert client.post(chat + "/delete", data={"_csrf_token": csrf(client)}).status_code == 404


def test_delete_with_htmx_redirects_the_page(client):
    chat = new_chat(client)
    r = client.post(chat + "/delete", data={"_csrf_token": csrf(client)}, headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["hx-redirect"] == "/"


BAD_IDS = ["abc", "999999", "99999999999999999999999", "-1", "0", "1.5", "%00", "٣", "1e3", "%2e%2e"]


def test_bad_ids_are_404_not_500(client):
    token = csrf(client)
    for raw in BAD_IDS:
        for suffix in ["/delete", "/export.md", "/export.json"]:
            assert client.get(f"/c/{raw}{suffix}").status_code == 404, (raw, suffix)
        assert client.post(f"/c/{raw}/delete", data={"_csrf_token": token}).status_code == 404, raw


def deleted_mid_run_then_a_new_conversation(client, fake, data, script, started) -> tuple[int, str]:
    """Delete a conversation while it is answered, start another at once (SQLite may give
    it the same id) and have it answered; return (the deleted id, the new one's path)."""
    fake.script(script)
    chat = new_chat(client)
    chat_id = int(chat.rsplit("/", 1)[1])
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "Talk for a long time"})
    wait_for(started)
    client.post(chat + "/delete", data={"_csrf_token": csrf(client)})
    assert db_rows(data, "SELECT count(*) FROM items WHERE chat = ?", [chat_id])[0][0] == 0
    assert db_rows(data, "SELECT count(*) FROM runs WHERE chat = ?", [chat_id])[0][0] == 0
    fake.script("Still here.")
    other = new_chat(client)
    client.post(other + "/ask", data={"_csrf_token": csrf(client), "text": "Anyone?"})
    wait_for(lambda: "Still here." in client.get(other).text, timeout=15)
    return chat_id, other


def only_its_own_items(data, path, wait=1.5):
    time.sleep(wait)  # long enough for a run that went on to write again
    chat = int(path.rsplit("/", 1)[1])
    assert db_rows(data, "SELECT kind, text FROM items WHERE chat = ? ORDER BY id", [chat]) == \
        [("user", "Anyone?"), ("text", "Still here.")]
    assert db_rows(data, "SELECT count(*) FROM items WHERE text LIKE '%word%' OR text = 'too late'")[0][0] == 0


def test_deleting_during_a_run_ends_it_and_the_worker_goes_on(client, fake, data):
    _, other = deleted_mid_run_then_a_new_conversation(
        client, fake, data, [rate(20), text("word " * 400)],
        lambda: any(len(r["text"]) > 20 for r in texts(data)))
    only_its_own_items(data, other)


def test_deleting_before_the_first_token_ends_the_run(client, fake, data):
    _, other = deleted_mid_run_then_a_new_conversation(
        client, fake, data, [stall(1.0), text("too late")], lambda: fake.wait_requests(1))
    only_its_own_items(data, other)


def test_export_markdown_and_json_round_trip_the_conversation(client, fake):
    chat = conversation_with_an_answer(client, fake)
    # the name comes from a side request of its own, which may end after the answer (loaded machine)
    wait_for(lambda: soup(client.get(chat)).select_one("title").text == "A fitting title · Tabletalk")
    links = {a.text: a["href"] for a in soup(client.get(chat)).select("a")}
    assert links["Export Markdown"] == chat + "/export.md" and links["Export JSON"] == chat + "/export.json"
    md = client.get(chat + "/export.md")
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert md.headers["content-disposition"].startswith('attachment; filename="')
    assert "Tell me about otters <script>x</script>" in md.text
    assert "Otters hold hands while they sleep." in md.text
    assert md.text.startswith("# A fitting title")
    js = client.get(chat + "/export.json")
    assert js.status_code == 200 and js.headers["content-type"].startswith("application/json")
    assert js.headers["content-disposition"] == 'attachment; filename="A-fitting-title.json"'
    data = js.json()
    assert data["version"] == export.FORMAT_VERSION and data["conversation"]["id"] == int(chat.rsplit("/", 1)[1])
    kinds = [(row["kind"], row["text"]) for row in data["items"]]
    assert kinds == [("user", "Tell me about otters <script>x</script>"), ("reasoning", "hmm"),
                     ("text", "Otters hold hands while they sleep.")]


def test_export_names_a_hostile_title_safely(client):
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": 'Über "quotes"\n/etc/passwd'})
    r = client.get(chat + "/export.md")
    value = r.headers["content-disposition"]
    assert value.startswith('attachment; filename="Uber-quotes-etc-passwd.md"')
    assert unquote(value.split("filename*=UTF-8''")[1]) == "Über-quotes-etc-passwd.md"


# --- live: the list drops a deleted conversation; a page open on it is told ----------------------


def test_the_feed_sends_the_removal_to_the_list_and_to_the_open_page(store):
    writer = store
    keep, gone = writer.new_conversation(1, "keep"), writer.new_conversation(1, "gone")
    writer.ask(gone.id, "hello")
    feed = Feed(database_of(store), render=live.chat_changes, render_list=sidebar.list_changes)
    listing, page, elsewhere = feed.follow(None), feed.follow(gone.id), feed.follow(keep.id)
    assert writer.delete_conversation(gone.id) and not writer.delete_conversation(gone.id)
    feed.dispatch()
    [(rev, data)] = listing.messages
    assert data == encode(rev, f'<div id="c{gone.id}" hx-swap-oob="delete"></div>')
    [(_, data)] = page.messages
    html = "\n".join(v for line in data.decode().splitlines() if (v := sse_value(line, "data")) is not None)
    said = BeautifulSoup(html, "html.parser")
    assert "This conversation was deleted" in said.select_one('#status[hx-swap-oob="true"]').text
    assert said.select_one('#composer[hx-swap-oob="delete"]') is not None
    assert not elsewhere.messages
    feed.db.conn.close()


@pytest.mark.process
def test_a_list_page_and_a_conversation_page_see_the_deletion_live(served, fake):
    from tests.test_serve import read_events, session

    client, token = session(served)
    chat = start_chat(client, "soon deleted", token=token)
    chat_id = chat.rsplit("/", 1)[1]
    since = re.search(r"events\?since=(\d+)", client.get("/").text).group(1)
    found = {}
    opened = {"list": threading.Event(), "page": threading.Event()}

    def follow(path, key, until):
        try:
            found[key] = read_events(served, path, until, timeout=10, opened=opened[key])
        except httpx.HTTPError as e:
            found[key] = e

    readers = [
        threading.Thread(target=follow, args=(f"/events?since={since}", "list",
                                              lambda m: any(f'id="c{chat_id}" hx-swap-oob="delete"' in d for _, d in m))),
        threading.Thread(target=follow, args=(f"{chat}/events?since={since}", "page",
                                              lambda m: any("This conversation was deleted" in d for _, d in m))),
    ]
    for t in readers:
        t.start()
    assert all(e.wait(10) for e in opened.values()), "both streams are open"
    client.post(chat + "/delete", data={"_csrf_token": token})
    for t in readers:
        t.join(12)
    assert any(f'<div id="c{chat_id}" hx-swap-oob="delete"></div>' in d for _, d in found["list"])
    assert any("This conversation was deleted" in d for _, d in found["page"])


def test_a_deleted_conversations_id_is_never_reused(client):
    token = csrf(client)
    first = start_chat(client, "first", token=token)
    client.post(first + "/delete", data={"_csrf_token": token})
    second = start_chat(client, "second", token=token)
    assert second != first and client.get(first).status_code == 404
