"""kill -9 chaos, longer than the suite's: the figures of a run.

    .venv/bin/python benchmarks/chaos.py                       # 40 conversations, 12 kills, 2 workers
    .venv/bin/python benchmarks/chaos.py --rounds 20 --per-round 5
    .venv/bin/python benchmarks/chaos.py --postgres           # on a throwaway PostgreSQL cluster

`tabletalk serve --workers 2` (a real process group, a temporary data folder) answers
conversations that each call an MCP plugin's `echo` (every third waits for the person's
approval, given 1.5 s later) and then stream a long answer, all from the fakes in
tests/fakes. Each round asks `--per-round` new conversations, lets the server work for
`--gap` seconds (half to all of it) and then kills, in turn, one worker (granian starts it
again; its runs resume when their leases expire) or the whole server (started again at
once), at a moment when a call is being made, an answer is streaming or a call waits for
approval. See tests/chaos.py for what is checked.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._shared import Table  # noqa: E402
from tests.chaos import Chaos  # noqa: E402

GOALS = {"calls_repeated": "0", "rows_lost": "0", "stuck_calls": "0", "pending": "0", "tracebacks": "0"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--first", type=int, default=10, help="conversations asked before the first kill")
    parser.add_argument("--rounds", type=int, default=12, help="kills (one a round)")
    parser.add_argument("--per-round", type=int, default=3, help="conversations asked each round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=60, help="tokens a second per answer")
    parser.add_argument("--gap", type=float, default=4, help="seconds of work between kills (half to all of it)")
    parser.add_argument("--postgres", action="store_true",
                        help="the rows in a throwaway PostgreSQL cluster started here (tests/pg.py), not SQLite's file")
    args = parser.parse_args()
    phases = ["call", "text", "approval"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tabletalk-chaos-") as tmp, contextlib.ExitStack() as stack:
        url = None
        if args.postgres:
            from tests.pg import Cluster

            cluster = Cluster(durable=True).start()
            stack.callback(cluster.stop)
            url = cluster.database()
        with Chaos(Path(tmp), conversations=args.first, workers=args.workers, tokens_per_second=args.rate,
                   database_url=url) as chaos:
            for i in range(args.rounds):
                chaos.ask(args.per_round)
                time.sleep(chaos.random.uniform(args.gap / 2, args.gap))
                during = phases[i % len(phases)]
                if args.workers > 1 and i % 2 == 0:
                    chaos.kill_worker(during)
                else:
                    chaos.kill_server(during)
                print(f"  .. kill {i + 1} of {args.rounds} ({'worker' if i % 2 == 0 and args.workers > 1 else 'server'},"
                      f" during {during})", file=sys.stderr, flush=True)
            chaos.wait(timeout=300)
            f = chaos.outcome()
    table = Table()
    for metric, value in f.table():
        goal = GOALS.get(metric, "")
        if metric == "answered":
            goal = str(f.conversations)
        table.add(metric, value, goal)
    table.add("wall seconds", f"{time.monotonic() - started:.0f}")
    table.print()
    for p in f.problems:
        print("problem:", p)
    ok = not f.problems and all(dict(f.table())[k] == v for k, v in GOALS.items()) and f.answered == f.conversations
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
