"""A GGUF model uploaded through the browser, as files on disk: its bytes written as they
arrive to a hidden part file under data/models/ (never held in memory), the disk checked
before and while they come, the whole file checked by its header (gguf.py), and only then
renamed to NAME.gguf, where the models page lists it (brought.py). So no half of a file is
ever a model.

    data/models/.NAME.gguf.KEY.part   the bytes so far of one upload of NAME.gguf; KEY is
                                      the page's for the file it sends (its script goes on
                                      from here after a cut), or a plain form's, made here

One upload of a name at a time: a request holds a lock on its part while it writes, and a
second upload of the same name while one does is refused; a part nobody writes is given up
(deleted) by the next upload of its name, or by any upload once it is a day old. The name
is taken once, by a rename no other upload makes at the same moment (a lock on the folder),
and never over a model already there.

The web's side (app/web/model_upload.py) reads the request and hands the bytes over.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from . import NAME, brought, gguf

KEEP_LEAST, KEEP_MOST = 64_000_000, 1_000_000_000  # room an upload leaves on the disk: a 50th of it, within these
STALE = 24 * 3600  # seconds a part nobody writes is kept for its upload to go on
CHECK_EVERY = 8 * 1024 * 1024  # the disk's room is read again after this many bytes
_KEY = re.compile(r"^[A-Za-z0-9]{8,64}$")
FULL = (errno.ENOSPC, errno.EDQUOT)

Free = Callable[[Path], tuple[int, int]]  # a folder's disk: (its size, bytes free)


def disk(path: Path) -> tuple[int, int]:
    usage = shutil.disk_usage(path)
    return usage.total, usage.free


class NotTaken(Exception):
    """An upload refused or failed; the message says why, for a person. `kind`: name, taken,
    busy (another upload of the name), again (this upload's request that was cut still
    writes), room, size (past the limit), length (not the size it said), model, or behind
    (the part holds less than a continuation starts from: `have`)."""

    def __init__(self, kind: str, message: str, have: int = 0):
        super().__init__(message)
        self.kind, self.have = kind, have


def file_name(raw: str) -> str:
    """The name an uploaded file is kept under: its last path part (never a folder's), each
    run of characters a model's name may not carry made one '-'; NotTaken when nothing is left
    of it, it is not a .gguf file, or it is the built-in model's."""
    base = re.split(r"[/\\]", raw.strip())[-1]
    stem, dot, ext = base.rpartition(".")
    if not dot or ext.lower() != "gguf":
        raise NotTaken("name", f"{base or 'It'} is not a .gguf file: only GGUF model files can be added here.")
    stem = re.sub(r"[^A-Za-z0-9._+-]+", "-", stem).strip("-._+")[:100]
    if not stem:
        raise NotTaken("name", "The file's name has nothing a model can be called by: rename it, then upload it.")
    if stem == NAME:
        raise NotTaken("name", f"{NAME} is the built-in model's name: rename the file, then upload it.")
    return f"{stem}.gguf"


def amount(n: int) -> str:
    """Bytes as a person reads them: 36 MB, 4.2 GB."""
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.0f} MB"


def new_key() -> str:
    return secrets.token_hex(12)


