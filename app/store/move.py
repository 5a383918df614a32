"""The SQL of `tabletalk move-to` (app/admin/move.py): a SQLite install's rows copied into an empty
PostgreSQL database of the same schema, ids and revs kept, then checked table by table.

What is copied is every table SQLite's migrations make, found from SQLite's own catalogue (so
a table a later migration adds is copied without a change here), in the order their foreign
keys need. Not copied: `migrations` (each engine has its own history, both at this release's
version), SQLite's FTS5 tables (PostgreSQL's `search` rows are written by its own triggers
from the items and titles copied, `search_passages` and its words' counts from the
passages), and the rows of `runs` and `watched`: leases and follows of a server that is not
running, void as `tabletalk serve` voids leases when it starts on SQLite. Files' bytes, which
SQLite's install keeps in files/, go into PostgreSQL's `blobs` and `chunks` through the
store's blobs interface (app/store/blobs.py), each checked against its sha256.

For speed the copy does what a bulk load does: the search triggers are off while the rows go
in, and `search` is filled after by one statement per rule (the triggers' own: titles, and
each user message or finished answer); the tables' plain indexes (not those of a key or a
unique constraint) are dropped first and made again after, from their own definitions, which
is far quicker than growing them row by row (the GIN index above all). All of it in the
copy's transaction, so a failure leaves the schema as it was. Only when the tables are the
mover's own (it migrated them); else the rows go in with triggers and indexes as they are.

Rows go through COPY in batches, each value as SQLite holds it except NUL characters in
text, which PostgreSQL's text cannot hold: each becomes U+FFFD on the way (counted, and said;
only a table that holds one pays for the look).
"""
from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlite_utils

from . import db as dbm
from .schema.pg_migrations import INDEXED

BATCH = 20_000  # rows read from SQLite, then written to the COPY, at a time (a progress line each)
NOT_COPIED = {"migrations", "sqlite_sequence", "sqlite_stat1", "sqlite_stat4"}
VOID = {"runs", "watched"}  # copied empty: leases and follows of a stopped server
# What PostgreSQL's migrations write into a new database (pg_m001_to_m022.py's default agent,
# m021's built-in model row, the counter at the rev the agent took): a database holding only
# these is empty.
SEEDED = {"revs": 1, "assistants": 1, "builtin_model": 1}
SEED_REV = 1
REPLACEMENT = dbm.REPLACEMENT  # what a NUL in a text becomes (dbm.storable, as every write does)


class MoveError(Exception):
    """Why the rows could not be moved, in plain words; nothing was changed."""


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Column:
    name: str
    kind: str  # INTEGER, REAL, TEXT or BLOB, by SQLite's declared type


@dataclass
class Table:
    name: str
    columns: list[Column]
    rows: int = 0
    after: set[str] = field(default_factory=set)  # tables its foreign keys name

    @property
    def names(self) -> str:
        return ", ".join(q(c.name) for c in self.columns)


