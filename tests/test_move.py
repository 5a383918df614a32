"""`tabletalk move-to DATABASE_URL`: a SQLite install copied into an empty PostgreSQL database
on the tests' throwaway cluster, then served from it; the refusals; hostile targets."""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import OWNER, ROOT, Served, on_sqlite, password_hash, soup
from tests.test_serve import read_events, session

from app.store import schema

pytestmark = pytest.mark.process


@pytest.fixture
def env(env, monkeypatch):
    """The install moved is SQLite's: its app is on SQLite under TABLETALK_TEST_POSTGRES=1 too."""
    return on_sqlite(env, monkeypatch)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(200))


def build(data: Path) -> dict:
    """An install as a person leaves it: two people signed in, agents with a memory, a plugin
    with its OAuth row and an MCP session, a skill, conversations with an edited message (a
    branch) and an answer made again (versions), items of every kind, a file, a deleted
    conversation (its tombstone), the model list, limits, calibrations, a context and a
    sign-in attempt. Returns what the tests look for."""
    from app import tables
    from app.accounts.rules import Accounts
    from app.providers.ids import Choice
    from app.providers.limits import Limits
    from app.store import Store
    from app.store import db as dbm

    data.mkdir(parents=True, exist_ok=True)
    db = dbm.connect(data / "tabletalk.db")
    schema.migrate(db)
    store = Store(db)
    people = Accounts(store)
    owner = people.add(OWNER, password_hash(), owner=True)
    ada = people.add("Ada", password_hash())
    tokens = {"owner": people.start_session(owner.id), "ada": people.start_session(ada.id)}
    agent = store.default_agent(owner.id)
    planner = store.add_agent(tables.Assistant(name="Planner", instructions="Plan things.", person=owner.id))
    store.add_memory(planner.id, "The owner likes short plans.")
    plugin = store.add_plugin(tables.plugin(planner.id, "https://mcp.example.org/mcp", name="Notes"))
    # as a release before OAuth tokens were sealed wrote them: sealing them here would make the
    # app's key a row, which an install older than m028 kept in its data folder instead
    with store.write() as w:
        w.conn.execute("INSERT INTO plugin_auth (plugin, client, tokens, updated) VALUES (?, ?, ?, ?)",
                       [plugin.id, '{"client_id": "x"}', '{"access_token": "t"}', dbm.now()])
    store.add_skill(tables.skill("summarise", "Sum a text up", "Read it, then say it shortly."))
    store.replace_choices([Choice("fake-model", "fake-model", "Server", window=8192)])
    store.set_limits("fake-model", Limits(window=8192, images=False))
    store.set_calibration("fake-model", 1.25, 3)
    store.add_attempt(dbm.now(), "mallory", "203.0.113.9")

    chat, first = store.start_conversation(agent.id, owner.id, "Where is the café Zeta?")
    store.set_title(chat.id, "Harbour cafés")
    store.add(tables.item("reasoning", chat.id, "Thinking about harbours.", turn=first.id, done=True, thought=2.5))
    store.add(tables.item("call", chat.id, "", turn=first.id, name="fetch_page", input='{"url": "https://a.example"}',
                          output="Zeta sits on the quay.", state="done", done=True,
                          sources='[{"url": "https://a.example", "title": "Quay"}]'))
    store.add(tables.item("text", chat.id, "The café Zeta is on the quay, by the lighthouse.", turn=first.id,
                          done=True, model="fake-model"))
    store.update(first.id, done=True)
    store.again(store.item(first.id))
    store.add(tables.item("text", chat.id, "Zeta: the quay, again.", turn=first.id, done=True, model="fake-model"))
    store.set_plan(chat.id, "- [x] find the quay\n- [ ] walk there")
    store.add(tables.item("error", chat.id, "The model server did not answer.", turn=first.id, done=True))
    edited = store.edit(store.item(first.id), "Where is the bakery Omega?")
    store.add(tables.item("text", chat.id, "Omega bakes by the mill.", turn=edited.id, done=True))
    store.update(edited.id, done=True)
    store.set_context(chat.id, used=900, window=8192)
    store.pin(chat.id, True)
    store.keep_mcp_session(chat.id, plugin.id, "fp", "session-1", "{}")

    other, asked = store.start_conversation(None, ada.id, "Read the picture, please\x00 now")
    # as an older release kept it (the store binds a NUL as U+FFFD on both engines since): a
    # NUL in the message and in the title made of it, which the move replaces
    for table, key in (("items", asked.id), ("conversations", other.id)):
        column = "text" if table == "items" else "title"
        was = db.conn.execute(f"SELECT {column} FROM {table} WHERE id = ?", [key]).fetchone()[0]
        sqlite3.Connection.execute(db.conn, f"UPDATE {table} SET {column} = ? WHERE id = ?", [was.replace("\ufffd", "\x00"), key])
    file_id = store.add_file("picture.png", PNG, person=ada.id)
    store.update(asked.id, files=str(file_id), done=True)
    call = store.add(tables.item("call", other.id, turn=asked.id, name="notes_ask", input="{}", state="done", done=True))
    store.add(tables.item("ask", other.id, "Which colour?", turn=asked.id, name="Notes", state="declined",
                          done=True, input=json.dumps({"call": call.id, "schema": {"type": "object"}})))
    request = {"call": call.id, "system": "You name colours.", "max_tokens": 20,
               "messages": [{"role": "user", "text": "Name the colour."}]}
    store.add(tables.item("sample", other.id, turn=asked.id, name="Notes", model="fake-model", state="done",
                          done=True, input=json.dumps(request), output="Teal."))
    store.add(tables.item("text", other.id, "It is a tiny PNG.", turn=asked.id, done=True))
    store.add(tables.stopped(other.id))

    # knowledge: a collection the planner searches, a document read into passages on two
    # pages, and one attached to a conversation
    manuals = store.add_collection(owner.id, "Harbour manuals", "How the harbour works", shared=True)
    store.set_agent_collections(planner.id, [manuals])
    read = store.add_document(owner.id, store.add_file("tides.md", b"# Tides", person=owner.id), "tides.md",
                              collection=manuals, kind="markdown")
    attached = store.add_document(owner.id, store.add_file("quay.txt", b"quay", person=owner.id), "quay.txt",
                                  chat=chat.id, kind="text")
    for d, pages in ((read, [[("Tides", "The harbour tide turns at the tern stone.")],
                              [("Locks", "The lock keeper opens the gate at high water.")]]),
                     (attached, [[("", "The quay is paved with granite setts.")]])):
        store.take_document("builder", 60)
        for n, passages in enumerate(pages, 1):
            assert store.read_page(d, "builder", n, len(pages), passages, 60)
        store.finish_document(d, "builder", "ready")
    passage = db.conn.execute("SELECT id FROM passages WHERE text LIKE '%tern stone%'").fetchone()[0]
    gone, _ = store.start_conversation(agent.id, owner.id, "This one goes")
    store.delete_conversation(gone.id)
    rev = dbm.current_rev(db)
    top = db.conn.execute("SELECT max(id) FROM items").fetchone()[0]
    db.conn.close()
    return {"chats": [chat.id, other.id], "gone": gone.id, "planner": planner.id, "file": file_id, "rev": rev, "top": top,
            "tokens": tokens, "collection": manuals, "passage": passage}


