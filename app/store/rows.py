"""The store's common ground: the connection, transactions that wake the feed (and, for a
run's writes, hold to its lease), and reads."""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import sqlite_utils

from ..tables import Item
from . import db as dbm
from .outage import unavailable

GROWN = ("text", "reasoning")  # the kinds whose text grows in chunks (m035)


class LeaseLost(Exception):
    """A run's write found its conversation's lease held by another owner (or gone with the
    conversation): nothing of it was written (docs/architecture.md, "The runner")."""


@dataclass
class Fence:
    """What a run's writes hold to: the lease of `chat` by `owner`. `fault` is the first
    failure that ended them (LeaseLost, or the database unreachable): a turn writes nothing
    more once one is set, even where a tool's code caught it (Turn.emit)."""

    chat: int
    owner: str
    fault: Exception | None = None


class Base:
    fence: Fence | None = None  # set on a run's view of the store (`fenced`)

    def __init__(self, db: sqlite_utils.Database, notify: Callable[[], None] = lambda: None):
        self.db = db
        self.notify = notify

    def fenced(self, chat: int, owner: str) -> Base:
        """This store as a run sees it: the same connection, every write of it held to the
        lease of `chat` by `owner` in its own transaction (`write`)."""
        view = copy.copy(self)
        view.fence = Fence(chat, owner)
        view._unfenced = self
        return view

    @property
    def unfenced(self) -> Base:
        """The store itself, for what outlives a run (a plugin's session, closed later)."""
        return getattr(self, "_unfenced", self)

    @contextmanager
    def write(self, notify: bool = True) -> Iterator[sqlite_utils.Database]:
        """One write transaction; its commit wakes this process's feed at once, unless not
        `notify` (SQLite: the feed then sees it at its next `PRAGMA data_version` poll).

        On a run's view (`fenced`) the transaction first reads the lease, inside the write
        lock (SQLite's BEGIN IMMEDIATE, PostgreSQL's advisory lock), which every taking of a
        lease holds too: if another owner took it, LeaseLost is raised and nothing is
        written; if not, nobody can take it before this transaction ends."""
        outer = not self.db.conn.in_transaction
        try:
            with dbm.write(self.db):
                if self.fence is not None:
                    if self.fence.fault is not None:
                        raise self.fence.fault
                    if self._one("SELECT 1 FROM runs WHERE chat = ? AND owner = ?",
                                 [self.fence.chat, self.fence.owner]) is None:
                        raise LeaseLost(f"conversation {self.fence.chat} is no longer leased by {self.fence.owner}")
                yield self.db
        except Exception as e:
            if self.fence is not None and self.fence.fault is None and (isinstance(e, LeaseLost) or unavailable(e)):
                self.fence.fault = e
            raise
        if outer and notify:
            self.notify()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Several reads that must agree (a page and the rev it was rendered at)."""
        if dbm.postgres(self.db):
            with self.db.snapshot():
                yield
            return
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
        row = self._one("SELECT id FROM people WHERE owner = 1")
        return row[0] if row else None

    def rev(self) -> int:
        return dbm.current_rev(self.db)

    @staticmethod
    def _is(column: str, value: Any) -> tuple[str, list[Any]]:
        """`column IS value` as both engines read it and index it (PostgreSQL's IS takes no
        parameter): `IS NULL` for None, else `= ?`."""
        return (f"{column} IS NULL", []) if value is None else (f"{column} = ?", [value])

    def data_version(self) -> int:
        """A number that changes when another connection (another process) commits: the
        feed's cheap poll for others' writes. On PostgreSQL: the highest rev heard of, by
        NOTIFY or a catch-up read (store/postgres.py), from any machine."""
        if dbm.postgres(self.db):
            return self.db.version()
        return self._one("PRAGMA data_version")[0]

    def shapes(self) -> dict[str, list[dict[str, Any]]]:
        """Every table's columns (name, type, not null, default, primary key), the search
        index's own tables left out."""
        out = {}
        for table in sorted(self.db.table_names()):
            if table.startswith(("search", "sqlite_")):
                continue
            out[table] = [
                {"name": r[1], "type": r[2], "notnull": bool(r[3]), "default": r[4], "pk": bool(r[5])}
                for r in self._all(f'PRAGMA table_info("{table}")')
            ]
        return out

    # The store's own: a statement belongs in a named method of the store (SQL only in app/store/).
    def _one(self, sql: str, params: Any = ()) -> Any:
        return self.db.conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: Any = ()) -> list[Any]:
        return self.db.conn.execute(sql, params).fetchall()

    def _item(self, row: Any) -> Item | None:
        return self._items([row])[0] if row else None

    def _items(self, rows: Iterable[Any]) -> list[Item]:
        """Items of rows of `items`, a growing text whole: its `text` (empty while it grows)
        then its chunks (Runs.grow_items, m035), one read for all of them."""
        items = [Item.from_row(r) for r in rows]
        growing = [it.id for it in items if not it.done and it.kind in GROWN]
        if not growing:
            return items
        marks = ",".join("?" * len(growing))
        tails: dict[int, list[str]] = {}
        for item, text in self._all(f"SELECT item, text FROM text_chunks WHERE item IN ({marks}) ORDER BY item, n", growing):
            tails.setdefault(item, []).append(text)
        if not tails:
            return items
        return [replace(it, text=it.text + "".join(tails[it.id])) if it.id in tails else it for it in items]

    def _update(self, table: str, row_id: int, allowed: set[str], values: dict[str, Any]) -> None:
        """Change some columns of a row a page shows: it takes a new rev in the same write."""
        bad = set(values) - allowed
        if bad:
            raise ValueError(f"not {table} columns: {sorted(bad)}")
        with self.write() as db:
            values = values | {"updated": dbm.now(), "rev": dbm.bump(db)}
            sets = ", ".join(f"{k} = ?" for k in values)
            db.conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*values.values(), row_id])
