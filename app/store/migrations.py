"""SQLite's schema as its history: an append-only list of small named migrations, applied in
this order by `db.migrate` (each in its own write, recorded in the `migrations` table). Never
edit one that has landed; add the next at the end. PostgreSQL's twin of each is in
pg_schema.py."""
from __future__ import annotations

import unicodedata
from collections.abc import Callable

import sqlite_utils

from .db import bump, now

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


@migration
def m013_sidebar(db: sqlite_utils.Database) -> None:
    # The sidebar lists a person's conversations pinned first, then by `active`: when the
    # person last sent a message (milliseconds, an integer so a "More" cursor compares exactly;
    # answers do not move a conversation). Rows made before are placed by their last message.
    db.execute("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1))")
    db.execute("ALTER TABLE conversations ADD COLUMN active INTEGER NOT NULL DEFAULT 0")
    db.execute(
        """UPDATE conversations SET active = CAST(1000 * coalesce(
               (SELECT max(created) FROM items WHERE items.chat = conversations.id AND kind = 'user'),
               created) AS INTEGER)""")
    db.execute("CREATE INDEX conversations_listed ON conversations (person, pinned, active, id)")
    # What a new conversation with an agent suggests asking, one per line ('' = the defaults).
    db.execute("ALTER TABLE assistants ADD COLUMN suggestions TEXT NOT NULL DEFAULT ''")


