"""Usage (docs/usage.md): each person's tokens per model and UTC day, from the scripted
OpenAI-compatible server's usage or, where it reports none, our estimate marked so; counted
once per model request, across a crash and a resume; the daily limit said in the composer and
refused for a form, a page without script and the API, losing nothing typed; the Usage page
the owner's alone; hostile limits refused."""
from __future__ import annotations

import asyncio
import signal

import pytest

from app.accounts import usage as usage_rules
from app.agent import Delta
from app.run.turn import Turn
from app.run.writes import Writes
from app.store import Store
from app.store import db as dbm
from app.store.usage import Used
from app.tables import asked
from app.web.usage import AXIS_STEPS, chart
from tests.conftest import COOKIE, Served, ask, csrf, database, idle, rows, signed_in, soup, start_chat, wait_for, store_of
from tests.fakes.openai_server import rate, text, usage
from tests.test_openai_api import ask as api_ask
from tests.test_openai_api import make_key, refusal

PAGE = "/settings/usage"
TODAY = usage_rules.today()
WORDS = "You have used today’s 1,000 tokens; it resets at 00:00 UTC."


def days(data) -> list[dict]:
    return rows(data, "SELECT person, day, model, prompt, completion, cached, requests, estimated FROM usage_days "
                      "ORDER BY day, model")


def owner_of(client) -> int:
    return store_of(client).owner()


# --- what is counted --------------------------------------------------------------------------


def test_the_servers_usage_is_kept_per_person_model_and_day(client, fake, data):
    fake.script([text("Hello there."), usage(120, 30, 20)])
    idle(client, start_chat(client, "hi"))
    [row] = days(data)
    assert row == {"person": owner_of(client), "day": TODAY, "model": "fake-model", "prompt": 120,
                   "completion": 30, "cached": 20, "requests": 1, "estimated": 0}
    assert [(r["prompt"], r["completion"]) for r in rows(data, "SELECT * FROM turn_usage")] == [(120, 30)]
    account = soup(client.get("/account"))
    mine = account.select_one("#usage-mine-title").text
    assert "Your tokens a day" in mine and TODAY[:8] + "01" in mine
    cells = {r.th.text.strip(): [td.text.strip() for td in r.select("td")] for r in account.select("table.usage-table tr")
             if r.th and r.select("td")}
    assert cells["fake-model"] == ["120", "30", "150"] and cells[TODAY] == ["120", "30", "150"]


def test_a_server_that_reports_no_usage_is_estimated_and_marked(client, fake, data):
    fake.sends_usage = False
    fake.script(text("An answer of a few words, counted by our estimate."))
    idle(client, start_chat(client, "hi"))
    [row] = days(data)
    assert row["requests"] == 1 and row["estimated"] == 1 and row["prompt"] > 0 and row["completion"] > 0
    assert rows(data, "SELECT estimated FROM turn_usage") == [{"estimated": 1}]
    marks = soup(client.get("/account")).select("abbr.estimated")
    assert marks and "1 of 1 request counted by Tabletalk’s estimate" in marks[0]["title"]


def test_a_step_cut_after_its_usage_came_counts_once_when_made_again(store):
    """The process dies after the server's usage arrived and before the step was written: the
    step is made again on resume, and only that request's tokens count (they are written in
    the write that ends the step, never before it)."""
    person = store.owner() or store.add_person("Ann", "x", owner=True)
    chat = store.new_conversation(store.default_agent(person).id, person=person).id
    user = store.ask(chat, "Say something")

    async def dies(messages, tools):
        yield Delta(text="Half an ans")
        yield Delta(usage={"prompt": 500, "completion": 50, "cached": 0})
        raise asyncio.CancelledError  # the worker is gone before the step's end is written

    async def answers(messages, tools):
        yield Delta(text="A whole answer.")
        yield Delta(usage={"prompt": 510, "completion": 40, "cached": 0})

    def turn() -> Turn:
        return Turn(store, Writes(store), chat, user, store.default_agent(person), "m", person=person)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(turn().run(dies))
    assert store.usage_by("model", TODAY, TODAY) == [], "nothing counted for a step that was not written"
    asyncio.run(turn().run(answers))
    [used] = store.usage_by("model", TODAY, TODAY)
    assert (used.key, used.prompt, used.completion, used.requests) == ("m", 510, 40, 1)
    assert store.turn_usage(user.id)["requests"] == 1