def _kind(declared: str) -> str:
    declared = declared.upper()
    if "INT" in declared:
        return "INTEGER"
    if any(k in declared for k in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    if any(k in declared for k in ("TEXT", "CHAR", "CLOB")):
        return "TEXT"
    return "BLOB"


# --- the source: SQLite -----------------------------------------------------------------

def source_tables(src: sqlite_utils.Database) -> list[Table]:
    """SQLite's tables to copy, each after the tables its foreign keys name."""
    catalogue = src.conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
    virtual = {name for name, sql in catalogue if (sql or "").upper().startswith("CREATE VIRTUAL TABLE")}
    tables: dict[str, Table] = {}
    for name, _sql in catalogue:
        if name in NOT_COPIED or name in virtual or any(name.startswith(v + "_") for v in virtual):
            continue
        columns = [Column(r[1], _kind(r[2])) for r in src.conn.execute(f"PRAGMA table_info({q(name)})")]
        after = {r[2] for r in src.conn.execute(f"PRAGMA foreign_key_list({q(name)})")} - {name}
        rows = src.conn.execute(f"SELECT count(*) FROM {q(name)}").fetchone()[0]
        tables[name] = Table(name, columns, rows, after)
    ordered: list[Table] = []
    placed: set[str] = set()
    while len(ordered) < len(tables):
        ready = [t for t in tables.values() if t.name not in placed and t.after <= placed | (t.after - tables.keys())]
        if not ready:  # a cycle of foreign keys: none in Tabletalk's schema
            raise MoveError("SQLite's tables name each other in a cycle: " + ", ".join(sorted(tables.keys() - placed)))
        for t in sorted(ready, key=lambda t: t.name):
            ordered.append(t)
            placed.add(t.name)
    return ordered


def problems(src: sqlite_utils.Database) -> list[str]:
    """Rows PostgreSQL's foreign keys would refuse: [] when every row names rows that exist."""
    return [f"{r[0]} row {r[1]} names a missing {r[2]} row" for r in src.conn.execute("PRAGMA foreign_key_check")]


def source_rows(src: sqlite_utils.Database, table: Table, nuls: bool = False) -> Iterator[list[tuple]]:
    """The table's rows in batches of BATCH, in rowid order (ids ascending); with `nuls`, each
    NUL in a text as U+FFFD (`dbm.storable`, what the store binds on both engines; SQLite's
    replace() cannot look for a NUL). Rows written since that rule hold none: only an older
    install's can."""
    cursor = src.conn.cursor()
    cursor.row_factory = None  # plain tuples: what COPY's write_row takes fastest
    cursor.execute(f"SELECT {table.names} FROM {q(table.name)} ORDER BY rowid")
    while rows := cursor.fetchmany(BATCH):
        if nuls:
            rows = [tuple(map(dbm.storable, row)) for row in rows]
        yield rows


def nuls(src: sqlite_utils.Database, table: Table) -> int:
    """How many text values of the table hold a NUL character."""
    texts = [c for c in table.columns if c.kind == "TEXT"]
    if not texts or not table.rows:
        return 0
    terms = " + ".join(f"coalesce(sum(instr(CAST({q(c.name)} AS BLOB), x'00') > 0), 0)" for c in texts)
    return src.conn.execute(f"SELECT {terms} FROM {q(table.name)}").fetchone()[0]


def autoincrement(src: sqlite_utils.Database) -> dict[str, int]:
    """The highest id each AUTOINCREMENT table ever gave (deleted rows' included)."""
    try:
        return {r[0]: r[1] for r in src.conn.execute("SELECT name, seq FROM sqlite_sequence")}
    except sqlite3.OperationalError:  # no AUTOINCREMENT table
        return {}


def named_files(src: sqlite_utils.Database) -> dict[str, int]:
    """The bytes SQLite's file rows name: sha256 -> size."""
    return {r[0]: r[1] for r in src.conn.execute("SELECT sha256, max(size) FROM files GROUP BY sha256")}


def held_files(pg: Any) -> dict[str, int]:
    """The bytes PostgreSQL holds (app/store/blobs.py's rows): sha256 -> size."""
    return {r[0]: r[1] for r in pg.execute("SELECT sha256, size FROM blobs")}


def rows(db: Any, table: str) -> int:
    return db.execute(f"SELECT count(*) FROM {q(table)}").fetchone()[0]


def search_rows(db: Any) -> int:
    return db.execute("SELECT count(*) FROM search").fetchone()[0]


# --- the target: PostgreSQL -------------------------------------------------------------

def applied(pg: Any) -> list[str] | None:
    """The PostgreSQL migrations the database holds, or None before any (no Tabletalk tables)."""
    if not pg.execute("SELECT to_regclass('migrations') IS NOT NULL").fetchone()[0]:
        return None
    return [r[0] for r in pg.execute("SELECT name FROM migrations ORDER BY applied, name")]


def held(pg: Any) -> dict[str, int]:
    """The rows the database holds beyond what its migrations wrote, by table: {} when empty.
    `revs` counts as held once its counter is past the seed's rev."""
    found = {}
    for name in pg.table_names():
        if name in ("migrations", "search"):  # its own history; search follows the items
            continue
        n = pg.execute(f"SELECT count(*) FROM {q(name)}").fetchone()[0]
        if name == "revs":
            rev = pg.execute("SELECT coalesce(max(rev), 0) FROM revs").fetchone()[0]
            n = 1 if rev > SEED_REV else 0
        elif name == "assistants":
            n -= pg.execute("SELECT count(*) FROM assistants WHERE person IS NULL AND rev <= ?", [SEED_REV]).fetchone()[0]
        else:
            n -= min(n, SEEDED.get(name, 0))
        if n > 0:
            found[name] = n
    return found


def target_columns(pg: Any, table: str) -> list[str]:
    return [r[0] for r in pg.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = ? ORDER BY ordinal_position", [table])]


def clear(pg: Any, tables: list[Table]) -> None:
    """The seeds go (the default agent, the counter, the built-in model's row): the copied rows
    take their place, ids and all. Children first."""
    for t in reversed(tables):
        pg.execute(f"DELETE FROM {q(t.name)}")


def owned(pg: Any, tables: list[Table]) -> bool:
    """Whether the user moving owns every table (may disable triggers, drop and make indexes)."""
    names = [t.name for t in tables] + ["search"]
    return pg.execute("SELECT bool_and(pg_has_role(tableowner, 'USAGE')) FROM pg_tables "
                      "WHERE schemaname = current_schema() AND tablename = ANY(?)", [names]).fetchone()[0]


SEARCH_TRIGGERS = {"items": "items_search", "conversations": "conversations_search"}  # pg_migrations.py's insert triggers


def unindexed(pg: Any, tables: list[Table]) -> list[str]:
    """Drop the plain indexes of the tables (and search's): the statements that make them again."""
    names = [t.name for t in tables] + ["search"]
    found = pg.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relnamespace = current_schema()::regnamespace "
        "AND t.relname = ANY(?) AND NOT i.indisprimary AND NOT i.indisunique "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) ORDER BY c.relname",
        [names]).fetchall()
    for name, _ in found:
        pg.execute(f"DROP INDEX {q(name)}")
    for table, trigger in SEARCH_TRIGGERS.items():
        pg.execute(f"ALTER TABLE {q(table)} DISABLE TRIGGER {q(trigger)}")
    return [definition for _, definition in found]


