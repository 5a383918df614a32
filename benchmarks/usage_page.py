"""How long the Usage page takes for 50 people x 90 days (issue 32's bound: 200 ms).

    .venv/bin/python benchmarks/usage_page.py [--people 50] [--days 90] [--models 3] [--pages 30] [--no-postgres]

The app runs in this process (litestar's TestClient, its worker included) on SQLite and on a
throwaway PostgreSQL cluster (tests/pg.py). The usage rows are written as the runner writes
them (Store.add_usage, one a request: two requests a person, model and day), then the owner's
Usage page over the whole range, its default (the last 30 days) and the account page are
asked for P times each: the time of each whole response (handler, store, template, sidebar),
and the CPU this process spent on it (the worker's own tasks included), which a loaded
machine's other work does not lengthen.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _shared import Table, pct  # noqa: E402  (beside this script)

from app.store import schema

GOAL_MS = 200


def measure(label: str, database: str, args, table: Table) -> None:
    from litestar.testing import TestClient

    from app import config as configuration
    from app.accounts import usage as usage_rules
    from app.store import Store
    from app.store import db as dbm
    from app.web.app import create_app
    from tests.conftest import COOKIE, signed_in

    with tempfile.TemporaryDirectory(prefix="tabletalk-usage-") as tmp:
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
        for k in range(args.people - 1):
            signed_in(Path(tmp), f"person {k:02d}", owner=False)
        with TestClient(create_app(config)) as client:
            client.cookies.set(COOKIE, token)
            store: Store = client.app.state.tabletalk.store
            today = usage_rules.today()
            days = [usage_rules.days_before(today, d) for d in range(args.days)]
            t0 = time.perf_counter()
            with store.write():
                for person in [p.id for p in store.people()]:
                    for d, day in enumerate(days):
                        for m in range(args.models):
                            for _ in range(2):
                                store.add_usage(person, f"model-{m}", day, 1_000 + 37 * d + person, 200 + m,
                                                estimated=(d + m) % 7 == 0)
            rows = store._one("SELECT count(*) FROM usage_days")[0]
            table.add(f"{label}: usage rows written", f"{rows:,} rows in {time.perf_counter() - t0:.1f} s")
            first = days[-1]
            for name, path in ((f"Usage page, {args.days} days", f"/settings/usage?from={first}&to={today}"),
                               ("Usage page, its default 30 days", "/settings/usage"),
                               ("account page (this month)", "/account")):
                assert client.get(path).status_code == 200
                times, cpu = [], []
                for _ in range(args.pages):
                    t0, c0 = time.perf_counter(), time.process_time()
                    r = client.get(path)
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                    assert r.status_code == 200, r.status_code
                table.add(f"{label}: {name}", f"p50 {pct(times, 50) * 1000:.1f} ms, p99 {pct(times, 99) * 1000:.1f} ms "
                          f"(CPU p50 {pct(cpu, 50) * 1000:.1f} ms), {len(r.content) // 1024} KB",
                          f"<= {GOAL_MS} ms" if "Usage" in name else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--people", type=int, default=50)
    p.add_argument("--days", type=int, default=90)
    p.add_argument("--models", type=int, default=3, help="models each person used each day")
    p.add_argument("--pages", type=int, default=30, help="requests of each page")
    p.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = p.parse_args(argv)
    table = Table(echo=True)
    measure("SQLite", "", args, table)
    if not args.no_postgres:
        from tests.pg import Cluster

        cluster = Cluster().start()
        try:
            measure("PostgreSQL", cluster.database(), args, table)
        finally:
            cluster.stop()
    print()
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
