"""Two servers on one PostgreSQL database: two `tabletalk serve` processes with data folders
of their own (standing in for two machines) and one DATABASE_URL. Every message is answered
exactly once, whichever server took it, and a page on one follows what the other wrote."""
import re
import threading
import time

import httpx
import pytest

from tests.conftest import Served, rows, start_chat, wait_for
from tests.test_serve import read_events, session

pytestmark = pytest.mark.process


@pytest.fixture
def servers(data, env, pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", pg_url)  # the tests' own reads (rows, signed_in) too
    shared = env | {"DATABASE_URL": pg_url}
    other = tmp_path / "data-b"
    a = Served(data, shared).start()
    b = Served(other, shared | {"TABLETALK_DATA": str(other)}).start()
    try:
        yield a, b
    finally:
        for s in (a, b):
            s.stop()


def test_each_message_is_answered_once_and_shown_on_both(servers, fake, data):
    a, b = servers
    fake.script(*[f"Answer {n}." for n in range(6)])
    chats = []
    for n, server in enumerate([a, b] * 3):
        client, token = session(server)
        chats.append((server, start_chat(client, f"question {n}", token=token)))
    for server, chat in chats:  # each page, on the server it was not sent to
        client, _ = session(b if server is a else a)
        wait_for(lambda: re.search(r"Answer \d\.", client.get(chat).text), 30)
    wait_for(lambda: not rows(data, "SELECT 1 FROM items WHERE kind = 'user' AND done = 0"), 30)
    answers = rows(data, "SELECT chat, turn, text FROM items WHERE kind = 'text' ORDER BY id")
    assert sorted(r["text"] for r in answers) == sorted(f"Answer {n}." for n in range(6))
    assert len({(r["chat"], r["turn"]) for r in answers}) == 6, "one answer per message"
    assert sum(1 for r in fake.requests if r.get("stream")) == 6, "each message sent to the model once"


def test_a_page_on_one_server_follows_an_answer_written_through_the_other(servers, fake):
    a, b = servers
    fake.script("The answer, live across servers.")
    chat = a.empty_chat()
    client, token = session(a)
    since = re.search(r"events\?since=(\d+)", client.get(chat).text).group(1)
    found: dict[str, object] = {}

    def follow():
        try:
            found["b"] = read_events(b, f"{chat}/events?since={since}",
                                     lambda m: any("The answer, live across servers." in d for _, d in m), timeout=20)
        except httpx.HTTPError as e:
            found["b"] = e

    reader = threading.Thread(target=follow)
    reader.start()
    time.sleep(0.5)  # B's stream is open
    assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "hello"},
                       follow_redirects=False).status_code == 303
    reader.join(25)
    assert any("The answer, live across servers." in d for _, d in found["b"])