def test_a_stopped_answer_is_paid_for_as_far_as_it_went(client, fake, data):
    """Stop must not step around a daily limit: a request cut by Stop counts our estimate of
    its prompt and of the words written (the server's usage, when it came before the cut: a
    server sends it last, so the scripted one cannot cut after it)."""
    import threading

    from tests.fakes.openai_server import hold

    release = threading.Event()
    words = " ".join(f"word{i}" for i in range(400))
    fake.script([text(words), hold(release), text(" end."), usage(50_000, 4_000)])
    chat = start_chat(client, "x " * 2000)
    try:
        wait_for(lambda: "word390" in client.get(chat).text)  # (a growing text's last words are held back)
        client.post(f"{chat}/stop", data={"_csrf_token": csrf(client)}, headers={"hx-request": "true"})
        idle(client, chat)
    finally:
        release.set()
    [day] = days(data)
    assert day["prompt"] > 1_000 and day["completion"] > 400 and day["estimated"] == 1, day
    assert day["requests"] == 1


def test_the_day_is_the_utc_day_the_step_ended(store):
    person = store.add_person("Ann", "x", owner=True) if not store.owner() else store.owner()
    chat = store.new_conversation(store.default_agent(person).id, person=person).id
    user = store.ask(chat, "hi")
    midnight = 1_741_305_600.0  # 2025-03-07 00:00 UTC

    async def answers(messages, tools):
        yield Delta(text="Hello.")
        yield Delta(usage={"prompt": 7, "completion": 3, "cached": 0})

    asyncio.run(Turn(store, Writes(store), chat, user, None, "m", person=person, clock=lambda: midnight - 1).run(answers))
    assert [u.key for u in store.usage_by("day", "2025-03-01", "2025-03-31")] == ["2025-03-06"]


@pytest.mark.process
def test_a_kill_9_mid_answer_counts_each_request_once(data, env, fake):
    """A real server killed mid-answer and started again: the answered turn is not counted
    again, the cut request (its usage never came) not at all, the one made again once."""
    fake.script([text("First answer."), usage(100, 10)], [rate(40), text(" ".join(f"w{i}" for i in range(120))),
                                                          usage(999, 999)],
                [text("Made again."), usage(200, 20)])
    first = Served(data, env).start()
    db = dbm.connect(database(data))
    store = Store(db)
    try:
        person = store.owner()
        chat = store.new_conversation(store.default_agent(person).id, person=person).id
        store.add(asked(chat, "one"))
        wait_for(lambda: store.used_on(person, TODAY) == 110, timeout=20)
        store.add(asked(chat, "two"))
        wait_for(lambda: any(len(r["text"]) > 30 for r in db.conn.execute(
            "SELECT text FROM items WHERE kind = 'text' AND done = 0").fetchall()), timeout=20)
        first.signal(signal.SIGKILL)
        first.proc.wait(5)
        second = Served(data, env).start()
        try:
            wait_for(lambda: db.conn.execute("SELECT count(*) FROM items WHERE kind = 'user' AND done = 0")
                     .fetchone()[0] == 0, timeout=30)
            [used] = store.usage_by("person", TODAY, TODAY)
            assert (used.prompt, used.completion, used.requests) == (300, 30, 2)
        finally:
            second.stop()
    finally:
        db.conn.close()


# --- the daily limit --------------------------------------------------------------------------


def spend(store, person: int, tokens: int) -> None:
    store.add_usage(person, "fake-model", TODAY, tokens, 0)


