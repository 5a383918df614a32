"""What a page's store calls cost on each engine, and how long they hold the event loop.

    .venv/bin/python benchmarks/store_calls.py [--messages M] [--pages P] [--rtt MS,MS]

The app runs in this process (litestar's TestClient, its worker included: runner, feed) on
SQLite, on a throwaway PostgreSQL cluster (tests/pg.py) reached directly, and on the same
cluster through a TCP proxy that holds every chunk for half of each RTT each way (a
database on another machine: 0.5 ms is a LAN, 2 ms another zone). For a conversation of M
messages with answers it GETs the conversation's page, the list and the search page P times
each and reports per page: the round trips to PostgreSQL (counted at the proxy), the time the handler took (which is time
the event loop was held: the handlers are async and call the store synchronously), and
the same for the runner's one write a beat (grow_items of 50 answers).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _shared import Table, pct  # noqa: E402  (beside this script)

from app.store import schema


class DelayProxy:
    """127.0.0.1:port -> target, each chunk forwarded `delay` seconds after it arrived."""

    def __init__(self, target_port: int, delay: float):
        self.target, self.delay = target_port, delay
        self.sent = 0  # chunks from the app to the server: its round trips (each waits for an answer)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.sock.accept()
            server = socket.create_connection(("127.0.0.1", self.target))
            for a, b, up in ((client, server, True), (server, client, False)):
                a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                threading.Thread(target=self._pipe, args=(a, b, up), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                self.sent += up
                if self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def measure(label: str, database: str, args, table: Table, proxy: DelayProxy | None = None) -> None:
    """Each page's time (and, through a proxy, its round trips: every statement, BEGIN,
    COMMIT, the write lock and NOTIFY of a write, whichever process part sends them)."""
    from litestar.testing import TestClient

    from app import config as configuration
    from app.store import Store
    from app.store import db as dbm
    from app.tables import item
    from app.web.app import create_app
    from tests.conftest import COOKIE, signed_in

    with tempfile.TemporaryDirectory(prefix="tabletalk-calls-") as tmp:
        os.environ["TABLETALK_DATA"] = tmp
        os.environ.pop("DATABASE_URL", None)
        if database:
            os.environ["DATABASE_URL"] = database
        os.environ["AI_URL"] = "http://127.0.0.1:9/v1"  # nothing listens: no model is asked
        config = configuration.load()
        db = dbm.connect(config.database)
        schema.migrate(db)
        db.conn.close()
        token = signed_in(Path(tmp))
        with TestClient(create_app(config)) as client:
            client.cookies.set(COOKIE, token)
            worker = client.app.state.tabletalk
            store: Store = worker.store
            person = store.owner()
            chat = store.new_conversation(store.default_agent(person).id, person=person).id
            with store.write():
                for k in range(args.messages):
                    user = store.add(item("user", chat, f"question {k} about the fox", done=True))
                    store.add(item("text", chat, f"Answer {k}: the quick brown fox " * 20, turn=user.id, done=True))
            answers = [store.add(item("text", chat, "", turn=user.id)).id for _ in range(50)]
            for path in (f"/c/{chat}", "/", "/search?q=fox"):
                assert client.get(path).status_code == 200
                counts, times = [], []
                for _ in range(args.pages):
                    n0, t0 = proxy.sent if proxy else 0, time.perf_counter()
                    r = client.get(path)
                    times.append(time.perf_counter() - t0)
                    counts.append((proxy.sent if proxy else 0) - n0)
                    assert r.status_code == 200, r.status_code
                table.add(f"{label}: GET {path.split('?')[0]}", trips(counts, proxy) +
                          f"p50 {pct(times, 50) * 1000:.1f} ms, p99 {pct(times, 99) * 1000:.1f} ms")
            times, counts = [], []
            for k in range(args.pages):
                n0, t0 = proxy.sent if proxy else 0, time.perf_counter()
                store.grow_items({a: {"text": f"word {k} " * 5} for a in answers})
                times.append(time.perf_counter() - t0)
                counts.append((proxy.sent if proxy else 0) - n0)
            table.add(f"{label}: the runner's write a beat (50 answers)", trips(counts, proxy) +
                      f"p50 {pct(times, 50) * 1000:.1f} ms, p99 {pct(times, 99) * 1000:.1f} ms")


def trips(counts: list[int], proxy: DelayProxy | None) -> str:
    """Round trips of the request (the worker's runner and feed send theirs too meanwhile:
    the median says the request's own)."""
    return f"{pct(counts, 50)} round trips, " if proxy else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=50, help="messages (each with an answer) in the conversation")
    p.add_argument("--pages", type=int, default=30, help="requests of each page")
    p.add_argument("--rtt", default="0,0.5,2", help="round trips (ms, commas) added by the proxy (default %(default)s)")
    args = p.parse_args(argv)
    from tests.pg import Cluster

    table = Table(echo=True)
    cluster = Cluster(durable=True).start()
    try:
        measure("SQLite", "", args, table)
        measure("PostgreSQL, same machine", cluster.database(), args, table)
        for rtt in [float(x) for x in args.rtt.split(",") if x.strip()]:
            proxy = DelayProxy(cluster.port, rtt / 2000)
            url = cluster.database().replace(f":{cluster.port}/", f":{proxy.port}/")
            measure(f"PostgreSQL, +{rtt:g} ms a round trip", url, args, table, proxy)
    finally:
        cluster.stop()
    print()
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
