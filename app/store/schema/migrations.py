"""SQLite's schema as its history: an append-only list of small named migrations, applied in
the order of MIGRATIONS by `db.migrate` (each in its own write, recorded in the `migrations`
table). Never edit one that has landed. PostgreSQL's twin of each is in pg_migrations.py.

The older ones are in app/store/schema/, in parts by era (m001_to_m010.py, then
m011_to_m027.py), frozen; MIGRATIONS begins with theirs, in that order, and goes on with
the ones below. A NEW MIGRATION GOES AT THE END OF THIS FILE: a function decorated with
`@migration`, named with the number you were given (m0NN_what), after the last one here.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Callable

import sqlite_utils

from ..db import bump, now  # noqa: F401  (what a migration here may take)
from . import m001_to_m010, m011_to_m027
from .m001_to_m010 import DEFAULT_INSTRUCTIONS  # noqa: F401  (the default agent's words; people.py)

MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [*m001_to_m010.MIGRATIONS, *m011_to_m027.MIGRATIONS]
migration = MIGRATIONS.append


@migration
def m028_shared_secrets(db: sqlite_utils.Database) -> None:
    # Secrets every server of one database must agree on, kept in it rather than in a data
    # folder (app/store/secrets.py): the key that signs forms (`secret.key`, read from the
    # data folder's file of an install that had one) and the setup codes (one per server
    # started, `setup <server>`, until the owner exists). On PostgreSQL files' bytes are
    # rows too (pg_migrations.py's m028: `blobs`, `chunks`); SQLite keeps them in files/.
    db.execute(
        """CREATE TABLE secrets (
            name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
            value TEXT NOT NULL CHECK (length(value) >= 16),
            created REAL NOT NULL)""")


def name_key(name: str) -> str:
    """What a person's name is compared by, on both engines: its NFKC form case-folded (any
    script: "Émile" and "émile", "Straße" and "STRASSE", a full-width "Ａda" and "Ada" are one
    name), then NFKC again. Two people's names never have the same key (m034)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def key_names(db: sqlite_utils.Database) -> list[tuple[int, str]]:
    """Fill `people.folded` (m034, on both engines): each name's key, the owner's first, then
    by id, so the earliest account keeps a key two names share. A later one sharing it keeps
    its name, its password and its rows, and gets the key plus a tab and its id: no name
    makes that key (a name is one line of printable characters), so nobody new can take it,
    and its person still signs in with the name exactly as they always have
    (Store.person_named). Returns the (id, name) of the accounts keyed so."""
    taken: set[str] = set()
    apart = []
    for person, name in db.execute("SELECT id, name FROM people ORDER BY owner DESC, id").fetchall():
        key = name_key(name)
        if key in taken:
            key = f"{key}\t{person}"
            apart.append((person, name))
        taken.add(key)
        db.execute("UPDATE people SET folded = ? WHERE id = ?", [key, person])
    return apart


@migration
def m034_name_keys(db: sqlite_utils.Database) -> None:
    # People's names are one name whatever their case, in any script, on both engines.
    # SQLite's NOCASE folds ASCII only ("Émile" and "émile" were two people) and PostgreSQL's
    # `nocase` collation folded by ICU's rules: one key of Python's (name_key) in a UNIQUE
    # column of its own on both. The old UNIQUE ... COLLATE NOCASE stays on SQLite (changing
    # it means copying the table): every pair it refuses differs only in ASCII case, so the
    # key refuses it too. Existing names sharing a key: key_names.
    db.execute("ALTER TABLE people ADD COLUMN folded TEXT NOT NULL DEFAULT ''")
    key_names(db)
    db.execute("CREATE UNIQUE INDEX people_folded ON people (folded)")


