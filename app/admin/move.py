"""`tabletalk move-to DATABASE_URL`: an install's SQLite rows copied into an empty PostgreSQL
database, checked, and what to set next.

1. The data folder's lock (app/serve/datalock.py): refused while `tabletalk serve` runs on it,
   since what it wrote after the copy would not be moved; a server started meanwhile waits
   for nothing, it refuses to start until the move ends.
2. A snapshot of `tabletalk.db` (SQLite's online backup, one read transaction) into a
   temporary folder inside the data folder, migrated to this release's schema there: the
   install's own file is only read, and stays as it was, the way back.
3. The target: refused, before anything is written, when it holds any row beyond what
   Tabletalk's migrations write into a new database (a second run is the same refusal) or
   was made by a newer release; else migrated to the same version.
4. One transaction: the migrations' seed rows go, every table is copied by COPY in batches
   (ids and revs as they are, the rev counter carried; as a bulk load, with the search
   triggers off and the plain indexes made after, see app/store/move.py), `search` is filled
   by the triggers' rules, files' bytes go from files/ into the database's rows (each
   checked against its sha256), each identity's sequence is set past
   the highest id copied (and every id SQLite ever gave), and each table is summed on both
   sides (rows, values per column, integer and real sums, text lengths) and compared. Any
   difference rolls the whole copy back.
"""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import sqlite_utils

from ..serve import datalock
from ..config import Config
from ..store import Store, backup as backup_sql, blobs as blobstore, db as dbm, move as move_sql, schema
from ..store.schema import pg_migrations
from ..store.move import MoveError
from ..accounts.setup import secret_key

CONNECT_TIMEOUT = 10  # seconds: an address that does not answer is said so, not waited on for minutes


@dataclass
class Moved:
    url: str
    counts: dict[str, int] = field(default_factory=dict)
    rev: int = 0
    seconds: float = 0.0
    replaced_nuls: int = 0
    files: int = 0
    bytes: int = 0
    missing: list[str] = field(default_factory=list)  # bytes named by a row and not in files/ (they were not before either)


