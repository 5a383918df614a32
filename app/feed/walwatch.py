"""Another process's commit to the SQLite database, told by the kernel rather than looked for.

SQLite tells a connection that another one committed only when asked (`PRAGMA
data_version`), so a feed that no page follows looked ten times a second: most of what an
idle worker, and an answer nobody follows, cost (benchmarks/README.md, "Idle wake-ups").
A commit in WAL mode writes its pages to the `-wal` file beside the database first, so on
Linux an inotify watch of the database's folder wakes the feed when any process writes
that file, and only then. The write comes before the commit is visible (the WAL index is
updated after it), so a look that finds nothing new looks once more a moment later (the
feed's `settle`). Where inotify is missing (not Linux, a limit reached) `start` says so
and the feed polls as before.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of name, NUL-padded

_libc: ctypes.CDLL | None = None


def _inotify() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)  # this process's own libc (find_library runs ldconfig)
            libc.inotify_init1, libc.inotify_add_watch  # noqa: B018 (missing: AttributeError)
        except (OSError, AttributeError):
            return None
        _libc = libc
    return _libc


class WalWatch:
    """Calls `changed` (in the loop) when a process writes the database's `-wal` file."""

    def __init__(self, database: Path | str):
        path = Path(database)
        self.folder = path.parent
        self.name = os.fsencode(path.name + "-wal")
        self.fd = -1
        self._changed: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, changed: Callable[[], None]) -> bool:
        """Watch from now on; False where the kernel cannot tell (the caller polls)."""
        libc = _inotify()
        if libc is None:
            return False
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.info("no inotify (%s): other processes' commits are polled for", os.strerror(ctypes.get_errno()))
            return False
        if libc.inotify_add_watch(fd, os.fsencode(self.folder), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
            log.info("inotify cannot watch %s (%s): other processes' commits are polled for",
                     self.folder, os.strerror(ctypes.get_errno()))
            os.close(fd)
            return False
        self.fd, self._changed = fd, changed
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._read)
        return True

    def _read(self) -> None:
        """Every event queued, at once; `changed` once if any is about the `-wal` file (or
        the kernel's queue overflowed: then it cannot say which)."""
        try:
            data = os.read(self.fd, 64 * 1024)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            log.exception("reading inotify events failed: other processes' commits are polled for")
            self.close()
            return
        ours = False
        at = 0
        while at + _EVENT.size <= len(data):
            _, mask, _, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size:at + _EVENT.size + size].rstrip(b"\0")
            at += _EVENT.size + size
            if mask & IN_Q_OVERFLOW or name == self.name:
                ours = True
        if ours and self._changed is not None:
            self._changed()

    @property
    def watching(self) -> bool:
        return self.fd >= 0

    def close(self) -> None:
        if self.fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.fd)
        os.close(self.fd)
        self.fd = -1
        self._changed = None
