"""PostgreSQL stopped while the app serves (the test session's cluster, `down` then `up`): the
outage is said as one, never as a bug of ours (/healthz 503 with the reason, a page's banner
instead of "Something went wrong", the live feed's banner), and everything goes on once the
database answers: the feed from its cursor, a run cut by it from its last complete step,
answered exactly once. (The chaos of it, with kills and pauses: tests/test_chaos*.py.)"""
import logging
import threading
import time

import pytest

from app.run.runner import FAILED
from app.accounts.rules import COOKIE
from app.store import postgres as pg
from app.store.outage import WORDS
from tests.conftest import Served, ask, csrf, idle, new_chat, rows, soup, wait_for
from tests.fakes.openai_server import hold, text

FIRST, REST = "The first words of the answer, ", "and the rest of it, written once the database is back."


@pytest.fixture
def env(env, pg_url, monkeypatch):
    """The app on the test's own PostgreSQL database."""
    monkeypatch.setenv("DATABASE_URL", pg_url)
    return env | {"DATABASE_URL": pg_url}


@pytest.fixture
def outage(pg_cluster):
    """`with outage():` the server stopped for the block; started again after it, whatever happens."""
    class Outage:
        def __call__(self):
            pg_cluster.down()
            return self

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pg_cluster.up()

    try:
        yield Outage()
    finally:
        pg_cluster.up()


def test_healthz_answers_503_with_the_reason_while_the_database_is_down_and_200_once_it_is_back(client, outage):
    assert client.get("/healthz").json() == {"ok": True, "rev": client.get("/healthz").json()["rev"]}
    with outage():
        for _ in range(3):
            started = time.monotonic()
            r = client.get("/healthz")
            assert time.monotonic() - started < pg.CONNECT_SECONDS, "one attempt at most, never a wait"
            assert (r.status_code, r.json()) == (503, {"ok": False, "reason": "the database is unreachable"})
        token = client.cookies.get(COOKIE)
        client.cookies.clear()
        anyone = client.get("/healthz")
        client.cookies.set(COOKIE, token)
        assert anyone.status_code == 503 and "127.0.0.1" not in anyone.text, "the address is for the log"
    back = time.monotonic()
    wait_for(lambda: client.get("/healthz").status_code == 200, 15, every=0.1)
    assert time.monotonic() - back < 15


def test_a_page_says_the_database_is_unreachable_instead_of_failing(client, outage, caplog):
    chat = new_chat(client)
    token = csrf(client, chat)
    with outage():
        page = client.get(chat)
        assert page.status_code == 503 and page.headers["retry-after"] == "5"
        html = soup(page)
        banner = html.select_one("#outage[role=alert]")
        assert banner is not None and banner.get_text(strip=True) == WORDS
        assert "Something went wrong" not in page.text and html.select_one("h1").get_text() == "Unavailable for now"
        assert html.select_one('meta[http-equiv="refresh"]')["content"] == "5", "it asks again by itself"
        assert html.select_one("#side") is None, "nothing that needs the database"
        sent = client.post(chat + "/ask", data={"_csrf_token": token, "text": "hello"}, follow_redirects=False)
        assert sent.status_code == 503 and "not saved" in sent.text and soup(sent).select_one("#outage").get_text()
        htmx = client.post(chat + "/ask", data={"_csrf_token": token, "text": "hello"}, headers={"HX-Request": "true"})
        assert htmx.status_code == 503 and htmx.text.startswith(WORDS)
    assert "unhandled error" not in caplog.text and "Traceback" not in caplog.text
    wait_for(lambda: client.get(chat).status_code == 200, 15, every=0.1)
    assert soup(client.get(chat)).select_one("#outage").get_text() == "", "the banner is empty (hidden) again"


def test_an_answer_cut_by_an_outage_resumes_from_its_last_complete_step_once(make_client, fake, data, outage, caplog):
    """The model's stream ends while the database is down: the step cannot be written, the
    run ends writing nothing more (no "failed on our side", the message not marked answered),
    and once the database answers the step is made again, whole, once."""
    caplog.set_level(logging.WARNING)
    go_on = threading.Event()
    fake.script([text(FIRST), hold(go_on), text(REST)], [text(FIRST + REST)])
    with make_client(TABLETALK_LEASE_SECONDS="30") as client:
        runner = client.app.state.tabletalk.runner
        chat = new_chat(client)
        number = int(chat.rsplit("/", 1)[1])
        ask(client, chat, "Say it")
        wait_for(lambda: any(r["kind"] == "text" and r["text"] == FIRST for r in rows(data)), 15)
        before = rows(data)
        with outage():
            go_on.set()  # the stream ends now: its step's write finds the database gone
            wait_for(lambda: number not in runner.runs, 15)
            assert len(fake.streamed) == 1
        wait_for(lambda: answered_once(data), 20)
        page = idle(client, chat)
    after = rows(data)
    texts = [(r["text"], r["done"]) for r in after if r["kind"] == "text"]
    assert texts == [(FIRST + REST, 1)], "one answer, whole"
    assert [r["done"] for r in after if r["kind"] == "user"] == [1]
    assert not [r for r in after if r["kind"] == "error"], "no error, no notice"
    assert [r for r in before if r["kind"] == "user"][0]["done"] == 0
    assert len(fake.streamed) == 2, "the cut step asked for again, once"
    assert FAILED not in page.text and page.select_one("article.text").get_text(strip=True) == FIRST + REST
    assert "resumes from its last complete step" in caplog.text
    assert "Traceback" not in caplog.text


