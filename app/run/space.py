"""A full disk: telling it from other failures, and a reserve to end work in plain words.

When the database ("database or disk is full", SQLITE_FULL) or files/ (ENOSPC) cannot be
written, every answer being written ends with an error item saying so. Writing that item
needs a little space too, so the data folder keeps a reserve: a file of its own
(`space.reserve`, a 64th of the disk, 256 KB to 4 MB) that is deleted the moment the
disk is found full, which frees room for the error items and the rows that mark the answers
ended. While the reserve is gone, uploads are refused and no new answer starts; once the
disk has room for the reserve twice over it is made again, and everything goes on by itself.
"""
from __future__ import annotations

import errno
import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from .. import agent as loop

log = logging.getLogger(__name__)

ANSWER_CUT = "The server's disk is full: the answer could not be saved past this point."
CALL_CUT = "The server's disk is full: this call's result could not be saved."
NOT_SAVED = ("The server's disk is full: this could not be saved. What was saved before stays; "
             "try again once there is room on the disk.")
NO_UPLOADS = ("The server's disk is full: files cannot be uploaded now, and your message was not sent. "
              "Send it without the files, or try again once there is room on the disk.")
NAME = "space.reserve"
LEAST, MOST = 256 * 1024, 4 * 1024 * 1024
FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}


def is_full(exc: BaseException | None) -> bool:
    """Whether this failure (or one it came from) is a full disk."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, sqlite3.Error) and (
                getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(exc)):
            return True
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class Reserve:
    """The data folder's reserve file: present while the disk has room."""

    def __init__(self, data: Path):
        self.path = data / NAME

    def size(self) -> int:
        total = shutil.disk_usage(self.path.parent).total
        return max(LEAST, min(MOST, total // 64))

    def held(self) -> bool:
        return self.path.exists()

    def ensure(self) -> bool:
        """Make the reserve when it is missing and the disk has room for it twice over;
        whether it is there now."""
        if self.path.exists():
            return True
        try:
            size = self.size()
            if shutil.disk_usage(self.path.parent).free < 2 * size:
                return False
            tmp = self.path.with_name(f".{NAME}.{os.getpid()}")
            with open(tmp, "wb") as f:
                try:
                    os.posix_fallocate(f.fileno(), 0, size)  # blocks kept (ext4, xfs, tmpfs), fast
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    f.write(b"\0" * size)  # a file system that cannot allocate ahead
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            try:
                tmp.unlink()
            except (OSError, UnboundLocalError):
                pass
            if not is_full(e):
                log.warning("could not make the disk reserve %s: %s", self.path, e)
            return False
        log.info("the disk has room again: the reserve %s is back", self.path)
        return True

    def release(self) -> bool:
        """Free the reserve (the disk is full): whether this call freed it."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        log.warning("the disk is full: released the reserve %s to end the answers in plain words", self.path)
        return True


class DiskFull:
    """A part of the runner (app/run/runner.py): its runs end in words when the disk is full, and no
    run starts until the reserve is back. Uses the runner's `runs`, `writes`, `store`,
    `reserve`, `full` and `_mark_done`."""

    runs: dict[int, Any]
    writes: Any  # app.run.writes.Writes
    store: Any
    reserve: Reserve
    full: bool

    def disk_full(self) -> None:
        """A write failed for want of space: free the reserve and end every run in plain words."""
        if not self.full:
            self.full = True
            self.reserve.release()
        self.writes.clear()
        for run in self.runs.values():
            if run.task and not run.task.done() and not run.full:
                run.full = True
                run.task.cancel()  # this run's own task too: it ends at its next await

    def recovered(self) -> bool:
        """Once the disk has room for the reserve again, answers start again."""
        if self.reserve.ensure():
            self.full = False
        return not self.full

    def ended_full(self, run) -> None:
        """The rows of a run the full disk cut: what was written stays, marked done, and an error
        item says why. If even that cannot be written, the rows stay pending and the run is
        answered again (from its last complete step) once the disk has room."""
        self.writes.clear()
        try:
            with run.store.write():  # held to the run's lease (Store.fenced)
                if run.turn is not None:
                    run.turn.stopped(CALL_CUT)
                    run.turn.emit(loop.Failed(ANSWER_CUT))
                    self._mark_done(run)
        except Exception as e:
            if not is_full(e):
                raise
            log.warning("the disk is full: conversation %s is answered again once there is room", run.chat)