@migration
def m035_text_chunks(db: sqlite_utils.Database) -> None:
    # A growing text's chunks (Runs.grow_items): while an answer grows past one chunk its text
    # is here, in rows of CHUNK_CHARS characters (chunk n from character n * CHUNK_CHARS), and
    # its item's `text` is empty. A row's text is rewritten whole by SQLite when any column of
    # it changes (overflow pages and all): written whole at every beat an answer cost
    # O(length²); now a beat rewrites the last chunk, adds the new ones and gives the item, a
    # small row, its rev.
    # Read back joined after `items.text` (Base._items). Gone once the item's text is written
    # (any UPDATE that sets it, by the first trigger: a whole write, a fresh start), folded
    # into it when the item is done without its text being set (the second: search and every
    # reader of a finished item have it whole), and with its item (the foreign key).
    db.execute("""CREATE TABLE text_chunks (
        item INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        n INTEGER NOT NULL CHECK (n >= 0),
        text TEXT NOT NULL,
        PRIMARY KEY (item, n))""")
    db.execute("""CREATE TRIGGER text_chunks_written AFTER UPDATE OF text ON items
        WHEN EXISTS (SELECT 1 FROM text_chunks WHERE item = new.id)
        BEGIN
            DELETE FROM text_chunks WHERE item = new.id;
        END""")
    db.execute("""CREATE TRIGGER text_chunks_done AFTER UPDATE OF done ON items
        WHEN new.done = 1 AND old.text IS new.text AND EXISTS (SELECT 1 FROM text_chunks WHERE item = new.id)
        BEGIN
            UPDATE items SET text = text || (SELECT group_concat(text, '') FROM
                (SELECT text FROM text_chunks WHERE item = new.id ORDER BY n)) WHERE id = new.id;
        END""")


@migration
def m036_knowledge(db: sqlite_utils.Database) -> None:
    # Knowledge (docs/knowledge.md): a person's collections of documents, each document read
    # once into passages that agents search. A document is a file (its bytes kept as any
    # file's) and its reading as durable work: `state` queued -> reading -> ready, or failed
    # (`reason` in plain words) or stopped by the person; `pages_read` of `pages` is how far
    # it got, and a reading taken up again (another worker, after a kill -9) starts at the
    # page after it: a page's passages and its progress are written in one transaction. The
    # worker reading it holds `owner` until `leased` (epoch seconds), renewed as it reads.
    # A document is in a collection, or (`chat`) attached to a conversation and gone with it.
    db.execute(
        """CREATE TABLE collections (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
            description TEXT NOT NULL DEFAULT '' CHECK (length(description) <= 2000),
            shared INTEGER NOT NULL DEFAULT 0 CHECK (shared IN (0, 1)),
            created REAL NOT NULL,
            updated REAL NOT NULL,
            rev INTEGER NOT NULL DEFAULT 0)""")
    db.execute("CREATE INDEX collections_person ON collections (person)")
    db.execute(
        """CREATE TABLE documents (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            collection INTEGER REFERENCES collections(id) ON DELETE CASCADE,
            chat INTEGER REFERENCES conversations(id) ON DELETE CASCADE,
            file INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
            name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
            kind TEXT NOT NULL DEFAULT '',
            state TEXT NOT NULL DEFAULT 'queued'
                CHECK (state IN ('queued', 'reading', 'ready', 'failed', 'stopped')),
            reason TEXT NOT NULL DEFAULT '',
            pages INTEGER NOT NULL DEFAULT 0 CHECK (pages >= 0),
            pages_read INTEGER NOT NULL DEFAULT 0 CHECK (pages_read >= 0),
            passages INTEGER NOT NULL DEFAULT 0 CHECK (passages >= 0),
            owner TEXT,
            leased REAL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            rev INTEGER NOT NULL DEFAULT 0,
            CHECK ((collection IS NULL) <> (chat IS NULL)))""")
    db.execute("CREATE INDEX documents_collection ON documents (collection)")
    db.execute("CREATE INDEX documents_chat ON documents (chat)")
    db.execute("CREATE INDEX documents_file ON documents (file)")
    db.execute("CREATE INDEX documents_work ON documents (state) WHERE state IN ('queued', 'reading')")
    # n: the passage's place within its page, from 0; (document, page, n) once: a page written
    # again (a reading taken up after a kill) cannot double it
    db.execute(
        """CREATE TABLE passages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            document INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            page INTEGER NOT NULL CHECK (page >= 1),
            n INTEGER NOT NULL CHECK (n >= 0),
            heading TEXT NOT NULL DEFAULT '',
            text TEXT NOT NULL CHECK (length(text) >= 1),
            UNIQUE (document, page, n))""")
    # Which collections an agent searches (its person's own, or shared ones)
    db.execute(
        """CREATE TABLE agent_collections (
            agent INTEGER NOT NULL REFERENCES assistants(id) ON DELETE CASCADE,
            collection INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
            PRIMARY KEY (agent, collection))""")
    db.execute("CREATE INDEX agent_collections_collection ON agent_collections (collection)")
    # Full text over passages: FTS5 with BM25, English stems (porter: "encoding" finds
    # "encoded"), accents folded; its rows are the passages' (external content), kept by triggers.
    db.execute("""CREATE VIRTUAL TABLE search_passages USING fts5(heading, text, content = 'passages',
        content_rowid = 'id', tokenize = 'porter unicode61 remove_diacritics 2')""")
    db.execute("""CREATE TRIGGER passages_search_insert AFTER INSERT ON passages BEGIN
        INSERT INTO search_passages (rowid, heading, text) VALUES (new.id, new.heading, new.text);
        END""")
    db.execute("""CREATE TRIGGER passages_search_delete AFTER DELETE ON passages BEGIN
        INSERT INTO search_passages (search_passages, rowid, heading, text)
            VALUES ('delete', old.id, old.heading, old.text);
        END""")