def answered_once(data) -> bool:
    """Whether the message is answered; never marked so before its answer is whole and done.
    (False while this process's pool cannot reach the database yet: the app's own is the same.)"""
    try:
        now = rows(data)
    except pg.Unreachable:
        return False
    [user] = [r for r in now if r["kind"] == "user"]
    if not user["done"]:
        return False
    assert [(r["text"], r["done"]) for r in now if r["kind"] == "text"] == [(FIRST + REST, 1)], now
    return True


def test_an_answer_that_streams_through_a_short_outage_is_written_whole_once(make_client, fake, data, outage, caplog):
    """The model goes on while the database is down (its growth cannot be written: nothing
    is said for it but the runner's outage line): the answer ends whole, once, either written
    at its step's end once the database is back or, had a write of the run failed, made again."""
    caplog.set_level(logging.WARNING)
    down, back = threading.Event(), threading.Event()
    fake.script([text(FIRST), hold(down), text(REST[:20]), hold(back), text(REST[20:])], [text(FIRST + REST)])
    with make_client(TABLETALK_LEASE_SECONDS="30") as client:
        chat = new_chat(client)
        ask(client, chat, "Say it")
        wait_for(lambda: any(r["kind"] == "text" and r["text"] == FIRST for r in rows(data)), 15)
        with outage():
            down.set()  # it grows while nothing can be written
            time.sleep(0.5)
        wait_for(lambda: client.get("/healthz").status_code == 200, 15, every=0.1)
        back.set()
        wait_for(lambda: answered_once(data), 20)
        idle(client, chat)
    assert len(fake.streamed) in (1, 2)
    assert not [r for r in rows(data) if r["kind"] == "error"]
    assert "Traceback" not in caplog.text and FAILED not in caplog.text


@pytest.mark.browser
def test_an_open_page_shows_the_banner_and_goes_on_once_the_database_is_back(browser, data, env, fake, outage):
    """The page's stream stays open through the outage: the feed's banner comes and goes,
    and the next answer streams into the same page (no reload, no error in the console).
    A page asked for meanwhile is the banner's too. Screenshots, light and dark: SHOTS."""
    from playwright.sync_api import expect

    from tests.conftest import SHOTS, light_and_dark

    fake.script("The answer before.", "The answer after.")
    served = Served(data, env).start()
    try:
        with served.watched_page(browser) as page:
            page.goto(served.empty_chat())
            box = page.locator("#composer textarea")
            box.fill("hello")
            box.press("Enter")
            expect(page.locator("article.text")).to_have_text("The answer before.", timeout=15_000)
            page.evaluate("window.__sameDocument = true")
            banner = page.locator("#outage[role=alert]")
            expect(banner).to_be_hidden()
            with outage():
                expect(banner).to_have_text(WORDS, timeout=15_000)
                for scheme in ("light", "dark"):
                    page.emulate_media(color_scheme=scheme)
                    page.screenshot(path=f"{SHOTS}/outage-live-{scheme}.png")
                    colors = banner.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor,"
                                             " getComputedStyle(document.body).color]")
                    assert colors[0] == colors[2] and colors[0] != colors[1], colors
                fresh = served.context(browser).new_page()
                fresh.goto(served.url + "/")
                expect(fresh.locator("#outage[role=alert]")).to_have_text(WORDS)
                light_and_dark(fresh, f"{SHOTS}/outage-page-{{scheme}}.png")
                fresh.context.close()
            expect(banner).to_be_hidden(timeout=20_000)
            box.fill("again")
            box.press("Enter")
            expect(page.locator("article.text").nth(1)).to_have_text("The answer after.", timeout=15_000)
            assert page.evaluate("window.__sameDocument") is True, "no reload happened"
    finally:
        served.stop()
    assert "Traceback" not in served.log.read_text()
