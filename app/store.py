"""Reading and writing rows. The one module that knows ids, revs and SQL (but for the
accounts' own tables, in accounts.py).

Conversations, agents and files belong to a person (`person`); every question a page asks
for a list is asked for one person, and the web layer checks the owner of every row it is
given by id.

Every write of a row a page shows takes a new rev in the same transaction (db.bump) and,
once committed, wakes this process's followers (`notify`); other processes see the commit
through the feed's poll.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

import sqlite_utils

from . import db as dbm
from . import files as filestore
from .tables import Assistant, Choice, Conversation, Item, Plugin, Skill, asked, order

ITEM_COLUMNS = [f.name for f in fields(Item) if f.name not in ("id",)]
TITLE_WORDS = 8
TITLE_MAX = 80


def plugin_from_row(row: Any) -> Plugin:
    data = dict(row)
    return Plugin(agent=data["agent"], name=data["name"], address=data["address"], header=data["header"],
                  secret=data["secret"], enabled=bool(data["enabled"]), status=data["status"], id=data["id"])


def first_words(text: str) -> str:
    """A conversation's first title: the person's first words."""
    words = text.split()
    title = " ".join(words[:TITLE_WORDS])
    if len(title) > TITLE_MAX:
        title = title[: TITLE_MAX - 1].rstrip() + "…"
    elif len(words) > TITLE_WORDS:
        title += "…"
    return title


class Store:
    def __init__(self, db: sqlite_utils.Database, notify: Callable[[], None] = lambda: None):
        self.db = db
        self.notify = notify

    @contextmanager
    def write(self) -> Iterator[sqlite_utils.Database]:
        outer = not self.db.conn.in_transaction
        with dbm.write(self.db):
            yield self.db
        if outer:
            self.notify()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Several reads that must agree (a page and the rev it was rendered at)."""
        if self.db.conn.in_transaction:
            yield
            return
        self.db.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.db.conn.execute("COMMIT")

    def owner(self) -> int | None:
        """The owner's id: rows made without a person (the Python API) are theirs. None
        before the app is set up; the owner then claims them (accounts.People.add)."""
        row = self.one("SELECT id FROM people WHERE owner = 1")
        return row[0] if row else None

    def rev(self) -> int:
        return dbm.current_rev(self.db)

    def one(self, sql: str, params: Any = ()) -> Any:
        return self.db.conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: Any = ()) -> list[Any]:
        return self.db.conn.execute(sql, params).fetchall()

    # --- models ---------------------------------------------------------------------

    @staticmethod
    def _choice(r: Any) -> Choice:
        return Choice(id=r["id"], name=r["name"], group=r["group"], note=r["note"], window=r["window"],
                      tags=tuple(t for t in r["tags"].split(",") if t), up=bool(r["up"]))

    def choices(self) -> list[Choice]:
        """The models listed at the last refresh, in the picker's order, with the providers that were down."""
        return [self._choice(r) for r in self.all("SELECT * FROM choices ORDER BY rowid")]

    def choice(self, model: str) -> Choice | None:
        """The model a message may name as `model`: listed, and its server answered."""
        r = self.one("SELECT * FROM choices WHERE id = ? AND up = 1", [model])
        return self._choice(r) if r else None

    def replace_choices(self, choices: list[Choice]) -> None:
        """The whole list at once (rowid keeps its order): readers see the old list or the new."""
        with self.write() as db:
            db.conn.execute("DELETE FROM choices")
            db.conn.executemany(
                'INSERT OR REPLACE INTO choices (id, name, "group", note, window, tags, up) VALUES (?, ?, ?, ?, ?, ?, ?)',
                [[c.id, c.name, c.group, c.note, c.window, ",".join(c.tags), int(c.up)] for c in choices])

    # --- agents ---------------------------------------------------------------------

    def agent(self, agent_id: int) -> Assistant | None:
        row = self.one("SELECT * FROM assistants WHERE id = ?", [agent_id])
        return Assistant.from_row(row) if row else None

    def agents(self, person: int | None) -> list[Assistant]:
        return [Assistant.from_row(r) for r in self.all("SELECT * FROM assistants WHERE person IS ? ORDER BY id", [person])]

    def add_agent(self, a: Assistant) -> Assistant:
        t = dbm.now()
        with self.write() as db:
            cur = db.conn.execute(
                "INSERT INTO assistants (name, instructions, model, tools, approve, created, updated, rev, person) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [a.name, a.instructions, a.model, a.tools, a.approve, t, t, dbm.bump(db), a.person])
        return self.agent(cur.lastrowid)

    def delete_agent(self, agent_id: int) -> None:
        """Its conversations stay readable (their agent becomes none); its plugins and memories go."""
        with self.write() as db:
            db.conn.execute("DELETE FROM assistants WHERE id = ?", [agent_id])

    def memories(self, agent: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self.all("SELECT * FROM memories WHERE agent = ? ORDER BY id", [agent])]

    def add_memory(self, agent: int, text: str) -> int:
        with self.write() as db:
            return db.conn.execute("INSERT INTO memories (agent, text, created) VALUES (?, ?, ?)",
                                   [agent, text, dbm.now()]).lastrowid

    def delete_memory(self, agent: int, memory: int) -> bool:
        with self.write() as db:
            return db.conn.execute("DELETE FROM memories WHERE id = ? AND agent = ?", [memory, agent]).rowcount == 1

    def update_agent(self, agent_id: int, **values: Any) -> None:
        self._update("assistants", agent_id, {"name", "instructions", "model", "tools", "approve", "thinking"}, values)

    # --- plugins --------------------------------------------------------------------

    def plugins(self, agent: int, enabled_only: bool = False) -> list[Plugin]:
        sql = "SELECT * FROM plugins WHERE agent = ?" + (" AND enabled = 1" if enabled_only else "") + " ORDER BY id"
        return [plugin_from_row(r) for r in self.all(sql, [agent])]

    def plugin_row(self, plugin_id: int) -> Plugin | None:
        row = self.one("SELECT * FROM plugins WHERE id = ?", [plugin_id])
        return plugin_from_row(row) if row else None

    def add_plugin(self, p: Plugin) -> Plugin:
        t = dbm.now()
        with self.write() as db:
            cur = db.conn.execute(
                "INSERT INTO plugins (agent, name, address, header, secret, enabled, status, created, updated, rev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [p.agent, p.name, p.address, p.header, p.secret, int(p.enabled), p.status, t, t, dbm.bump(db)])
        return self.plugin_row(cur.lastrowid)

    def update_plugin(self, plugin_id: int, **values: Any) -> None:
        if "enabled" in values:
            values["enabled"] = int(values["enabled"])
        self._update("plugins", plugin_id, {"name", "address", "header", "secret", "enabled", "status"}, values)

    def delete_plugin(self, plugin_id: int) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM plugins WHERE id = ?", [plugin_id])

    def default_agent(self, person: int | None = None) -> Assistant | None:
        """A person's first agent; with no person, the owner's (or, before any account, the
        first one): never another person's, whose memories and plugins are theirs."""
        if person is None:
            row = self.one("SELECT * FROM assistants WHERE person IS NULL OR person = "
                           "(SELECT id FROM people WHERE owner = 1) ORDER BY id LIMIT 1")
        else:
            row = self.one("SELECT * FROM assistants WHERE person = ? ORDER BY id LIMIT 1", [person])
        return Assistant.from_row(row) if row else None

    # --- skills (shared by every agent; no page follows them live, so no rev) --------

    @staticmethod
    def _skill(row: Any) -> Skill:
        return Skill(name=row["name"], description=row["description"], body=row["body"], id=row["id"])

    def skills(self) -> list[Skill]:
        return [self._skill(r) for r in self.all("SELECT * FROM skills ORDER BY name COLLATE NOCASE, id")]

    def skill(self, skill_id: int) -> Skill | None:
        row = self.one("SELECT * FROM skills WHERE id = ?", [skill_id])
        return self._skill(row) if row else None

    def skill_by_name(self, name: str) -> Skill | None:
        row = self.one("SELECT * FROM skills WHERE name = ?", [name])
        return self._skill(row) if row else None

    def add_skill(self, s: Skill) -> Skill:
        """Raises sqlite3.IntegrityError when the name is taken."""
        t = dbm.now()
        with self.write() as db:
            cur = db.conn.execute(
                "INSERT INTO skills (name, description, body, created, updated) VALUES (?, ?, ?, ?, ?)",
                [s.name, s.description, s.body, t, t])
        return self.skill(cur.lastrowid)

    def update_skill(self, skill_id: int, s: Skill) -> None:
        """Raises sqlite3.IntegrityError when the new name is another skill's."""
        with self.write() as db:
            db.conn.execute("UPDATE skills SET name = ?, description = ?, body = ?, updated = ? WHERE id = ?",
                            [s.name, s.description, s.body, dbm.now(), skill_id])

    def delete_skill(self, skill_id: int) -> bool:
        with self.write() as db:
            return db.conn.execute("DELETE FROM skills WHERE id = ?", [skill_id]).rowcount == 1

    # --- conversations --------------------------------------------------------------

    def conversation(self, chat: int) -> Conversation | None:
        row = self.one("SELECT * FROM conversations WHERE id = ?", [chat])
        return Conversation.from_row(row) if row else None

    def conversations(self, person: int | None, limit: int = 200) -> list[Conversation]:
        rows = self.all("SELECT * FROM conversations WHERE person IS ? ORDER BY id DESC LIMIT ?", [person, limit])
        return [Conversation.from_row(r) for r in rows]

    def new_conversation(self, agent: int | None, title: str = "", person: int | None = None) -> Conversation:
        """A conversation with `agent`, belonging to `person` (by default the agent's, else the owner's)."""
        t = dbm.now()
        with self.write() as db:
            if person is None and agent is not None:
                person = (db.conn.execute("SELECT person FROM assistants WHERE id = ?", [agent]).fetchone() or [None])[0]
            if person is None:
                person = self.owner()
            rev = dbm.bump(db)
            # Ids are never reused: a deleted conversation's old links, open tabs or a run still
            # finishing elsewhere must not reach a new one (its tombstone keeps its id).
            next_id = db.conn.execute(
                """SELECT max(coalesce((SELECT max(id) FROM conversations), 0),
                              coalesce((SELECT max(CAST(substr(dom, 2) AS INTEGER)) FROM tombstones
                                        WHERE chat IS NULL AND dom LIKE 'c%'), 0)) + 1""").fetchone()[0]
            db.conn.execute(
                "INSERT INTO conversations (id, agent, title, created, updated, rev, person) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [next_id, agent, title, t, t, rev, person],
            )
        return Conversation(agent=agent, title=title, id=next_id, created=t, updated=t, rev=rev, person=person)

    def set_title(self, chat: int, title: str) -> None:
        with self.write() as db:
            db.conn.execute(
                "UPDATE conversations SET title = ?, rev = ? WHERE id = ?", [title, dbm.bump(db), chat]
            )

    def touch(self, chat: int) -> None:
        """Mark a conversation as just used (it moves to the top of the list)."""
        with self.write() as db:
            db.conn.execute(
                "UPDATE conversations SET updated = ?, rev = ? WHERE id = ?", [dbm.now(), dbm.bump(db), chat]
            )

    # --- items ----------------------------------------------------------------------

    def item(self, item_id: int) -> Item | None:
        row = self.one("SELECT * FROM items WHERE id = ?", [item_id])
        return Item.from_row(row) if row else None

    def items(self, chat: int) -> list[Item]:
        return [Item.from_row(r) for r in self.all("SELECT * FROM items WHERE chat = ? ORDER BY id", [chat])]

    def items_since(self, rev: int, chat: int | None = None, upto: int | None = None,
                    chats: list[int] | None = None) -> list[Item]:
        """Items changed after `rev` (up to `upto`), of one conversation or some, in page order."""
        sql, params = "SELECT * FROM items WHERE rev > ?", [rev]
        if chat is not None:
            sql, params = sql + " AND chat = ?", [*params, chat]
        if chats is not None:
            sql, params = sql + f" AND chat IN ({','.join('?' * len(chats))})", [*params, *chats]
        if upto is not None:
            sql, params = sql + " AND rev <= ?", [*params, upto]
        return [Item.from_row(r) for r in self.all(sql + " ORDER BY chat, turn, id", params)]

    def conversations_since(self, rev: int, upto: int | None = None) -> list[Conversation]:
        sql, params = "SELECT * FROM conversations WHERE rev > ?", [rev]
        if upto is not None:
            sql, params = sql + " AND rev <= ?", [*params, upto]
        return [Conversation.from_row(r) for r in self.all(sql + " ORDER BY id", params)]

    def add(self, new: Item) -> Item:
        """Store a new item; a user item is its own turn."""
        if new.chat is None:
            raise ValueError("an item belongs to a conversation")
        t = dbm.now()
        with self.write() as db:
            rev = dbm.bump(db)
            values = new.to_dict() | {"created": t, "updated": t, "rev": rev, "done": int(new.done)}
            values.pop("id")
            cols = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            item_id = db.conn.execute(f"INSERT INTO items ({cols}) VALUES ({marks})", list(values.values())).lastrowid
            if new.kind == "user":
                db.conn.execute("UPDATE items SET turn = ? WHERE id = ?", [item_id, item_id])
                values["turn"] = item_id
            # not a change a page shows, so no rev: only the title and the list order show
            db.conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", [t, new.chat])
        return Item(**{k: v for k, v in values.items() if k != "done"}, done=bool(new.done), id=item_id)

    def update(self, item_id: int, **values: Any) -> None:
        """Change some columns of an item (text, output, state, done ...)."""
        if "done" in values:
            values["done"] = int(values["done"])
        self._update("items", item_id, set(ITEM_COLUMNS), values)

    def _update(self, table: str, row_id: int, allowed: set[str], values: dict[str, Any]) -> None:
        """Change some columns of a row a page shows: it takes a new rev in the same write."""
        bad = set(values) - allowed
        if bad:
            raise ValueError(f"not {table} columns: {sorted(bad)}")
        with self.write() as db:
            values = values | {"updated": dbm.now(), "rev": dbm.bump(db)}
            sets = ", ".join(f"{k} = ?" for k in values)
            db.conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*values.values(), row_id])

    def plan(self, chat: int) -> Item | None:
        row = self.one("SELECT * FROM items WHERE chat = ? AND kind = 'plan' ORDER BY id LIMIT 1", [chat])
        return Item.from_row(row) if row else None

    def set_plan(self, chat: int, text: str) -> Item:
        """The conversation's one plan item, made or replaced."""
        with self.write():
            current = self.plan(chat)
            if current is None:
                return self.add(Item(kind="plan", chat=chat, text=text, done=True))
            self.update(current.id, text=text)
            return self.item(current.id)

    def delete_items(self, ids: list[int]) -> None:
        """Delete items, leaving tombstones so following pages remove them too."""
        if not ids:
            return
        with self.write() as db:
            for item_id in ids:
                row = db.conn.execute("SELECT chat FROM items WHERE id = ?", [item_id]).fetchone()
                if row is None:
                    continue
                db.conn.execute("DELETE FROM items WHERE id = ?", [item_id])
                db.conn.execute("INSERT INTO tombstones (chat, dom, rev) VALUES (?, ?, ?)",
                                [row[0], f"i{item_id}", dbm.bump(db)])

    def tombstones_since(self, rev: int, chat: int | None = None,
                         upto: int | None = None) -> list[tuple[int | None, str, int | None]]:
        """(chat, dom id, person) of what was deleted after `rev`; chat None: from a list."""
        sql, params = "SELECT chat, dom, person FROM tombstones WHERE rev > ?", [rev]
        if chat is not None:
            sql, params = sql + " AND chat = ?", [*params, chat]
        if upto is not None:
            sql, params = sql + " AND rev <= ?", [*params, upto]
        return [(r[0], r[1], r[2]) for r in self.all(sql + " ORDER BY rev", params)]

    def ask(self, chat: int, text: str, model: str = "", files: tuple[int, ...] = (), thinking: str = "",
            steer: bool = False) -> Item:
        """Write the person's message; the first one also names the conversation."""
        with self.write():
            new = self.add(asked(chat, text, model=model, files=files, thinking=thinking, steer=steer))
            convo = self.conversation(chat)
            if convo is not None and not convo.title:
                self.set_title(chat, first_words(text))
        return new

    # --- what the model is sent (window.py) -----------------------------------------

    def turn_items(self, chat: int, first: int, last: int) -> list[Item]:
        """The items of turns `first`..`last` (user item ids), in page order: a request's
        history from the model's view start, without reading what it leaves out."""
        rows = self.all("SELECT * FROM items WHERE chat = ? AND turn BETWEEN ? AND ?", [chat, first, last])
        return sorted((Item.from_row(r) for r in rows), key=order)

    def context(self, chat: int) -> dict[str, int]:
        """The conversation's `contexts` row (zeros before its first request)."""
        row = self.one("SELECT * FROM contexts WHERE id = ?", [chat])
        if row is None:
            return {"used": 0, "window": 0, "start": 0, "trim": 0, "turns_out": 0, "left_out": 0, "estimate": 0,
                    "cached": 0}
        return {k: row[k] for k in row.keys() if k not in ("id", "rev")}

    def set_context(self, chat: int, **values: int) -> None:
        """Change some columns of the conversation's `contexts` row (made when missing); the
        status fragment shows it, so it takes a rev."""
        allowed = {"used", "window", "start", "trim", "turns_out", "left_out", "estimate", "cached"}
        if bad := set(values) - allowed:
            raise ValueError(f"not contexts columns: {sorted(bad)}")
        with self.write() as db:
            values = values | {"rev": dbm.bump(db)}
            cols = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            sets = ", ".join(f"{k} = excluded.{k}" for k in values)
            db.conn.execute(f"INSERT INTO contexts (id, {cols}) VALUES (?, {marks}) ON CONFLICT (id) DO UPDATE SET {sets}",
                            [chat, *values.values()])

    def contexts_since(self, rev: int, upto: int, chats: list[int]) -> list[int]:
        """Conversations among `chats` whose context changed after `rev` (up to `upto`)."""
        if not chats:
            return []
        marks = ",".join("?" * len(chats))
        return [r[0] for r in self.all(f"SELECT id FROM contexts WHERE rev > ? AND rev <= ? AND id IN ({marks})",
                                       [rev, upto, *chats])]

    def calibration(self, model: str) -> tuple[float, int]:
        """(the server's tokens per token of our raw estimate, how many answers taught it);
        (1.0, 0) for a model not seen yet."""
        row = self.one("SELECT ratio, samples FROM calibrations WHERE model = ?", [model])
        return (row[0], row[1]) if row else (1.0, 0)

    def set_calibration(self, model: str, ratio: float, samples: int) -> None:
        with self.write() as db:
            db.conn.execute(
                """INSERT INTO calibrations (model, ratio, samples, updated) VALUES (?, ?, ?, ?)
                   ON CONFLICT (model) DO UPDATE SET ratio = excluded.ratio, samples = excluded.samples,
                   updated = excluded.updated""", [model, ratio, samples, dbm.now()])

    def unread_steers(self, chat: int, after: int) -> list[Item]:
        """Messages sent "now" after item `after` that no run has read yet, oldest first."""
        rows = self.all("SELECT * FROM items WHERE chat = ? AND kind = 'user' AND steer = 1 AND done = 0 "
                        "AND id > ? ORDER BY id", [chat, after])
        return [Item.from_row(r) for r in rows]

    def read_steers(self, ids: list[int], turn: int) -> None:
        """The model reads these messages now: they join `turn`, placed after its last item."""
        with self.write() as db:
            last = db.conn.execute("SELECT max(id) FROM items WHERE chat = (SELECT chat FROM items WHERE id = ?) "
                                   "AND turn = ?", [turn, turn]).fetchone()[0] or turn
            for item_id in ids:
                self.update(item_id, turn=turn, read_after=last, done=True)

    # --- files (bytes on disk by content hash beside the database, rows here) -------------

    def files_root(self) -> Path:
        """data/files: beside the database (Config.files), wherever this store was opened."""
        main = next((r[2] for r in self.all("PRAGMA database_list") if r[1] == "main"), "")
        return Path(main).parent / "files"

    def add_file(self, name: str, data: bytes, person: int | None = None) -> int:
        """Store bytes (once per content) and a row naming them, `person`'s (else the owner's);
        the type is sniffed here."""
        sha = filestore.save(self.files_root(), data)
        with self.write() as db:
            person = self.owner() if person is None else person
            return db.conn.execute(
                "INSERT INTO files (name, type, size, sha256, created, person) VALUES (?, ?, ?, ?, ?, ?)",
                [filestore.clean_name(name), filestore.sniff(data), len(data), sha, dbm.now(), person]).lastrowid

    def files_of(self, items: list[Item]) -> dict[int, dict[str, Any]]:
        """The file rows the items name (attachments and tool-made files), by id."""
        ids = {f for it in items for f in it.file_ids} | {it.file for it in items if it.file}
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {r["id"]: dict(r) for r in self.all(f"SELECT id, name, type, size FROM files WHERE id IN ({marks})", list(ids))}

    def file(self, file_id: int) -> dict[str, Any] | None:
        row = self.one("SELECT * FROM files WHERE id = ?", [file_id])
        return dict(row) if row else None

    def file_bytes(self, file_id: int) -> tuple[dict[str, Any], bytes] | None:
        row = self.file(file_id)
        data = filestore.load(self.files_root(), row["sha256"]) if row else None
        return (row, data) if row is not None and data is not None else None

    # --- deleting and searching conversations ---------------------------------------

    def delete_conversation(self, chat: int) -> bool:
        """Delete a conversation; its items, lease and context go with it (foreign keys) and
        the search index follows (triggers). Two tombstones: one takes it off the list pages,
        one tells a page open on it. False when there was none."""
        with self.write() as db:
            row = db.conn.execute("DELETE FROM conversations WHERE id = ? RETURNING person", [chat]).fetchone()
            if row is None:
                return False
            rev = dbm.bump(db)
            db.conn.executemany("INSERT INTO tombstones (chat, dom, rev, person) VALUES (?, ?, ?, ?)",
                                [[None, f"c{chat}", rev, row[0]], [chat, f"c{chat}", rev, row[0]]])
        return True

    def search(self, terms: list[str], marks: tuple[str, str], person: int | None,
               limit: int = 50) -> list[dict[str, Any]]:
        """`person`'s conversations holding every term (FTS5 strings, already safe) in their title or in
        any message or answer, newest first. Each comes with its title highlighted where it
        matched and a snippet of its best matching item, `marks` around the hits."""
        if not terms:
            return []
        with self.snapshot():  # the matches, their titles and snippets as of one moment
            every = " INTERSECT ".join("SELECT chat FROM search WHERE search MATCH ?" for _ in terms)
            found = self.all(f"SELECT id, title FROM conversations WHERE person IS ? AND id IN ({every}) "
                             "ORDER BY id DESC LIMIT ?", [person, *terms, limit])
            if not found:
                return []
            anyterm = " OR ".join(terms)
            places = ",".join("?" * len(found))
            best = {r["chat"]: r["item"] for r in self.all(
                f"""SELECT chat, item FROM (
                        SELECT chat, rowid AS item, row_number() OVER (PARTITION BY chat ORDER BY rank) AS n
                        FROM search WHERE search MATCH ? AND rowid > 0 AND chat IN ({places}))
                    WHERE n = 1""", [anyterm, *(r["id"] for r in found)])}
            hits = []
            for r in found:
                title = self.one("SELECT highlight(search, 1, ?, ?) FROM search WHERE search MATCH ? AND rowid = ?",
                                 [*marks, anyterm, -r["id"]])
                item = best.get(r["id"])
                snippet = self.one("SELECT snippet(search, 2, ?, ?, '…', 16) FROM search WHERE search MATCH ? "
                                   "AND rowid = ?", [*marks, anyterm, item]) if item else None
                hits.append({"chat": r["id"], "title": r["title"], "title_marked": title[0] if title else None,
                             "item": item, "snippet": snippet[0] if snippet else ""})
        return hits
