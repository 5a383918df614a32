"""Two servers on one PostgreSQL database: two `tabletalk serve` processes with data folders
of their own (standing in for two machines) and one DATABASE_URL. Every message is answered
exactly once, whichever server took it (many at once too), a page on one follows what the
other wrote, Stop and an approval decided on one reach the run on the other, and after
kill -9 of the server running an answer the other takes it over once the lease
(TABLETALK_LEASE_SECONDS, 4 s here) expires, running no completed step again."""
import re
import threading
import time

import httpx
import pytest

from tests.conftest import Served, rows, start_chat, wait_for
from tests.conftest import texts as text_items
from tests.fakes.openai_server import rate, text, tool_call
from tests.test_serve import read_events, session

pytestmark = pytest.mark.process

LEASE = 4  # seconds: a dead server's conversations are taken over after this (renewed every third)


@pytest.fixture
def servers(data, env, pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", pg_url)  # the tests' own reads (rows, signed_in) too
    shared = env | {"DATABASE_URL": pg_url, "TABLETALK_LEASE_SECONDS": str(LEASE)}
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
    opened = threading.Event()

    def follow():
        try:
            found["b"] = read_events(b, f"{chat}/events?since={since}",
                                     lambda m: any("The answer, live across servers." in d for _, d in m), timeout=20,
                                     opened=opened)
        except httpx.HTTPError as e:
            found["b"] = e

    reader = threading.Thread(target=follow)
    reader.start()
    assert opened.wait(20), "B's stream is open"
    assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "hello"},
                       follow_redirects=False).status_code == 303
    reader.join(25)
    assert any("The answer, live across servers." in d for _, d in found["b"])



def running_on(servers, data, chat: str, wait: bool = True):
    """Which server's worker holds the conversation's lease (its owner names the worker's pid,
    a child of the server's process); None when none does (`wait` False)."""
    held = lambda: rows(data, f"SELECT owner FROM runs WHERE chat = {int(chat.rsplit('/', 1)[1])}")  # noqa: E731
    owner = wait_for(held, 30) if wait else held()
    if not owner:
        return None
    pid = int(owner[0]["owner"].split(":")[1])
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    [server] = [s for s in servers if parent in (s.proc.pid, pid)]
    return server


def test_stop_sent_to_the_other_server_ends_the_run(servers, fake, data):
    """A long answer runs on one server; Stop is posted to the other: the run ends there,
    what was written stays, nothing is written after."""
    fake.script([rate(20), text("word " * 400)])
    client, token = session(servers[0])
    chat = start_chat(client, "Talk for a long time", token=token)
    wait_for(lambda: any(len(r["text"]) > 20 for r in text_items(data)), 30)
    runner = running_on(servers, data, chat)
    other, other_token = session(servers[1] if runner is servers[0] else servers[0])
    assert other.post(chat + "/stop", data={"_csrf_token": other_token},
                      headers={"HX-Request": "true"}).status_code == 204
    wait_for(lambda: all(r["done"] for r in rows(data, "SELECT done FROM items")), 15)
    written = text_items(data)[0]["text"]
    time.sleep(0.5)
    assert text_items(data)[0]["text"] == written, "nothing after stop"
    assert 20 < len(written) < len("word " * 400)


def test_after_kill_9_of_the_server_running_an_answer_the_other_takes_it_over(servers, fake, data):
    """The lease of the killed server's worker expires (TABLETALK_LEASE_SECONDS), the other server's
    runner takes the conversation and answers from the last complete step: the cut answer
    is replaced, the page shows it once, the model is asked the same again."""
    import signal

    words = " ".join(f"w{i}" for i in range(120))
    fake.script([rate(40), text(words)], [rate(200), text(words)])
    client, token = session(servers[0])
    chat = start_chat(client, "Say the words", token=token)
    texts = lambda: text_items(data)  # noqa: E731
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


# --- nothing but the database shared: files' bytes, the key that signs forms, setup codes -------


def token_in(page: str) -> str:
    return re.search(r'name="_csrf_token" value="([^"]+)"', page).group(1)


