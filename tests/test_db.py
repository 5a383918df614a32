"""Migrations and the constraints the database enforces itself (both engines)."""
import sqlite3

import pytest

from app.store import Store, db as dbm, schema
from app.store.schema import migrations
from app.titles import first_words
from app.tables import asked, item


def test_migrations_apply_once_and_are_recorded(tmp_path):
    db = dbm.connect(tmp_path / "t.db")
    applied = schema.migrate(db)
    assert applied == [fn.__name__ for fn in migrations.MIGRATIONS]
    assert schema.migrate(db) == []
    assert {"assistants", "conversations", "items", "choices", "plugins", "skills", "memories",
            "contexts", "files", "runs", "revs", "migrations"} <= set(db.table_names())


def test_every_connection_uses_wal_and_waits_for_locks(tmp_path):
    db = dbm.connect(tmp_path / "t.db")
    assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.conn.execute("PRAGMA busy_timeout").fetchone()[0] == dbm.BUSY_TIMEOUT_MS
    assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_a_default_agent_exists_after_first_start(store):
    agent = store.default_agent()
    assert agent is not None and agent.name and "assistant" in agent.instructions.lower()
    assert len(store.agents(None)) == 1


@pytest.mark.parametrize("sql,params", [
    ("INSERT INTO items (chat, kind, created, updated) VALUES (?, 'banana', 0, 0)", "chat"),
    ("INSERT INTO items (chat, kind, done, created, updated) VALUES (?, 'text', 2, 0, 0)", "chat"),
    ("INSERT INTO items (chat, kind, state, created, updated) VALUES (?, 'call', 'pending', 0, 0)", "chat"),
    ("INSERT INTO items (chat, kind, name, created, updated) VALUES (?, 'call', ?, 0, 0)", "chat, long"),
    ("INSERT INTO items (chat, kind, created, updated) VALUES (999, 'text', 0, 0)", None),
    ("INSERT INTO items (chat, kind, created, updated) VALUES (NULL, 'text', 0, 0)", None),
    ("INSERT INTO assistants (name, created, updated) VALUES (?, 0, 0)", "long"),
    ("INSERT INTO assistants (name, created, updated) VALUES ('', 0, 0)", None),
    ("INSERT INTO plugins (agent, name, address, created, updated) VALUES (999, 'p', 'http://x', 0, 0)", None),
    ("INSERT INTO memories (agent, text, created) VALUES (999, 'x', 0)", None),
])
def test_the_database_enforces_the_constraints(store, sql, params):
    chat = store.new_conversation(store.default_agent().id).id
    values = {"chat": chat, "long": "x" * 81}
    with pytest.raises(sqlite3.IntegrityError):  # on PostgreSQL too (store/postgres.py raises a subclass)
        store.db.conn.execute(sql, [values[p] for p in (params or "").split(", ") if p])


def test_every_write_takes_a_new_rev_in_the_same_transaction(store):
    chat = store.new_conversation(None).id
    r0 = store.rev()
    first = store.add(asked(chat, "hello"))
    second = store.add(item("text", chat, "hi", turn=first.id))
    assert first.rev == r0 + 1 and second.rev == r0 + 2
    store.update(second.id, text="hi there", done=True)
    row = store.item(second.id)
    assert row.rev == store.rev() and row.text == "hi there" and row.done is True
    assert first.turn == first.id and second.turn == first.id


def test_a_failed_write_takes_no_rev(store):
    chat = store.new_conversation(None).id
    before = store.rev()
    with pytest.raises(sqlite3.IntegrityError):
        with store.write() as db:
            dbm.bump(db)
            db.conn.execute("INSERT INTO items (chat, kind, created, updated) VALUES (?, 'nope', 0, 0)", [chat])
    assert store.rev() == before


def test_rev_survives_reopening(tmp_path):
    db = dbm.connect(tmp_path / "t.db")
    schema.migrate(db)
    Store(db).new_conversation(None)
    rev = dbm.current_rev(db)
    db.conn.close()
    again = dbm.connect(tmp_path / "t.db")
    assert dbm.current_rev(again) == rev > 0


def test_deleting_an_agent_keeps_its_conversations(store):
    agent = store.default_agent().id
    chat = store.new_conversation(agent).id
    store.add(asked(chat, "hello"))
    with store.write() as db:
        db.conn.execute("DELETE FROM assistants WHERE id = ?", [agent])
    assert store.conversation(chat).agent is None
    assert [it.text for it in store.items(chat)] == ["hello"]


def test_the_first_message_names_the_conversation(store):
    chat = store.new_conversation(None).id
    store.ask(chat, "How do I   make bread\nwithout yeast at home please tell me")
    store.ask(chat, "something else")
    assert store.conversation(chat).title == "How do I make bread without yeast at…"
    assert first_words("short one") == "short one"
    assert len(first_words("x" * 500)) <= 80
