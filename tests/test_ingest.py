"""Reading documents is durable work (app/run/ingest.py): Stop and delete end a reading at
once (its child killed), a lost lease writes nothing more, and a worker killed mid-document
leaves it to the next, which goes on from the page after the last one written: every page
once, no passage twice, the same passages as one reading from start to end."""
import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from app.knowledge.reading import read
from app.store import db as dbm
from tests.conftest import csrf, database, rows, wait_for

pytestmark = pytest.mark.process  # documents are read in a child process (app/knowledge/reading.py)

ROWS = 60_000
CSV = ("id,name,notes\n" + "".join(f"{n},row {n},the tide rises at hour {n % 24} over stone {n % 97}\n"
                                   for n in range(ROWS))).encode()



def document(data) -> dict:
    found = rows(data, "SELECT * FROM documents")
    assert len(found) == 1, found
    return found[0]


def children(parent: int | None = None, data: Path | None = None) -> list[int]:
    """The reading children alive (of `parent`, or reading a copy under `data`, when given):
    processes running app.knowledge.child."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if b"app.knowledge.child" in cmdline and state != "Z" and (parent is None or int(ppid) == parent) \
                and (data is None or any(str(data).encode() in arg for arg in cmdline)):
            out.append(int(entry.name))
    return out


def my_children() -> list[int]:
    return children(os.getpid())


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def whole_reading(path: Path, kind: str) -> list[tuple[int, str, str]]:
    """The passages one reading from the first page to the last gives: (page, heading, text)."""
    async def go():
        return [(page.number, p.heading, p.text) async for page in read(path, kind) for p in page.passages]
    return asyncio.run(go())


def upload(client, collection: int, name: str = "tides.csv", content: bytes = CSV):
    r = client.post(f"/knowledge/{collection}/documents", data={"_csrf_token": csrf(client, f"/knowledge/{collection}")},
                    files=[("file", (name, content, "text/csv"))], follow_redirects=False)
    assert r.status_code == 303, r.text


def collection(client) -> int:
    r = client.post("/knowledge", data={"_csrf_token": csrf(client, "/knowledge"), "name": "Tides"},
                    follow_redirects=False)
    return int(r.headers["location"].split("/")[2].split("?")[0])


def reading_at(data, page: int) -> dict:
    return wait_for(lambda: (d := document(data))["state"] == "reading" and d["pages_read"] >= page and d)


def held(data, seconds: float = 1.5) -> dict:
    """The document's row, which must not move for `seconds` (nothing more is written)."""
    before = document(data)
    time.sleep(seconds)
    after = document(data)
    assert after == before, (before, after)
    return after


def test_stop_kills_the_child_at_once_keeps_the_pages_read_and_read_again_goes_on(client, data, tmp_path):
    c = collection(client)
    upload(client, c)
    reading_at(data, 3)
    assert len(my_children()) == 1, "one child reads the document"
    r = client.post(f"/knowledge/documents/{document(data)['id']}/stop",
                    data={"_csrf_token": csrf(client, f"/knowledge/{c}")}, follow_redirects=False)
    assert r.status_code == 303
    wait_for(lambda: my_children() == [], 10)
    stopped = held(data)
    assert stopped["state"] == "stopped" and 3 <= stopped["pages_read"] < stopped["pages"], stopped
    searchable = rows(data, "SELECT count(*) AS n FROM passages")[0]["n"]
    assert searchable == stopped["passages"] > 0, "the pages read so far stay searchable"

    r = client.post(f"/knowledge/documents/{stopped['id']}/again",
                    data={"_csrf_token": csrf(client, f"/knowledge/{c}")}, follow_redirects=False)
    assert r.status_code == 303
    done = wait_for(lambda: (d := document(data))["state"] == "ready" and d, 120)
    copy = tmp_path / "tides.csv"
    copy.write_bytes(CSV)
    whole = whole_reading(copy, "csv")
    got = rows(data, "SELECT page, heading, text FROM passages ORDER BY page, n")
    assert [(p["page"], p["heading"], p["text"]) for p in got] == whole, "went on from the page after the last"
    assert done["passages"] == len(whole) and done["pages_read"] == done["pages"] == whole[-1][0]
    assert my_children() == []


