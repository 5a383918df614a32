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



def running_on(servers, data, chat: str):
    """Which server's worker holds the conversation's lease (its owner names the worker's pid,
    a child of the server's process)."""
    owner = wait_for(lambda: rows(data, f"SELECT owner FROM runs WHERE chat = {int(chat.rsplit('/', 1)[1])}"), 30)
    pid = int(owner[0]["owner"].split(":")[1])
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    [server] = [s for s in servers if parent in (s.proc.pid, pid)]
    return server


def test_stop_sent_to_the_other_server_ends_the_run(servers, fake, data):
    """A long answer runs on one server; Stop is posted to the other: the run ends there,
    what was written stays, nothing is written after."""
    from tests.fakes.openai_server import rate, text

    fake.script([rate(20), text("word " * 400)])
    client, token = session(servers[0])
    chat = start_chat(client, "Talk for a long time", token=token)
    wait_for(lambda: any(len(r["text"]) > 20 for r in rows(data, "SELECT text FROM items WHERE kind = 'text'")), 30)
    runner = running_on(servers, data, chat)
    other, other_token = session(servers[1] if runner is servers[0] else servers[0])
    assert other.post(chat + "/stop", data={"_csrf_token": other_token},
                      headers={"HX-Request": "true"}).status_code == 204
    wait_for(lambda: all(r["done"] for r in rows(data, "SELECT done FROM items")), 15)
    written = rows(data, "SELECT text FROM items WHERE kind = 'text'")[0]["text"]
    time.sleep(0.5)
    assert rows(data, "SELECT text FROM items WHERE kind = 'text'")[0]["text"] == written, "nothing after stop"
    assert 20 < len(written) < len("word " * 400)


def test_after_kill_9_of_the_server_running_an_answer_the_other_takes_it_over(servers, fake, data):
    """The lease of the killed server's worker expires (LEASE_SECONDS), the other server's
    runner takes the conversation and answers from the last complete step: the cut answer
    is replaced, the page shows it once, the model is asked the same again."""
    import signal

    from tests.fakes.openai_server import rate, text

    words = " ".join(f"w{i}" for i in range(120))
    fake.script([rate(40), text(words)], [rate(200), text(words)])
    client, token = session(servers[0])
    chat = start_chat(client, "Say the words", token=token)
    texts = lambda: rows(data, "SELECT id, text, done FROM items WHERE kind = 'text' ORDER BY id")  # noqa: E731
    wait_for(lambda: texts() and len(texts()[0]["text"]) > 30, 30)
    runner = running_on(servers, data, chat)
    survivor = servers[1] if runner is servers[0] else servers[0]
    runner.signal(signal.SIGKILL)
    runner.proc.wait(5)
    cut = texts()[0]
    assert not cut["done"] and len(cut["text"]) < len(words)
    wait_for(lambda: any(r["done"] for r in texts()), 40)  # the lease expires, then the answer
    assert [(r["text"], r["id"] != cut["id"]) for r in texts()] == [(words, True)], "once, anew"
    assert rows(data, "SELECT done FROM items WHERE kind = 'user'") == [{"done": 1}]
    assert len(fake.streamed) == 2 and fake.streamed[1]["messages"] == fake.streamed[0]["messages"]
    page, _ = session(survivor)
    assert page.get(chat).text.count("w119") == 1
