"""What each engine must do alike under the store (conftest's `store` runs each test on
SQLite and on PostgreSQL): words found as FTS5 finds them, revs that commit in order while
several connections write, the write lock, rows read alike."""
import sqlite3
import threading
import time

import pytest

from app.store import Store, db as dbm, schema
from app.web import search
from app.tables import item


def found(store, query):
    return [h.chat for h in search.find(store, query, store.owner())]


def test_words_are_found_as_fts5_finds_them(store):
    chat = store.new_conversation(1, "Un café à Paris").id
    store.ask(chat, "see example.org/path, 3.14 and <b>bold</b> e-mail don't snake_case")
    other = store.new_conversation(1, "something else").id
    store.ask(other, "nothing to see")
    for query in ("cafe", "CAFÉ", "paris", "exam*", "example org", "org", "14", "bold", "mail", "don", "snake",
                  "case", "e-mail", "3.14", '"example.org"', "caf*"):
        assert found(store, query) == [chat], query
    assert found(store, "caf") == [] and found(store, "bold paris") == [chat] and found(store, "bold nothing") == []
    [hit] = search.find(store, "cafe bold", store.owner())
    assert str(hit.title) == "Un <mark>café</mark> à Paris"
    assert "<mark>bold</mark>" in str(hit.snippet)


def test_a_long_message_is_cut_around_its_hits(store):
    chat = store.new_conversation(1, "t").id
    words = [f"w{i}" for i in range(100)]
    words[50] = "needle"
    store.ask(chat, " ".join(words))
    [hit] = search.find(store, "needle", store.owner())
    text = str(hit.snippet)
    assert "<mark>needle</mark>" in text and text.startswith("…") and text.endswith("…")
    assert "w10 " not in text and "w90" not in text


def _target(store, tmp_path):
    return store.db.url if dbm.postgres(store.db) else tmp_path / "t.db"


def test_revs_commit_in_order_so_a_follower_never_skips_a_row(store, tmp_path):
    """Three connections write at once while a follower reads as the feed does (the rows
    after its cursor up to the rev it read first, then that rev as its cursor): it must see
    every row. Revs taken out of commit order would let it step over one still committing."""
    chat = store.new_conversation(None).id
    target, per_writer, seen, done, errors = _target(store, tmp_path), 60, set(), threading.Event(), []
    start = store.rev()  # before any writer starts

    def write(n):
        try:
            db = dbm.connect(target)
            writer = Store(db)
            for i in range(per_writer):
                writer.add(item("text", chat, f"{n}-{i}", done=True))
            db.conn.close()
        except Exception as e:  # told below: a thread's exception would only be printed
            errors.append(e)

    def follow():
        try:
            db = dbm.connect(target)
            follower, cursor = Store(db), start
            while True:
                last = done.is_set()
                upto = follower.rev()
                seen.update(it.text for it in follower.items_since(cursor, chat=chat, upto=upto))
                cursor = upto
                if last:
                    break
            db.conn.close()
        except Exception as e:
            errors.append(e)

    reader = threading.Thread(target=follow)
    reader.start()
    writers = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert errors == []
    assert seen == {f"{n}-{i}" for n in range(3) for i in range(per_writer)}
    revs = [it.rev for it in store.items(chat)]
    assert revs == sorted(revs) and len(set(revs)) == len(revs)  # ids and revs in one order


def test_a_write_waits_for_the_one_in_progress(store, tmp_path):
    """One writer at a time on both engines: a read-then-write inside `write` sees no other
    writer between its read and its write."""
    other = Store(dbm.connect(_target(store, tmp_path)))
    inside, order = threading.Event(), []

    def second():
        inside.wait()
        with other.write():
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    with store.write():
        inside.set()
        t.join(0.5)  # it cannot get in while this write is open
        order.append("first")
    t.join()
    other.db.conn.close()
    assert order == ["first", "second"]


def test_rows_read_by_position_and_name_alike(store):
    chat = store.new_conversation(None, "t").id
    row = store.db.conn.execute("SELECT id, title FROM conversations WHERE id = ?", [chat]).fetchone()
    assert (row[0], row["title"], row.keys(), dict(row)) == (chat, "t", ["id", "title"], {"id": chat, "title": "t"})
    with pytest.raises(IndexError):
        row["nope"]
    assert store.db.conn.execute("SELECT count(*) FROM items WHERE text LIKE 'x%' AND ? = 1", [1]).fetchone()[0] == 0


