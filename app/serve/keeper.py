"""When `tabletalk serve` runs the built-in model's supervisor (supervise.py), and its process.

Only while the row asks for one: chosen (`wanted`), being installed, or installed (`ready`).
A fresh Tabletalk, or one whose owner never chose the built-in model, runs none (it was ~31
MB and a read of the row twice a second). serve starts it before its workers when the row
asks at start; later, the worker that sees the row come to that (the owner's choice on a
page, `tabletalk model install` in another process: app/serve/worker.py runs `watch`) starts it,
without a restart of serve. One per data folder: the supervisor holds a lock on
`model/supervisor.lock` (with its pid and serve's in it) for as long as it runs, so a
second start (two workers seeing the same change) ends at once, and a supervisor killed
outright leaves no lock. serve ends the one that runs for it, at its end.

The process is `python -m app.serve.keeper SERVE_PID`: it forks once (so it is not
the child of serve or a worker: serve's children are granian's workers alone), takes the
lock, prints its pid for the one that started it, and only then imports the supervisor
(the app's store and clients), so a start waits for Python's start-up, not for imports.
"""
from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..store.outage import unavailable
from ..builtin import Paths, alive, asks
from .supervise import run

log = logging.getLogger(__name__)

SERVE_PID = "TABLETALK_SERVE_PID"  # set by serve for its workers: the serve they may start a supervisor for
LOOK_SECONDS = 5.0  # a worker looks at least this often (a supervisor that died is started again)
STOP_SECONDS = 20.0  # the supervisor's own stop (the model server's SIGTERM, then SIGKILL) and its exit


def lock_path(data: Path) -> Path:
    return Paths(data).root / "supervisor.lock"


def running(data: Path) -> tuple[int, int]:
    """(the supervisor's pid, the serve it works for) while one holds the lock, else (0, 0)."""
    path = lock_path(data)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0, 0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            words = os.pread(fd, 64, 0).split()
            try:
                return int(words[0]), int(words[1])
            except (IndexError, ValueError):
                return -1, 0  # held, its pid not written yet
        fcntl.flock(fd, fcntl.LOCK_UN)
        return 0, 0
    finally:
        os.close(fd)


def start(data: Path, serve: int) -> int:
    """Start a supervisor working for `serve` (a pid); its pid, or 0 when one runs already.
    Blocks for the new process's Python start-up (~30-60 ms): from a worker, off its loop."""
    proc = subprocess.Popen([sys.executable, "-m", "app.serve.keeper", str(serve)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            env={**os.environ, "TABLETALK_DATA": str(data)})
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the supervisor's pid (0: another holds the lock), from the process it forked
    proc.stdout.close()
    proc.wait()
    try:
        return int(line)
    except ValueError:
        raise RuntimeError("the built-in model's supervisor did not start") from None


def stop(pid: int) -> None:
    """End the supervisor: it stops the model server first, then exits (waited for)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_SECONDS
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def stop_ours(data: Path) -> None:
    """serve is ending: the supervisor that works for it, if one runs, ends (and its server)."""
    pid, serve = running(data)
    if pid > 0 and serve == os.getpid():
        stop(pid)


async def watch(data: Path, store, feed) -> None:
    """A worker's part: when the row comes to ask for a supervisor (or one that ran is gone
    while it still asks), start one for serve. It looks when the feed saw a change (the row
    is read at most once a second) and every LOOK_SECONDS; only in a worker of `tabletalk
    serve` (SERVE_PID), and never once that serve is gone (its workers may outlive a kill)."""
    serve = int(os.environ.get(SERVE_PID) or 0)
    if not serve:
        return
    looked_rev, looked_at, checked = -1, 0.0, 0.0
    while True:
        await asyncio.wait([feed.next_change()], timeout=LOOK_SECONDS)
        gap = 1.0 - (time.monotonic() - looked_at)
        if gap > 0:
            await asyncio.sleep(gap)
        if os.getppid() != serve:
            return
        looked_at = time.monotonic()
        try:
            row = store.builtin()
            if not asks(row) or (row.rev == looked_rev and looked_at - checked < LOOK_SECONDS):
                continue
            looked_rev, checked = row.rev, looked_at
            if running(data)[0] == 0:
                pid = await asyncio.to_thread(start, data, serve)
                if pid:
                    log.info("started the built-in model's supervisor (process %s): the model is %s", pid, row.state)
        except Exception as e:  # a bug here must not end the worker's other work
            if not unavailable(e):  # (the database unreachable: the runner's scan says it; looked at again)
                log.exception("starting the built-in model's supervisor failed")


def _hold_lock(data: Path) -> int | None:
    """The lock, taken for this process (its fd, kept open until it exits), or None when
    another supervisor holds it."""
    path = lock_path(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def main() -> None:
    serve = int(sys.argv[1])
    if os.fork():  # the first process ends: this one is not a child of serve (or of a worker)
        os._exit(0)
    data = Path(os.environ["TABLETALK_DATA"])
    fd = _hold_lock(data)
    if fd is None:
        print(0, flush=True)  # one runs already
        return
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {serve}\n".encode(), 0)
    print(os.getpid(), flush=True)
    os.dup2(2, 1)  # the starter reads one line; what it logs goes where serve's log goes

    run(serve)


if __name__ == "__main__":
    main()