def test_a_document_deleted_while_it_is_read_stops_its_child_and_leaves_nothing(client, data):
    c = collection(client)
    upload(client, c)
    d = reading_at(data, 2)
    r = client.post(f"/knowledge/documents/{d['id']}/delete", data={"_csrf_token": csrf(client, f"/knowledge/{c}")},
                    follow_redirects=False)
    assert r.status_code == 303
    wait_for(lambda: my_children() == [], 10)
    time.sleep(1.5)
    assert rows(data, "SELECT * FROM documents") == [] and rows(data, "SELECT * FROM passages") == []
    assert list((data / "reading").iterdir()) == [], "its copy is gone"


def test_a_reader_that_lost_its_lease_writes_nothing_more(client, data):
    c = collection(client)
    upload(client, c)
    d = reading_at(data, 2)
    db = dbm.connect(database(data))
    try:  # another worker took it (this one was held up past its lease, say)
        with db.conn:
            db.conn.execute("UPDATE documents SET owner = 'elsewhere:1:x', leased = ? WHERE id = ?",
                            [time.time() + 3600, d["id"]])
    finally:
        db.conn.close()
    wait_for(lambda: my_children() == [], 10)
    after = held(data)
    assert after["owner"] == "elsewhere:1:x" and after["state"] == "reading"


@pytest.fixture(params=["sqlite", "postgresql"])
def engine_env(request, env, monkeypatch) -> dict:
    """The app's settings on SQLite's file, or on a PostgreSQL database of the test's own (its
    file's bytes are rows there, copied out for the child a chunk at a time)."""
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_url")
        monkeypatch.setenv("DATABASE_URL", url)  # conftest's rows() read it too
        return env | {"DATABASE_URL": url}
    return env


def test_a_worker_killed_mid_document_leaves_it_to_the_next_which_goes_on(data, engine_env, tmp_path):
    from tests.conftest import Served

    env = engine_env | {"TABLETALK_LEASE_SECONDS": "2"}
    served = Served(data, env).start()
    try:
        with served.client() as client:
            c = collection(client)
            upload(client, c)
            reading_at(data, 3)
            [child] = wait_for(lambda: children(data=data) or None)
            worker = parent_of(child)
            assert worker != served.proc.pid, "the child is the worker's (granian's worker process)"
            os.kill(worker, signal.SIGKILL)
            # the child dies with its worker (PR_SET_PDEATHSIG), never reading on as an orphan
            wait_for(lambda: child not in children(data=data), 10)
            # granian starts the worker again; it takes the document once the lease runs out
            done = wait_for(lambda: (d := document(data))["state"] == "ready" and d, 180)
        copy = tmp_path / "tides.csv"
        copy.write_bytes(CSV)
        whole = whole_reading(copy, "csv")
        got = rows(data, "SELECT page, heading, text FROM passages ORDER BY page, n")
        assert [(p["page"], p["heading"], p["text"]) for p in got] == whole, "every page once, none twice"
        assert done["passages"] == len(whole) and done["pages_read"] == done["pages"]
        assert children(data=data) == []
    finally:
        served.stop()


def test_a_server_stopped_mid_document_leaves_it_for_the_next_start(data, env):
    from tests.conftest import Served

    served = Served(data, env).start()
    try:
        with served.client() as client:
            c = collection(client)
            upload(client, c, content=CSV * 4)  # long enough to be read still as the server stops (~3,000 pages)
            reading_at(data, 2)
        # still mid-document: the reading gives the loop its turn between pages (it once held it
        # while the child ran ahead: the stop took 3.6 s instead of 0.1 s, and read all 9,086 pages)
        served.stop()
        left = document(data)
        assert left["state"] == "reading" and left["owner"] is None, "released at the stop, from its last page"
        assert children(data=data) == []
        served.start()
        done = wait_for(lambda: (d := document(data))["state"] == "ready" and d, 180)
        assert done["pages_read"] == done["pages"] and done["passages"] > left["passages"]
    finally:
        served.stop()


