"""What the benchmark scripts share: a free port, percentiles, CPU, the printed table, and a
followed conversation in-process.

Not a benchmark itself (`make bench` skips files starting with "_")."""
from __future__ import annotations

import resource
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.store import schema

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextmanager
def followed_conversation(prefix: str) -> Iterator[tuple]:
    """(feed, store, chat): a temporary migrated SQLite database, the worker's `Feed` on it with
    the pages' renderers (`live.chat_changes`, `sidebar.list_changes`), a Store whose commits
    wake it, and one conversation; both connections closed afterwards (in-process benchmarks)."""
    from app.feed.dispatch import Feed
    from app.store import Store
    from app.store import db as dbm
    from app.web import live, sidebar

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        path = Path(tmp) / "tabletalk.db"
        db = dbm.connect(path)
        schema.migrate(db)
        feed = Feed(path, render=live.chat_changes, render_list=sidebar.list_changes)
        store = Store(db, notify=feed.notify)
        try:
            yield feed, store, store.new_conversation(None, title="A title").id
        finally:
            feed.db.conn.close()
            db.conn.close()


class Growing:
    """An answer's text written as the runner writes it (app/run/writes.py): a beat's write
    rewrites its last chunk and adds the new ones, the last one sets it whole with `done`."""

    def __init__(self, store, item_id: int):
        from app.agent import Pieces
        from app.run.writes import Writes

        self.store, self.item_id, self.writes, self.pieces = store, item_id, Writes(store), Pieces()

    def add(self, piece: str, done: bool = False) -> None:
        so_far = self.pieces.add(piece)
        if done:
            self.store.update(self.item_id, text=str(so_far), done=True)
        else:
            self.writes.pending[self.item_id] = {"text": so_far}
            self.writes.flush()


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass
class Table:
    """Rows of (metric, value, goal), printed aligned at the end; with `echo`, each row also
    goes to stderr as it is measured (a long run shows its progress)."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)
    echo: bool = False

    def add(self, metric: str, value: str, goal: str = "") -> None:
        self.rows.append((metric, value, goal or "-"))
        if self.echo:
            print(f"  .. {metric}: {value}", file=sys.stderr, flush=True)

    def print(self) -> None:
        head = ("metric", "value", "goal")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(3)]
        line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        print(line(head))
        print("-+-".join("-" * w for w in widths))
        for r in self.rows:
            print(line(r))