@migration
def m037_documents_rev(db: sqlite_utils.Database) -> None:
    # Every open page follows the documents being read (the feed reads those whose rev moved
    # past its cursor, as it reads conversations'): by rev, not by a scan of every document
    db.execute("CREATE INDEX documents_rev ON documents (rev)")


@migration
def m038_passage_vectors(db: sqlite_utils.Database) -> None:
    # A passage's vector from the embedding model (AI_EMBEDDINGS), for search by meaning beside
    # full text (docs/knowledge.md): float32s, unit length, written after the passage by
    # app/run/embedding.py; `model` says whose, so a model changed since is embedded again.
    # `code` is its signs, one bit a number, what a search's first look compares in memory;
    # `rev` (db.bump's, in commit order) lets a worker read only the codes new since its last
    db.execute(
        """CREATE TABLE passage_vectors (
            passage INTEGER PRIMARY KEY REFERENCES passages(id) ON DELETE CASCADE,
            model TEXT NOT NULL,
            rev INTEGER NOT NULL,
            vector BLOB NOT NULL CHECK (length(vector) >= 4),
            code BLOB NOT NULL)""")
    db.execute("CREATE INDEX passage_vectors_rev ON passage_vectors (model, rev)")


@migration
def m039_documents_sent(db: sqlite_utils.Database) -> None:
    # A document attached to a message is sent whole when it fits the model's window, else
    # searched (docs/knowledge.md): which, as its conversation's last request had it, so that
    # its chip can say so
    db.execute("ALTER TABLE documents ADD COLUMN sent TEXT NOT NULL DEFAULT ''")


@migration
def m040_items_knowledge(db: sqlite_utils.Database) -> None:
    # A message's picks with "/" (or "#"): the collections and documents searched for its answer
    # beside the agent's own ("c3,d7"; tables.Picks). Checked against the person when sent and
    # again when searched, so a collection unshared since is not
    db.execute("ALTER TABLE items ADD COLUMN knowledge TEXT NOT NULL DEFAULT ''")


@migration
def m041_builtin_model_brought(db: sqlite_utils.Database) -> None:
    # The model the built-in model's runtime serves: '' SmolLM2 (the one it installs), else a
    # GGUF file the owner brought, by its name under data/models/ (app/builtin/brought.py)
    db.execute("ALTER TABLE builtin_model ADD COLUMN model TEXT NOT NULL DEFAULT ''")


