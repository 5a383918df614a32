"""Files' bytes, by content: put bytes, open them as a stream of chunks, drop them.

Every file row (`files`, app/store/files.py) names its bytes by their sha256; the bytes are
kept once per content, wherever the engine keeps them:

- SQLite (`Disk`): in the data folder beside the database, `files/ab/cdef…` (the sha256's
  hex split after two characters), each written to a temporary file, fsynced and renamed
  into place, so a reader never sees half a file.
- PostgreSQL (`Rows`): in the database, so that servers on several machines share nothing
  but it: one `blobs` row per content (sha256, size, how many chunks) and its `chunks` rows
  (sha256, n from 0, at most CHUNK bytes of data each), written in the caller's write
  transaction: the bytes and the row naming them commit together, or neither does.

`Store.blobs` (app/store/files.py) is the store's one, chosen by the engine; callers
(uploads, downloads, tool-made files, `tabletalk move-to`) use only this interface:

    blobs = store.blobs
    with store.write():                        # Rows: the bytes commit with this write
        sha, size = blobs.put(data)            # bytes, or chunks with their sha256 (below)
        ...                                    # the row that names `sha`
    for chunk in blobs.open(sha) or ():        # None: not held; else chunks of <= CHUNK bytes
        ...
    blobs.read(sha)                            # all the bytes at once (for a model), or None
    blobs.has(sha)                             # whether they are held, complete
    with store.write():
        blobs.drop(sha)                        # once no file row names them

`put(source, sha256=None)` takes `bytes`, or an iterable of byte chunks (e.g. another
store's `open(sha)`, so a copy never holds a whole file in memory) together with the sha256
they must have: the bytes are hashed as they are written and refused (BlobError, nothing
kept) when they do not match. Putting bytes already held writes nothing (content-addressed:
stored once) and returns the same sha256. Size limits (TABLETALK_UPLOAD_MAX) are the
caller's: `put` stores what it is given.

The rule for dropping is the same on both engines: the write that deletes the last file
row naming some bytes drops them in that transaction (Store.forget_files), under the write
lock; a put of the same bytes either came first (its row keeps them) or comes after and
writes them again. `Disk.put` writes the file at once (not transactional): Store.add_file
calls it before the write lock so an upload's fsync holds no writer up, then, inside the
write, puts again if a drop took the bytes meanwhile (`transactional` says which kind a
store has).
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from . import db as dbm

CHUNK = 256 * 1024  # bytes per chunk row, and per read of a stream on both engines
_SHA = re.compile(r"[0-9a-f]{64}")


class BlobError(ValueError):
    """Bytes that cannot be put: an iterable without its sha256, or bytes that are not the
    sha256 they were given as, or a sha256 that is not one."""


class NotTheBytes(BlobError):
    """Bytes whose sha256 (`found`) is not the one they were given as (`want`)."""

    def __init__(self, want: str, found: str):
        super().__init__(f"the bytes are not {want} (their sha256 is {found})")
        self.want, self.found = want, found


class Hashing:
    """Chunks passed through as they are read (`for chunk in hashing`), their sha256 and size
    counted on the way; `check(want)` then says whether they were the bytes `want` names."""

    def __init__(self, chunks: Iterable[bytes]):
        self.chunks = chunks
        self.hash = hashlib.sha256()
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.hash.update(chunk)
            self.size += len(chunk)
            yield chunk

    def check(self, want: str) -> int:
        """The size passed through; NotTheBytes when their sha256 is not `want`."""
        if (found := self.hash.hexdigest()) != want:
            raise NotTheBytes(want, found)
        return self.size


def write_checked(f: BinaryIO, chunks: Iterable[bytes], sha256: str) -> int:
    """Write `chunks` to the open file `f`, hashing them on the way, flushed and fsynced; the
    size written. NotTheBytes when they are not the bytes `sha256` names: the file then
    holds bytes no one may use, and the caller removes it (a blob put, a backup's copy)."""
    hashing = Hashing(chunks)
    for chunk in hashing:
        f.write(chunk)
    f.flush()
    os.fsync(f.fileno())
    return hashing.check(sha256)


class Blobs(Protocol):
    transactional: bool  # True: put and drop are part of the caller's write transaction

    def put(self, source: bytes | Iterable[bytes], sha256: str | None = None) -> tuple[str, int]: ...

    def has(self, sha256: str) -> bool: ...

    def open(self, sha256: str) -> Iterator[bytes] | None: ...

    def read(self, sha256: str) -> bytes | None: ...

    def drop(self, sha256: str) -> None: ...


def checked(sha256: str) -> str:
    if not isinstance(sha256, str) or not _SHA.fullmatch(sha256):
        raise BlobError(f"not a sha256: {sha256!r:.80}")
    return sha256


def _pieces(source: bytes | Iterable[bytes], sha256: str | None) -> tuple[Iterable[bytes], str | None]:
    """The source as chunks of at most CHUNK bytes, and the sha256 it must have (known up front for bytes)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        want = hashlib.sha256(data).hexdigest()
        if sha256 is not None and checked(sha256) != want:
            raise BlobError(f"the bytes are not {sha256} (their sha256 is {want})")
        return (data[i:i + CHUNK] for i in range(0, len(data), CHUNK)), want
    if sha256 is None:
        raise BlobError("bytes given in chunks need the sha256 they must have")
    return _rechunked(source), checked(sha256)


def _rechunked(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Chunks of any size as chunks of CHUNK bytes (the last one shorter)."""
    held = bytearray()
    for chunk in chunks:
        held += chunk
        while len(held) >= CHUNK:
            yield bytes(held[:CHUNK])
            del held[:CHUNK]
    if held:
        yield bytes(held)


class Disk:
    """Bytes as files under `root` (the data folder's files/), SQLite's store."""

    transactional = False

    def __init__(self, root: Path):
        self.root = root

    def path(self, sha256: str) -> Path:
        sha256 = checked(sha256)
        return self.root / sha256[:2] / sha256[2:]

    def put(self, source: bytes | Iterable[bytes], sha256: str | None = None) -> tuple[str, int]:
        pieces, want = _pieces(source, sha256)
        assert want is not None
        target = self.path(want)
        if target.is_file():  # renamed into place whole: held bytes are complete
            return want, target.stat().st_size
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                size = write_checked(f, pieces, want)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return want, size

    def has(self, sha256: str) -> bool:
        try:
            return self.path(sha256).is_file()
        except BlobError:
            return False

    def open(self, sha256: str) -> Iterator[bytes] | None:
        try:
            f = open(self.path(sha256), "rb")  # opened now: a drop after this leaves the stream whole
        except (FileNotFoundError, BlobError):
            return None
        return read_chunks(f)

    def read(self, sha256: str) -> bytes | None:
        try:
            return self.path(sha256).read_bytes()
        except (FileNotFoundError, BlobError):
            return None

    def drop(self, sha256: str) -> None:
        try:
            self.path(sha256).unlink()
        except (FileNotFoundError, BlobError):
            pass


def read_chunks(f) -> Iterator[bytes]:
    """The open file `f`'s bytes as chunks of CHUNK bytes, read as they are asked for; `f`
    closed at the end."""
    with f:
        while chunk := f.read(CHUNK):
            yield chunk


class Rows:
    """Bytes as rows of the database (`blobs`, `chunks`), PostgreSQL's store."""

    transactional = True

    def __init__(self, db):
        self.db = db

    def put(self, source: bytes | Iterable[bytes], sha256: str | None = None) -> tuple[str, int]:
        pieces, want = _pieces(source, sha256)
        assert want is not None
        with dbm.write(self.db) as db:
            held = db.execute("SELECT size FROM blobs WHERE sha256 = ?", [want]).fetchone()
            if held is not None:
                return want, held[0]
            with dbm.write(db):  # a savepoint: bytes refused leave nothing behind
                db.execute("INSERT INTO blobs (sha256, size, chunks, created) VALUES (?, 0, 0, ?)", [want, dbm.now()])
                hashing, n = Hashing(pieces), 0
                for n, piece in enumerate(hashing, 1):
                    db.execute("INSERT INTO chunks (sha256, n, data) VALUES (?, ?, ?)", [want, n - 1, piece])
                size = hashing.check(want)
                db.execute("UPDATE blobs SET size = ?, chunks = ? WHERE sha256 = ?", [size, n, want])
            return want, size

    def has(self, sha256: str) -> bool:
        try:
            checked(sha256)
        except BlobError:
            return False
        return self.db.execute("SELECT 1 FROM blobs WHERE sha256 = ?", [sha256]).fetchone() is not None

    def open(self, sha256: str) -> Iterator[bytes] | None:
        try:
            checked(sha256)
        except BlobError:
            return None
        row = self.db.execute("SELECT size, chunks FROM blobs WHERE sha256 = ?", [sha256]).fetchone()
        if row is None:
            return None
        return self._chunks(sha256, row[0], row[1])

    def _chunks(self, sha256: str, size: int, count: int) -> Iterator[bytes]:
        """One chunk per statement, read as the stream is consumed: a download holds one chunk
        in memory at a time. The bytes dropped meanwhile (the last row naming them deleted)
        end the stream with an error rather than short."""
        sent = 0
        for n in range(count):
            row = self.db.execute("SELECT data FROM chunks WHERE sha256 = ? AND n = ?", [sha256, n]).fetchone()
            if row is None:
                raise BlobError(f"the bytes {sha256} were dropped while they were read")
            sent += len(row[0])
            yield bytes(row[0])
        if sent != size:
            raise BlobError(f"the bytes {sha256} are {sent} bytes, not {size}: damaged")

    def read(self, sha256: str) -> bytes | None:
        chunks = self.open(sha256)
        if chunks is None:
            return None
        try:
            return b"".join(chunks)
        except BlobError:
            return None

    def drop(self, sha256: str) -> None:
        with dbm.write(self.db) as db:
            db.execute("DELETE FROM blobs WHERE sha256 = ?", [sha256])  # its chunks go with it (ON DELETE CASCADE)


__all__ = ["CHUNK", "BlobError", "Blobs", "Disk", "Rows", "checked"]
