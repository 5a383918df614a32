"""What benchmarks/runs.py runs and watches: `tabletalk serve` processes, their CPU, the
database they share (SQLite's file, or PostgreSQL: one given, or a throwaway cluster), and
a watcher process noting when each answer's committed text reached each length.

Not a benchmark itself (`make bench` skips files starting with "_")."""
from __future__ import annotations

import bisect
import http.client
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _shared import free_port  # noqa: E402  (beside this script)

POLL_SECONDS = 0.01
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the database ---------------------------------------------------------------------

class Engine:
    """Where a phase keeps its rows: SQLite's file in the (one) server's data folder, the
    PostgreSQL database given (`url`), or a fresh database per phase of a throwaway cluster
    started here (`cluster`, tests/pg.py's, durable: fsync on, synchronous_commit off, as
    SQLite's WAL with synchronous=NORMAL)."""

    def __init__(self, url: str = "", cluster=None):
        self.url, self.cluster = url, cluster

    @property
    def postgres(self) -> bool:
        return bool(self.url or self.cluster)

    def name(self) -> str:
        if self.cluster is not None:
            return "PostgreSQL (throwaway cluster)"
        return "PostgreSQL (--database)" if self.url else "SQLite"

    def target(self, data: Path) -> Path | str:
        """What a phase's servers and readers open (a fresh database of the cluster's)."""
        if self.cluster is not None:
            return self.cluster.database()
        return self.url or data / "tabletalk.db"

    def server_pids(self) -> list[int]:
        """PostgreSQL's server processes (the cluster's postmaster), when they are ours."""
        if self.cluster is None:
            return []
        return [int((self.cluster.data / "postmaster.pid").read_text().split()[0])]


def read_only(target: Path | str):
    """A reader's connection: `execute(sql, params)` with `?` on either engine."""
    if isinstance(target, str):
        from app.store import db as dbm

        return dbm.connect(target)
    return sqlite3.connect(f"file:{target}?mode=ro", uri=True, isolation_level=None)


# --- the servers ----------------------------------------------------------------------

class Served:
    """`tabletalk serve --workers 1` as a process group of its own (as tests/conftest.py)."""

    def __init__(self, data: Path, ai_url: str, model: str, database: Path | str, lease: float):
        self.data = data
        self.env = {**os.environ, "TABLETALK_DATA": str(data), "AI_URL": ai_url, "AI_KEY": "", "AI_MODEL": model,
                    "TABLETALK_LEASE_SECONDS": f"{lease:g}"}
        self.env.pop("DATABASE_URL", None)
        if isinstance(database, str):
            self.env["DATABASE_URL"] = database
        self.port = free_port()
        self.log = data.parent / f"serve-{data.name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.admin.cli", "serve", "--port", str(self.port), "--workers", "1"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def healthy(self) -> bool:
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            c.request("GET", "/healthz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 60) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tabletalk serve exited:\n{self.log.read_text()[-3000:]}")
            if self.healthy():
                return time.monotonic()
            time.sleep(0.01)
        raise RuntimeError(f"tabletalk serve did not come up:\n{self.log.read_text()[-3000:]}")

    def pids(self) -> set[int]:
        return set(tree_cpu(self.proc.pid)) if self.proc and self.proc.poll() is None else set()

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


def tree_cpu(*roots: int) -> dict[int, float]:
    """CPU seconds (user + system) of each root and every process below them, by pid."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # fields[0] is field 3 (state)
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    members, frontier = set(roots), list(roots)
    while frontier:
        p = frontier.pop()
        for child, pp in parent.items():
            if pp == p and child not in members:
                members.add(child)
                frontier.append(child)
    return {p: cpu[p] for p in members if p in cpu}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two readings (a process that ended in between counts what it had)."""
    return sum(v - before.get(p, 0.0) for p, v in after.items())


# --- the watcher of committed text (its own process) ----------------------------------

# The length of a text item's text as committed, on either engine: while it grows past one
# chunk its `text` is empty and the text is in `text_chunks` rows (docs/architecture.md,
# "Writes and revs").
TEXT_LENGTH = "(length(text) + coalesce((SELECT sum(length(c.text)) FROM text_chunks c WHERE c.item = items.id), 0))"


def watch_lengths(target: Path | str, thresholds: list[int], ready, stop, out) -> None:
    """For each text item: when its committed length first reached each threshold."""
    db = read_only(target)
    seen: dict[int, tuple[int, list[float]]] = {}  # item id -> (chat, times)
    last = 0
    ready.set()
    while not stop.is_set():
        t = time.monotonic()  # what a poll sees was committed before its snapshot, so before ~t
        rows = db.execute(
            f"SELECT id, chat, {TEXT_LENGTH}, rev FROM items WHERE rev > ? AND kind = 'text'", (last,)
        ).fetchall()
        for item_id, chat, length, rev in rows:
            last = max(last, rev)
            entry = seen.get(item_id)
            if entry is None:
                entry = seen[item_id] = (chat, [])
            reached = entry[1]
            upto = bisect.bisect_right(thresholds, length)
            while len(reached) < upto:
                reached.append(t)
        time.sleep(max(0.0, POLL_SECONDS - (time.monotonic() - t)))
    out.send(seen)
    out.close()


class Watcher:
    def __init__(self, target: Path | str, thresholds: list[int]):
        ctx = mp.get_context("spawn")  # not fork: this process has the fake's thread running
        self.ready, self.stop_event = ctx.Event(), ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=watch_lengths, args=(target, thresholds, self.ready, self.stop_event, send),
                                daemon=True)
        self.proc.start()
        send.close()
        if not self.ready.wait(60):
            raise RuntimeError("the watcher process did not start")

    def stop(self) -> dict[int, tuple[int, list[float]]]:
        self.stop_event.set()
        seen = self.recv.recv()
        self.proc.join(10)
        return seen

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
