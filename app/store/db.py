"""The database: connection setup, write transactions and the rev counter; `migrate` applies
the schema's history (app/store/schema/migrations.py).

Every process opens one connection (WAL, busy_timeout, foreign keys on) and writes in
explicit `BEGIN IMMEDIATE` transactions, so two workers never deadlock upgrading a read
to a write.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

BUSY_TIMEOUT_MS = 10_000
NUL, REPLACEMENT = "\x00", "\ufffd"  # what PostgreSQL's text cannot hold, and what it becomes on both engines


def storable(value: Any) -> Any:
    """A value as either engine keeps it: a text's NUL characters (U+0000, which PostgreSQL's
    text cannot hold and SQLite's can) each as U+FFFD, so a text reads back the same on both
    (and a move finds none to change); an object that adapts itself for sqlite3
    (`__conform__`, a growing answer's pieces) as what it adapts to; a list (PostgreSQL's
    `ANY(?)`) item by item. Bytes, numbers and None as they are."""
    if type(value) is str:
        return value.replace(NUL, REPLACEMENT) if NUL in value else value
    if hasattr(type(value), "__conform__"):
        return storable(value.__conform__(sqlite3.PrepareProtocol))
    if type(value) is list:
        return [storable(v) for v in value]
    return value


_PLAIN = frozenset({int, float, bytes, bool, type(None)})  # bound as they are


def bound(params: Any) -> Any:
    """A statement's parameters (a sequence, or a mapping of names) as both engines bind them;
    the same object when nothing in them changes (most statements: one look at each)."""
    if isinstance(params, dict):
        return {k: storable(v) for k, v in params.items()}
    if not isinstance(params, (list, tuple)):
        params = tuple(params)  # looked at twice below
    for p in params:
        kind = type(p)
        if kind is str:
            if NUL in p:
                break
        elif kind not in _PLAIN:
            break
    else:
        return params
    return tuple(storable(p) for p in params)


class SQLiteConnection(sqlite3.Connection):
    """sqlite3's connection, binding what `bound` makes of the parameters: every statement
    the store (or sqlite-utils under it) runs goes through `execute` or `executemany`."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, bound(parameters))

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> sqlite3.Cursor:
        return super().executemany(sql, (bound(p) for p in seq_of_parameters))


def is_url(target: Path | str) -> bool:
    """Whether the database named is a PostgreSQL server's (DATABASE_URL), not a file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def postgres(db: Any) -> bool:
    """Whether this connection is PostgreSQL's (app/store/postgres.py), not SQLite's."""
    return getattr(db, "dialect", "") == "postgresql"


def connect(path: Path | str, pool_size: int | None = None) -> sqlite_utils.Database:
    """Open the database with the settings every connection needs: SQLite's file, or the
    PostgreSQL server a URL names, a connection from the process's pool (of at most
    `pool_size`, when this opens it)."""
    if is_url(path):
        from . import postgres as pg

        return pg.connect(str(path), pool_size)
    if str(path) != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: we open transactions ourselves (see `write`), never implicitly.
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000,
                           factory=SQLiteConnection)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return sqlite_utils.Database(conn)


@contextmanager
def write(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """One write transaction, taken IMMEDIATE so concurrent writers queue on busy_timeout.

    Nested calls become savepoints of the outer transaction.
    """
    if postgres(db):
        with db.write():
            yield db
        return
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
        # In the try: a COMMIT that fails (a full disk) may leave the transaction open, and
        # every later write would become a savepoint of it, never committed.
        db.conn.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise


def bump(db: sqlite_utils.Database, n: int = 1, told: bool = True) -> int:
    """Take the next rev (or the next `n`, returning the last); call inside `write` so the rev
    and the row it marks commit together. Not `told`: other processes' feeds are not woken
    for it on PostgreSQL (a row no page shows, ordered by the rev all the same)."""
    rev = db.conn.execute("UPDATE revs SET rev = rev + ? WHERE id = 1 RETURNING rev", [n]).fetchone()[0]
    if postgres(db) and told:
        db.bumped = rev  # told to other processes when the write commits (store/postgres.py)
    return rev


def current_rev(db: sqlite_utils.Database) -> int:
    return db.conn.execute("SELECT rev FROM revs WHERE id = 1").fetchone()[0]


def now() -> float:
    return time.time()