def masked(url: str) -> str:
    """The URL with its password hidden, to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def _with_timeout(url: str) -> str:
    if "connect_timeout=" in url:
        return url
    return url + ("&" if "?" in url else "?") + f"connect_timeout={CONNECT_TIMEOUT}"


def connect(url: str):
    """The target, opened; a URL that is not one, a server that does not answer, a database
    that is not there or a refused sign-in said in words."""
    if not dbm.is_url(url):
        raise MoveError(f"{url!r} is not a PostgreSQL URL: move-to takes one such as "
                        "postgresql://user:password@host:5432/name")
    try:
        return dbm.connect(_with_timeout(url))
    except psycopg.ProgrammingError as e:  # libpq could not read the URL
        raise MoveError(f"{masked(url)} is not a usable PostgreSQL URL: {_first(e)}") from None
    except psycopg.OperationalError as e:
        why = _first(e)
        if "connection option" in why:  # libpq read the URL and found a part it cannot use
            raise MoveError(f"{masked(url)} is not a usable PostgreSQL URL: {why}") from None
        hint = ""
        if "does not exist" in why and "database" in why:
            name = urlsplit(url).path.lstrip("/")
            hint = (f" Create it first, empty, owned by the user move-to connects as: "
                    f"createdb -O {urlsplit(url).username or 'USER'} {name} (or CREATE DATABASE {name} OWNER ...).")
        raise MoveError(f"cannot connect to {masked(url)}: {why}.{hint}") from None


def _n(count: int, what: str) -> str:
    return f"{count:,} {what}" + ("" if count == 1 else "s")


def _first(e: Exception) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return "; ".join(lines[:2]).rstrip(".") or type(e).__name__


@contextlib.contextmanager
def _snapshot(database: Path, say: Callable[[str], None]) -> Iterator[sqlite_utils.Database]:
    """A consistent copy of SQLite's file, migrated to this release's schema, removed after.
    The key that signs forms is made a row of it (from the data folder's `secret.key` of an
    install that has not run since migration m028), so the database moved carries it and
    forms of pages open across the move stay valid, on every server."""

    for stale in database.parent.glob(".move-to-*"):  # a move killed before it could clean up (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(dir=database.parent, prefix=".move-to-"))
    try:
        started = time.monotonic()
        source = dbm.connect(database)
        try:
            backup_sql.snapshot(source, work / database.name)
        finally:
            source.conn.close()
        copy = dbm.connect(work / database.name)
        try:
            schema.migrate(copy)
            secret_key(Store(copy), database.parent)
            size = (work / database.name).stat().st_size
            say(f"Snapshot of {database} (SQLite's online backup: one consistent read): "
                f"{size / 1e6:.1f} MB in {time.monotonic() - started:.1f} s")
            yield copy
        finally:
            copy.conn.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _refuse_unless_empty(target, url: str, counts: dict[str, int]) -> None:
    done = move_sql.applied(target)
    if done is None:  # no Tabletalk tables: empty, whatever its migrations will write into it
        others = target.table_names()
        if others:
            raise MoveError(f"{masked(url)} holds tables that are not Tabletalk's ({', '.join(others[:8])}"
                            f"{', ...' if len(others) > 8 else ''}): move into a database of its own, new and empty")
        return
    newer = [n for n in done if n not in {fn.__name__ for fn in pg_migrations.MIGRATIONS}]
    if newer:
        raise MoveError(f"{masked(url)} holds Tabletalk's tables of a newer release (migrations "
                        f"{', '.join(newer)}): move into an empty database, or with that release")
    held = move_sql.held(target)
    if held:
        what = ", ".join(f"{n:,} {t}" for t, n in sorted(held.items()))
        same = all(counts.get(t) == n for t, n in held.items() if t in counts)
        again = (" It looks like this install, moved already: its counts match. Set DATABASE_URL to use it."
                 if same and "conversations" in held else "")
        raise MoveError(f"{masked(url)} is not empty ({what}): move-to copies into an empty database only, "
                        f"and changed nothing.{again} To move again, drop it and create it anew "
                        "(dropdb NAME; createdb -O USER NAME).")


def _rights(url: str, e: psycopg.Error) -> MoveError:
    parts = urlsplit(url)
    user, name = parts.username or "the user", parts.path.lstrip("/") or "the database"
    return MoveError(f"the user {user} may not make Tabletalk's tables in {name} ({_first(e)}). Make it the "
                     f"database's owner (ALTER DATABASE {name} OWNER TO {user}), or use the user that owns it; "
                     "nothing was changed.")


def move(config: Config, url: str, say: Callable[[str], None] = print) -> Moved:
    """Copy the install at `config.data` into the empty PostgreSQL database at `url`."""
    started = time.monotonic()
    database = config.data / "tabletalk.db"
    if not dbm.is_url(url):
        connect(url)  # raises its words
    if config.database_url:
        raise MoveError("DATABASE_URL is set: this install keeps its rows in PostgreSQL already. move-to copies "
                        f"the SQLite file in TABLETALK_DATA ({database}); unset DATABASE_URL to run it")
    if not database.exists():
        raise MoveError(f"there is no SQLite install at {database} (TABLETALK_DATA is {config.data})")
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(datalock.moving(config.data))
        except datalock.Busy:
            raise MoveError(f"tabletalk serve is running on {config.data}: stop it first (what it writes during "
                            "the move would not be moved), then run move-to again") from None
        source = held.enter_context(_snapshot(database, say))
        tables = move_sql.source_tables(source)
        broken = move_sql.problems(source)
        if broken:
            raise MoveError("SQLite's rows name rows that are not there, which PostgreSQL refuses: "
                            + "; ".join(broken[:10]) + (f" (and {len(broken) - 10} more)" if len(broken) > 10 else ""))
        counts = {t.name: t.rows for t in tables}
        target = connect(url)
        try:
            _refuse_unless_empty(target, url, counts)
            try:
                applied = schema.migrate(target)
            except psycopg.errors.InsufficientPrivilege as e:
                raise _rights(url, e) from None
            say(f"{masked(url)}: empty; " + (f"migrated ({len(applied)} migrations)" if applied else "migrated already"))
            try:
                moved = _copy(source, target, tables, config.files, move_sql.held(target), say)
            except psycopg.errors.InsufficientPrivilege as e:
                raise _rights(url, e) from None
            move_sql.analyze(target, tables)
        finally:
            target.conn.close()
    moved.url, moved.seconds = url, time.monotonic() - started
    return moved


def _copy(source: sqlite_utils.Database, target, tables: list[move_sql.Table], files: Path, seeded: dict[str, int],
          say: Callable[[str], None]) -> Moved:
    """The copy in one write; `seeded`: what the target held once migrated (its migrations' rows)."""
    moved = Moved("")
    with target.write():
        if move_sql.held(target) != seeded:  # a server started on it since
            raise MoveError("the database was written to while the move began: nothing was changed")
        missing = {t.name: [c.name for c in t.columns if c.name not in move_sql.target_columns(target, t.name)]
                   for t in tables}
        missing = {t: cs for t, cs in missing.items() if cs}
        if missing:
            raise MoveError(f"PostgreSQL's schema lacks what SQLite's has: {missing} (a bug: tell us)")
        move_sql.clear(target, tables)
        bulk = move_sql.owned(target, tables)
        indexes = move_sql.unindexed(target, tables) if bulk else []
        width = max(len(t.name) for t in tables)
        for t in tables:
            began = time.monotonic()
            if t.name in move_sql.VOID:
                say(f"  {t.name:<{width}}  {t.rows:>9,} {'lease' if t.rows == 1 else 'leases'}, void (a stopped server's)")
                moved.counts[t.name] = 0
                continue
            nuls = move_sql.nuls(source, t)
            moved.replaced_nuls += nuls

            def progress(done: int, t=t) -> None:
                if done < t.rows:
                    say(f"  {t.name:<{width}}  {done:>9,} of {t.rows:,}")

            try:
                n = move_sql.copy_table(source, target, t, progress, nuls > 0)
            except psycopg.errors.InsufficientPrivilege:
                raise
            except psycopg.Error as e:
                raise MoveError(f"PostgreSQL refused a row of {t.name}: {_first(e)}; nothing was changed") from None
            moved.counts[t.name] = n
            say(f"  {t.name:<{width}}  {n:>9,} {'row' if n == 1 else 'rows'} in {time.monotonic() - began:.1f} s")
        _copy_files(source, target, files, moved, say)
        if bulk:
            began = time.monotonic()
            n = move_sql.reindexed(target, indexes)
            say(f"  search and {len(indexes)} indexes made in {time.monotonic() - began:.1f} s ({n:,} search rows)")
        wrong = []
        for t in tables:
            if t.name in move_sql.VOID:
                got = move_sql.rows(target, t.name)
                wrong += [f"{t.name}: {got} rows instead of none"] if got else []
                continue
            wrong += move_sql.differences(t, move_sql.fingerprint(source, t, False), move_sql.fingerprint(target, t, True))
        if move_sql.search_rows(source) != move_sql.search_rows(target):
            wrong.append(f"search: {move_sql.search_rows(source)} rows in SQLite, {move_sql.search_rows(target)} in PostgreSQL")
        held = move_sql.held_files(target)
        named = {sha: size for sha, size in move_sql.named_files(source).items() if sha not in moved.missing}
        if held != named:
            wrong.append(f"files: {len(held)} held in PostgreSQL, {len(named)} named by SQLite's rows")
        if wrong:
            raise MoveError("the copy does not match, so nothing was kept: " + "; ".join(wrong[:10]))
        moved.rev = dbm.current_rev(target)
        move_sql.set_identities(target, move_sql.autoincrement(source))
    say(f"Checked: every table's rows, and per column its values, sums and text lengths, equal on both; "
        f"search's {move_sql.search_rows(target):,} rows; the rev counter at {moved.rev:,}")
    if moved.replaced_nuls:
        say(f"{_n(moved.replaced_nuls, 'text')} held NUL characters, which PostgreSQL's text cannot: each became U+FFFD")
    return moved


def _copy_files(source: sqlite_utils.Database, target, files: Path, moved: Moved, say: Callable[[str], None]) -> None:
    """Every file's bytes from files/ into PostgreSQL's rows (chunks of 256 KB, each file's
    sha256 checked as it goes in), in the copy's transaction."""
    began, disk, rows = time.monotonic(), blobstore.Disk(files), blobstore.Rows(target)
    named = move_sql.named_files(source)
    for n, sha in enumerate(sorted(named), 1):
        chunks = disk.open(sha)
        if chunks is None:
            moved.missing.append(sha)
            continue
        try:
            _, size = rows.put(chunks, sha)
        except blobstore.BlobError as e:
            raise MoveError(f"{disk.path(sha)} is damaged ({e}): nothing was changed") from None
        moved.files, moved.bytes = moved.files + 1, moved.bytes + size
        if n % 500 == 0 and n < len(named):
            say(f"  files  {n:,} of {len(named):,}")
    say(f"  files' bytes  {_n(moved.files, 'file')}, {moved.bytes / 1e6:.1f} MB in {time.monotonic() - began:.1f} s")
    if moved.missing:
        say(f"  {_n(len(moved.missing), 'file')} named by rows not in {files} (nor served before the move): "
            + ", ".join(moved.missing[:5]) + ("…" if len(moved.missing) > 5 else ""))


def next_steps(config: Config, moved: Moved) -> str:
    database = config.data / "tabletalk.db"
    return f"""Moved {sum(moved.counts.values()):,} rows in {moved.seconds:.1f} s.

Next:
  1. Set DATABASE_URL={masked(moved.url)}{" (with its password)" if masked(moved.url) != moved.url else ""}
     wherever tabletalk serve runs on it, each server with a TABLETALK_DATA of its own.
  2. Restart tabletalk serve.
  3. Files' bytes, the key that signs forms and the accounts are in the database now: a server
     needs nothing else from {config.data}.
  4. {database} is left as it was: the way back (unset DATABASE_URL). What is written on
     PostgreSQL from now on is not in it."""