def test_the_composer_says_the_limit_is_used_and_every_send_is_refused_keeping_what_was_typed(client, fake, data):
    fake.script([text("Hello."), usage(10, 5)])
    chat = start_chat(client, "hi")
    idle(client, chat)
    store = store_of(client)
    me = owner_of(client)
    store.set_token_limit(me, 1_000)
    assert "limit" not in (soup(client.get(chat)).select_one("#composer-error") or {"class": ""})["class"]
    spend(store, me, 1_000)
    for path in (chat, "/"):
        said = soup(client.get(path)).select_one("#composer #composer-error")
        assert said is not None and said.text.strip() == WORDS, path
    before = rows(data, "SELECT count(*) AS n FROM items")[0]["n"]
    # a form without script: the page again, the words in the composer, the text still in the box
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "my long message"}, follow_redirects=False)
    assert r.status_code == 429
    assert soup(r).select_one("#composer textarea").text == "my long message"
    assert soup(r).select_one("#composer-error").text.strip() == WORDS
    r = client.post("/c", data={"_csrf_token": csrf(client), "text": "a new one"}, follow_redirects=False)
    assert r.status_code == 429 and soup(r).select_one("#composer textarea").text == "a new one"
    # with script: the words, which app.js shows above the box it leaves as it is
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "again"}, headers={"HX-Request": "true"})
    assert r.status_code == 429 and r.text == WORDS + " Nothing was sent."
    for path in (f"{chat}/retry", ):
        r = client.post(path, data={"_csrf_token": csrf(client)}, headers={"HX-Request": "true"})
        assert r.status_code == 429 and WORDS in r.text, path
    head = rows(data, "SELECT id FROM items WHERE kind = 'user'")[0]["id"]
    r = client.post(f"{chat}/answers/{head}/again", data={"_csrf_token": csrf(client)}, headers={"HX-Request": "true"})
    assert r.status_code == 429 and WORDS in r.text
    r = client.post(f"{chat}/items/{head}/edit", data={"_csrf_token": csrf(client), "text": "edited"},
                    headers={"HX-Request": "true"})
    assert r.status_code == 429 and WORDS in r.text
    assert rows(data, "SELECT count(*) AS n FROM items")[0]["n"] == before, "nothing was written"
    # another person's day is theirs: Bea sends as ever
    client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
    fake.script(text("Hi Bea."))
    assert "Hi Bea." in idle(client, start_chat(client, "hello")).text


def test_messages_queued_before_the_limit_was_reached_are_not_sent_past_it(client, fake, data):
    """The limit is kept at each request, not only at each send: thirty messages sent at once
    under it (each send finds it unspent) are answered until it is spent, then refused in
    words in their conversation, and the server hears no more."""
    import threading

    from tests.fakes.openai_server import hold

    release = threading.Event()
    store = store_of(client)
    store.set_token_limit(owner_of(client), 1_000)
    fake.script([text("First."), hold(release), usage(900, 200)], *[[text("More."), usage(900, 200)]] * 5)
    chat = start_chat(client, "one")
    for n in range(5):
        ask(client, chat, f"and {n}")
    release.set()
    idle(client, chat)
    assert len(fake.streamed) == 1, "only the first request went: the others found the limit spent"
    errors = [r["text"] for r in rows(data, "SELECT text FROM items WHERE kind = 'error'")]
    assert len(errors) == 5 and all(e == WORDS + " Nothing was sent." for e in errors), errors
    assert [d["prompt"] + d["completion"] for d in days(data)] == [1_100]


def test_the_api_is_refused_in_the_same_words(client, fake, data):
    key = make_key(client)
    store = store_of(client)
    store.set_default_token_limit(1_000)
    spend(store, owner_of(client), 1_200)
    before = rows(data, "SELECT count(*) AS n FROM conversations")[0]["n"]
    error = refusal(api_ask(client, key), 429)
    assert error["message"] == WORDS + " Nothing was sent."
    assert rows(data, "SELECT count(*) AS n FROM conversations")[0]["n"] == before and not fake.requests


