"""Pages and forms, in-process: what a person sees and sends, with and without htmx."""
import re

import pytest
from bs4 import BeautifulSoup

from tests.conftest import app_client, csrf, new_chat, soup, wait_for
from tests.fakes.openai_server import error, reasoning, text


def items_of(client, path):
    return soup(client.get(path)).select("#items > article")


def test_home_is_a_new_conversation_and_the_sidebar_lists_the_latest_message_first(client):
    page = soup(client.get("/"))
    assert page.select_one("h1").text == "New conversation"
    assert page.select_one('form#composer[action="/c"][method="post"] textarea[name=text]') is not None
    assert page.select_one('nav#side[aria-label="Conversations"] a.new-convo').text == "New conversation"
    assert page.select_one('meta[name="htmx-config"]')["content"] == '{"extensions": "sse, upsert, grow"}'
    first, second = new_chat(client), new_chat(client)
    token = csrf(client)
    client.post(second + "/ask", data={"_csrf_token": token, "text": "older one"})
    client.post(first + "/ask", data={"_csrf_token": token, "text": "newer one"})
    links = [a["href"] for a in soup(client.get("/")).select("#conversations a.open")]
    assert links == [first, second], "the last message, not the id, orders the list"


def test_a_message_without_javascript_is_answered_after_the_redirect(client, fake):
    fake.script([reasoning("Let me think."), text("Hello **there**.")])
    fake.plain_default = [error(500)]  # no model-made title: the first words stay
    chat = new_chat(client)
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "Hi!"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == chat + "#end", "it opens at the newest message"
    page = wait_for(lambda: (p := soup(client.get(chat))).select_one("article.text .state.done") and p)
    user, thought, answer = page.select("#items > article")
    assert "user" in user["class"] and user.select_one(".body").text == "Hi!"
    assert re.fullmatch(r"Thought for \d+ s", thought.select_one("details summary").text)
    assert not thought.select_one("details").has_attr("open"), "closed once it is over"
    assert answer.select_one("strong").text == "there"
    assert page.select_one("h1#title").text == "Hi!"
    assert fake.streamed[-1]["messages"][-1] == {"role": "user", "content": "Hi!"}


def test_with_htmx_the_form_answers_204_and_the_feed_brings_the_change(client):
    chat = new_chat(client)
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "Hi"},
                    headers={"HX-Request": "true"}, follow_redirects=False)
    assert r.status_code == 204


def test_a_running_conversation_refreshes_itself_without_javascript(client, fake):
    from tests.fakes.openai_server import stall
    fake.script([stall(3), text("late")])
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "Hi"})
    page = soup(client.get(chat))
    # the page itself stays (a half-typed message with it): a frame refreshes instead
    assert page.select_one('meta[http-equiv="refresh"]') is None
    frame = page.select_one("noscript iframe.watch-frame")
    assert frame["src"] == chat + "/watch"
    assert page.select_one("#status .typing") is not None
    r = client.get(chat + "/watch")
    assert "frame-ancestors 'self'" in r.headers["content-security-policy"] and r.headers["x-frame-options"] == "SAMEORIGIN"
    watched = soup(r)
    assert watched.select_one('meta[http-equiv="refresh"]') is not None and watched.select("script") == []
    assert watched.select_one("article.user .body").text == "Hi" and watched.select_one("#status .typing")
    assert "frame-ancestors 'none'" in client.get(chat).headers["content-security-policy"], "the page itself is never framed"
    done = soup(wait_for(lambda: (r := client.get(chat + "/watch")) and "complete" in r.text and r, timeout=15))
    assert done.select_one('meta[http-equiv="refresh"]') is None, "it stops refreshing when the answer is done"
    assert done.select_one('a[target="_top"]')["href"] == chat + "?#end", "a new URL: a real navigation"


def test_an_unreachable_model_gives_an_error_in_plain_words(client, fake):
    fake.script([error(401, "bad key")])
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "Hi"})
    err = wait_for(lambda: soup(client.get(chat)).select_one("article.error .error"))
    assert "refused the key" in err.text and "Traceback" not in err.text


@pytest.mark.parametrize("text,status,says", [
    ("", 400, "empty"),
    ("   \n\t ", 400, "empty"),
    ("x" * 100_001, 413, "too long"),
])
def test_bad_messages_get_a_clear_error_and_write_nothing(client, text, status, says):
    chat = new_chat(client)
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": text})
    assert r.status_code == status and says in r.text
    assert items_of(client, chat) == []


