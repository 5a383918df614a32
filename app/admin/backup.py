"""`tabletalk backup PATH` and `tabletalk restore PATH`: a copy of a running install, and back.

A backup is a folder: `tabletalk.db` (one consistent snapshot, SQLite's online backup in one
step: a read transaction, which in WAL mode holds no writer up, so answers keep streaming),
`files/` (the content-addressed bytes the snapshot's file rows name, each checked against its
hash as it is copied), the data folder's `secret.key` when an install made before migration
m028 has one (the key that signs forms is a row of the database since, so it is in the
snapshot) and `manifest.json` (what was copied: counts of rows, every file with its size). It is written beside PATH under a
temporary name and renamed into place, so a PATH that exists is a complete backup.

A restore goes only into an empty (or missing) data folder, and checks the backup before
and the copy after: SQLite's integrity check, the manifest's counts, every named file
present with the right hash.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..store import db as dbm
from ..config import Config
from ..store import backup as backup_sql
from ..store.blobs import Disk, Hashing, NotTheBytes, read_chunks, write_checked

FORMAT = "tabletalk-backup"
VERSION = 1
DATABASE = "tabletalk.db"
SECRET = "secret.key"
MANIFEST = "manifest.json"
TRIES = 5  # snapshots taken again when a named file went meanwhile (its conversation was deleted)


class BackupError(Exception):
    """Why a backup or restore could not be made, in plain words."""


@dataclass
class Summary:
    path: Path
    counts: dict[str, int] = field(default_factory=dict)
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        rows = ", ".join(f"{n} {t}" for t, n in self.counts.items())
        return f"{self.path}: {rows}; {self.files} files ({self.bytes:,} bytes) in {self.seconds:.1f} s"


def _empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def _copy_checked(source: Path, target: Path, sha256: str) -> int:
    """Copy the bytes, hashing them on the way; the copy is fsynced. Raises when they do not
    match their name (the source is damaged)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(source, "rb") as src, open(target, "wb") as dst:
            return write_checked(dst, read_chunks(src), sha256)
    except NotTheBytes as e:
        target.unlink()
        raise BackupError(f"{source} does not hold the bytes its name says (sha256 {e.found}): it is damaged") from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def backup(config: Config, path: Path) -> Summary:
    """Copy the install at `config.data` into the folder `path` (missing or empty) while it serves."""
    started = time.monotonic()
    path = path.expanduser().resolve()
    if config.database_url:
        raise BackupError("DATABASE_URL names a PostgreSQL database: back it up with PostgreSQL's own pg_dump "
                          "(and TABLETALK_DATA's files/ beside it); tabletalk backup copies SQLite's file")
    if not config.database.exists():
        raise BackupError(f"there is no database to back up at {config.database}")
    if not _empty(path):
        raise BackupError(f"{path} is not empty: a backup goes into a new (or empty) folder")
    if path.is_relative_to(config.data):
        raise BackupError(f"{path} is inside the data folder {config.data}: choose a folder outside it")
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial-"))
    try:
        summary = _take(config, work)
        (work / MANIFEST).write_text(json.dumps({
            "format": FORMAT, "version": VERSION, "created": dbm.now(), "counts": summary.counts,
            "migrations": summary.migrations, "files": summary.named}, indent=1, sort_keys=True))
        _fsync_dir(work)
        if path.exists():
            path.rmdir()  # empty (checked above)
        os.replace(work, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    out = Summary(path, summary.counts, len(summary.named), summary.bytes, time.monotonic() - started)
    return out


@dataclass
class _Taken:
    counts: dict[str, int]
    migrations: list[str]
    named: dict[str, int]
    bytes: int


def _take(config: Config, work: Path) -> _Taken:
    source = dbm.connect(config.database)
    try:
        for _ in range(TRIES):
            target = work / DATABASE
            target.unlink(missing_ok=True)
            backup_sql.snapshot(source, target)
            copy = backup_sql.open_as_is(target)
            try:
                counts, named, applied = backup_sql.counts(copy), backup_sql.named_files(copy), backup_sql.migrations(copy)
            finally:
                copy.conn.close()
            gone, size = [], 0
            for sha in named:
                held = Disk(config.files).path(sha)
                dest = Disk(work / "files").path(sha)
                if dest.exists():
                    size += dest.stat().st_size
                    continue
                try:
                    size += _copy_checked(held, dest, sha)
                except FileNotFoundError:
                    gone.append(sha)
            if not gone:
                break
            # The rows naming them were deleted after the snapshot (forget_files removes the
            # bytes with the rows): a newer snapshot no longer names them.
        else:
            raise BackupError(f"{len(gone)} files named by the database are missing from {config.files}, "
                              "and stay missing: the data folder is damaged")
    finally:
        source.conn.close()
    for wal in (work / (DATABASE + "-wal"), work / (DATABASE + "-shm")):
        wal.unlink(missing_ok=True)
    key = config.data / SECRET
    if key.exists():
        shutil.copyfile(key, work / SECRET)
        os.chmod(work / SECRET, 0o600)
    return _Taken(counts, applied, named, size)


def check(folder: Path, manifest: dict | None = None) -> Summary:
    """Check a backup (or a restored data folder) against the manifest: the database's integrity,
    its counts, every named file present with the right hash. Raises BackupError with every
    problem found."""
    started = time.monotonic()
    manifest = manifest if manifest is not None else read_manifest(folder)
    database = folder / DATABASE
    if not database.exists():
        raise BackupError(f"{database} is missing")
    db = backup_sql.open_as_is(database)
    try:
        problems = backup_sql.integrity(db)
        counts, named = backup_sql.counts(db), backup_sql.named_files(db)
    finally:
        db.conn.close()
    if counts != manifest["counts"]:
        problems.append(f"the rows are not those the backup counted: {counts} instead of {manifest['counts']}")
    if set(named) != set(manifest["files"]):
        problems.append("the database names other files than the backup copied")
    size = 0
    for sha in named:
        held = Disk(folder / "files").path(sha)
        try:
            hashing = Hashing(read_chunks(open(held, "rb")))
            for _ in hashing:  # read through, hashed
                pass
            size += hashing.check(sha)
        except FileNotFoundError:
            problems.append(f"file {sha} is missing")
        except NotTheBytes:
            problems.append(f"file {sha} does not hold the bytes its name says")
    if problems:
        shown = "; ".join(problems[:10]) + (f" (and {len(problems) - 10} more)" if len(problems) > 10 else "")
        raise BackupError(f"{folder} failed its check: {shown}")
    return Summary(folder, counts, len(named), size, time.monotonic() - started)


def read_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise BackupError(f"{folder} is not a Tabletalk backup (no {MANIFEST})") from None
    except ValueError as e:
        raise BackupError(f"{folder / MANIFEST} is damaged: {e}") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{folder} is not a Tabletalk backup")
    if manifest.get("version") != VERSION:
        raise BackupError(f"{folder} is a backup of format version {manifest.get('version')}; "
                          f"this release reads version {VERSION}")
    return manifest


def restore(config: Config, path: Path) -> Summary:
    """Copy the backup at `path` into the data folder, which must be empty; checked before and after."""
    started = time.monotonic()
    path = path.expanduser().resolve()
    if config.database_url:
        raise BackupError("DATABASE_URL names a PostgreSQL database: tabletalk restore writes SQLite's file; "
                          "unset DATABASE_URL to restore a backup into TABLETALK_DATA")
    manifest = read_manifest(path)
    if not _empty(config.data):
        raise BackupError(f"the data folder {config.data} is not empty: restore into a new (or empty) "
                          "folder (set TABLETALK_DATA), then serve from it")
    check(path, manifest)
    config.data.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copyfile(path / DATABASE, config.database)
        for sha in manifest["files"]:
            _copy_checked(Disk(path / "files").path(sha), Disk(config.files).path(sha), sha)
        if (path / SECRET).exists():
            shutil.copyfile(path / SECRET, config.data / SECRET)
            os.chmod(config.data / SECRET, 0o600)
        db = dbm.connect(config.database)  # WAL again, as the server keeps it
        db.conn.close()
        done = check(config.data, manifest)
    except BaseException:
        for child in config.data.iterdir():  # it was empty: leave it so, for another try
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    done.seconds = time.monotonic() - started
    return done