def test_a_file_uploaded_through_one_server_downloads_through_the_other(servers, fake):
    """Its bytes are rows of the database (in chunks), in neither server's data folder."""
    import os

    from app.store.blobs import CHUNK

    a, b = servers
    fake.script("Got it.")
    content = os.urandom(2 * CHUNK + 12_345)  # three chunks, the last one short
    client, token = session(a)
    chat = start_chat(client, "keep this", token=token,
                      files=[("file", ("notes.bin", content, "application/octet-stream")),
                             ("file", ("empty-named/../x.txt", b"short words", "text/plain"))])
    there, _ = session(b)
    links = re.findall(r'href="(/files/\d+)"', there.get(chat).text)
    assert len(set(links)) == 2
    got = there.get(links[0])
    assert got.status_code == 200 and got.content == content, "byte for byte, through B"
    assert got.headers["content-length"] == str(len(content))
    assert got.headers["content-disposition"].startswith('attachment; filename="notes.bin"')
    small = there.get(links[-1])
    assert small.content == b"short words" and 'filename="x.txt"' in small.headers["content-disposition"]
    for server in servers:
        assert not (server.data / "files").exists(), "no bytes on either server's disk"
    assert rows(a.data, "SELECT count(*) AS n FROM blobs") == [{"n": 2}]


def test_a_form_whose_page_came_from_one_server_is_taken_by_the_other(servers, fake):
    """The key that signs forms is the database's: a message sent with the token of A's page
    is taken by B, and signing in on B with A's sign-in page works, its session on both."""
    from tests.conftest import OWNER, PASSWORD

    a, b = servers
    fake.script("Answered.")
    chat = a.empty_chat()
    with a.client(timeout=10) as on_a, httpx.Client(base_url=b.url, cookies=a.cookies, timeout=10) as on_b:
        token = token_in(on_a.get(chat).text)
        r = on_b.post(chat + "/ask", data={"_csrf_token": token, "text": "from A's page"}, follow_redirects=False)
        assert r.status_code == 303, r.text
    wait_for(lambda: rows(a.data, "SELECT text FROM items WHERE kind = 'text' AND done = 1"), 30)
    assert [r["text"] for r in rows(a.data, "SELECT text FROM items WHERE kind = 'user'")] == ["from A's page"]
    with httpx.Client(base_url=a.url, timeout=10) as anon_a:
        form = anon_a.get("/signin")
        token, pre = token_in(form.text), anon_a.cookies.get("tabletalk_pre")
    assert pre
    with httpx.Client(base_url=b.url, cookies={"tabletalk_pre": pre}, timeout=10) as anon_b:
        r = anon_b.post("/signin", data={"_csrf_token": token, "name": OWNER, "password": PASSWORD, "next": "/"},
                        follow_redirects=False)
        assert r.status_code == 303, r.text
        signed = anon_b.cookies.get("tabletalk_session")
    assert signed
    with httpx.Client(base_url=a.url, cookies={"tabletalk_session": signed}, timeout=10) as back_on_a:
        assert back_on_a.get("/", follow_redirects=False).status_code == 200, "the session B made is good on A"
    with httpx.Client(base_url=b.url, cookies={"tabletalk_pre": pre}, timeout=10) as forged:
        r = forged.post("/signin", data={"_csrf_token": "0" * 64, "name": OWNER, "password": PASSWORD},
                        follow_redirects=False)
        assert r.status_code == 403, "a token no server signed is still refused"


def test_the_setup_code_either_server_printed_works_on_both(data, env, pg_url, tmp_path, monkeypatch):
    """No account yet: each server prints a code of its own at start, the second's start does
    not void the first's, and either is taken by either server."""
    monkeypatch.setenv("DATABASE_URL", pg_url)
    shared = env | {"DATABASE_URL": pg_url}
    other = tmp_path / "data-b"
    a = Served(data, shared, account=False).start()
    b = Served(other, shared | {"TABLETALK_DATA": str(other)}, account=False).start()
    try:
        printed = [re.search(r"/setup\?code=(\S+)", s.log.read_text()).group(1) for s in (a, b)]
        assert printed[0] != printed[1]
        form = {"name": "Ada", "password": "analytical engine"}
        with a.client(timeout=10) as on_a, b.client(timeout=10) as on_b:
            refused = on_a.post("/setup", data={**form, "again": form["password"], "code": "not it",
                                                "_csrf_token": token_in(on_a.get("/setup").text)})
            assert refused.status_code == 403 and "setup code" in refused.text
            # A's code on B: taken (the form goes on to its next check, the passwords differ)
            r = on_b.post("/setup", data={**form, "again": "something else", "code": printed[0],
                                          "_csrf_token": token_in(on_b.get("/setup").text)})
            assert r.status_code == 400 and "passwords differ" in r.text
            # B's code on A, with A's page: set up
            r = on_a.post("/setup", data={**form, "again": form["password"], "code": printed[1],
                                          "_csrf_token": token_in(on_a.get("/setup").text)}, follow_redirects=False)
            assert r.status_code == 303, r.text
        assert rows(data, "SELECT name FROM people") == [{"name": "Ada"}]
        assert rows(data, "SELECT count(*) AS n FROM secrets WHERE name LIKE 'setup %'") == [{"n": 0}], "spent"
    finally:
        for s in (a, b):
            s.stop()
