"""The sidebar's rows, groups and forms, lazy conversations, suggestions and search results,
in-process (issue 13); what only a browser shows is in test_browser_sidebar.py."""
from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from app.web import search
from app.tables import Conversation
from app.web.sidebar import PAGE, group_of, list_changes, parse_key, row_key
from tests.conftest import csrf, new_chat, rows, soup, start_chat, wait_for, store_of
from tests.fakes.openai_server import text

NOW = datetime(2026, 12, 1, 15, 30)


def at(t: datetime, pinned: bool = False, id: int = 1) -> Conversation:
    return Conversation(agent=None, id=id, active=int(t.timestamp() * 1000), pinned=pinned)


@pytest.mark.parametrize("when,label", [
    (NOW, "Today"),
    (NOW.replace(hour=0, minute=0, second=0), "Today"),
    (NOW.replace(hour=0, minute=0, second=0) - timedelta(seconds=1), "Yesterday"),
    (NOW - timedelta(days=2), "Previous 7 days"),
    (NOW.replace(hour=0) - timedelta(days=7), "Previous 7 days"),
    (NOW - timedelta(days=8), "Previous 30 days"),
    (NOW - timedelta(days=29), "Previous 30 days"),
    (NOW - timedelta(days=31), "October 2026"),
    (datetime(2025, 2, 10), "February 2025"),
])
def test_a_row_is_grouped_by_its_last_message(when, label):
    assert group_of(at(when), NOW).label == label
    assert group_of(at(when, pinned=True), NOW).label == "Pinned"


def test_a_groups_heading_sorts_above_its_rows_and_below_the_newer_groups_rows():
    """What lets a live upsert (sort:desc by data-key) put a row under the right heading."""
    times = [NOW, NOW - timedelta(hours=20), NOW - timedelta(days=3), NOW - timedelta(days=12),
             NOW - timedelta(days=40), NOW - timedelta(days=75), NOW - timedelta(days=400)]
    convos = [at(t, id=n + 1) for n, t in enumerate(times)] + [at(NOW - timedelta(days=90), pinned=True, id=99)]
    keyed = [(row_key(c), f"c{c.id}") for c in convos] + [(group_of(c, NOW).key, group_of(c, NOW).id) for c in convos]
    order = [dom for _, dom in sorted(set(keyed), reverse=True)]
    assert order == ["g-pinned", "c99", "g-today", "c1", "g-yesterday", "c2", "g-7", "c3", "g-30", "c4",
                     f"g-{(NOW - timedelta(days=40)):%Y-%m}", "c5", f"g-{(NOW - timedelta(days=75)):%Y-%m}", "c6",
                     f"g-{(NOW - timedelta(days=400)):%Y-%m}", "c7"]


def test_the_list_messages_take_a_row_out_then_upsert_it_with_its_heading(store):
    c = store.new_conversation(None, "Moving", person=None)
    html = list_changes(store, [store.conversation(c.id)], ["c7"])
    assert html.startswith('<div id="c7" hx-swap-oob="delete"></div><div id="c1" hx-swap-oob="delete"></div>')
    assert '<li id="g-today" class="group"' in html and "&lt;" not in html


def test_the_store_lists_pinned_first_then_the_latest_message_and_pages_by_key(store):
    a, b, c = (store.new_conversation(None, t) for t in "abc")
    time.sleep(0.002)  # a later millisecond than c's
    store.ask(a.id, "a speaks last")
    store.pin(b.id, True)
    listed = [x.id for x in store.conversations(None)]
    assert listed == [b.id, a.id, c.id]
    first = store.conversations(None, limit=2)
    rest = store.conversations(None, after=parse_key(row_key(first[-1])))
    assert [x.id for x in first + rest] == listed


def test_a_conversation_and_its_first_message_are_one_write(store):
    before = store.rev()
    convo, first = store.start_conversation(None, None, "Hello there", model="m")
    assert convo.title == "Hello there" and first.chat == convo.id and first.kind == "user"
    assert convo.active == int(first.created * 1000)
    assert store.rev() > before