def test_limits_reset_at_midnight_utc_and_a_persons_own_wins_over_the_default(store):
    person = store.add_person("Ann", "x", owner=True) if not store.owner() else store.owner()
    store.set_default_token_limit(500)
    noon = 1_741_348_800.0  # 2025-03-07 12:00 UTC
    store.add_usage(person, "m", "2025-03-07", 400, 100)
    assert usage_rules.allowance(store, person, lambda: noon).spent
    assert usage_rules.refusal(store, person, lambda: noon) == (
        "You have used today’s 500 tokens; it resets at 00:00 UTC. Nothing was sent.")
    assert not usage_rules.allowance(store, person, lambda: noon + 12 * 3600).spent, "a new day, a new allowance"
    store.set_token_limit(person, 2_000)
    assert usage_rules.allowance(store, person, lambda: noon) == usage_rules.Allowance(2_000, 500)
    store.set_token_limit(person, None)
    assert usage_rules.allowance(store, person, lambda: noon).limit is None, "no limit for them"
    store.set_token_limit(person, None, own=False)
    assert usage_rules.allowance(store, person, lambda: noon).limit == 500, "the default's again"


# --- the Usage page ---------------------------------------------------------------------------


def test_the_usage_page_shows_everyone_per_person_and_per_model_with_a_chart(client, data):
    store = store_of(client)
    me = owner_of(client)
    signed_in(data, "Bea", owner=False)
    bea = next(p.id for p in store.people() if p.name == "Bea")
    store.add_usage(me, "fake-model", TODAY, 1_000, 200)
    store.add_usage(bea, "other-model", usage_rules.days_before(TODAY, 3), 50, 5, estimated=True)
    store.add_usage(bea, "other-model", usage_rules.days_before(TODAY, 40), 7, 7)  # before the range
    page = soup(client.get(PAGE))
    svg = page.select_one("figure.usage-chart svg")
    assert svg["role"] == "img" and svg.title.text.startswith("Everyone’s tokens a day") and svg.desc.text
    assert len(svg.select("g rect.in")) == 2, "a bar for each day with tokens"
    people = {r.th.text.strip(): [td.text.strip() for td in r.select("td")] for r in page.select("table.usage-table")[1]
              .select("tbody tr")}
    assert people[store.person(me).name] == ["1,000", "200", "1,200", "1,200"]
    assert people["Bea"] == ["50", "5", "55*", "0"]
    models = [r.th.text.strip() for r in page.select("table.usage-table")[2].select("tbody tr")]
    assert models == ["fake-model", "other-model"]
    wide = soup(client.get(f"{PAGE}?from={usage_rules.days_before(TODAY, 60)}&to={TODAY}"))
    assert "62" not in wide.select_one("#usage-all-desc").text and "61 days" in wide.select_one("#usage-all-desc").text
    for hostile in ("from=yesterday", "from=2025-13-45", "to=../../etc", "from=0001-01-01", "from=9999-12-31&to=0001-01-01",
                    "from=0001-01-01&to=0001-01-02", "from=&to="):
        r = client.get(f"{PAGE}?{hostile}")
        assert r.status_code == 200, hostile
        assert len(soup(r).select("table.usage-days-table tbody tr")) <= 366


@pytest.mark.parametrize("most", [0, 1, 3, 7, 10, 999, 1_001, 200_000, 210_000, 2_500_000])
def test_the_charts_axis_lines_are_round_exact_and_above_the_highest_day(most):
    drawn = chart(["2026-12-01", "2026-12-02"], {"2026-12-02": Used("2026-12-02", most, 0)})
    labels = [label for _, label in drawn.ticks]
    step = drawn.top // AXIS_STEPS
    assert drawn.top >= most and drawn.top == step * AXIS_STEPS and str(step)[0] in "125", (most, drawn.top)
    assert len(set(labels)) == len(labels) == AXIS_STEPS + 1, labels  # a day of one token read "0, 0, 0, 0, 1"
    assert [y for y, _ in drawn.ticks] == sorted((y for y, _ in drawn.ticks), reverse=True)


def test_a_member_sees_their_own_usage_and_is_refused_everyones(client, data):
    store = store_of(client)
    store.add_usage(owner_of(client), "fake-model", TODAY, 123_456, 7)
    client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
    assert client.get(PAGE).status_code == 403
    r = client.post(f"{PAGE}/limits", data={"_csrf_token": csrf(client, "/"), "default": "5"}, follow_redirects=False)
    assert r.status_code == 403 and store.default_token_limit() is None
    account = client.get("/account")
    assert account.status_code == 200 and "123,456" not in account.text and "Today (UTC): 0 tokens" in account.text
    assert "Usage" not in soup(client.get("/")).select_one("nav.main").text