def move_to(data: Path, url: str, **env: str) -> subprocess.CompletedProcess:
    """`tabletalk move-to URL` as a person runs it, with TABLETALK_DATA set."""
    settings = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"TABLETALK_DATA": str(data), **env}
    return subprocess.run([sys.executable, "-m", "app.admin.cli", "move-to", url], cwd=ROOT, env=settings,
                          capture_output=True, text=True, timeout=300)


def counts(target) -> dict[str, int]:
    """Every table's rows, SQLite's file or a PostgreSQL URL (the tables both have)."""
    from app.store import db as dbm

    db = dbm.connect(target)
    try:
        names = (db.table_names() if dbm.postgres(db) else
                 [r[0] for r in db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")])
        skip = {"migrations", "search", "sqlite_sequence", "blobs", "chunks"}
        return {n: db.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names
                if n not in skip and not n.startswith("search_")}
    finally:
        db.conn.close()


def rows_of(target, sql: str) -> list[dict]:
    from app.store import db as dbm

    db = dbm.connect(target)
    try:
        return [dict(r) for r in db.execute(sql)]
    finally:
        db.conn.close()


def log_of(client: httpx.Client, chat: int) -> list[tuple[str, str]]:
    """A conversation's page as a person reads it: each item's element id and its words."""
    page = soup(client.get(f"/c/{chat}"))
    return [(el["id"], " ".join(el.get_text(" ").split())) for el in page.select("[id^=i]")
            if re.fullmatch(r"i\d+", el["id"])]


def words_of(client: httpx.Client, path: str) -> str:
    """A page's main text, as a person reads it (the sidebar and forms' tokens aside)."""
    main = soup(client.get(path)).select_one("main")
    return " ".join(main.get_text(" ").split())


def found(client: httpx.Client, words: str) -> list[str]:
    page = soup(client.get("/search", params={"q": words}))
    return sorted(a["href"] for a in page.select("a[href^='/c/']") if re.fullmatch(r"/c/\d+", a["href"]))


def test_an_install_moved_is_served_from_postgresql_as_it_was(data, env, pg_url, fake, tmp_path):
    made = build(data)
    a = Served(data, env, account=False)
    a.cookies = {"tabletalk_session": made["tokens"]["owner"]}
    a.start()
    try:
        with a.client(timeout=10) as c:
            pages = {chat: log_of(c, chat) for chat in made["chats"][:1]}
            searched = {w: found(c, w) for w in ("cafe", "quay", "Omega", "lighthouse")}
            settings = {path: words_of(c, path) for path in ("/agents", f"/agents/{made['planner']}?tab=plugins",
                                                        f"/agents/{made['planner']}?tab=memory", "/skills")}
        with httpx.Client(base_url=a.url, cookies={"tabletalk_session": made["tokens"]["ada"]}, timeout=10) as c:
            # the NUL Ada's message holds is the one change a move makes: PostgreSQL's text holds none
            pages[made["chats"][1]] = [(i, t.replace("\x00", "\ufffd")) for i, t in log_of(c, made["chats"][1])]
            picture = c.get(f"/files/{made['file']}").content
        refused = move_to(data, pg_url)  # while it serves: refused, nothing written
        assert refused.returncode != 0 and "tabletalk serve is running on" in refused.stderr, refused.stderr
        assert counts(pg_url) == {}, "the database was left as it was"
    finally:
        a.stop()
    assert picture == PNG and all(pages.values()) and all(searched.values())
    assert "Planner" in settings["/agents"] and "summarise" in settings["/skills"]
    assert "Notes" in settings[f"/agents/{made['planner']}?tab=plugins"]
    assert "short plans" in settings[f"/agents/{made['planner']}?tab=memory"]
    before_counts = counts(data / "tabletalk.db")
    sqlite_file = (data / "tabletalk.db").read_bytes()
    made["rev"] = rows_of(data / "tabletalk.db", "SELECT rev FROM revs")[0]["rev"]  # server A wrote some too

    done = move_to(data, pg_url)
    assert done.returncode == 0, done.stderr + done.stdout
    assert f"DATABASE_URL={pg_url}" in done.stdout and "Restart tabletalk serve" in done.stdout
    assert "left as it was" in done.stdout and "Checked: every table" in done.stdout
    key = "SELECT value FROM secrets WHERE name = 'secret.key'"
    assert rows_of(pg_url, key) == rows_of(data / "tabletalk.db", key) != [], \
        "the key that signs forms moved: a page open across the move posts its forms to any server"
    assert re.search(r"files' bytes +3 files, 0\.0 MB", done.stdout), done.stdout  # a picture, two documents
    assert (data / "tabletalk.db").read_bytes() == sqlite_file, "SQLite's file untouched"
    assert not list(data.glob(".move-to-*")), "the snapshot is removed"
    after = counts(pg_url)
    assert after == before_counts | {"runs": 0}
    assert rows_of(pg_url, "SELECT rev FROM revs") == [{"rev": made["rev"]}], "the rev counter carried"

    # Served from a data folder of its own (another machine): the rows and files' bytes are
    # all in the database.
    elsewhere = tmp_path / "elsewhere"
    b = Served(elsewhere, env | {"DATABASE_URL": pg_url, "TABLETALK_DATA": str(elsewhere)}, account=False)
    b.cookies = {"tabletalk_session": made["tokens"]["owner"]}  # signed in as before: sessions moved
    b.start()
    try:
        with b.client(timeout=10) as c:
            assert log_of(c, made["chats"][0]) == pages[made["chats"][0]]
            assert {w: found(c, w) for w in searched} == searched
            assert {path: words_of(c, path) for path in settings} == settings  # agents, memory, plugin, skills
            assert c.get(f"/c/{made['chats'][1]}").status_code == 404, "Ada's conversation is hers alone"
            assert c.get(f"/c/{made['gone']}").status_code == 404
            # knowledge: the collection, its passage's page, and search in PostgreSQL's own index
            assert "tides.md" in c.get(f"/knowledge/{made['collection']}").text
            assert "The harbour tide turns at the tern stone." in c.get(f"/knowledge/passages/{made['passage']}").text
        with httpx.Client(base_url=b.url, cookies={"tabletalk_session": made["tokens"]["ada"]}, timeout=10) as c:
            assert log_of(c, made["chats"][1]) == pages[made["chats"][1]]
            assert c.get(f"/files/{made['file']}").content == PNG

        # A new message: new ids and revs above the old, the answer followed live.
        fake.script("Zeta opens at nine.")
        client, token = session(b)
        chat = f"/c/{made['chats'][0]}"
        since = re.search(r"events\?since=(\d+)", client.get(chat).text).group(1)
        assert int(since) >= made["rev"], "the rev counter carried over"
        heard: dict[str, object] = {}
        reader = threading.Thread(target=lambda: heard.update(events=read_events(
            b, f"{chat}/events?since={since}", lambda m: any("Zeta opens at nine." in d for _, d in m), timeout=20)))
        reader.start()
        time.sleep(0.5)
        assert client.post(chat + "/ask", data={"_csrf_token": token, "text": "When does it open?"},
                           follow_redirects=False).status_code == 303
        reader.join(25)
        assert any("Zeta opens at nine." in d for _, d in heard["events"])
        from app.store import db as dbm

        pg = dbm.connect(pg_url)
        try:
            new = [dict(r) for r in pg.execute("SELECT id, rev, kind FROM items WHERE id > ? ORDER BY id", [made["top"]])]
            assert {r["kind"] for r in new} >= {"user", "text"}
            assert all(r["rev"] > made["rev"] for r in new)
            assert pg.execute("SELECT count(*) FROM items WHERE id <= ?", [made["top"]]).fetchone()[0] == \
                before_counts["items"]
        finally:
            pg.conn.close()
        with b.client(timeout=10) as c:
            assert found(c, "nine") == [chat]
        from app.store import Scope, Store

        pg = dbm.connect(pg_url)
        try:
            searched_pg = Store(pg).search_passages("when does the tide turn at the stone",
                                                    Scope(collections=(made["collection"],), chat=made["chats"][0]))
            assert [f.passage for f in searched_pg][:1] == [made["passage"]]
            assert {f.name for f in Store(pg).search_passages("granite quay", Scope(chat=made["chats"][0]))} == {"quay.txt"}
        finally:
            pg.conn.close()
    finally:
        b.stop()

    again = move_to(data, pg_url)  # a second run: refused, nothing changed
    assert again.returncode != 0 and "is not empty" in again.stderr and "changed nothing" in again.stderr
    assert counts(pg_url)["items"] == before_counts["items"] + len(new)


def test_a_new_id_never_meets_a_deleted_one(data, pg_url):
    """SQLite never gives an AUTOINCREMENT id twice (sqlite_sequence keeps the highest, deleted
    rows' too): PostgreSQL's identities go on after it, not after the highest row left."""
    from app import tables
    from app.store import Store
    from app.store import db as dbm

    made = build(data)
    db = dbm.connect(data / "tabletalk.db")
    top = db.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'items'").fetchone()[0]
    db.conn.close()
    assert top > made["top"] - 1
    assert move_to(data, pg_url).returncode == 0
    pg = dbm.connect(pg_url)
    try:
        store = Store(pg)
        item = store.add(tables.asked(made["chats"][0], "A new one"))
        assert item.id == top + 1
        assert item.rev == made["rev"] + 1
    finally:
        pg.conn.close()


def test_a_database_with_rows_is_refused_and_left_alone(data, pg_url):
    from app import tables
    from app.store import Store
    from app.store import db as dbm

    build(data)
    pg = dbm.connect(pg_url)
    schema.migrate(pg)
    Store(pg).add_skill(tables.skill("theirs", "someone else's"))
    pg.conn.close()
    before = counts(pg_url)
    out = move_to(data, pg_url)
    assert out.returncode != 0
    assert "is not empty (1 skills)" in out.stderr and "changed nothing" in out.stderr
    assert counts(pg_url) == before


def test_a_database_of_another_app_is_refused(data, pg_url):
    import psycopg

    build(data)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    out = move_to(data, pg_url)
    assert out.returncode != 0 and "holds tables that are not Tabletalk's (invoices)" in out.stderr, out.stderr
    assert counts(pg_url) == {"invoices": 0}


def test_a_database_migrated_but_empty_is_taken(data, pg_url):
    """`tabletalk migrate` on the new database first (its seed rows: the default agent, the
    counter, the built-in model's row) still counts as empty."""
    from app.store import db as dbm

    build(data)
    pg = dbm.connect(pg_url)
    schema.migrate(pg)
    pg.conn.close()
    out = move_to(data, pg_url)
    assert out.returncode == 0, out.stderr
    assert "migrated already" in out.stdout


def test_a_newer_schema_is_refused(data, pg_url):
    from app.store import db as dbm

    build(data)
    pg = dbm.connect(pg_url)
    schema.migrate(pg)
    with pg.write():
        pg.execute("INSERT INTO migrations (name, applied) VALUES ('m999_from_the_future', 0)")
    pg.conn.close()
    out = move_to(data, pg_url)
    assert out.returncode != 0 and "newer release" in out.stderr and "m999_from_the_future" in out.stderr


@pytest.mark.parametrize("url, words", [
    ("mysql://someone@127.0.0.1/x", "is not a PostgreSQL URL"),
    ("tabletalk.db", "is not a PostgreSQL URL"),
    ("postgresql://someone@127.0.0.1:notaport/x", "is not a usable PostgreSQL URL"),
])
def test_a_bad_url_is_said_so(data, url, words):
    build(data)
    out = move_to(data, url)
    assert out.returncode != 0 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_an_unreachable_server_is_said_so(data):
    from tests.conftest import free_port

    build(data)
    started = time.monotonic()
    out = move_to(data, f"postgresql://someone:secret@127.0.0.1:{free_port()}/tabletalk")
    assert out.returncode != 0 and "cannot connect to postgresql://someone:***@127.0.0.1" in out.stderr, out.stderr
    assert "secret" not in out.stderr, "the password is not printed"
    assert time.monotonic() - started < 60


def test_a_missing_database_says_how_to_make_it(data, pg_cluster):
    build(data)
    out = move_to(data, pg_cluster.url("not_there"))
    assert out.returncode != 0 and "does not exist" in out.stderr and "createdb -O" in out.stderr, out.stderr


def test_a_user_without_rights_is_said_so_and_nothing_is_made(data, pg_url, pg_cluster):
    import psycopg

    build(data)
    name = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS visitor")
        conn.execute("CREATE ROLE visitor LOGIN")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        out = move_to(data, pg_url.replace("tabletalk@", "visitor@"))
        assert out.returncode != 0 and "the user visitor may not make Tabletalk's tables" in out.stderr, out.stderr
        assert f"ALTER DATABASE {name} OWNER TO visitor" in out.stderr
        assert counts(pg_url) == {}
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY visitor")
        with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
            conn.execute("DROP ROLE visitor")
            conn.execute(f"CREATE DATABASE {name}")


def test_a_snapshot_left_by_a_killed_move_is_cleared(data, pg_url):
    build(data)
    (data / ".move-to-abc123").mkdir()
    (data / ".move-to-abc123" / "tabletalk.db").write_bytes(b"half a copy")
    assert move_to(data, pg_url).returncode == 0
    assert not list(data.glob(".move-to-*"))


def test_no_install_to_move_is_said_so(tmp_path, pg_url):
    out = move_to(tmp_path / "nothing", pg_url)
    assert out.returncode != 0 and "there is no SQLite install at" in out.stderr


def test_a_server_does_not_start_during_a_move(data, env):
    from app.serve import datalock

    build(data)
    with datalock.moving(data):
        done = subprocess.run([sys.executable, "-m", "app.admin.cli", "serve", "--port", "1"], cwd=ROOT,
                              env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "tabletalk move-to is copying" in done.stderr


def test_nul_characters_become_the_replacement_character(data, pg_url):
    build(data)
    out = move_to(data, pg_url)
    assert out.returncode == 0 and "2 texts held NUL characters" in out.stdout, out.stdout
    from app.store import db as dbm

    pg = dbm.connect(pg_url)
    try:
        assert pg.execute("SELECT count(*) FROM items WHERE text = 'Read the picture, please\ufffd now'").fetchone()[0] == 1
    finally:
        pg.conn.close()
    db = sqlite3.connect(data / "tabletalk.db")
    assert db.execute("SELECT count(*) FROM items WHERE instr(CAST(text AS BLOB), x'00')").fetchone()[0] == 1
    db.close()


def test_search_words_splits_as_it_did(pg_url):
    """m030's search_words (a regular expression) makes the same text as the translate() it
    replaced, for every character up to U+07FF and some beyond."""
    from app.store import db as dbm

    pg = dbm.connect(pg_url)
    try:
        schema.migrate(pg)
        text = "".join(map(chr, range(1, 0x800))) + "café <b>bold</b> example.org 3.14 ☕ 𝔘 a\\b"
        before = pg.execute("SELECT translate(?, '!\"#$%&''()*+,-./:;<=>?@[\\]^_`{|}~', "
                            "'                                ')", [text]).fetchone()[0]
        assert pg.execute("SELECT search_words(?)", [text]).fetchone()[0] == before
        assert before[:0x7FF].count(" ") - text[:0x7FF].count(" ") == 32, "each ASCII punctuation mark"
    finally:
        pg.conn.close()


def test_a_damaged_file_refuses_the_move_and_a_missing_one_is_said(data, pg_url):
    from app.store import blobs as blobstore

    made = build(data)
    sha = rows_of(data / "tabletalk.db", f"SELECT sha256 FROM files WHERE id = {made['file']}")[0]["sha256"]
    held = blobstore.Disk(data / "files").path(sha)
    held.write_bytes(b"not the picture")
    out = move_to(data, pg_url)
    assert out.returncode != 0 and "is damaged" in out.stderr and "nothing was changed" in out.stderr, out.stderr
    assert counts(pg_url)["items"] == 0 and rows_of(pg_url, "SELECT count(*) AS n FROM blobs") == [{"n": 0}]
    held.unlink()
    out = move_to(data, pg_url)
    assert out.returncode == 0, out.stderr
    assert f"1 file named by rows not in {data / 'files'}" in out.stdout and sha in out.stdout


def test_an_install_already_on_postgresql_is_not_moved_again(data, pg_url):
    build(data)
    out = move_to(data, pg_url, DATABASE_URL=pg_url)
    assert out.returncode != 0 and "DATABASE_URL is set" in out.stderr and "unset DATABASE_URL" in out.stderr
    assert counts(pg_url) == {}


def test_a_mover_who_does_not_own_the_tables_moves_row_by_row(data, pg_url):
    """The database migrated by its owner; the move made by another user with rights on its
    rows (not the tables' owner: no triggers turned off, no indexes dropped): the same rows,
    search written by the triggers as each row goes in."""
    import psycopg

    from app.store import db as dbm

    build(data)
    pg = dbm.connect(pg_url)
    schema.migrate(pg)
    pg.conn.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS helper")
        conn.execute("CREATE ROLE helper LOGIN")
        conn.execute("GRANT CREATE, USAGE ON SCHEMA public TO helper")
        conn.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO helper")
        conn.execute("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO helper")
    try:
        out = move_to(data, pg_url.replace("tabletalk@", "helper@"))
        assert out.returncode == 0, out.stderr
        assert "indexes made" not in out.stdout, "no bulk load for a user who does not own the tables"
        assert counts(pg_url) == counts(data / "tabletalk.db") | {"runs": 0, "secrets": 1}  # + the form key
        assert rows_of(pg_url, "SELECT count(*) AS n FROM search WHERE doc @@ to_tsquery('tabletalk', 'quay')") \
            == [{"n": 2}]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY helper")
            conn.execute("DROP ROLE helper")


def test_the_form_key_of_an_older_install_moves_from_its_file(data, pg_url):
    """An install that has not run since the key became a row (migration m028) keeps it in
    data/secret.key: the move makes it the database's, so its open pages' forms stay valid."""
    build(data)
    (data / "secret.key").write_text("an older install's key, kept in its data folder\n")
    assert move_to(data, pg_url).returncode == 0
    assert rows_of(pg_url, "SELECT value FROM secrets WHERE name = 'secret.key'") == \
        [{"value": "an older install's key, kept in its data folder"}]
    assert rows_of(data / "tabletalk.db", "SELECT count(*) AS n FROM secrets") == [{"n": 0}], "SQLite's file untouched"


@pytest.mark.timeout(300)  # 40 MB of rows copied once: ~4 s alone (120 MB twice took ~40 s on a loaded machine)
def test_ctrl_c_during_the_copy_keeps_nothing(data, pg_url):
    """Interrupted while the rows go in (SIGINT as Ctrl-C sends it): the copy's transaction
    rolls back, the snapshot goes, and a second run moves the install (without the bulk,
    which was there only to keep the first copy busy while the signal came)."""
    import signal

    made = build(data)
    from app.store import db as dbm

    db = dbm.connect(data / "tabletalk.db")
    with dbm.write(db):  # enough rows that the copy is still under way when the signal comes
        db.conn.executemany("INSERT INTO items (chat, kind, text, done, created, updated, rev) "
                            "VALUES (?, 'user', ?, 1, 0, 0, 1)", [(made["chats"][0], "x" * 2000)] * 20_000)
    db.conn.close()
    settings = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {"TABLETALK_DATA": str(data)}
    proc = subprocess.Popen([sys.executable, "-m", "app.admin.cli", "move-to", pg_url], cwd=ROOT, env=settings,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # as a terminal's job has it: a shell without job control (a script's
                            # `make test &`) starts what it runs with SIGINT ignored, and the move
                            # would inherit that and finish, deaf to Ctrl-C
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = ""
    while "items" not in line:  # the items' COPY has begun
        line = proc.stdout.readline()
        assert line or proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "stopped (Ctrl-C); nothing was kept" in err, err
    assert counts(pg_url)["items"] == 0 and not list(data.glob(".move-to-*"))
    db = dbm.connect(data / "tabletalk.db")
    with dbm.write(db):
        db.conn.execute("DELETE FROM items WHERE text = ?", ["x" * 2000])
    db.conn.close()
    assert move_to(data, pg_url).returncode == 0
    assert counts(pg_url)["items"] == counts(data / "tabletalk.db")["items"] > 0


def test_a_server_that_never_answers_is_given_up_on(data):
    """An address that takes the connection and says nothing (a firewall, a wrong port on a
    busy host): move-to gives up after its connect timeout, in words."""
    import socket

    build(data)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(5)  # accepted by the kernel, never answered
    try:
        started = time.monotonic()
        out = move_to(data, f"postgresql://someone@127.0.0.1:{silent.getsockname()[1]}/tabletalk")
        took = time.monotonic() - started
    finally:
        silent.close()
    assert out.returncode != 0 and "cannot connect to" in out.stderr and "timeout" in out.stderr.lower(), out.stderr
    assert took < 60