def test_many_messages_at_once_are_each_answered_once(servers, fake, data):
    """30 conversations posted alternately to both servers, as fast as they take them: each
    message reaches the model once and gets one answer, whichever server's runner took it."""
    a, b = servers
    n = 30
    fake.script(*[f"Answer {k}." for k in range(n)])
    sessions = [session(a), session(b)]
    chats = [start_chat(sessions[k % 2][0], f"question {k}", token=sessions[k % 2][1]) for k in range(n)]
    wait_for(lambda: not rows(data, "SELECT 1 FROM items WHERE kind = 'user' AND done = 0"), 90)
    answers = rows(data, "SELECT chat, turn, text FROM items WHERE kind = 'text' ORDER BY id")
    assert sorted(r["text"] for r in answers) == sorted(f"Answer {k}." for k in range(n))
    assert len({r["turn"] for r in answers}) == n and len({r["chat"] for r in answers}) == len(set(chats)) == n
    assert len(fake.streamed) == n, "each message sent to the model once"
    assert not rows(data, "SELECT 1 FROM items WHERE kind = 'error'")


def test_an_approval_decided_on_the_other_server_reaches_the_waiting_run(servers, fake, data):
    """The run waits for the person's approval on one server; the decision is posted to the
    other: the waiting run hears it (through the rows), runs the tool and goes on."""
    from tests.test_approval import PLAN, agent_waits_for

    agent_waits_for(data)
    fake.script([text("I'll make a plan."), tool_call("update_plan", {"plan": PLAN})], "Planned and done.")
    client, token = session(servers[0])
    chat = start_chat(client, "Plan it", token=token)
    [call] = wait_for(lambda: rows(data, "SELECT id FROM items WHERE state = 'approval'"), 30)
    runner = running_on(servers, data, chat)
    other, other_token = session(servers[1] if runner is servers[0] else servers[0])
    assert other.post(f"{chat}/calls/{call['id']}", data={"_csrf_token": other_token, "decision": "approve"},
                      follow_redirects=False).status_code == 303
    wait_for(lambda: rows(data, "SELECT done FROM items WHERE kind = 'user'") == [{"done": 1}], 30)
    assert rows(data, f"SELECT state FROM items WHERE id = {call['id']}") == [{"state": "done"}]
    assert [r["text"] for r in rows(data, "SELECT text FROM items WHERE kind = 'text' ORDER BY id")] == [
        "I'll make a plan.", "Planned and done."]
    assert len(fake.streamed) == 2 and fake.streamed[1]["messages"][-1]["content"].startswith("Plan saved")
    assert running_on(servers, data, chat, wait=False) is None, "released"


def test_a_takeover_after_kill_9_runs_no_completed_step_again(servers, fake, data):
    """Step 1 (a tool call) completed, step 2 streams when the server running it is killed:
    the other server takes the conversation once the lease expires and makes step 2 again
    from the same request; the tool is not run again, its call stays the one item."""
    import signal

    from tests.test_approval import PLAN

    words = " ".join(f"w{i}" for i in range(120))
    fake.script([tool_call("update_plan", {"plan": PLAN})], [rate(40), text(words)], [rate(200), text(words)])
    client, token = session(servers[0])
    chat = start_chat(client, "Plan, then say the words", token=token)
    texts = lambda: text_items(data)  # noqa: E731
    wait_for(lambda: texts() and len(texts()[0]["text"]) > 30, 30)
    [call] = rows(data, "SELECT id, state FROM items WHERE kind = 'call'")
    assert call["state"] == "done"
    runner = running_on(servers, data, chat)
    survivor = servers[1] if runner is servers[0] else servers[0]
    runner.signal(signal.SIGKILL)
    runner.proc.wait(5)
    killed = time.monotonic()
    wait_for(lambda: len(fake.streamed) == 3, 40)  # step 2 asked again, once the lease expired
    assert time.monotonic() - killed > LEASE / 2, "not before the dead server's lease ran out"
    wait_for(lambda: any(r["done"] for r in texts()), 40)
    assert [r["text"] for r in texts()] == [words], "the cut step replaced, shown once"
    assert rows(data, "SELECT id, state FROM items WHERE kind = 'call'") == [{"id": call["id"], "state": "done"}]
    assert fake.streamed[2]["messages"] == fake.streamed[1]["messages"], "from the last complete step"
    assert sum(1 for m in fake.streamed[2]["messages"] if m["role"] == "tool") == 1, "the tool's one result"
    assert rows(data, "SELECT done FROM items WHERE kind = 'user'") == [{"done": 1}]
    page, _ = session(survivor)
    assert page.get(chat).text.count("w119") == 1
