"""SQLite's first migrations, the seed's era (m001-m010): the tables, the default agent,
tombstones, sources, search, models, thinking, accounts, steering, the context window.
Frozen history (app/store/schema/__init__.py): never edit one; new ones go at the end of
app/store/schema/migrations.py."""
from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

from ..db import bump, now

MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = []
migration = MIGRATIONS.append


@migration
def m001_tables(db: sqlite_utils.Database) -> None:
    # The seed's tables, with the constraints SQLite enforces itself. `rev` on every row a
    # page shows is the change feed's cursor (see feed.py); `revs` holds its one counter.
    db.execute("CREATE TABLE revs (id INTEGER PRIMARY KEY CHECK (id = 1), rev INTEGER NOT NULL)")
    db.execute("INSERT INTO revs (id, rev) VALUES (1, 0)")
    db.execute(
        """CREATE TABLE assistants (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
            instructions TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            tools TEXT NOT NULL DEFAULT '',      -- '' means every tool, else names, commas
            approve TEXT NOT NULL DEFAULT '',    -- tools that wait for the person, commas
            created REAL NOT NULL, updated REAL NOT NULL, rev INTEGER NOT NULL DEFAULT 0)"""
    )
    db.execute(
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            agent INTEGER REFERENCES assistants(id) ON DELETE SET NULL,  -- readable after the agent goes
            title TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL, updated REAL NOT NULL, rev INTEGER NOT NULL DEFAULT 0)"""
    )
    db.execute(
        """CREATE TABLE files (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
            type TEXT NOT NULL,
            size INTEGER NOT NULL CHECK (size >= 0),
            sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
            created REAL NOT NULL)"""
    )
    db.execute(
        """CREATE TABLE items (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so ids sort in creation order
            chat INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            -- the user item this item belongs to: answers stay under their question even
            -- when a queued question was written while the answer was still growing
            turn INTEGER NOT NULL DEFAULT 0,
            kind TEXT NOT NULL CHECK (kind IN ('user','text','reasoning','call','plan','error','retry','stop')),
            text TEXT NOT NULL DEFAULT '',
            name TEXT NOT NULL DEFAULT '' CHECK (length(name) <= 80),
            input TEXT NOT NULL DEFAULT '',
            output TEXT NOT NULL DEFAULT '',
            file INTEGER REFERENCES files(id),
            files TEXT NOT NULL DEFAULT '',      -- attachment file ids, commas
            model TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT '' CHECK (state IN
                ('','running','done','failed','approval','approved','declined')),
            done INTEGER NOT NULL DEFAULT 0 CHECK (done IN (0, 1)),
            created REAL NOT NULL, updated REAL NOT NULL, rev INTEGER NOT NULL DEFAULT 0)"""
    )
    db.execute("CREATE INDEX items_chat ON items (chat, id)")
    db.execute("CREATE INDEX items_rev ON items (rev)")
    db.execute("CREATE INDEX conversations_rev ON conversations (rev)")
    # The runner's question "what is waiting?" reads only this small partial index.
    db.execute("CREATE INDEX items_pending ON items (chat, id) WHERE done = 0 AND kind IN ('user','retry','stop')")
    db.execute(
        """CREATE TABLE choices (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            "group" TEXT NOT NULL,
            note TEXT NOT NULL DEFAULT '',
            window INTEGER)"""
    )
    db.execute(
        """CREATE TABLE plugins (
            id INTEGER PRIMARY KEY,
            agent INTEGER NOT NULL REFERENCES assistants(id) ON DELETE CASCADE,
            name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
            address TEXT NOT NULL,
            header TEXT NOT NULL DEFAULT '',
            secret TEXT NOT NULL DEFAULT '',
            enabled INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
            status TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL, updated REAL NOT NULL, rev INTEGER NOT NULL DEFAULT 0)"""
    )
    db.execute(
        """CREATE TABLE skills (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 80),
            description TEXT NOT NULL DEFAULT '',
            body TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL, updated REAL NOT NULL)"""
    )
    db.execute(
        """CREATE TABLE memories (
            id INTEGER PRIMARY KEY,
            agent INTEGER NOT NULL REFERENCES assistants(id) ON DELETE CASCADE,
            text TEXT NOT NULL CHECK (length(text) >= 1),
            created REAL NOT NULL)"""
    )
    db.execute(
        """CREATE TABLE contexts (
            id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            used INTEGER NOT NULL DEFAULT 0,
            window INTEGER NOT NULL DEFAULT 0,
            rev INTEGER NOT NULL DEFAULT 0)"""
    )
    # A lease: the one worker answering a conversation, until `expires` (epoch seconds).
    db.execute(
        """CREATE TABLE runs (
            chat INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            owner TEXT NOT NULL,
            expires REAL NOT NULL)"""
    )


DEFAULT_INSTRUCTIONS = """You are a helpful assistant in Tabletalk, a chat app people host themselves.
Answer clearly and briefly; use Markdown (lists, tables, fenced code with a language) where it helps.
When you are not sure of something, say so rather than guess."""


@migration
def m002_default_agent(db: sqlite_utils.Database) -> None:
    # On first start one agent exists, so a new conversation has someone to talk to.
    if db.conn.execute("SELECT count(*) FROM assistants").fetchone()[0] == 0:
        t = now()
        db.conn.execute(
            "INSERT INTO assistants (name, instructions, created, updated, rev) VALUES (?, ?, ?, ?, ?)",
            ["Assistant", DEFAULT_INSTRUCTIONS, t, t, bump(db)],
        )


@migration
def m003_tombstones(db: sqlite_utils.Database) -> None:
    # Deletions are rows too: a page that follows the feed removes what a tombstone names.
    db.execute(
        """CREATE TABLE tombstones (
            id INTEGER PRIMARY KEY,
            chat INTEGER,              -- the conversation it was in (NULL: the list)
            dom TEXT NOT NULL,         -- the element's id on the page, e.g. i42 or c7
            rev INTEGER NOT NULL)"""
    )
    db.execute("CREATE INDEX tombstones_rev ON tombstones (rev)")


@migration
def m004_item_sources(db: sqlite_utils.Database) -> None:
    # The pages a call's result came from, as JSON [{"url", "title"}]: shown as chips.
    db.execute("ALTER TABLE items ADD COLUMN sources TEXT NOT NULL DEFAULT ''")


@migration
def m005_search(db: sqlite_utils.Database) -> None:
    # Full-text search over titles and what was said. One FTS5 row per conversation title
    # (rowid -chat, so it never meets an item's id) and per `user` item or finished `text`
    # item (rowid = the item's id). A growing answer is indexed once it is done: its text is
    # rewritten every 50 ms while it streams, and re-indexing it on every tick would cost
    # the runner's hot path. `remove_diacritics 2`: "cafe" finds "café".
    db.execute(
        """CREATE VIRTUAL TABLE search USING fts5(
            chat UNINDEXED, title, text, tokenize = 'unicode61 remove_diacritics 2')"""
    )
    indexed = "({0}.kind = 'user' OR ({0}.kind = 'text' AND {0}.done = 1))"
    db.execute(
        f"""CREATE TRIGGER items_search_insert AFTER INSERT ON items WHEN {indexed.format('new')}
        BEGIN
            INSERT INTO search (rowid, chat, title, text) VALUES (new.id, new.chat, '', new.text);
        END"""
    )
    db.execute(
        f"""CREATE TRIGGER items_search_update AFTER UPDATE OF text, done ON items
        WHEN {indexed.format('old')} IS NOT {indexed.format('new')}
          OR ({indexed.format('new')} AND old.text IS NOT new.text)
        BEGIN
            DELETE FROM search WHERE rowid = old.id;
            INSERT INTO search (rowid, chat, title, text)
                SELECT new.id, new.chat, '', new.text WHERE {indexed.format('new')};
        END"""
    )
    db.execute(
        """CREATE TRIGGER items_search_delete AFTER DELETE ON items WHEN old.kind IN ('user', 'text')
        BEGIN
            DELETE FROM search WHERE rowid = old.id;
        END"""
    )
    db.execute(
        """CREATE TRIGGER conversations_search_insert AFTER INSERT ON conversations
        BEGIN
            INSERT INTO search (rowid, chat, title, text) VALUES (-new.id, new.id, new.title, '');
        END"""
    )
    db.execute(
        """CREATE TRIGGER conversations_search_update AFTER UPDATE OF title ON conversations
        WHEN old.title IS NOT new.title
        BEGIN
            DELETE FROM search WHERE rowid = -old.id;
            INSERT INTO search (rowid, chat, title, text) VALUES (-new.id, new.id, new.title, '');
        END"""
    )
    db.execute(
        """CREATE TRIGGER conversations_search_delete AFTER DELETE ON conversations
        BEGIN
            DELETE FROM search WHERE rowid = -old.id;
        END"""
    )
    db.execute("INSERT INTO search (rowid, chat, title, text) SELECT -id, id, title, '' FROM conversations")
    db.execute(
        f"INSERT INTO search (rowid, chat, title, text) SELECT id, chat, '', text FROM items "
        f"WHERE {indexed.format('items')}"
    )


@migration
def m006_models(db: sqlite_utils.Database) -> None:
    # A provider that cannot be reached is listed as one row with up = 0 and a note saying why,
    # so the picker shows it without offering it. `tags` is what the server says a model can
    # do (thinking, tools, vision), commas, for pages that offer what a model can use.
    db.execute("ALTER TABLE choices ADD COLUMN up INTEGER NOT NULL DEFAULT 1 CHECK (up IN (0, 1))")
    db.execute("ALTER TABLE choices ADD COLUMN tags TEXT NOT NULL DEFAULT ''")


@migration
def m007_thinking(db: sqlite_utils.Database) -> None:
    # How hard the model should think: per agent, and per message when the person says so
    # ('' = the agent's level, or the server's own default). See models.THINKING.
    db.execute("ALTER TABLE assistants ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE items ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")


@migration
def m008_accounts(db: sqlite_utils.Database) -> None:
    # People and who owns what. Conversations, agents and files belong to a person (plugins
    # and memories through their agent); skills are shared. Rows made before the first
    # account have no person: the owner claims them when the account is set up
    # (Store.add_person, in app/store/people.py). A removed person's rows go with them.
    db.execute(
        """CREATE TABLE people (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a removed person's id is theirs
            name TEXT NOT NULL UNIQUE COLLATE NOCASE CHECK (length(name) BETWEEN 1 AND 80),
            hash TEXT NOT NULL,                  -- argon2id, with its own salt and parameters
            owner INTEGER NOT NULL DEFAULT 0 CHECK (owner IN (0, 1)),
            created REAL NOT NULL)"""
    )
    # A session is known by the sha256 of its cookie's token: a copy of the database does
    # not hand out live sessions.
    db.execute(
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            created REAL NOT NULL,
            expires REAL NOT NULL)"""
    )
    # Failed sign-ins, counted per minute (shared by every worker) and then forgotten.
    db.execute("CREATE TABLE signins (id INTEGER PRIMARY KEY, at REAL NOT NULL, name TEXT NOT NULL, address TEXT NOT NULL)")
    db.execute("CREATE INDEX signins_at ON signins (at)")
    for table in ("conversations", "assistants", "files"):
        db.execute(f"ALTER TABLE {table} ADD COLUMN person INTEGER REFERENCES people(id) ON DELETE CASCADE")
        db.execute(f"CREATE INDEX {table}_person ON {table} (person, id)")
    # A deleted conversation's tombstone is sent to its owner's lists only.
    db.execute("ALTER TABLE tombstones ADD COLUMN person INTEGER")