def reindexed(pg: Any, definitions: list[str]) -> int:
    """The search rows the triggers would have written, then the indexes made again; the search
    rows written."""

    for table, trigger in SEARCH_TRIGGERS.items():
        pg.execute(f"ALTER TABLE {q(table)} ENABLE TRIGGER {q(trigger)}")
    pg.execute("DELETE FROM search")
    pg.execute("INSERT INTO search (id, chat, title, doc) "
               "SELECT -id, id, title, to_tsvector('tabletalk', search_words(title)) FROM conversations")
    pg.execute("INSERT INTO search (id, chat, text, doc) SELECT id, chat, text, "
               f"to_tsvector('tabletalk', search_words(text)) FROM items WHERE {INDEXED.format('items')}")
    pg.execute("SET LOCAL maintenance_work_mem = '128MB'")  # an index made in one sort, not in pieces
    for definition in definitions:
        pg.execute(definition)
    return search_rows(pg)


def copy_table(src: sqlite_utils.Database, pg: Any, table: Table, progress: Callable[[int], None],
               nuls: bool = False) -> int:
    """Every row of `table` through one COPY, BATCH rows at a time; the rows written."""
    done = 0
    with pg.conn.raw.cursor() as cur:
        with cur.copy(f"COPY {q(table.name)} ({table.names}) FROM STDIN") as copy:
            for rows in source_rows(src, table, nuls):
                for row in rows:
                    copy.write_row(row)
                done += len(rows)
                progress(done)
    return done


def set_identities(pg: Any, highest: dict[str, int]) -> dict[str, int]:
    """Each identity column's sequence set so its next value is above every id copied (and
    every id SQLite ever gave, deleted rows' too): {table: the last id taken}."""
    out = {}
    for table, column in pg.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND is_identity = 'YES' ORDER BY table_name").fetchall():
        top = pg.execute(f"SELECT coalesce(max({q(column)}), 0) FROM {q(table)}").fetchone()[0]
        top = max(top, highest.get(table, 0))
        if top > 0:
            pg.execute("SELECT setval(pg_get_serial_sequence(?, ?), ?, true)", [q(table), column, top])
            out[table] = top
    return out


def analyze(pg: Any, tables: list[Table]) -> None:
    """The planner's statistics for the tables just filled (autovacuum would come later)."""
    for t in (*tables, Table("search", [])):
        pg.execute(f"ANALYZE {q(t.name)}")


# --- the check: both sides summed alike -------------------------------------------------

def _measures(table: Table) -> list[tuple[str, str, str]]:
    """What the check sums, in order: (its label, the aggregate, the column)."""
    out = [("rows", "count", "*")]
    for c in table.columns:
        out.append((f"{c.name}: values", "count", q(c.name)))
        if c.kind in ("INTEGER", "REAL"):
            out.append((f"{c.name}: sum", "sum", q(c.name)))
        elif c.kind == "TEXT":
            out.append((f"{c.name}: length", "length", q(c.name)))
    return out


def _sums(table: Table, length: Callable[[str], str]) -> str:
    terms = [f"sum({length(col)})" if agg == "length" else f"{agg}({col})" for _, agg, col in _measures(table)]
    return f"SELECT {', '.join(terms)} FROM {q(table.name)}"


def fingerprint(db: Any, table: Table, postgres: bool) -> list[Any]:
    """The table summed: its rows; per column, its values (not NULL); integers' and reals'
    sums; texts' lengths in UTF-8 bytes, U+FFFD counted as one byte on both sides (a NUL
    copied became one)."""
    if postgres:
        sql = _sums(table, lambda c: f"octet_length(replace({c} COLLATE \"C\", U&'\\FFFD', 'x'))")
    else:
        sql = _sums(table, lambda c: f"length(CAST(replace({c}, char(65533), 'x') AS BLOB))")
    return list(db.execute(sql).fetchone())


def differences(table: Table, source: list[Any], target: list[Any]) -> list[str]:
    """Where the two fingerprints disagree, in words ([]: they agree)."""
    out = []
    for (label, _, _), a, b in zip(_measures(table), source, target):
        if isinstance(a, float) or isinstance(b, float):
            same = a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)
            same = same or (a is None and b is None)
        else:
            same = (int(a) if isinstance(a, Decimal) else a) == (int(b) if isinstance(b, Decimal) else b)
        if not same:
            out.append(f"{table.name} {label}: {a} in SQLite, {b} in PostgreSQL")
    return out


__all__ = ["BATCH", "Column", "MoveError", "Table", "applied", "analyze", "autoincrement", "clear",
           "copy_table", "differences", "fingerprint", "held", "held_files", "named_files", "nuls", "owned", "problems", "reindexed", "rows",
           "search_rows", "set_identities", "source_tables", "target_columns", "unindexed"]