def keep(total: int) -> int:
    """The room an upload leaves free on a disk of `total` bytes (for the database and answers)."""
    return max(KEEP_LEAST, min(KEEP_MOST, total // 50))


def part_of(data: Path, file: str, key: str) -> Path:
    return brought.folder(data) / f".{file}.{key}.part"


def have(data: Path, file: str, key: str) -> int:
    """How many bytes of this upload the part holds (0: none, or no such upload)."""
    if not _KEY.match(key):
        return 0
    try:
        return part_of(data, file, key).stat().st_size
    except OSError:
        return 0


@contextmanager
def _folder_lock(folder: Path):
    """Held for the moments an upload takes a name or gives one up: one at a time, across
    the server's processes."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and its lock


def _locked_elsewhere(path: Path) -> bool:
    """Whether a request is writing the part at `path` now (it holds its lock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def sweep(data: Path, now: float | None = None) -> int:
    """Delete the parts nobody has written for STALE seconds; how many went."""
    now = time.time() if now is None else now
    gone = 0
    for part in brought.folder(data).glob(".*.part"):
        try:
            if now - part.stat().st_mtime > STALE and not _locked_elsewhere(part):
                part.unlink()
                gone += 1
        except OSError:
            pass
    return gone


class Upload:
    """One request's bytes of an upload of `file`, from `start` (0, or where a cut one
    stopped) to `total` when the request says it (None: a plain form's file, whose end the
    request's end is). `limit`: the largest file taken. Used as: claim, write ... write,
    finish; close always (a part is kept after a cut when `resumable`, else removed)."""

    def __init__(self, data: Path, file: str, key: str, total: int | None, limit: int, free: Free = disk):
        if not _KEY.match(key):
            raise NotTaken("name", "The upload's key must be 8 to 64 letters and digits.")
        if file_name(file) != file:
            raise NotTaken("name", f"{file} cannot be a model's file name here.")
        self.folder = brought.folder(data)
        self.file, self.key, self.total, self.limit, self.free = file, key, total, limit, free
        self.part = part_of(data, file, key)
        self.final = self.folder / file
        self.fd: int | None = None
        self.start = self.written = 0  # bytes: where this request began, and how far it got
        self._room_at = 0  # `written` when the disk's room was last read
        self.done = False

    @property
    def size(self) -> int:
        return self.start + self.written

    def ask(self) -> int:
        """What the page's script asks before it sends a file, and after a cut: how many bytes
        of this upload are here already. NotTaken when it would be refused: too large, its name
        taken, another upload of it under way, or no room for the rest."""
        self._fits(self.total or 0)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._name_free(give_up_others=False)
        held = have(self.folder.parent, self.file, self.key)
        self._room((self.total or 0) - held)
        return held

    def claim(self, start: int = 0, expected: int = 0) -> None:
        """Take the part for this request, from byte `start`; `expected`: the most bytes it may
        bring (the request's length) when `total` is unknown, for the disk's check."""
        self._fits(self.total if self.total is not None else expected - 65_536)  # a form's own bytes besides
        self.folder.mkdir(parents=True, exist_ok=True)
        sweep(self.folder.parent)
        with _folder_lock(self.folder):
            self._name_free(give_up_others=True)
            fd = os.open(self.part, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise NotTaken("again", f"{self.file} is still being written by the upload that was cut: "
                                        "try again in a moment.") from None
            self.fd = fd
        try:
            held = os.fstat(self.fd).st_size
            if start > held:
                raise NotTaken("behind", f"Only {held:,} bytes of {self.file} are here, not {start:,}.", have=held)
            os.ftruncate(self.fd, start)  # what came after `start` (a cut request's last bytes) comes again
            os.lseek(self.fd, start, os.SEEK_SET)
            self.start = start
            self._room((self.total - start) if self.total is not None else expected)
        except NotTaken:
            self.close(resumable=start > 0)  # what is here stays for a try with the right start, or with room
            raise

    def _fits(self, size: int) -> None:
        if size > self.limit:
            raise NotTaken("size", f"{self.file} is {amount(size)}: at most {amount(self.limit)} "
                                   "can be uploaded (TABLETALK_MODEL_UPLOAD_MAX).")

    def _name_free(self, give_up_others: bool) -> None:
        """NotTaken when a model has the name already or another upload of it is under way;
        the parts of this name nobody writes are deleted when `give_up_others` (this upload
        replaces them)."""
        if self.final.exists() or self.final.is_symlink():
            raise NotTaken("taken", f"There is a model named {self.file} here already: remove it first, or "
                                    "rename the file and upload it again.")
        for other in self.folder.glob(f".{self.file}.*.part"):
            if other == self.part:
                continue
            if _locked_elsewhere(other):
                raise NotTaken("busy", f"{self.file} is being uploaded already (from another page): wait for "
                                       "that to end, or rename the file and upload it again.")
            if give_up_others:
                other.unlink(missing_ok=True)

    def _room(self, need: int) -> None:
        """NotTaken when the disk has not `need` bytes and the room kept besides."""
        total, free = self.free(self.folder)
        kept = keep(total)
        if free - kept < need:
            raise NotTaken("room", f"There is no room for {self.file} on this computer's disk: it needs "
                                   f"{amount(need)}, and {amount(max(0, free - kept))} are free "
                                   f"(besides {amount(kept)} kept for Tabletalk's own data). Make room, "
                                   "then upload it again.")

    def write(self, data: bytes | memoryview) -> None:
        """Add bytes to the part (the caller's buffer: a thread may run this, not the loop)."""
        assert self.fd is not None
        if self.size == 0 and len(data) >= 4 and bytes(data[:4]) != gguf.MAGIC:
            raise NotTaken("model", f"{self.file} is not a GGUF model file (it does not begin with “GGUF”).")
        if self.total is not None and self.size + len(data) > self.total:
            raise NotTaken("length", f"{self.file} is longer than the {self.total:,} bytes its upload said.")
        if self.size + len(data) > self.limit:
            raise NotTaken("size", f"{self.file} is past the {amount(self.limit)} an upload may be "
                                   "(TABLETALK_MODEL_UPLOAD_MAX).")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as e:
            if e.errno in FULL:
                raise self._filled() from e
            raise
        self.written += len(data)
        if self.written - self._room_at >= CHECK_EVERY:
            self._room_at = self.written
            try:
                self._room((self.total - self.size) if self.total is not None else 0)
            except NotTaken:
                raise self._filled() from None

    def _filled(self) -> NotTaken:
        return NotTaken("room", f"The disk filled up while {self.file} was uploading: what came of it was removed. "
                                "Make room, then upload it again.")

    def finish(self) -> brought.Brought:
        """The request ended: the part checked whole (its length, its header) and renamed to
        its name, where it is listed. NotTaken says why not (the part is then removed)."""
        assert self.fd is not None
        if self.total is not None and self.size != self.total:
            raise NotTaken("length", f"The upload of {self.file} ended after {self.size:,} bytes of the "
                                   f"{self.total:,} it said.")
        try:
            os.fsync(self.fd)  # on the disk before its name says it is a model
        except OSError as e:
            if e.errno in FULL:
                raise self._filled() from e
            raise
        try:
            gguf.read(self.part)
        except gguf.NotAModel as e:
            raise NotTaken("model", f"{self.file} cannot be served: {e}.") from None
        with _folder_lock(self.folder):
            if self.final.exists() or self.final.is_symlink():
                raise NotTaken("taken", f"There is a model named {self.file} here already (it came while this "
                                        "one was uploading).")
            os.rename(self.part, self.final)
        self.done = True
        return brought.check(self.final)

    def close(self, resumable: bool = False) -> None:
        """The request is over: the lock given up, and the part removed unless it became the
        model, or was cut and may be gone on with."""
        if self.fd is None:
            return
        if not self.done and not resumable:
            self.part.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None