@migration
def m011_branches(db: sqlite_utils.Database) -> None:
    # Edits and versions as a tree (see app/branches.py and docs/branches.md). A message that
    # starts a turn follows a *version head* (`parent`): the previous turn's user item (its
    # answer's first version) or one of that turn's retry items, 0 at the start. An edit is a
    # new user item with the edited message's parent; among such siblings the greatest
    # `chosen` (the rev it was written or picked at) is current. `answer` on a user item names
    # its turn's current answer version (0: the newest). Until now every conversation was one
    # line: each turn follows the newest version of the turn before it.
    for column in ("parent", "chosen", "answer"):
        db.execute(f"ALTER TABLE items ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    last: dict[int, int] = {}  # conversation -> the head its next turn follows
    latest: dict[int, int] = {}  # conversation -> its latest turn (the one "again" redid)
    rows = db.conn.execute("SELECT id, chat, kind, turn, rev FROM items WHERE kind IN ('user', 'retry') "
                           "ORDER BY chat, id").fetchall()
    for row in rows:
        if row["kind"] == "retry":
            if row["turn"] and row["turn"] == latest.get(row["chat"]):
                last[row["chat"]] = row["id"]
            continue
        if row["turn"] not in (0, row["id"]):
            continue  # a message sent "now" that joined a running turn: inside it, not a turn
        db.conn.execute("UPDATE items SET parent = ?, chosen = ? WHERE id = ?",
                        [last.get(row["chat"], 0), row["rev"], row["id"]])
        last[row["chat"]] = latest[row["chat"]] = row["id"]


@migration
def m012_composer(db: sqlite_utils.Database) -> None:
    # The model and thinking level the person last picked in a conversation's composer: shown
    # in its header, preselected in the composer, used by its later messages and by "Again"
    # when none is given ('' = the agent's).
    db.execute("ALTER TABLE conversations ADD COLUMN model TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE conversations ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")
    # How long the model reasoned, in seconds: from its reasoning's first token to its answer's
    # first (or the step's end when no answer followed); 0 until then.
    db.execute("ALTER TABLE items ADD COLUMN thought REAL NOT NULL DEFAULT 0")


@migration
def m014_theme(db: sqlite_utils.Database) -> None:
    # The theme a person's pages use: '' follows the system's light or dark (prefers-color-
    # scheme), 'light' and 'dark' are chosen on the account page and hold on every device
    # they sign in on (a column, not a cookie: it follows the person, not the browser).
    db.execute("ALTER TABLE people ADD COLUMN theme TEXT NOT NULL DEFAULT '' CHECK (theme IN ('', 'light', 'dark'))")


@migration
def m017_tool_content(db: sqlite_utils.Database) -> None:
    # A tool result whose parts are meant for one audience (MCP annotations): `output` is what
    # the model is sent, `shown` what the page shows instead when that differs ('' = the
    # output). `unsent` = 1 when the call's `file` (an image or audio it returned) is for the
    # person only and is not sent to the model.
    db.execute("ALTER TABLE items ADD COLUMN shown TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE items ADD COLUMN unsent INTEGER NOT NULL DEFAULT 0 CHECK (unsent IN (0, 1))")


@migration
def m015_vetted_memories(db: sqlite_utils.Database) -> None:
    # A memory the model writes after a tool brought it text from outside (a plugin's result,
    # a fetched page) may be that text's doing: `outside` marks it (the Memory tab says so),
    # and `chat` is the conversation it was written in.
    db.execute("ALTER TABLE memories ADD COLUMN outside INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE memories ADD COLUMN chat INTEGER REFERENCES conversations(id) ON DELETE SET NULL")
    # Per agent: whether such a memory waits for the person's approval before it is kept (on
    # by default; the owner of an agent that only reads trusted plugins may turn it off).
    db.execute("ALTER TABLE assistants ADD COLUMN vet_memories INTEGER NOT NULL DEFAULT 1")


@migration
def m019_call_dispatch(db: sqlite_utils.Database) -> None:
    # A call is marked `dispatched` when it is sent to its tool (not when it starts: an MCP
    # session is opened first), and `interrupted` when a restart cut it: with `dispatched`
    # the page and the model are told it may have run. Calls left running by a release that
    # did not mark dispatch may have been sent: they count as dispatched.
    db.execute("ALTER TABLE items ADD COLUMN dispatched INTEGER NOT NULL DEFAULT 0 CHECK (dispatched IN (0, 1))")
    db.execute("ALTER TABLE items ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0 CHECK (interrupted IN (0, 1))")
    db.execute("UPDATE items SET dispatched = 1 WHERE kind = 'call' AND state = 'running'")


@migration
def m022_plugin_page_sessions_stdio(db: sqlite_utils.Database) -> None:
    # A plugin's page shows what was read with its status: `transport` (streamable-http, sse
    # or stdio), `status_at` (when the status was read), `listed` (its tools as of then: the
    # MCP tool definitions, JSON, so a plugin that went down is shown with the tools it had
    # and a call to one of them is told why it fails) and `offers` (the server's
    # capabilities that matter, JSON: whether it has prompts, resources).
    db.execute("ALTER TABLE plugins ADD COLUMN transport TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE plugins ADD COLUMN status_at REAL")
    db.execute("ALTER TABLE plugins ADD COLUMN listed TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE plugins ADD COLUMN offers TEXT NOT NULL DEFAULT ''")
    # A plugin is an address (http) or, when the owner allows it, a command run on this
    # machine (stdio): the program, its arguments (JSON list) and environment (JSON object).
    db.execute("ALTER TABLE plugins ADD COLUMN kind TEXT NOT NULL DEFAULT 'http' CHECK (kind IN ('http', 'stdio'))")
    db.execute("ALTER TABLE plugins ADD COLUMN command TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE plugins ADD COLUMN args TEXT NOT NULL DEFAULT '[]'")
    db.execute("ALTER TABLE plugins ADD COLUMN env TEXT NOT NULL DEFAULT '{}'")
    # The MCP session a conversation has with a plugin (Streamable HTTP's Mcp-Session-Id and
    # the server's answer to `initialize`), so another worker, or this one after a restart,
    # goes on in the same session. `fingerprint` is a hash of what reaching the plugin takes
    # (address, header, secret, transport): a changed secret is another session.
    db.execute(
        """CREATE TABLE mcp_sessions (
            chat INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            plugin INTEGER NOT NULL REFERENCES plugins(id) ON DELETE CASCADE,
            fingerprint TEXT NOT NULL,
            session_id TEXT NOT NULL CHECK (length(session_id) BETWEEN 1 AND 1000),
            initialized TEXT NOT NULL,
            used REAL NOT NULL,
            PRIMARY KEY (chat, plugin))""")


@migration
def m020_model_limits(db: sqlite_utils.Database) -> None:
    # What a model server showed it cannot take, learned from its failures (app/providers/
    # limits.py), per model id: the window its error named (NULL: none learned), and whether
    # it takes image parts, tools and a reasoning field (1 until one was refused). Read
    # before each turn, so every worker builds its requests by what any of them learned.
    db.execute(
        """CREATE TABLE model_limits (
            model TEXT PRIMARY KEY,
            window INTEGER CHECK (window IS NULL OR window > 0),
            images INTEGER NOT NULL DEFAULT 1 CHECK (images IN (0, 1)),
            tools INTEGER NOT NULL DEFAULT 1 CHECK (tools IN (0, 1)),
            reasoning INTEGER NOT NULL DEFAULT 1 CHECK (reasoning IN (0, 1)),
            updated REAL NOT NULL
        )""")
    # The meter's count is the app's own estimate (the server reported no usage): 1.
    db.execute("ALTER TABLE contexts ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1))")


@migration
def m021_builtin_model(db: sqlite_utils.Database) -> None:
    # The built-in model (app/localmodel): one row, so every open page follows its install
    # and its server like any other row (its rev). `state`: '' not chosen, 'wanted' (the
    # owner chose it; `tabletalk serve` installs it), 'installing', 'ready', 'failed'.
    # `step` of `steps` is the install's step (`what` in words), `percent` its progress (-1:
    # unknown) and `line` the installer's last line, `pid` the installing process (an
    # install whose process is gone was cut off). `serving` is the model server's state
    # ('', 'starting', 'up', 'restarting', 'stopped'), at `url`, started `restarts` times
    # after it died.
    db.execute("""CREATE TABLE builtin_model (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        state TEXT NOT NULL DEFAULT '' CHECK (state IN ('', 'wanted', 'installing', 'ready', 'failed')),
        step INTEGER NOT NULL DEFAULT 0,
        steps INTEGER NOT NULL DEFAULT 0,
        what TEXT NOT NULL DEFAULT '',
        percent INTEGER NOT NULL DEFAULT -1,
        line TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        pid INTEGER NOT NULL DEFAULT 0,
        started REAL NOT NULL DEFAULT 0,
        finished REAL NOT NULL DEFAULT 0,
        serving TEXT NOT NULL DEFAULT '',
        url TEXT NOT NULL DEFAULT '',
        restarts INTEGER NOT NULL DEFAULT 0,
        updated REAL NOT NULL DEFAULT 0,
        rev INTEGER NOT NULL DEFAULT 0
    )""")
    db.execute("INSERT INTO builtin_model (id) VALUES (1)")


@migration
def m027_choice_places(db: sqlite_utils.Database) -> None:
    # The model picker's order as a column of its own (it was the rows' rowid, which
    # PostgreSQL has not): `place` is a model's position in the list as last refreshed.
    db.execute("ALTER TABLE choices ADD COLUMN place INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE choices SET place = rowid")


@migration
def m023_plugin_requests(db: sqlite_utils.Database) -> None:
    # A plugin's request to the person during a call is an item of its own: `ask` (an MCP
    # elicitation: a form) and `sample` (MCP sampling: the model's words, once approved), in
    # the states of app/plugins/asks.py. The CHECKs on kind and state are widened in place, the way
    # SQLite documents for loosening a constraint (a new schema text, no copy of the table):
    # every existing row satisfies the wider check.
    sql = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'items'").fetchone()[0]
    kinds = "kind IN ('user','text','reasoning','call','plan','error','retry','stop')"
    states = "('','running','done','failed','approval','approved','declined')"
    if kinds not in sql or states not in sql:
        raise RuntimeError("the items table's checks are not the ones m023 widens")
    sql = sql.replace(kinds, "kind IN ('user','text','reasoning','call','plan','error','retry','stop','ask','sample')")
    sql = sql.replace(states, "('','running','done','failed','approval','approved','declined',"
                              "'waiting','accepted','cancelled','lost','stopped','withdrawn')")
    version = db.execute("PRAGMA schema_version").fetchone()[0]
    db.execute("PRAGMA writable_schema = ON")
    try:
        db.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'items'", [sql])
        db.execute(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        db.execute("PRAGMA writable_schema = OFF")
    # A plugin connected with OAuth (the MCP authorization flow, app/plugins/oauth.py): the client
    # Tabletalk registered with its authorization server, the tokens it was given, and a flow
    # under way (the state and PKCE verifier between the redirect out and the one back).
    db.execute(
        """CREATE TABLE plugin_auth (
            plugin INTEGER PRIMARY KEY REFERENCES plugins(id) ON DELETE CASCADE,
            client TEXT NOT NULL DEFAULT '',   -- the registered client's information, JSON
            tokens TEXT NOT NULL DEFAULT '',   -- the access and refresh tokens, JSON
            pending TEXT NOT NULL DEFAULT '',  -- a flow under way, JSON
            flow TEXT NOT NULL DEFAULT '',     -- its OAuth `state`, by which the callback finds it
            updated REAL NOT NULL)"""
    )


@migration
def m028_shared_secrets(db: sqlite_utils.Database) -> None:
    # Secrets every server of one database must agree on, kept in it rather than in a data
    # folder (app/store/secrets.py): the key that signs forms (`secret.key`, read from the
    # data folder's file of an install that had one) and the setup codes (one per server
    # started, `setup <server>`, until the owner exists). On PostgreSQL files' bytes are
    # rows too (pg_schema.py's m028: `blobs`, `chunks`); SQLite keeps them in files/.
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