def test_database_url_selects_postgresql(pg_url, tmp_path, monkeypatch):
    from app import api
    from app.admin import cli
    from app import config as configuration
    from app.store.schema import pg_migrations

    monkeypatch.setenv("TABLETALK_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("DATABASE_URL", pg_url)
    config = configuration.load()
    assert config.database == pg_url
    assert cli.migrate(config) == [fn.__name__ for fn in pg_migrations.MIGRATIONS]  # PostgreSQL's, not SQLite's
    store = api.open()
    assert dbm.postgres(store.db) and store.default_agent() is not None
    file_id = store.add_file("a.txt", b"bytes")  # the bytes in the database, none in TABLETALK_DATA
    assert store.file_bytes(file_id)[1] == b"bytes" and not (tmp_path / "data" / "files").exists()
    store.db.conn.close()
    assert not (tmp_path / "data" / "tabletalk.db").exists()
    monkeypatch.setenv("DATABASE_URL", "mysql://x")
    with pytest.raises(SystemExit, match="must name a PostgreSQL database"):
        configuration.load()


def test_a_listener_hears_of_every_committed_rev(pg_url, monkeypatch):
    """PostgreSQL: a write in another connection is heard of by NOTIFY when it commits (no
    catch-up read in between), a rolled-back one never; the catch-up read finds a rev that
    came with no notification."""
    from app.store import postgres as pg

    monkeypatch.setattr(pg, "CATCH_UP_SECONDS", 3600.0)
    listening, writing = dbm.connect(pg_url), dbm.connect(pg_url)
    schema.migrate(writing)
    listener, writer = Store(listening), Store(writing)
    try:
        start = listening.version()
        chat = writer.new_conversation(None).id
        with pytest.raises(sqlite3.IntegrityError):
            with writer.write() as db:
                dbm.bump(db)
                db.conn.execute("INSERT INTO items (chat, kind, created, updated) VALUES (?, 'nope', 0, 0)", [chat])
        written = writer.add(item("text", chat, "hi", done=True)).rev
        for _ in range(500):  # up to 5 s on a loaded machine; a notification takes milliseconds
            if listening.version() >= written:
                break
            time.sleep(0.01)
        assert listening.version() == written == writer.rev() > start
        writing.conn.execute("UPDATE revs SET rev = rev + 5")  # no write of the store's: no notification
        assert listening.version() == written
        monkeypatch.setattr(pg, "CATCH_UP_SECONDS", 0.0)
        assert listening.version() == written + 5
    finally:
        listening.conn.close()
        writing.conn.close()


def test_a_dropped_connection_is_opened_again(pg_url, monkeypatch):
    """PostgreSQL restarted or a proxy cut the connection: the next read goes on on a new
    one, a write after it too, and a listener listens again and catches up, whatever the
    clock reads (a machine booted a minute ago: monotonic() under CATCH_UP_SECONDS)."""
    import types

    from app.store import postgres as pg

    monkeypatch.setattr(pg, "CATCH_UP_SECONDS", 3600.0)
    monkeypatch.setattr(pg, "time", types.SimpleNamespace(monotonic=lambda: 60.0))
    listening, writing, admin = dbm.connect(pg_url), dbm.connect(pg_url), dbm.connect(pg_url)
    schema.migrate(writing)
    writer, reader = Store(writing), Store(listening)
    try:
        chat = writer.new_conversation(None).id
        listening.version()
        for db in (listening, writing):
            admin.execute("SELECT pg_terminate_backend(?)", [db.conn.raw.info.backend_pid])
        assert writer.rev() == reader.rev()  # a read, sent again on a new connection
        written = writer.add(item("text", chat, "after", done=True)).rev
        for _ in range(500):
            if listening.version() >= written:
                break
            time.sleep(0.01)
        assert listening.version() == written and listening.conn.opened == 2
        later = writer.add(item("text", chat, "later", done=True)).rev  # heard by NOTIFY on the new one
        for _ in range(500):
            if listening.version() >= later:
                break
            time.sleep(0.01)
        assert listening.version() == later
    finally:
        for db in (listening, writing, admin):
            db.conn.close()
