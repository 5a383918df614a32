"""SQLite's migrations of the second era (m011-m027, in the order they landed, which is not
their numbers' order: m013 before m011, m017 before m015, ...): the sidebar, branches, the
composer, the theme, tool content, memories, call dispatch, plugins' sessions, model
limits, the built-in model, choice places, plugin requests. Frozen history
(app/store/schema/__init__.py): never edit one; new ones go at the end of
app/store/schema/migrations.py."""
from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = []
migration = MIGRATIONS.append


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
    # The built-in model (app/builtin): one row, so every open page follows its install
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