@migration
def m042_password_resets(db: sqlite_utils.Database) -> None:
    # A one-time link the owner makes for someone who forgot their password (the People
    # page): the sha256 of its token (the token itself is only in the link), whose password it
    # sets, until when. Used once, it goes, with the person's sessions; a new one for the same
    # person replaces it
    db.execute(
        """CREATE TABLE resets (
            id TEXT PRIMARY KEY CHECK (length(id) = 64),
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            created REAL NOT NULL,
            expires REAL NOT NULL)""")
    db.execute("CREATE INDEX resets_person ON resets (person)")


@migration
def m043_model_limits_thought(db: sqlite_utils.Database) -> None:
    # Whether a model was seen thinking (an answer of it with reasoning, app/run/turn.py): the
    # composer offers its Thinking picker for such models and those whose listing says they
    # think, and not for the others
    db.execute("ALTER TABLE model_limits ADD COLUMN thought INTEGER NOT NULL DEFAULT 0 CHECK (thought IN (0, 1))")


@migration
def m044_openai_api(db: sqlite_utils.Database) -> None:
    # Tabletalk's agents behind an OpenAI-compatible API (docs/api.md). A person's API keys,
    # each known by the sha256 of its token (as sessions are: a copy of the database hands
    # out no key), `shown` its first characters so a list can tell keys apart; `agent` limits
    # a key to one agent (NULL: every agent of its person); `expires` NULL never.
    db.execute(
        """CREATE TABLE api_keys (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            name TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 80),
            hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
            shown TEXT NOT NULL,
            agent INTEGER REFERENCES assistants(id) ON DELETE CASCADE,
            created REAL NOT NULL,
            expires REAL,
            used REAL)""")
    db.execute("CREATE INDEX api_keys_person ON api_keys (person)")
    db.execute("CREATE INDEX api_keys_agent ON api_keys (agent)")
    # Each request to the API, counted for its person's limit per minute (across workers and
    # servers) and kept for the account page's usage; the turn it asked links its tokens.
    db.execute(
        """CREATE TABLE api_requests (
            id INTEGER PRIMARY KEY,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            key INTEGER REFERENCES api_keys(id) ON DELETE SET NULL,
            at REAL NOT NULL,
            chat INTEGER,
            turn INTEGER)""")
    db.execute("CREATE INDEX api_requests_person ON api_requests (person, at)")
    db.execute("CREATE INDEX api_requests_key ON api_requests (key)")
    # What the owner decides for the whole install, as rows (not the environment): whether the
    # API is on, for whom, its limits (app/accounts/api_keys.py names them).
    db.execute(
        """CREATE TABLE settings (
            name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
            value TEXT NOT NULL)""")
    # A conversation the API made: the sidebar marks it; its client's system messages (said
    # after the agent's instructions) and its own functions (JSON, passed to the model; their
    # calls go back to the client, call state 'waiting').
    db.execute("ALTER TABLE conversations ADD COLUMN origin TEXT NOT NULL DEFAULT ''")
    db.execute(
        """CREATE TABLE api_chats (
            chat INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            system TEXT NOT NULL DEFAULT '',
            tools TEXT NOT NULL DEFAULT '')""")
    # The tokens each turn's model requests took (the server's usage, or our estimate when it
    # said none), summed over its steps: the API's usage, and a person's.
    db.execute(
        """CREATE TABLE turn_usage (
            turn INTEGER PRIMARY KEY REFERENCES items(id) ON DELETE CASCADE,
            prompt INTEGER NOT NULL DEFAULT 0,
            completion INTEGER NOT NULL DEFAULT 0,
            cached INTEGER NOT NULL DEFAULT 0,
            requests INTEGER NOT NULL DEFAULT 0,
            estimated INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1)))""")


@migration
def m045_items_outside(db: sqlite_utils.Database) -> None:
    # A message whose text a plugin wrote (a prompt picked with "/"): outside text, like a
    # tool's output, for memory vetting and the `outside` mark (docs/security.md). A message's
    # attachments count by themselves (its `files`)
    db.execute("ALTER TABLE items ADD COLUMN outside INTEGER NOT NULL DEFAULT 0 CHECK (outside IN (0, 1))")


