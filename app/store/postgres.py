"""PostgreSQL under the store: a connection that takes the store's SQL as SQLite does.

The store writes its statements once where the two dialects agree (most of them: RETURNING,
ON CONFLICT upserts, window functions, row values), with `?` placeholders and rows read by
position or by name. `Connection` is the seam: it turns `?` into psycopg's `%s` (and a
literal `%` into `%%`), gives rows that behave like sqlite3.Row, binds Python's bool as an
integer (the schema keeps SQLite's 0/1 columns), binds a text's NULs as U+FFFD as SQLite's
connection does (`dbm.bound`: PostgreSQL's text cannot hold one), and raises a constraint's failure as
`IntegrityError`, a sqlite3.IntegrityError, the one the store's callers already catch.
Where the dialects differ the store asks `dbm.postgres(db)` and says each (search, PRAGMAs).

Writes are serialized as SQLite's BEGIN IMMEDIATE serializes them: each write transaction
first takes one transaction-level advisory lock (`WRITE_LOCK`), so a store method's reads and
writes inside `write` see no other writer, and revs are taken and committed in order (see
docs/postgres.md for why a follower then never skips a row). `snapshot` is a REPEATABLE READ
transaction: several reads that agree.

Across processes and machines a write that took a rev NOTIFYs `CHANNEL` with it (delivered
when it commits, never for a rollback), and `version()` is what a follower polls: the
highest rev heard of, read off the connection's socket without a round trip, plus a read of
the rev itself every CATCH_UP_SECONDS, so a lost notification or a reconnect costs at most
that delay, never a row (the feed then reads every row after its own cursor).

Connections come from one pool per process and URL (`Pool`), shared by the process's
Databases (the store's, the feed's, the built-in model's supervisor's) and bounded
(POOL_SIZE, TABLETALK_PG_POOL): each Database takes one and keeps it while it is open (a
statement costs one round trip, never a check), gives it back when it closes, and when it
finds it dropped (a restart) gives it back broken and takes another, which the pool checks
first (a restart leaves every idle one dead too). A server that cannot be reached is said at
once (`Unreachable`, never a wait), and reached again at the next try once it answers.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Dumper
from psycopg.conninfo import conninfo_to_dict

from . import db as dbm

WRITE_LOCK = 0x7461626C  # "tabl": the advisory lock every write transaction holds until it ends
CHANNEL = "tabletalk_revs"  # a committed write that took a rev says so here, the rev as payload
CATCH_UP_SECONDS = 1.0  # how often a listener reads the rev itself, whatever it heard
POOL_SIZE = 5  # connections one process keeps at most (TABLETALK_PG_POOL): store, feed, supervisor, spares
POOL_WAIT_SECONDS = 10.0  # how long opening a Database waits for a connection of a full pool
POOL_IDLE_SECONDS = 60.0  # a connection given back and not taken again for this long is closed
CONNECT_SECONDS = 5  # a connection attempt's limit (libpq's connect_timeout, whole seconds)
# After an attempt that could not reach the server, none for the first of these, doubling up
# to the second: every statement of a worker during an outage fails at once, not after an
# attempt each, and the server is tried again at most that long after it answers.
RETRY_SECONDS = (0.25, 2.0)


class IntegrityError(sqlite3.IntegrityError):
    """A constraint refused a write on PostgreSQL (psycopg's error is the __cause__)."""


class _BoolAsInt(Dumper):
    """Python's True/False as 1/0: the columns are integers with CHECK (x IN (0, 1)), as in SQLite."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """`?` placeholders as `%s`, and `%` as `%%`, outside quoted strings and names."""
    out, quote = [], ""
    for ch in sql:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "?":
            out.append("%s")
            continue
        if ch == "%":
            out.append("%%")
            continue
        out.append(ch)
    return "".join(out)


class Row(tuple):
    """A row as sqlite3.Row reads: by position, by column name, keys(), dict(row)."""

    _names: tuple[str, ...] = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = self._index[key]
            except KeyError:
                raise IndexError(f"No item with that key: {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


@functools.lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    return type("Row", (Row,), {"_names": names, "_index": {n: i for i, n in enumerate(names)}})


def _rows(cursor: psycopg.Cursor) -> Any:
    if cursor.description is None:
        return tuple
    return _row_class(tuple(c.name for c in cursor.description))


def _values(params: Sequence[Any]) -> tuple[Any, ...]:
    """The parameters as psycopg binds them, as SQLite's connection binds them (`dbm.bound`):
    a text's NULs as U+FFFD (PostgreSQL's text cannot hold one: psycopg would refuse the
    statement), an object that adapts itself for sqlite3 (`__conform__`, e.g. a growing
    answer's pieces) as what it adapts to."""
    return dbm.bound(params)


BUSY = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR, pq.TransactionStatus.ACTIVE)


