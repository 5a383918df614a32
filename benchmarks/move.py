"""How long `tabletalk move-to` takes: a SQLite install of N items (default 100,000: 1,000
conversations of 100 items, a question and its answer of a few hundred characters each, some
calls with output) and F files (default 100 of 200 KB each, 20 MB) moved into an empty database of a throwaway PostgreSQL cluster
(tests/pg.py: durability off, as in the tests).

    .venv/bin/python benchmarks/move.py [--items 100000] [--files 100]

Prints move-to's own lines, then the wall time of the whole command (the snapshot, the
migrations, the copy, the check and ANALYZE).
"""
from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.store import schema

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = ("the quay harbour lighthouse bakery mill tide river bridge market square lantern north south "
         "morning evening ferry rope anchor gull salt bread coffee table chair window door street").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def build(data: Path, items: int, files: int = 0) -> None:
    from app.store import Store
    from app.store import db as dbm

    data.mkdir(parents=True, exist_ok=True)
    db = dbm.connect(data / "tabletalk.db")
    schema.migrate(db)
    store = Store(db)
    owner = store.add_person("owner", "x" * 20, owner=True)
    agent = store.default_agent(owner)
    rng = random.Random(7)
    chats, per = max(1, items // 100), 100
    t = time.time() - 86400
    with dbm.write(db):
        rev = dbm.current_rev(db)
        item_id = 0
        for c in range(1, chats + 1):
            rev += 1
            db.conn.execute("INSERT INTO conversations (id, agent, title, created, updated, rev, person, active) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [c, agent.id, sentence(rng, 5), t, t, rev, owner, int(t * 1000)])
            rows = []
            for k in range(per):
                item_id += 1
                rev += 1
                if k % 2 == 0:
                    turn = item_id
                    rows.append((item_id, c, turn, "user", sentence(rng, 30), "", "", "", 1, t, t, rev))
                elif k % 10 == 5:
                    rows.append((item_id, c, turn, "call", "", "fetch_page", '{"url": "https://example.org"}',
                                 sentence(rng, 200), 1, t, t, rev))
                else:
                    rows.append((item_id, c, turn, "text", sentence(rng, 80), "", "", "", 1, t, t, rev))
            db.conn.executemany(
                "INSERT INTO items (id, chat, turn, kind, text, name, input, output, done, created, updated, rev) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        db.conn.execute("UPDATE revs SET rev = ? WHERE id = 1", [rev])
    for n in range(files):  # attachments, each its own bytes (random: nothing compresses them)
        store.add_file(f"scan-{n}.bin", rng.randbytes(200 * 1024), person=owner)
    db.conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=100)
    args = parser.parse_args()
    from tests.pg import Cluster

    cluster = Cluster().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "data"
            started = time.monotonic()
            build(data, args.items, args.files)
            size = (data / "tabletalk.db").stat().st_size
            print(f"built {args.items:,} items ({size / 1e6:.0f} MB) and {args.files} files in {time.monotonic() - started:.1f} s", flush=True)
            url = cluster.database()
            env = {**os.environ, "TABLETALK_DATA": str(data)}
            env.pop("DATABASE_URL", None)
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "app.admin.cli", "move-to", url], cwd=ROOT, env=env, check=True)
            print(f"\nmove-to of {args.items:,} items and {args.files} files: {time.monotonic() - started:.1f} s wall, "
                  "the command whole")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
