"""Conversations and their items: what pages show and the feed sends; deleting (searching: search.py)."""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from . import db as dbm
from ..tables import Conversation, Item, asked, file_ids
from ..titles import first_words
from .rows import Base

ITEM_COLUMNS = [f.name for f in fields(Item) if f.name not in ("id",)]


class Chats(Base):
    # --- conversations --------------------------------------------------------------

    def conversation(self, chat: int) -> Conversation | None:
        row = self._one("SELECT * FROM conversations WHERE id = ?", [chat])
        return Conversation.from_row(row) if row else None

    def existing(self, chats: set[int]) -> set[int]:
        """Which of these conversation ids still exist."""
        if not chats:
            return set()
        marks = ",".join("?" * len(chats))
        return {r[0] for r in self._all(f"SELECT id FROM conversations WHERE id IN ({marks})", list(chats))}

    def conversations(self, person: int | None, limit: int = 200,
                      after: tuple[int, int, int] | None = None) -> list[Conversation]:
        """`person`'s conversations as the sidebar lists them: pinned first, then the latest
        message first; `after` (pinned, active, id) of a row: the ones listed below it."""
        whose, params = self._is("person", person)
        sql = f"SELECT * FROM conversations WHERE {whose}"
        if after is not None:
            sql, params = sql + " AND (pinned, active, id) < (?, ?, ?)", [*params, *after]
        rows = self._all(sql + " ORDER BY pinned DESC, active DESC, id DESC LIMIT ?", [*params, limit])
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
            last = db.conn.execute(
                """SELECT (SELECT max(id) FROM conversations),
                          (SELECT max(CAST(substr(dom, 2) AS INTEGER)) FROM tombstones
                           WHERE chat IS NULL AND dom LIKE 'c%')""").fetchone()
            next_id = max(last[0] or 0, last[1] or 0) + 1
            db.conn.execute(
                "INSERT INTO conversations (id, agent, title, created, updated, rev, person, active) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [next_id, agent, title, t, t, rev, person, int(t * 1000)],
            )
        return Conversation(agent=agent, title=title, id=next_id, created=t, updated=t, rev=rev, person=person,
                            active=int(t * 1000))

    def start_conversation(self, agent: int | None, person: int, text: str, model: str = "",
                           files: tuple[int, ...] = (), thinking: str = "", knowledge: str = "",
                           outside: bool = False, search_web: bool = False) -> tuple[Conversation, Item]:
        """A conversation and its first message, in one write: a conversation exists only once
        something was said in it (the new-conversation page writes nothing)."""
        with self.write():
            convo = self.new_conversation(agent, person=person)
            first = self.ask(convo.id, text, model=model, files=files, thinking=thinking, knowledge=knowledge,
                             outside=outside, search_web=search_web)
            return self.conversation(convo.id), first

    def pin(self, chat: int, pinned: bool) -> None:
        with self.write() as db:
            db.conn.execute("UPDATE conversations SET pinned = ?, rev = ? WHERE id = ?",
                            [int(pinned), dbm.bump(db), chat])

    def set_title(self, chat: int, title: str) -> None:
        with self.write() as db:
            db.conn.execute(
                "UPDATE conversations SET title = ?, rev = ? WHERE id = ?", [title, dbm.bump(db), chat]
            )

    def set_choice(self, chat: int, model: str, thinking: str) -> None:
        """The model and thinking level picked in the conversation's composer ('' = the agent's):
        they stay picked, and pages open on it show the change (a new rev)."""
        with self.write() as db:
            db.conn.execute("UPDATE conversations SET model = ?, thinking = ?, rev = ? WHERE id = ?",
                            [model, thinking, dbm.bump(db), chat])

    # --- items ----------------------------------------------------------------------

    def item(self, item_id: int) -> Item | None:
        row = self._one("SELECT * FROM items WHERE id = ?", [item_id])
        return self._item(row)

    def items(self, chat: int) -> list[Item]:
        return self._items(self._all("SELECT * FROM items WHERE chat = ? ORDER BY id", [chat]))

    def last_of_turn(self, chat: int, turn: int) -> Item | None:
        """How a turn ended: its last answer, error or stop (a screen reader is told it)."""
        row = self._one("SELECT * FROM items WHERE chat = ? AND turn = ? AND kind IN ('text', 'error', 'stop') "
                       "ORDER BY id DESC LIMIT 1", [chat, turn])
        return self._item(row)

    def items_since(self, rev: int, chat: int | None = None, upto: int | None = None,
                    chats: list[int] | None = None) -> list[Item]:
        """Items changed after `rev` (up to `upto`), of one conversation or some, in page order."""
        sql, params = "SELECT * FROM items WHERE rev > ?", [rev]
        if chat is not None:
            sql, params = sql + " AND chat = ?", [*params, chat]
        if chats is not None:
            # The feed's read at each dispatch: found by `rev` (the few rows changed since its
            # last), never by `chat`. By the conversation's index SQLite read every row of
            # it, through each long text's overflow pages to reach `rev`, at every message
            # of a growing answer. `+chat` is the same value, not an indexed column.
            sql, params = sql + f" AND +chat IN ({','.join('?' * len(chats))})", [*params, *chats]
        if upto is not None:
            sql, params = sql + " AND rev <= ?", [*params, upto]
        return self._items(self._all(sql + " ORDER BY chat, turn, id", params))

    def conversations_since(self, rev: int, upto: int | None = None, person: int | None = None) -> list[Conversation]:
        """Conversations changed after `rev` (up to `upto`), everyone's or one `person`'s."""
        sql, params = "SELECT * FROM conversations WHERE rev > ?", [rev]
        if person is not None:
            sql, params = sql + " AND person = ?", [*params, person]
        if upto is not None:
            sql, params = sql + " AND rev <= ?", [*params, upto]
        return [Conversation.from_row(r) for r in self._all(sql + " ORDER BY id", params)]

    def add(self, new: Item) -> Item:
        """Store a new item; a user item is its own turn, and the first names its conversation.

        As the seed's constructors make them: a `retry` or `stop` that names no turn is of the
        conversation's last turn (a retry) or of the one running (a stop), and an item that has
        an id already (a decided call) is written over its row.
        """
        if new.chat is None:
            raise ValueError("an item belongs to a conversation")
        if new.id is not None:
            return self._written_over(new)
        t = dbm.now()
        with self.write() as db:
            if new.kind in ("retry", "stop") and not new.turn:
                new = replace(new, turn=self._turn_of(new))
            if new.kind == "user" and not new.parent:
                # unless it says where it stands (an edit), it follows the end of the current path
                new = replace(new, parent=self.head(new.chat))
            rev = dbm.bump(db)
            values = new.to_dict() | {"created": t, "updated": t, "rev": rev, "done": int(new.done)}
            values.pop("id")
            cols = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            item_id = db.conn.execute(f"INSERT INTO items ({cols}) VALUES ({marks}) RETURNING id",
                                      list(values.values())).fetchone()[0]
            if new.kind == "user":
                # its own turn, and current at its fork: the newest wins (app/branches.py)
                db.conn.execute("UPDATE items SET turn = ?, chosen = ? WHERE id = ?", [item_id, rev, item_id])
                values["turn"], values["chosen"] = item_id, rev
                # the first message names its conversation, and every message moves it to the top of
                # the sidebar (`active`), in the message's rev (which tells the lists)
                db.conn.execute("UPDATE conversations SET title = CASE WHEN title = '' THEN ? ELSE title END, "
                                "active = ?, rev = ? WHERE id = ?", [first_words(new.text), int(t * 1000), rev, new.chat])
            elif new.kind == "retry":  # a new version is its turn's current one
                db.conn.execute("UPDATE items SET answer = 0, rev = ? WHERE id = ? AND answer != 0", [rev, new.turn])
            # not a change a page shows, so no rev: only the title and the list order show
            db.conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", [t, new.chat])
        return Item(**{k: v for k, v in values.items() if k != "done"}, done=bool(new.done), id=item_id)

    def _turn_of(self, new: Item) -> int:
        if new.kind == "retry":  # the last turn of the current path (app/branches.py)
            path = self.path(new.chat)
            if not path.steps:
                raise ValueError("there is no answer to make again yet")
            return path.steps[-1].turn
        running = self.answering(new.chat)  # a steering message joins the turn being answered
        return running.turn if running else 0

    def _written_over(self, changed: Item) -> Item:
        with self.write():
            stored = self.item(changed.id)
            if stored is None or stored.chat != changed.chat:
                raise ValueError(f"there is no item {changed.id} in conversation {changed.chat}")
            values = {k: v for k, v in changed.to_dict().items()
                      if k in ITEM_COLUMNS and k not in ("created", "updated", "rev") and v != getattr(stored, k)}
            if values:
                self.update(changed.id, **values)
            return self.item(changed.id)

    def update(self, item_id: int, **values: Any) -> None:
        """Change some columns of an item (text, output, state, done ...)."""
        if "done" in values:
            values["done"] = int(values["done"])
        self._update("items", item_id, set(ITEM_COLUMNS), values)

    def plan(self, chat: int) -> Item | None:
        row = self._one("SELECT * FROM items WHERE chat = ? AND kind = 'plan' ORDER BY id LIMIT 1", [chat])
        return self._item(row)

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
        return [(r[0], r[1], r[2]) for r in self._all(sql + " ORDER BY rev", params)]

    def ask(self, chat: int, text: str, model: str = "", files: tuple[int, ...] = (), thinking: str = "",
            steer: bool = False, knowledge: str = "", outside: bool = False, search_web: bool = False) -> Item:
        """Write the person's message (following the end of the current path); the first one
        also names the conversation. `knowledge`: its picks (tables.Picks, checked by the caller);
        `outside`: its text is a plugin's prompt; `search_web`: the search switch was on."""
        return self.add(asked(chat, text, model=model, files=files, thinking=thinking, steer=steer, knowledge=knowledge,
                              outside=outside, search_web=search_web))

    # --- deleting conversations -----------------------------------------------------

    def delete_conversation(self, chat: int) -> bool:
        """Delete a conversation; its items, lease and context go with it (foreign keys), its
        files with them (forget_files), and the search index follows (triggers). Two
        tombstones: one takes it off the list pages, one tells a page open on it. False when
        there was none."""
        with self.write() as db:
            files = {f for r in db.conn.execute("SELECT file, files FROM items WHERE chat = ? AND (file IS NOT NULL "
                                                "OR files != '')", [chat])
                     for f in (r["file"], *file_ids(r["files"])) if f}
            row = db.conn.execute("DELETE FROM conversations WHERE id = ? RETURNING person", [chat]).fetchone()
            if row is None:
                return False
            self.forget_files(files)  # its attachments and tool-made files go with it
            rev = dbm.bump(db)
            db.conn.executemany("INSERT INTO tombstones (chat, dom, rev, person) VALUES (?, ?, ?, ?)",
                                [[None, f"c{chat}", rev, row[0]], [chat, f"c{chat}", rev, row[0]]])
        return True
