"""How soon a connection added in the browser is usable, here and on every other worker and
server (issue 32's bounds: its models seen <= 1 s after the server answers; a change on
another worker or server <= 1 s).

    .venv/bin/python benchmarks/connections.py [--rounds 10] [--models 12] [--no-postgres]

Real `tabletalk serve` processes: one with two workers on SQLite, and two servers on one
PostgreSQL database (a throwaway cluster, tests/pg.py). A scripted OpenAI-compatible server on
loopback lists M models. Each round the owner's form adds a connection to it (POST
/settings/connections, which tests it: lists its models), then asks /models for the list a
person's picker shows until the new connection's models are in it: on the same server (two
workers: either may answer) and on the other server. A round removes its connection after.
Times: the add's whole response, the model list's request to the scripted server within it
(what the server took, which is not ours), and from the add's response to the first list
showing the models, on each side.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _shared import Table, pct  # noqa: E402  (beside this script)

from tests.conftest import Served, csrf  # noqa: E402
from tests.fakes.openai_server import FakeModelServer  # noqa: E402

GOAL_MS = 1000


def listed(client, name: str) -> bool:
    return any(g["title"] == name and g["models"] for g in client.get("/models").json()["groups"])


def seen_after(client, name: str, timeout: float = 10) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if listed(client, name):
            return time.perf_counter() - started
    raise SystemExit(f"{name} was not listed within {timeout} s")


def rounds(label: str, here: Served, there: Served, fake: FakeModelServer, args, table: Table) -> None:
    add_ms, here_ms, there_ms = [], [], []
    with here.client(timeout=30) as a, there.client(timeout=30) as b:
        for n in range(args.rounds):
            name = f"Team {n}"
            token = csrf(a, "/settings/connections")
            started = time.perf_counter()
            r = a.post("/settings/connections", data={"_csrf_token": token, "name": name, "kind": "openai",
                                                      "url": fake.url, "key": ""})
            add_ms.append((time.perf_counter() - started) * 1000)
            assert r.status_code == 303, r.text[:300]
            here_ms.append(seen_after(a, name) * 1000)
            there_ms.append(seen_after(b, name) * 1000)
            with here.store() as store:
                store.delete_connection(store.connection_named(name).id)
    goal = f"<= {GOAL_MS} ms"
    table.add(f"{label}: add + Test, ms p50 / max", f"{pct(add_ms, 50):.0f} / {max(add_ms):.0f}", goal)
    table.add(f"{label}: listed on {here.name} after the add, ms p50 / max",
              f"{pct(here_ms, 50):.1f} / {max(here_ms):.1f}", goal)
    if there is not here:
        table.add(f"{label}: listed on {there.name} after the add, ms p50 / max",
                  f"{pct(there_ms, 50):.1f} / {max(there_ms):.1f}", goal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--models", type=int, default=12)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    table = Table()
    models = {f"model-{k:02d}": 8192 for k in range(args.models)}
    with FakeModelServer(models=models) as fake, tempfile.TemporaryDirectory(prefix="tabletalk-conn-") as tmp:
        env = {"AI_URL": "", "AI_KEY": "", "AI_MODEL": ""}
        data = Path(tmp) / "sqlite"
        served = Served(data, env | {"TABLETALK_DATA": str(data)}, workers=2).start()
        try:
            served.name = "either worker"
            rounds("SQLite, 2 workers", served, served, fake, args, table)
        finally:
            served.stop()
        if not args.no_postgres:
            from tests.pg import Cluster

            cluster = Cluster().start()
            try:
                url = cluster.database()
                a_data, b_data = Path(tmp) / "a", Path(tmp) / "b"
                a = Served(a_data, env | {"TABLETALK_DATA": str(a_data), "DATABASE_URL": url}).start()
                b = Served(b_data, env | {"TABLETALK_DATA": str(b_data), "DATABASE_URL": url}).start()
                try:
                    a.name, b.name = "server A", "server B"
                    rounds("PostgreSQL, 2 servers", a, b, fake, args, table)
                finally:
                    a.stop()
                    b.stop()
            finally:
                cluster.stop()
    table.print()
    print("\nThe add's time includes its Test: the scripted server's model list, answered at once.")


if __name__ == "__main__":
    main()