def test_a_model_that_is_not_offered_is_refused(client):
    chat = new_chat(client)
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "hi", "model": "nope<script>"})
    assert r.status_code == 400 and "<script>" not in r.text


def test_a_message_can_name_its_model(client, fake):
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "hi", "model": "other-model"})
    assert fake.wait_requests(1)[-1]["model"] == "other-model"


@pytest.mark.parametrize("path", [
    "/c/abc", "/c/999999", "/c/99999999999999999999999999", "/c/-1", "/c/0", "/c/1.5", "/c/%00",
    "/c/abc/events", "/c/٣",
])
def test_bad_ids_are_404_not_500(client, path):
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("path", ["/c/abc/ask", "/c/999999/ask", "/c/999999/stop"])
def test_posts_to_missing_conversations_are_404(client, path):
    assert client.post(path, data={"_csrf_token": csrf(client), "text": "x"}).status_code == 404


def test_every_form_needs_the_csrf_token(client):
    chat = new_chat(client)
    assert client.post("/c", data={}).status_code == 403
    r = client.post(chat + "/ask", data={"text": "sneaky"})
    assert r.status_code == 403 and "expired" in r.text
    assert client.post(chat + "/ask", data={"text": "sneaky", "_csrf_token": "forged"}).status_code == 403
    assert items_of(client, chat) == []


def test_without_a_model_server_the_page_says_how_to_connect_one(monkeypatch, data):
    monkeypatch.setenv("TABLETALK_DATA", str(data))
    monkeypatch.setenv("AI_URL", "")
    with app_client(data, raise_server_exceptions=True) as c:
        page = soup(c.get("/"))
        assert "AI_URL" in page.select_one("#connect").text
        chat = new_chat(c)
        c.post(chat + "/ask", data={"_csrf_token": csrf(c), "text": "Hi"})
        err = wait_for(lambda: soup(c.get(chat)).select_one("article.error .error"))
        assert "AI_URL" in err.text


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["ok"] is True


def test_static_files_are_served_locally(client):
    page = soup(client.get("/"))
    for tag in page.select("script[src], link[href]"):
        url = tag.get("src") or tag.get("href")
        assert url.startswith("/static/"), f"{url} is fetched from another host"
        assert client.get(url).status_code == 200


def test_every_page_sends_the_security_headers(client):
    chat = new_chat(client)
    for path in ["/", chat, "/agents", "/c/999999", "/static/app.css"]:
        r = client.get(path)
        csp = r.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers["referrer-policy"] == "same-origin", path


def test_no_template_has_inline_script():
    from pathlib import Path
    for t in (Path(__file__).resolve().parent.parent / "templates").glob("*.html"):
        html = t.read_text()
        soup_ = BeautifulSoup(html, "html.parser")
        assert all(s.get("src") for s in soup_.select("script")), f"inline script in {t.name}"
        assert " on" not in " ".join(str(tag.attrs) for tag in soup_.find_all(True) if any(a.startswith("on") for a in tag.attrs)), t.name


def test_a_conversations_first_load_is_a_handful_of_requests_under_100_kb(client, fake):
    """Counted as a browser gets it: compressed on the wire (br or gzip), each asset once."""
    fake.script("A short answer.")
    chat = new_chat(client)
    client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": "Hi"})
    wait_for(lambda: soup(client.get(chat)).select_one("article.text .state.done"))
    accept = {"Accept-Encoding": "br, gzip"}
    page = client.get(chat, headers=accept)
    assets = [t.get("src") or t.get("href") for t in soup(page).select("script[src], link[href]")]
    got = [page] + [client.get(a, headers=accept) for a in assets]
    assert len(got) <= 8, f"{len(got)} requests"
    assert all(r.headers.get("content-encoding") in ("br", "gzip") for r in got if len(r.content) > 1024), \
        [(str(r.url), r.headers.get("content-encoding")) for r in got]
    wire, decoded = sum(r.num_bytes_downloaded for r in got), sum(len(r.content) for r in got)
    assert wire < 100_000, f"{wire:,} bytes on the wire on first load"
    assert decoded < 200_000, f"{decoded:,} bytes decoded on first load"
