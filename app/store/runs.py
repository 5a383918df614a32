"""What the runner reads and writes: pending work, leases, growing text in batches.

Work is rows: a `user` item not done, a `retry` or `stop` not handled (PENDING, the one
place that predicate is written; the partial index `items_pending` of migration m001
covers it). A conversation is answered by the worker holding its lease in `runs`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from . import db as dbm
from ..tables import Item, stopped
from .rows import Base

# Work waiting for the runner. The same words as the partial index's, so SQLite uses it.
PENDING = "done = 0 AND kind IN ('user','retry','stop')"
# ... of it, what starts (or makes again) an answer: the head being answered, while it is.
ANSWERING = f"{PENDING} AND kind != 'stop'"
# What grows while a step streams: an answer's or a reasoning's text, a call's progress.
GROWING = {"text", "output"}


# A growing text's chunk (m035): the characters of one `text_chunks` row. Small enough that a
# row stays in its page (SQLite writes no overflow page for it) and, for ASCII text, under
# PostgreSQL's TOAST threshold (~2 KB): a beat rewrites the last chunk and adds new ones.
CHUNK_CHARS = 1800


@dataclass(frozen=True)
class Chunked:
    """A growing text written as chunks (Runs.grow_items): `text` is its characters from
    chunk `first` on (chunk n holds characters n * CHUNK_CHARS up to the next one's); chunks
    before `first` are as last written. `fresh`: none is known to be written (a first
    write, a takeover): `items.text` is emptied, which drops the item's old chunks."""

    first: int
    text: str
    fresh: bool = False

    def rows(self, item_id: int) -> list[list[Any]]:
        size = CHUNK_CHARS
        return [[item_id, self.first + k, self.text[at:at + size]] for k, at in enumerate(range(0, len(self.text), size))]


class Runs(Base):
    # --- pending work ---------------------------------------------------------------

    def pending_since(self, rev: int, owner: str | None = None) -> list[tuple[int, str]]:
        """(chat, kind) of the pending items changed after `rev` (0: every one), oldest first;
        with `owner`, not those of conversations another owner holds a live lease on (they are
        being answered there: a lease tried on each would be a write that fails)."""
        if owner is None:
            return [(r["chat"], r["kind"]) for r in self._all(
                f"SELECT chat, kind FROM items WHERE {PENDING} AND rev > ? ORDER BY id", [rev])]
        return [(r["chat"], r["kind"]) for r in self._all(
            f"""SELECT chat, kind FROM items WHERE {PENDING} AND rev > ? AND NOT EXISTS (
                  SELECT 1 FROM runs WHERE runs.chat = items.chat AND runs.owner != ? AND runs.expires >= ?)
                ORDER BY id""", [rev, owner, dbm.now()])]

    def next_pending(self, chat: int) -> Item | None:
        """The conversation's oldest pending item: what its run handles next."""
        row = self._one(f"SELECT * FROM items WHERE chat = ? AND {PENDING} ORDER BY id LIMIT 1", [chat])
        return self._item(row)

    def answering(self, chat: int) -> Item | None:
        """The user or retry item whose answer is written now (or waits to be), if any; its
        `turn` is the turn answered (a user item's turn is its own id)."""
        row = self._one(f"SELECT * FROM items WHERE chat = ? AND {ANSWERING} ORDER BY id LIMIT 1", [chat])
        return self._item(row)

    def waiting_messages(self, *, chat: int | None = None, person: int | None = None) -> int:
        """The messages not answered yet (the one being answered among them): in a
        conversation, or across a person's conversations."""
        if (chat is None) == (person is None):
            raise ValueError("count a conversation's waiting messages or a person's")
        if chat is not None:
            return self._one(f"SELECT count(*) FROM items WHERE chat = ? AND {PENDING} AND kind = 'user'", [chat])[0]
        return self._one(f"SELECT count(*) FROM items JOIN conversations ON conversations.id = items.chat "
                         f"WHERE {PENDING} AND kind = 'user' AND conversations.person = ?", [person])[0]

    def stop_waiting(self, chat: int, turn: int) -> list[int]:
        """Stop's rule for the messages queued behind the turn being answered (`turn`): they
        are not answered either. Each is marked done with a stop item of its own, done too,
        so its page shows "Stopped." and Again, which answers it. Their ids."""
        with self.write() as db:
            queued = [r[0] for r in db.conn.execute(
                f"SELECT id FROM items WHERE chat = ? AND {PENDING} AND kind = 'user' AND id != ? ORDER BY id",
                [chat, turn])]
            for user in queued:
                self.add(replace(stopped(chat), turn=user, done=True))
                self.update(user, done=True)
        return queued

    def unhandled_stops(self, chat: int) -> list[int]:
        return [r[0] for r in self._all(f"SELECT id FROM items WHERE chat = ? AND {PENDING} AND kind = 'stop'",
                                       [chat])]

    def deleted_since(self, rev: int) -> set[int]:
        """Conversations deleted after `rev` (their tombstone for a page open on them)."""
        return {r[0] for r in self._all(
            "SELECT chat FROM tombstones WHERE rev > ? AND chat IS NOT NULL AND dom = 'c' || chat", [rev])}

    # --- leases -----------------------------------------------------------------------

    def lease(self, chat: int, owner: str, seconds: float) -> bool:
        """Take (or keep) the lease on a conversation for `seconds`, unless a live lease of
        another owner holds it; False too when the conversation is gone."""
        t = dbm.now()
        with self.write() as db:
            if db.conn.execute("SELECT 1 FROM conversations WHERE id = ?", [chat]).fetchone() is None:
                return False  # deleted as the scan read it
            cur = db.conn.execute(
                """INSERT INTO runs (chat, owner, expires) VALUES (?, ?, ?)
                   ON CONFLICT (chat) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
                   WHERE runs.expires < ? OR runs.owner = excluded.owner""",
                [chat, owner, t + seconds, t],
            )
            return cur.rowcount == 1

    def lease_many(self, chats: list[int], owner: str, seconds: float) -> set[int]:
        """`lease` of several conversations in one write: the ones taken (or kept)."""
        if not chats:
            return set()
        t = dbm.now()
        marks = ",".join("?" * len(chats))
        with self.write() as db:
            # the SELECT's WHERE also keeps SQLite from reading ON CONFLICT as a join's
            return {r[0] for r in db.conn.execute(
                f"""INSERT INTO runs (chat, owner, expires) SELECT id, ?, ? FROM conversations WHERE id IN ({marks})
                    ON CONFLICT (chat) DO UPDATE SET owner = excluded.owner, expires = excluded.expires
                    WHERE runs.expires < ? OR runs.owner = excluded.owner
                    RETURNING chat""", [owner, t + seconds, *chats, t]).fetchall()}

    def release(self, chat: int, owner: str) -> None:
        with self.write() as db:
            db.conn.execute("DELETE FROM runs WHERE chat = ? AND owner = ?", [chat, owner])

    def renew(self, owner: str, chats: list[int], seconds: float) -> set[int]:
        """Extend `owner`'s leases on `chats` by `seconds`; returns the ones it still holds."""
        if not chats:
            return set()
        marks = ",".join("?" * len(chats))
        with self.write() as db:
            db.conn.execute(f"UPDATE runs SET expires = ? WHERE owner = ? AND chat IN ({marks})",
                            [dbm.now() + seconds, owner, *chats])
            return {r[0] for r in db.conn.execute(f"SELECT chat FROM runs WHERE owner = ? AND chat IN ({marks})",
                                                  [owner, *chats])}

    def void_leases(self) -> None:
        """Every lease goes (a start that owns the data folder: the runs of a process that
        died resume at once)."""
        with self.write() as db:
            db.conn.execute("DELETE FROM runs")

    # --- who follows ------------------------------------------------------------------

    def mark_watched(self, chats: list[int], seconds: float, marker: str) -> None:
        """A page or an API stream follows each of `chats` in the process whose feed is
        `marker`, for `seconds` more (renewed while it does): the runner of their answers, in
        another worker or server, writes their growth once a beat (`watched`). Not a change
        any page shows: no rev, nobody woken. A conversation deleted meanwhile is left out;
        marks a minute past (a process gone) go."""
        if not chats:
            return
        marks = ",".join("?" * len(chats))
        now = dbm.now()
        with self.write(notify=False) as db:
            db.conn.execute("DELETE FROM watched WHERE until < ?", [now - 60.0])
            db.conn.execute(
                f"""INSERT INTO watched (chat, marker, until) SELECT id, ?, ? FROM conversations WHERE id IN ({marks})
                    ON CONFLICT (chat, marker) DO UPDATE SET until = excluded.until
                    WHERE watched.until < excluded.until""",
                [marker, now + seconds, *chats])

    def watched(self, chats: list[int], besides: str | None = None) -> set[int]:
        """Those of `chats` that a page or an API stream follows now (`mark_watched`):
        anywhere, or in a process whose feed is not `besides`."""
        if not chats:
            return set()
        marks = ",".join("?" * len(chats))
        return {r[0] for r in self._all(
            f"SELECT DISTINCT chat FROM watched WHERE until > ? AND marker <> ? AND chat IN ({marks})",
            [dbm.now(), besides or "", *chats])}

    # --- growing text ---------------------------------------------------------------

    def grow_items(self, changes: dict[int, dict[str, Any]], notify: bool = True, owner: str | None = None) -> int:
        """Write columns of many items in one transaction: one rev range, one prepared
        statement per set of columns (hundreds of answers grow at once). Returns the range's
        last rev (it took as many revs as items it wrote, ending there; 0: nothing written).
        Not `notify`: the feed is not woken for it (Base.write).

        With `owner` (a runner's buffer), only the items of conversations whose lease that
        owner holds are written, read inside the same transaction (the write lock held): the
        growth of a run whose lease another worker took is dropped, never written over the
        new owner's rows. The items it leaves out are not in `changes` when it returns.

        A `text` given as `Chunked` is not written into the item's row: its chunks are (m035),
        the last one rewritten and new ones added, and the item's row, small while its text
        is in chunks, takes only its rev. So a beat writes what the answer gained, not the
        answer again (readers join the chunks: Base._items; they are folded into `text` once,
        when the item is done)."""
        if not changes:
            return 0
        t = dbm.now()
        by_columns: dict[tuple[str, ...], list[list[Any]]] = {}
        chunks: list[list[Any]] = []
        with self.write(notify=notify) as db:
            if owner is not None:
                marks = ",".join("?" * len(changes))
                held = {r[0] for r in db.conn.execute(
                    f"""SELECT items.id FROM items JOIN runs ON runs.chat = items.chat AND runs.owner = ?
                        WHERE items.id IN ({marks})""", [owner, *changes]).fetchall()}
                for item_id in [i for i in changes if i not in held]:
                    del changes[item_id]
                if not changes:
                    return 0
            top = dbm.bump(db, len(changes))
            for rev, (item_id, values) in enumerate(changes.items(), start=top - len(changes) + 1):
                grown = values.get("text")
                if isinstance(grown, Chunked):
                    chunks += grown.rows(item_id)
                    values = {k: v for k, v in values.items() if k != "text"}
                    if grown.fresh:  # (the trigger of m035 drops the item's chunks: they are written anew)
                        values["text"] = ""
                # str(): a growing text (agent.SoFar) is joined here, once per write, on either engine
                by_columns.setdefault(tuple(values), []).append([*map(str, values.values()), t, rev, item_id])
            for columns, rows in by_columns.items():
                bad = set(columns) - GROWING
                if bad:
                    raise ValueError(f"not growing columns: {sorted(bad)}")
                sets = "".join(f"{k} = ?, " for k in columns)
                db.conn.executemany(f"UPDATE items SET {sets}updated = ?, rev = ? WHERE id = ?", rows)
            if chunks:
                db.conn.executemany("INSERT INTO text_chunks (item, n, text) VALUES (?, ?, ?) "
                                    "ON CONFLICT (item, n) DO UPDATE SET text = excluded.text", chunks)
        return top

    # --- what a title is made from ------------------------------------------------------

    def first_message(self, chat: int) -> int | None:
        """The id of the conversation's first message."""
        return self._one("SELECT min(id) FROM items WHERE chat = ? AND kind = 'user'", [chat])[0]

    def answer_text(self, turn: int) -> str:
        """Every text the turn's answers wrote, in order."""
        return "".join(r[0] for r in self._all("SELECT text FROM items WHERE turn = ? AND kind = 'text' ORDER BY id",
                                              [turn]))

