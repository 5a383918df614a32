"""The SQL of a backup and a restore (app/admin/backup.py): a consistent copy, what it names, checks."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils

# Rows a restore compares with the backup's manifest: what a person would miss.
COUNTED = ("people", "conversations", "items", "files", "assistants", "plugins", "skills", "memories")


def snapshot(db: sqlite_utils.Database, target: Path) -> None:
    """Copy the database as it is at one moment into `target`, with SQLite's online backup in
    one step: one read transaction, which in WAL mode holds no writer up."""
    dest = sqlite3.connect(str(target), isolation_level=None)
    try:
        db.conn.backup(dest, pages=-1)
        # A backup is one self-contained file (no -wal beside it); serving it turns WAL on again.
        dest.execute("PRAGMA journal_mode = DELETE")
    finally:
        dest.close()


def open_as_is(path: Path) -> sqlite_utils.Database:
    """A connection that changes nothing about the file (no journal mode set): to read a copy."""
    if not path.exists():
        raise FileNotFoundError(path)
    return sqlite_utils.Database(sqlite3.connect(str(path), isolation_level=None))


def named_files(db: sqlite_utils.Database) -> dict[str, int]:
    """The bytes the file rows name: sha256 -> size."""
    return {r[0]: r[1] for r in db.conn.execute("SELECT sha256, max(size) FROM files GROUP BY sha256")}


def counts(db: sqlite_utils.Database) -> dict[str, int]:
    tables = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {t: db.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED if t in tables}


def integrity(db: sqlite_utils.Database) -> list[str]:
    """SQLite's integrity_check and foreign_key_check: [] when the database is sound."""
    problems = [r[0] for r in db.conn.execute("PRAGMA integrity_check") if r[0] != "ok"]
    problems += [f"{r[0]} row {r[1]} names a missing {r[2]} row" for r in db.conn.execute("PRAGMA foreign_key_check")]
    return problems


def migrations(db: sqlite_utils.Database) -> list[str]:
    return [r[0] for r in db.conn.execute("SELECT name FROM migrations ORDER BY name")]
