"""`tabletalk serve` as a real process: the form, the SSE stream, the database, shutdown."""
import re
import threading
import time

import httpx
import pytest
from bs4 import BeautifulSoup

from tests.conftest import Served, sse_value, start_chat, wait_for
from tests.conftest import rows as db_rows
from tests.fakes.openai_server import rate, reasoning, stall, text

pytestmark = pytest.mark.process

ANSWER = ("Streaming works. " * 20).strip()


def session(served: Served) -> tuple[httpx.Client, str]:
    client = served.client(timeout=10, follow_redirects=True)
    token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
    return client, token


def read_events(served: Served, path: str, until, headers=None, timeout: float = 15.0,
                opened: threading.Event | None = None) -> list[tuple[str, str]]:
    """Read SSE messages (id, data) until `until(messages)` holds, signed in as the owner;
    `opened` is set once the stream's headers came (the server follows it from then on)."""
    messages: list[tuple[str, str]] = []
    with httpx.stream("GET", served.url + path, headers=headers or {}, cookies=served.cookies,
                      timeout=timeout) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        if opened is not None:
            opened.set()
        event_id, data = "", []
        for line in r.iter_lines():
            if (value := sse_value(line, "id")) is not None:
                event_id = value
            elif (value := sse_value(line, "data")) is not None:
                data.append(value)
            elif line == "" and data:
                messages.append((event_id, "\n".join(data)))
                data = []
                if until(messages):
                    return messages
    return messages


def test_a_message_sent_through_the_form_streams_in_over_sse(served: Served, fake):
    fake.script([reasoning("Thinking it over."), rate(200), text(ANSWER)])
    client, token = session(served)
    chat = served.empty_chat()  # open before the message, to follow it from the start
    assert re.fullmatch(r"/c/\d+", chat)
    since = re.search(r'events\?since=(\d+)', client.get(chat).text).group(1)
    r = client.post(chat + "/ask", data={"_csrf_token": token, "text": "Stream please"}, follow_redirects=False)
    assert r.status_code == 303

    def finished(messages):
        joined = "".join(m[1] for m in messages)
        found = re.search(r'<article id="(i\d+)" data-key="[^"]+" class="item text"', joined)
        return found is not None and f'id="{found.group(1)}-s" class="state done"' in joined

    messages = read_events(served, f"{chat}/events?since={since}", finished)
    ids = [int(m[0]) for m in messages]
    assert ids == sorted(ids) and ids[0] >= int(since)
    growing = [m for m in messages if "state growing" in m[1] or "<hx-a " in m[1]]
    assert len(growing) >= 2, "the answer arrives in pieces while it grows"
    assert all(m[1].startswith(("<hx-partial ", "<hx-a ", "<div id=\"status\"", "<span id=")) for m in messages), \
        "fragments, not escaped text"

    rows = [tuple(r.values()) for r in db_rows(served.data, "SELECT kind, text, done FROM items ORDER BY id")]
    assert [r[0] for r in rows] == ["user", "reasoning", "text"]
    assert rows[2][1] == ANSWER and all(r[2] == 1 for r in rows)
    page = BeautifulSoup(client.get(chat).text, "html.parser")
    assert page.select_one("article.text").get_text(" ", strip=True).startswith("Streaming works.")


def test_last_event_id_wins_over_since(served: Served):
    client, token = session(served)
    chat = start_chat(client, "one", token=token)
    wait_for(lambda: "A fitting title" in client.get(chat).text)  # the run's last write
    top = int(client.get("/healthz").json()["rev"])
    # since=0 would replay everything; the header says the page already has it all.
    messages = read_events(served, f"{chat}/events?since=0", lambda m: True,
                           headers={"Last-Event-ID": str(top)})
    assert messages[0][0] == str(top)
    assert "<article" not in messages[0][1]
    # a cursor ahead of the database (another database, a restore) resyncs everything
    messages = read_events(served, f"{chat}/events?since={top + 1000}", lambda m: True)
    assert messages[0][1].count("<article") == 2


def test_sigterm_ends_open_streams_and_the_server_exits_promptly(served: Served, fake):
    fake.script([stall(30), text("never")])
    client, token = session(served)
    chat = start_chat(client, "wait", token=token)
    ended = []

    def follow():
        try:
            with httpx.stream("GET", f"{served.url}{chat}/events?since=0", cookies=served.cookies, timeout=30) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass
        ended.append(time.monotonic())

    followers = [threading.Thread(target=follow) for _ in range(3)]
    for t in followers:
        t.start()
    time.sleep(1.0)
    took = served.stop()
    for t in followers:
        t.join(5)
    assert took < 2.0, f"shutdown took {took:.2f}s with followers attached"
    assert len(ended) == 3


def test_sigusr2_prints_where_each_thread_of_a_worker_is_and_the_worker_goes_on(served: Served, fake):
    fake.script([stall(30), text("never")])
    client, token = session(served)
    start_chat(client, "wait", token=token)
    (pid,) = served.worker_pids()
    printed = served.stacks(pid)
    assert "Current thread" in printed and "File " in printed, printed[-6000:]
    assert client.get("/healthz").status_code == 200
    assert served.worker_pids() == [pid], "the worker was not started again"


def test_a_restarted_server_keeps_revs_and_serves_the_same_page(data, env, fake):
    first = Served(data, env).start()
    try:
        client, token = session(first)
        chat = start_chat(client, "remember me", token=token)
        wait_for(lambda: "A fitting title" in client.get(chat).text)  # the last write of the run
        rev = client.get("/healthz").json()["rev"]
    finally:
        first.stop()
    second = Served(data, env).start()
    try:
        client2 = second.client()
        assert client2.get("/healthz").json()["rev"] == rev
        assert "remember me" in client2.get(chat).text
    finally:
        second.stop()