def test_new_conversation_without_a_message_writes_nothing(client, data):
    token = csrf(client)
    r = client.post("/c", data={"_csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/?agent=")
    r = client.post("/c", data={"_csrf_token": token, "text": "   "}, headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["hx-redirect"].startswith("/")
    page = soup(client.get(r.headers["hx-redirect"]))
    assert page.select_one("#composer textarea") is not None and page.select("#conversations li.convo") == []
    assert rows(data, "SELECT count(*) AS n FROM conversations") == [{"n": 0}]


def test_the_first_message_makes_the_conversation_and_htmx_is_sent_there(client, data, fake):
    fake.script([text("Hi.")])
    r = client.post("/c", data={"_csrf_token": csrf(client), "text": "Hello"}, headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["hx-redirect"] == "/c/1"
    assert rows(data, "SELECT chat, kind, text FROM items WHERE kind = 'user'") == [
        {"chat": 1, "kind": "user", "text": "Hello"}]
    for bad in ({"text": "x" * 100_001}, {"text": "hi", "model": "nope"}, {"text": "hi", "when": "later"}):
        assert client.post("/c", data={"_csrf_token": csrf(client), **bad}).status_code in (400, 413)
    assert rows(data, "SELECT count(*) AS n FROM conversations") == [{"n": 1}], "a refused message writes nothing"


def test_rename_and_pin_check_what_they_are_given(client, data):
    chat = new_chat(client)
    token = csrf(client)
    for bad in ["", "   ", "x" * 81]:
        r = client.post(chat + "/rename", data={"_csrf_token": token, "title": bad})
        assert r.status_code == 400, bad
    r = client.post(chat + "/rename", data={"_csrf_token": token, "title": "  <b>Tea</b>\n notes ",
                                            "back": "//elsewhere.example/x"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/", "never back to another site"
    page = soup(client.get(chat))
    assert page.select_one(f'#conversations a.open[href="{chat}"]').text == "<b>Tea</b> notes"
    assert page.select_one(f'#conversations a.open[href="{chat}"] b') is None
    assert client.post(chat + "/pin", data={"_csrf_token": token, "pinned": "yes"}).status_code == 400
    r = client.post(chat + "/pin", data={"_csrf_token": token, "pinned": "1"},
                    headers={"Referer": "http://testserver.local/agents"}, follow_redirects=False)
    assert r.status_code == 303
    assert rows(data, "SELECT pinned FROM conversations") == [{"pinned": 1}]
    assert client.post(chat + "/pin", data={"_csrf_token": token, "pinned": "0"},
                       headers={"HX-Request": "true"}).status_code == 204
    assert rows(data, "SELECT pinned FROM conversations") == [{"pinned": 0}]
    assert client.post("/c/999999/pin", data={"_csrf_token": token, "pinned": "1"}).status_code == 404


def test_the_sidebar_is_on_every_signed_in_page_with_the_current_one_marked(client):
    chat = new_chat(client)
    for path in ["/", chat, chat + "/delete", chat + "/rename", "/agents", "/skills", "/search?q=x", "/account",
                 "/people", "/conversations"]:
        page = soup(client.get(path))
        side = page.select_one('nav#side[aria-label="Conversations"]')
        assert side is not None and side.select_one('form[role="search"] input[name="q"]') is not None, path
        assert len(page.select("h1")) == 1, path
        marked = [a["href"] for a in side.select('a[aria-current="page"]')]
        assert marked == ([chat] if path.startswith(chat) else []), path


def test_more_pages_by_a_cursor_and_refuses_one_it_did_not_make(client):
    store = store_of(client)
    person = store.owner()
    for n in range(PAGE + 3):
        store.new_conversation(None, f"n{n}", person=person)
    page = soup(client.get("/"))
    assert len(page.select("#conversations li.convo")) == PAGE
    more = page.select_one("#more a")["href"]
    rest = soup(client.get(more))
    assert [a.text for a in rest.select("main li.convo a.open")] == ["n2", "n1", "n0"]
    assert rest.select("main [id^='c']") == [], "the page's rows do not take the sidebar's ids"
    fragment = client.get(more, headers={"HX-Request": "true"}).text
    assert fragment.count('class="convo"') == 3 and '<p id="more" hx-swap-oob="true"></p>' in fragment
    for bad in ["x", "1-2", "1-2-3-4", "9" * 30 + "-1-1"]:
        assert client.get(f"/conversations?after={bad}").status_code == 400


def test_home_suggests_what_the_agent_says_else_defaults_and_the_field_is_checked(client):
    agent = store_of(client).default_agent(store_of(client).owner())
    suggested = [b["value"] for b in soup(client.get("/")).select(".suggestions button[name=text]")]
    assert len(suggested) == 4
    url = f"/agents/{agent.id}"
    r = client.post(url, data={"_csrf_token": csrf(client, url), "name": agent.name,
                               "suggestions": "Write a haiku\n\n  Explain   tides  \n"})
    assert r.status_code == 200
    assert soup(client.get(url)).select_one("textarea[name=suggestions]").text == "Write a haiku\nExplain tides"
    page = soup(client.get("/"))
    assert [b["value"] for b in page.select(".suggestions button[name=text]")] == ["Write a haiku", "Explain tides"]
    assert page.select_one(".suggestions form input[name=agent]")["value"] == str(agent.id)
    for bad in ["\n".join(f"s{n}" for n in range(9)), "x" * 201]:
        r = client.post(url, data={"_csrf_token": csrf(client, url), "name": agent.name, "suggestions": bad})
        assert r.status_code == 400
    # a settings form without the field leaves them as they were
    client.post(url, data={"_csrf_token": csrf(client, url), "name": agent.name})
    assert soup(client.get(url)).select_one("textarea[name=suggestions]").text == "Write a haiku\nExplain tides"
    assert client.get("/?agent=999").status_code == 400


def test_search_results_are_plain_text_with_the_match_marked_a_date_and_the_agent(client, fake):
    fake.script([text("Here is **Bold** advice about `otters` and [a link](https://example.org).\n\n"
                      "# Heading\n\n<script>x</script> and more")])
    chat = start_chat(client, "Tell me something")
    wait_for(lambda: "Bold" in client.get("/search", params={"q": "bold"}).text)
    page = soup(client.get("/search", params={"q": "bold"}))
    snippet = page.select_one(f"#r{chat.rsplit('/', 1)[1]} .snippet")
    assert snippet.select_one("mark").text == "Bold"
    assert "**" not in snippet.text and "`" not in snippet.text and "https://example.org" not in snippet.text
    assert "# Heading" not in snippet.text and "Heading" in snippet.text
    assert "<script>x" in snippet.text and snippet.select("script") == []
    meta = page.select_one(".results .meta")
    assert meta.select_one("time")["datetime"].startswith(datetime.now().strftime("%Y-%m-%d"))
    assert meta.select_one(".agent").text == "Assistant"


def test_plain_keeps_text_and_code_and_drops_markdown_syntax():
    o, c = search.MARKS
    assert search.plain(f"**{o}Bold{c}** and `x = 1`\n\n- item\n\n> quote") == f"{o}Bold{c} and x = 1 item quote"
    assert search.plain("```py\nprint(1)\n```\n![a cat](c.png)") == "print(1) a cat"


def test_a_conversation_pages_one_stream_carries_its_persons_list_too(store, client):
    from app.feed.dispatch import Feed
    from app.web import live, sidebar
    from tests.conftest import database_of

    writer = store
    a, b = writer.new_conversation(None, "a"), writer.new_conversation(None, "b")
    feed = Feed(database_of(store), render=live.chat_changes, render_list=sidebar.list_changes)
    page, plain = feed.follow(a.id, None, lists=True), feed.follow(b.id, None)
    writer.ask(b.id, "hello b")  # b's row moves in the list; nothing of a's own
    feed.dispatch()
    [(_, data)] = page.messages
    assert f'id="c{b.id}"' in data.decode() and 'hx-target="#conversations"' in data.decode()
    [(_, data)] = plain.messages
    assert 'hx-target="#conversations"' not in data.decode(), "a page not following the list is not sent it"
    page.messages.clear()
    writer.ask(a.id, "hello a")
    feed.dispatch()
    [(_, data)] = page.messages  # its items and the list, in one message of one rev
    assert "hello a" in data.decode() and f'<li id="c{a.id}"' in data.decode()
    feed.db.conn.close()
    # and the page opens that one stream only
    chat = new_chat(client)
    assert client.get(chat).text.count("hx-sse:connect=") == 1
    assert client.get("/agents").text.count('hx-sse:connect="/events?since=') == 1