@migration
def m009_steering(db: sqlite_utils.Database) -> None:
    # A message sent "now" during a run (steer = 1) is given to the model at the run's next
    # step boundary instead of waiting for the run to end. Once the model has read it, it
    # joins the running turn (`turn` becomes that turn) and `read_after` holds the id of the
    # turn's last item at that moment, so the page and the history put it where the model
    # saw it, not where its id would sort; 0 while unread or for every other item.
    db.execute("ALTER TABLE items ADD COLUMN steer INTEGER NOT NULL DEFAULT 0 CHECK (steer IN (0, 1))")
    db.execute("ALTER TABLE items ADD COLUMN read_after INTEGER NOT NULL DEFAULT 0")


@migration
def m010_context(db: sqlite_utils.Database) -> None:
    # What of a long conversation the model is sent (see window.py and docs/context.md). The
    # model's view starts at the user item `start` (0: the beginning) and long call outputs
    # before item `trim` are sent shortened; both only move forward, in chunks, so the start
    # of the request stays the same from one request to the next and servers can cache it.
    # They were chosen for `window` (another model's window chooses afresh). `turns_out` and
    # `left_out` are the turns and the estimated tokens left out; `estimate` our count of the
    # last request before it went; `cached` the tokens the server read from its cache for it.
    for column in ("start", "trim", "turns_out", "left_out", "estimate", "cached"):
        db.execute(f"ALTER TABLE contexts ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    # Per model: the server's count of prompt tokens over our raw estimate, learned from the
    # usage each answer reports, so the estimate converges to the server's own tokenizer.
    db.execute(
        """CREATE TABLE calibrations (
            model TEXT PRIMARY KEY,
            ratio REAL NOT NULL CHECK (ratio > 0),
            samples INTEGER NOT NULL DEFAULT 0,
            updated REAL NOT NULL)"""
    )