class PoolFull(RuntimeError):
    """Every connection of the process's pool is taken (TABLETALK_PG_POOL is too small)."""


class Unreachable(psycopg.OperationalError):
    """The server could not be reached (refused, timed out, starting up, shutting down):
    `reason` in PostgreSQL's (or libpq's) words. What failed may be done again once it
    answers (`dbm.unavailable`)."""


# Of a failure PostgreSQL names (SQLSTATE), those that say the server is not there now:
# class 08 (the connection), the server shutting down, crashed or starting, no slot left.
_GONE = ("57P01", "57P02", "57P03", "53300")
# A connection attempt's failure carries no SQLSTATE: a server that answered and refused says
# FATAL (a wrong password, user or database), unless it says it cannot take one now.
_NOT_NOW = ("starting up", "shutting down", "in recovery", "not yet accepting connections", "too many clients",
            "administrator command", "not accepting connections")


def unreachable(e: BaseException, where: str = "") -> str:
    """Why the server (at `where`, HOST:PORT, when known) cannot be used now, when `e` says it
    cannot be reached or the connection to it was lost, else "" (a refusal: a wrong
    password, user or database, a bad setting in the URL, a bad statement, a deadlock)."""
    if isinstance(e, Unreachable):
        return str(e)
    if not isinstance(e, psycopg.OperationalError):
        return ""
    words = " ".join(str(e).split())  # libpq's words run over several lines
    state = getattr(e, "sqlstate", None)
    if state is None:
        if "FATAL:" in words and not any(w in words for w in _NOT_NOW):
            return ""  # the server answered: no
        if "connection is bad" in words and "invalid" in words:
            return ""  # a setting of the URL libpq does not take
    elif not (state.startswith("08") or state in _GONE):
        return ""
    return f"the database{f' at {where}' if where else ''} is unreachable ({words[:300]})"