@migration
def m046_items_search_web(db: sqlite_utils.Database) -> None:
    # A message sent with the composer's search switch on: for its answer the agent is told to
    # search the web, and given web_search for it when the owner chose a provider
    db.execute("ALTER TABLE items ADD COLUMN search_web INTEGER NOT NULL DEFAULT 0 CHECK (search_web IN (0, 1))")


@migration
def m047_plugins_instructions(db: sqlite_utils.Database) -> None:
    # What a plugin's server says about using it (`instructions` in its answer to `initialize`),
    # as of its last listing: the system prompt names it under the plugin (docs/plugins.md).
    db.execute("ALTER TABLE plugins ADD COLUMN instructions TEXT NOT NULL DEFAULT ''")


@migration
def m048_connections(db: sqlite_utils.Database) -> None:
    # Model servers the owner added in the browser (app/providers/connections.py), beside those
    # the environment names. `prefix` starts its models' ids and stays when it is renamed (an
    # agent naming one of them keeps it); `key` is sealed with the app's key (sealed.py), never
    # kept as typed; `models_off` the model names switched off, `listed` what its last Test listed
    # (the page's switches), each one a line; `tested` the words its last Test said. The default
    # model is the `models.default` setting.
    db.execute(
        """CREATE TABLE connections (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 60),
            prefix TEXT NOT NULL UNIQUE CHECK (length(prefix) BETWEEN 1 AND 40),
            kind TEXT NOT NULL CHECK (kind IN ('openai', 'ollama')),
            url TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
            key TEXT NOT NULL DEFAULT '',
            models_off TEXT NOT NULL DEFAULT '',
            listed TEXT NOT NULL DEFAULT '',
            tested TEXT NOT NULL DEFAULT '',
            created REAL NOT NULL,
            updated REAL NOT NULL)""")


@migration
def m049_connection_people(db: sqlite_utils.Database) -> None:
    # Who may use a connection's models: everyone (as before), or only the people chosen here
    # (the owner always may). A person's pickers list only what they may use, and a turn with
    # another model is refused (app/providers/connections.py, `may_use`).
    db.execute("ALTER TABLE connections ADD COLUMN everyone INTEGER NOT NULL DEFAULT 1 CHECK (everyone IN (0, 1))")
    db.execute(
        """CREATE TABLE connection_people (
            connection INTEGER NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            PRIMARY KEY (connection, person))""")
    db.execute("CREATE INDEX connection_people_person ON connection_people (person)")


@migration
def m050_people_roles_invitations(db: sqlite_utils.Database) -> None:
    # Roles (docs/people.md): the owner (`owner`, exactly one: the index), admins, who manage
    # people and connections, and members (neither). The owner's `admin` stays 0: the owner
    # ranks above it.
    db.execute("ALTER TABLE people ADD COLUMN admin INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1))")
    db.execute("CREATE UNIQUE INDEX people_one_owner ON people (owner) WHERE owner = 1")
    # A one-time link that lets someone make their own account (app/accounts/invitations.py):
    # `hash`, the sha256 of its token (the token is only in the link), the role it gives, who it is for
    # as its maker wrote it (`note`, optional), who made it, until when. Kept after it is used
    # (`used`, by `person`) or revoked, so the list says what became of it.
    db.execute(
        """CREATE TABLE invitations (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            hash TEXT NOT NULL UNIQUE CHECK (length(hash) = 64),
            admin INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
            note TEXT NOT NULL DEFAULT '' CHECK (length(note) <= 80),
            made_by INTEGER REFERENCES people(id) ON DELETE SET NULL,
            created REAL NOT NULL,
            expires REAL NOT NULL,
            used REAL,
            person INTEGER REFERENCES people(id) ON DELETE SET NULL,
            revoked REAL)""")
    # A conversation of someone removed whose conversations the owner chose to keep: it is the
    # owner's now, marked with the removed person's name.
    db.execute("ALTER TABLE conversations ADD COLUMN kept_from TEXT NOT NULL DEFAULT ''")


