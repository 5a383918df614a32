"""Who is using a data folder: `tabletalk serve` holds `serve.lock` shared for as long as it
runs (its workers inherit it), `tabletalk move-to` holds it exclusive while it copies. So a
move refuses while a server runs on the folder, and a server refuses to start during a move.
An flock goes with the process that held it, kill -9 included: nothing stale to clean up.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

NAME = "serve.lock"

_held: list[int] = []  # the serving process's lock, kept open until it exits


class Busy(Exception):
    """The folder is held the other way."""


def _take(data: Path, how: int) -> int:
    data.mkdir(parents=True, exist_ok=True)
    fd = os.open(data / NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy(str(data)) from None
    return fd


def serving(data: Path) -> None:
    """Hold the folder as a server does, until this process (and its workers) exit."""
    _held.append(_take(data, fcntl.LOCK_SH))


@contextlib.contextmanager
def moving(data: Path) -> Iterator[None]:
    """Hold the folder alone while the block runs; Busy when a server holds it."""
    fd = _take(data, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)