def address(url: str) -> str:
    """HOST:PORT of a URL, as a log line names the server (libpq's defaults for what it omits)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return "?"
    host = str(info.get("host") or info.get("hostaddr") or "localhost")
    return f"{host}:{info.get('port') or 5432}"


def _configure(raw: psycopg.Connection) -> None:
    raw.adapters.register_dumper(bool, _BoolAsInt)


class Pool:
    """The process's connections to one database, at most `size` taken at once, opened with
    the first Database on the URL and closed with the last one.

    Not psycopg_pool's: its waits block the event loop the whole POOL_WAIT_SECONDS during an
    outage (a worker answered nothing meanwhile, and a timeout read as a full pool), and its
    attempts in the background back off to a minute and more (measured: usable 16.5 s after
    a 40 s outage ended). Here a connection is made when one is asked for and none is idle:
    a server that cannot be reached is said at once, and tried again RETRY_SECONDS later."""

    _open: dict[str, Pool] = {}
    _lock = threading.Lock()

    def __init__(self, url: str, size: int):
        self.url, self.size, self.users = url, size, 0
        self.idle: list[tuple[psycopg.Connection, float]] = []  # given back, and when
        self.lent = 0  # taken and not given back
        self.closed = False
        self._free = threading.Condition()
        self._failed: tuple[str, float, float] = ("", 0.0, 0.0)  # the last failed attempt: why, when, the wait after it

    @classmethod
    def join(cls, url: str, size: int | None = None) -> Pool:
        """The URL's pool in this process (made now, of `size`, when none is open)."""
        with cls._lock:
            pool = cls._open.get(url)
            if pool is None:
                pool = cls._open[url] = Pool(url, size or POOL_SIZE)
            pool.users += 1
            return pool

    def leave(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users > 0:
                return
            if self._open.get(self.url) is self:
                del self._open[self.url]
        with self._free:
            self.closed = True
            idle, self.idle = self.idle, []
        for raw, _ in idle:
            raw.close()

    def take(self) -> psycopg.Connection:
        """An idle connection that answers, else a new one; PoolFull when `size` are taken
        for POOL_WAIT_SECONDS; Unreachable at once when the server cannot be reached; a
        wrong URL, password or database in PostgreSQL's words."""
        deadline = time.monotonic() + POOL_WAIT_SECONDS
        with self._free:
            while True:
                while self.idle:
                    raw, _ = self.idle.pop()  # the last given back: the likeliest to answer
                    if self._answers(raw):
                        self.lent += 1
                        return raw
                if self.lent < self.size:
                    self.lent += 1
                    break
                if not self._free.wait(deadline - time.monotonic()) and self.lent >= self.size:
                    raise PoolFull(f"all {self.size} connections to PostgreSQL of this process are in use after "
                                   f"{POOL_WAIT_SECONDS:g} s: raise TABLETALK_PG_POOL")
        try:
            return self._connect()
        except BaseException:
            with self._free:
                self.lent -= 1
                self._free.notify()
            raise

    @staticmethod
    def _answers(raw: psycopg.Connection) -> bool:
        """Whether an idle connection still reaches its server (one round trip); else closed."""
        if not (raw.closed or raw.broken):
            try:
                raw.execute("")
                return True
            except psycopg.Error:
                pass
        raw.close()
        return False

    def _connect(self) -> psycopg.Connection:
        why, at, wait = self._failed
        if why and time.monotonic() < at + wait:
            raise Unreachable(why)
        try:
            raw = psycopg.connect(self.url, autocommit=True, row_factory=_rows, connect_timeout=CONNECT_SECONDS,
                                  application_name=f"tabletalk {os.getpid()}")
        except psycopg.OperationalError as e:
            reason = unreachable(e, address(self.url))
            if not reason:
                raise  # a wrong password, user or database: said as PostgreSQL says it
            first, most = RETRY_SECONDS
            self._failed = (reason, time.monotonic(), min(max(wait * 2, first), most))
            raise Unreachable(reason) from e
        self._failed = ("", 0.0, 0.0)
        _configure(raw)
        return raw

    def give(self, raw: psycopg.Connection) -> None:
        """Back to the pool, idle; one found broken, or in a transaction, is closed."""
        keep = not (raw.closed or raw.broken) and raw.info.transaction_status == pq.TransactionStatus.IDLE
        now = time.monotonic()
        with self._free:
            self.lent -= 1
            keep = keep and not self.closed
            if keep:
                self.idle.append((raw, now))
            stale = [c for c, since in self.idle if now - since > POOL_IDLE_SECONDS]
            self.idle = [(c, since) for c, since in self.idle if now - since <= POOL_IDLE_SECONDS]
            self._free.notify()
        for c in stale:
            c.close()
        if not keep and not raw.closed:
            raw.close()


# A process forked with a pool open (its threads do not follow) opens its own.
os.register_at_fork(after_in_child=Pool._open.clear)


class Connection:
    """The part of sqlite3.Connection the store uses, over one psycopg connection.

    A connection the server dropped (a restart, a failover, an idle timeout) is opened
    again at the next statement outside a transaction; a read that found it dropped is
    sent once more on the new one. A write is never sent again (it may have committed):
    its transaction fails, as any failed write does, and the next one finds a new
    connection."""

    def __init__(self, url: str, pool_size: int | None = None):
        self.url = url
        self.pool = Pool.join(url, pool_size)
        try:
            self.raw = self.pool.take()
        except BaseException:
            self.pool.leave()
            raise
        self.opened = 1  # how many times: a listener listens again after a new one
        self.depth = 0  # open transactions of ours (Database.write, snapshot): never reopened under one
        self._closed = False
        self._given = False  # `raw` broke and went back to the pool, and no other could be taken yet
        self._handlers: list = []  # notification handlers added (hear): taken off when it goes back

    def hear(self, handler) -> None:
        """Call `handler` with each notification this (live) connection receives."""
        self.raw.add_notify_handler(handler)
        self._handlers.append(handler)

    @property
    def in_transaction(self) -> bool:
        return self.depth > 0 or self.raw.info.transaction_status in BUSY

    def ready(self) -> None:
        """A live connection, unless a transaction of ours is open on the one that broke."""
        if (self.raw.broken or self.raw.closed) and not self._closed and self.depth == 0:
            if not self._given:
                self.pool.give(self.raw)
                self._given, self._handlers = True, []
            self.raw = self.pool.take()  # Unreachable while the server cannot be reached: `raw` stays the broken one
            self._given = False
            self.opened += 1

    def execute(self, sql: str, params: Sequence[Any] = (), binary: bool = False) -> psycopg.Cursor:
        """`binary`: the rows in PostgreSQL's binary format (bytes as they are, not as hex text
        of twice their size; only for statements whose every column has a type of its own)."""
        self.ready()
        outside = not self.in_transaction
        try:
            return self.raw.execute(translate(sql), _values(params), binary=binary)
        except psycopg.IntegrityError as e:
            raise IntegrityError(str(e)) from e
        except psycopg.OperationalError:
            if not (outside and self.raw.broken and sql.lstrip()[:6].upper() == "SELECT"):
                raise
            self.ready()
            return self.raw.execute(translate(sql), _values(params), binary=binary)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> psycopg.Cursor:
        self.ready()
        cur = self.raw.cursor()
        try:
            cur.executemany(translate(sql), [_values(r) for r in rows])
        except psycopg.IntegrityError as e:
            raise IntegrityError(str(e)) from e
        return cur

    def close(self) -> None:
        """The connection goes back to the process's pool (closed with the last user's)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._handlers:  # the next user of the connection hears nothing of ours
                for handler in self._handlers:
                    with contextlib.suppress(ValueError):
                        self.raw.remove_notify_handler(handler)
                if not (self.raw.broken or self.raw.closed) and not self.in_transaction:
                    with contextlib.suppress(psycopg.Error):
                        self.raw.execute("UNLISTEN *")
            if not self._given:
                self.pool.give(self.raw)
        finally:
            self.pool.leave()


class Database:
    """What the store and the migrations use of sqlite_utils.Database, on PostgreSQL."""

    dialect = "postgresql"

    def __init__(self, url: str, pool_size: int | None = None):
        self.url = url
        self.conn = Connection(url, pool_size)
        self.bumped = 0  # the last rev the open write took (dbm.bump), told to listeners at its commit
        self.heard = 0  # the highest rev this connection heard of (version)
        self._listening = 0  # the connection (Connection.opened) that listens
        self._caught_up = -math.inf  # when the rev was last read (never: the first poll reads it)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor:
        return self.conn.execute(sql, params)

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]

    @contextmanager
    def write(self) -> Iterator[Database]:
        """One write transaction holding the write lock; nested calls become savepoints."""
        if self.conn.in_transaction:
            with self.conn.raw.transaction():
                yield self
            return
        self.conn.ready()
        raw = self.conn.raw
        self.conn.depth += 1
        try:
            # BEGIN with the lock, and the notification with COMMIT, each one round trip (a
            # write a beat is 4 then, not 6, every one on the event loop: docs/postgres.md)
            raw.execute(f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK:d})")
            try:
                self.bumped = 0
                yield self
                # sent at COMMIT, so a listener hears only of what it can read
                notify = f"SELECT pg_notify('{CHANNEL}', '{self.bumped:d}'); " if self.bumped else ""
                raw.execute(notify + "COMMIT")
            except BaseException:
                if not raw.broken and raw.info.transaction_status != pq.TransactionStatus.IDLE:
                    raw.execute("ROLLBACK")
                raise
        finally:
            self.bumped = 0
            self.conn.depth -= 1

    def version(self) -> int:
        """A number that grows when a write (of any process, on any machine) that took a rev
        commits: the highest rev heard of. The first call starts listening, and so does the
        first after the connection was opened again (a catch-up read covers the gap)."""
        try:
            self.conn.ready()
            raw = self.conn.raw
            if self._listening != self.conn.opened:
                self.conn.hear(self._hear)
                raw.execute(f"LISTEN {CHANNEL}")
                self._listening, self._caught_up = self.conn.opened, -math.inf
            if not self.conn.in_transaction:
                raw.pgconn.consume_input()  # what arrived on the socket; never waits
                while (n := raw.pgconn.notifies()) is not None:
                    raw.pgconn.notify_handler(n)
            if time.monotonic() - self._caught_up >= CATCH_UP_SECONDS:
                self._caught_up = time.monotonic()
                self.heard = max(self.heard, raw.execute("SELECT rev FROM revs WHERE id = 1").fetchone()[0])
        except Unreachable:
            raise  # no connection could be made: the caller says so (Feed), and polls again
        except psycopg.OperationalError:  # dropped: opened again at the next poll, then caught up
            if not self.conn.raw.closed:
                self.conn.raw.close()  # however libpq saw it fail: gone, so `ready` opens a new one
        return self.heard

    def _hear(self, notify: psycopg.Notify) -> None:
        if notify.channel == CHANNEL and notify.payload.isdigit():
            self.heard = max(self.heard, int(notify.payload))

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads that see one moment (a page and the rev it was rendered at)."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.ready()
        self.conn.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self.conn.depth += 1
        try:
            yield
        finally:
            self.conn.depth -= 1
            if not self.conn.raw.broken:
                self.conn.raw.execute("COMMIT")


def connect(url: str, pool_size: int | None = None) -> Database:
    return Database(url, pool_size)


__all__ = ["Connection", "Database", "IntegrityError", "Pool", "PoolFull", "Unreachable", "address", "connect",
           "translate", "unreachable"]