@migration
def m051_usage_days(db: sqlite_utils.Database) -> None:
    # The tokens each person's model requests took, a row a person, model and day (UTC,
    # 'YYYY-MM-DD'): added to in the same write that ends the model step they were spent on,
    # so a step made again after a crash counts once (docs/usage.md). Kept past a deleted
    # conversation (spent is spent), gone with the person. `estimated`: how many of the
    # requests were counted by our estimate, the server having said nothing.
    db.execute(
        """CREATE TABLE usage_days (
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            day TEXT NOT NULL CHECK (length(day) = 10),
            model TEXT NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
            prompt INTEGER NOT NULL DEFAULT 0,
            completion INTEGER NOT NULL DEFAULT 0,
            cached INTEGER NOT NULL DEFAULT 0,
            requests INTEGER NOT NULL DEFAULT 0,
            estimated INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (person, day, model))""")
    db.execute("CREATE INDEX usage_days_day ON usage_days (day)")
    # A person's own daily token limit, set by the owner: no row, the default for everyone
    # (the `usage.daily_tokens` setting); a row with `tokens` NULL, no limit for them.
    db.execute(
        """CREATE TABLE token_limits (
            person INTEGER PRIMARY KEY REFERENCES people(id) ON DELETE CASCADE,
            tokens INTEGER CHECK (tokens IS NULL OR tokens >= 1))""")


@migration
def m052_reset_makers(db: sqlite_utils.Database) -> None:
    # Who made a reset link (NULL: the owner's own, from `tabletalk reset-link`): a maker who is
    # removed takes their links along (CASCADE), and one who is no longer an admin has them
    # deleted (Store.set_admin), so a link outlives no one's right to make it (docs/people.md).
    db.execute("ALTER TABLE resets ADD COLUMN made_by INTEGER REFERENCES people(id) ON DELETE CASCADE")


@migration
def m053_model_people(db: sqlite_utils.Database) -> None:
    # Who may use one model of a connection (docs/connections.md): a row of `model_rules` keeps
    # that model (its name as its server lists it, without the connection's prefix, so a renamed
    # connection keeps its rules) for the owner and the people of `model_people`; no row, for
    # everyone its connection allows. A model's rule narrows its connection's: a person may use
    # it only if both allow them (Store.barred, `may_use`).
    db.execute(
        """CREATE TABLE model_rules (
            connection INTEGER NOT NULL REFERENCES connections(id) ON DELETE CASCADE,
            model TEXT NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
            PRIMARY KEY (connection, model))""")
    db.execute(
        """CREATE TABLE model_people (
            connection INTEGER NOT NULL,
            model TEXT NOT NULL,
            person INTEGER NOT NULL REFERENCES people(id) ON DELETE CASCADE,
            PRIMARY KEY (connection, model, person),
            FOREIGN KEY (connection, model) REFERENCES model_rules(connection, model) ON DELETE CASCADE)""")
    db.execute("CREATE INDEX model_people_person ON model_people (person)")


@migration
def m055_watched(db: sqlite_utils.Database) -> None:
    # Which conversations a page or an API stream follows, in any worker or server, until when
    # (dbm.now(): the follower's worker marks them every few seconds while it follows:
    # Feed.mark_watched). The runner writes an answer's growth once a beat while its
    # conversation is followed somewhere, and once a second while it is not (run/writes.py):
    # growth is never read from the rows but to be shown (a step cut off is made again whole).
    # Marks of a deleted conversation go with it; old ones are simply past.
    db.execute(
        """CREATE TABLE watched (
            chat INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
            until REAL NOT NULL)""")


@migration
def m057_watched_by(db: sqlite_utils.Database) -> None:
    # A mark names the feed that made it (Feed.marker: a worker's, new at each start): a runner
    # asks whether a conversation is followed in another worker or server than its own, and
    # writes the growth of one only its own pages follow once a second, as for nobody (they
    # are handed the words from memory: run/runner.py, `watched`). Marks are seconds long and
    # renewed while they hold: those of m055 are simply dropped.
    db.execute("DROP TABLE watched")
    db.execute(
        """CREATE TABLE watched (
            chat INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            marker TEXT NOT NULL CHECK (length(marker) BETWEEN 1 AND 100),
            until REAL NOT NULL,
            PRIMARY KEY (chat, marker))""")