def test_the_collection_page_follows_a_reading_live(data, env):
    """The sidebar's stream (/events) brings each document's fragment as its reading moves."""
    from tests.conftest import Served

    served = Served(data, env).start()
    try:
        with served.client() as client:
            c = collection(client)
            page = client.get(f"/knowledge/{c}").text
            rev = page.split('/events?since=')[1].split('"')[0]
            with client.stream("GET", f"/events?since={rev}", timeout=30) as stream:
                upload(client, c)
                seen = ""
                deadline = time.monotonic() + 60
                for line in stream.iter_lines():
                    seen += line
                    if "reading page" in seen.lower() or time.monotonic() > deadline:
                        break
            assert 'id="document-' in seen and "reading page" in seen.lower(), seen[-2000:]
    finally:
        served.stop()



def test_a_conversations_page_follows_its_attached_documents_reading_beside_its_chip(data, env, fake):
    """A PDF attached to a message is read before the answer: the conversation's own stream
    brings its progress beside the attachment's chip, page by page, to "Ready"; the page
    loaded afterwards shows it there too."""
    from tests.conftest import Served, start_chat
    from tests.fakes.documents import text_pdf

    fake.script("First.", "It is tern-400.")
    served = Served(data, env).start()
    try:
        with served.client() as client:
            chat = start_chat(client, "Hello")
            wait_for(lambda: len(fake.streamed) >= 1)
            rev = client.get(chat).text.split("/events?since=")[1].split('"')[0]
            pdf = text_pdf([[f"Page {p} line {n} of the keeper's log." for n in range(40)] for p in range(1, 401)])
            seen, deadline = "", time.monotonic() + 60
            with client.stream("GET", f"{chat}/events?since={rev}", timeout=30) as stream:
                r = client.post(chat + "/ask", data={"_csrf_token": csrf(client, chat), "text": "What is the code?"},
                                files={"file": ("log.pdf", pdf, "application/pdf")}, follow_redirects=False)
                assert r.status_code == 303
                for line in stream.iter_lines():
                    seen += line + "\n"
                    if "Ready: 400 pages" in seen or time.monotonic() > deadline:
                        break
            [d] = rows(data, "SELECT id, state FROM documents")
            assert f'id="document-{d["id"]}-progress"' in seen and "Ready: 400 pages" in seen, seen[-1500:]
            assert "Reading page" in seen or "<progress" in seen, "its progress while it was read, not only its end"
            chip = client.get(chat).text.split('class="attachments"')[-1].split("</ul>")[0]
            assert "log.pdf" in chip and f'id="document-{d["id"]}-progress"' in chip and "Ready: 400 pages" in chip
    finally:
        served.stop()


def test_a_reading_that_ended_before_the_pages_stream_began_is_in_its_first_message(data, env):
    """A page rendered at rev R opens its stream (/events?since=R) a moment later, and the
    reading may have moved on, or ended, meanwhile: the stream's first message carries the
    document as it is now (it would otherwise show "Reading" until the page is reloaded)."""
    from tests.conftest import Served

    served = Served(data, env).start()
    try:
        with served.client() as client:
            c = collection(client)
            page = client.get(f"/knowledge/{c}").text
            rev = page.split("/events?since=")[1].split('"')[0]
            upload(client, c, "notes.txt", b"The moon pulls the sea.")
            [d] = wait_for(lambda: [x for x in rows(data, "SELECT * FROM documents") if x["state"] == "ready"] or None)
            first, deadline = "", time.monotonic() + 20
            with client.stream("GET", f"/events?since={rev}", timeout=30) as stream:
                for line in stream.iter_lines():  # (the stream's keep-alive comments come every few seconds)
                    first += line + "\n"
                    if (line.startswith("data:") and "document-" in line) or time.monotonic() > deadline:
                        break
            assert f'id="document-{d["id"]}"' in first and "Ready: " in first, first[:1000]
    finally:
        served.stop()