@pytest.mark.parametrize("typed, words", [
    ("-5", "is not one"),
    ("ten thousand", "is not one"),
    ("1e6", "is not one"),
    ("99999999999999999999999", "at most 1,000,000,000,000"),
    ("0", "at least 1 token"),
    ("１０００", "is not one"),  # full-width digits: Python's isdigit, not a number a person means here
])
def test_hostile_limits_are_refused_beside_their_field_and_nothing_is_saved(client, typed, words):
    store = store_of(client)
    me = owner_of(client)
    for field in ("default", f"limit-{me}"):
        r = client.post(f"{PAGE}/limits", data={"_csrf_token": csrf(client, PAGE), field: typed}, follow_redirects=False)
        assert r.status_code == 400, (field, typed)
        note = soup(r).select_one(f"#problem-{field}")
        assert note is not None and words in note.text
        assert soup(r).select_one(f"input[name={field}]")["value"] == typed, "what was typed is kept"
        assert store.default_token_limit() is None and store.token_limits() == {}


def test_limits_are_saved_as_typed_and_empty_means_none_or_the_default(client, data):
    store = store_of(client)
    me = owner_of(client)
    signed_in(data, "Bea", owner=False)
    bea = next(p.id for p in store.people() if p.name == "Bea")
    r = client.post(f"{PAGE}/limits", data={"_csrf_token": csrf(client, PAGE), "default": " 200,000 ",
                                            f"limit-{bea}": "5_000", f"none-{me}": "1"}, follow_redirects=False)
    assert r.status_code == 303
    assert store.default_token_limit() == 200_000 and store.token_limits() == {bea: 5_000, me: None}
    page = soup(client.get(r.headers["location"]))
    assert page.select_one("input[name=default]")["value"] == "200,000"
    assert page.select_one(f"input[name=limit-{bea}]")["value"] == "5,000"
    assert page.select_one(f"input[name=none-{me}]").has_attr("checked")
    r = client.post(f"{PAGE}/limits", data={"_csrf_token": csrf(client, PAGE), "default": ""}, follow_redirects=False)
    assert r.status_code == 303 and store.default_token_limit() is None and store.token_limits() == {}


# --- the rows on both engines -----------------------------------------------------------------


def test_the_rows_on_both_engines(store):
    ann = store.add_person("Ann", "x", owner=True) if not store.owner() else store.owner()
    bob = store.add_person("Bob", "x")
    store.add_usage(ann, "a", "2025-03-07", 10, 1)
    store.add_usage(ann, "a", "2025-03-07", 20, 2, cached=5, estimated=True)
    store.add_usage(ann, "b", "2025-03-08", 100, 10)
    store.add_usage(bob, "a", "2025-03-08", 1, 1)
    store.add_usage(bob, "a", "2025-03-08", -50, 10**30)  # a hostile server's word is not kept as it is
    assert store.used_on(ann, "2025-03-07") == 33
    by_day = store.usage_by("day", "2025-03-01", "2025-03-31")
    assert [(u.key, u.prompt, u.requests, u.estimated) for u in by_day] == [("2025-03-07", 30, 2, 1),
                                                                            ("2025-03-08", 101, 3, 0)]
    assert by_day[1].completion == 11 + 100_000_000
    assert [u.key for u in store.usage_by("model", "2025-03-01", "2025-03-31", person=ann)] == ["b", "a"]
    assert [u.key for u in store.usage_by("person", "2025-03-08", "2025-03-08")] == [bob, ann]
    store.set_token_limit(bob, 1_000)
    store.set_default_token_limit(50)
    assert (store.token_limit(bob), store.token_limit(ann)) == (1_000, 50)
    store.remove_person(bob)
    assert store.usage_by("person", "2025-03-08", "2025-03-08")[0].key == ann and store.token_limits() == {}
