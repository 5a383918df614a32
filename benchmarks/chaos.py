"""Chaos, longer than the suite's: the figures of a run of kills, pauses and database restarts.

    .venv/bin/python benchmarks/chaos.py                       # 40 conversations, 12 kills, 2 workers
    .venv/bin/python benchmarks/chaos.py --rounds 20 --per-round 5
    .venv/bin/python benchmarks/chaos.py --events kill,pause   # kills and pauses past the lease, in turn
    .venv/bin/python benchmarks/chaos.py --postgres           # on a throwaway PostgreSQL cluster
    .venv/bin/python benchmarks/chaos.py --postgres --servers 2 --workers 1 --events kill,pause,restart --rounds 45

`tabletalk serve --workers 2` (a real process group, a temporary data folder), or `--servers`
of them on one PostgreSQL database, answers conversations that each call an MCP plugin's
`echo` (every third waits for the person's approval, given 1.5 s later) and then stream a
long answer, all from the fakes in tests/fakes. Each round asks `--per-round` new
conversations, lets the servers work for `--gap` seconds (half to all of it) and then brings
the round's event, the kinds of `--events` in turn, at a moment when a call is being made,
an answer is streaming or a call waits for approval:

- kill: kill -9 one worker (granian starts it again; its runs resume when their leases
  expire) or a whole server (started again at once), in turn;
- pause: SIGSTOP one worker, or a whole server's process group, for `--pause` seconds (past
  the lease: `--lease`, TABLETALK_LEASE_SECONDS), then SIGCONT: others take its conversations
  and it must write nothing more of them;
- restart (--postgres): PostgreSQL stopped (`pg_ctl stop -m fast`, then `-m immediate`: a
  crash) for `--down` seconds and started again; every third time a server is killed and
  started while the database is down (it must wait for it, then serve).

See tests/chaos.py for what is checked.
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

GOALS = {"calls_repeated": "0", "rows_lost": "0", "repeated": "0", "cut_and_done": "0", "answered_early": "0",
         "stuck_calls": "0", "pending": "0", "left_undone": "0", "tracebacks": "0"}
KINDS = ("kill", "pause", "restart")


def event(chaos: Chaos, kind: str, nth: int, during: str, args) -> str:
    """The `nth` event of its kind; what it was, in a few words."""
    if kind == "kill":
        if args.workers > 1 and nth % 2 == 0:
            chaos.kill_worker(during)
            return "kill -9 a worker"
        chaos.kill_server(during)
        return "kill -9 a server"
    if kind == "pause":
        whole = args.workers == 1 or nth % 2 == 1
        chaos.pause(during, seconds=args.pause, whole=whole)
        return f"pause a {'server' if whole else 'worker'} {args.pause:.0f} s"
    if nth % 3 == 2:
        chaos.start_during_outage(down=args.down, mode="fast")
        return f"a server started during a {args.down:.0f} s outage"
    mode = "fast" if nth % 3 == 0 else "immediate"
    chaos.restart_database(during, mode=mode, down=args.down)
    return f"PostgreSQL stopped -m {mode} for {args.down:.0f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--first", type=int, default=10, help="conversations asked before the first event")
    parser.add_argument("--rounds", type=int, default=12, help="events (one a round)")
    parser.add_argument("--per-round", type=int, default=3, help="conversations asked each round")
    parser.add_argument("--workers", type=int, default=2, help="workers of each server")
    parser.add_argument("--servers", type=int, default=1, help="servers on one database (more than one: --postgres)")
    parser.add_argument("--events", default="kill", help=f"the kinds of event, in turn: of {', '.join(KINDS)}")
    parser.add_argument("--lease", type=float, default=3, help="TABLETALK_LEASE_SECONDS when pausing (else 10)")
    parser.add_argument("--pause", type=float, default=0, help="seconds a pause lasts (default: the lease + 5)")
    parser.add_argument("--down", type=float, default=3, help="seconds the database is down at a restart")
    parser.add_argument("--rate", type=float, default=60, help="tokens a second per answer")
    parser.add_argument("--gap", type=float, default=4, help="seconds of work between events (half to all of it)")
    parser.add_argument("--postgres", action="store_true",
                        help="the rows in a throwaway PostgreSQL cluster started here (tests/pg.py), not SQLite's file")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.events.split(",") if k.strip()]
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--events takes {', '.join(KINDS)}, not {args.events!r}")
    if ("restart" in kinds or args.servers > 1) and not args.postgres:
        parser.error("restarts and several servers need --postgres")
    lease = args.lease if "pause" in kinds else None
    args.pause = args.pause or (lease or 10) + 5
    phases = ["call", "text", "approval"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tabletalk-chaos-") as tmp, contextlib.ExitStack() as stack:
        url = cluster = None
        if args.postgres:
            from tests.pg import Cluster

            # crash-safe: what was committed outlives `pg_ctl stop -m immediate`
            cluster = Cluster(durable=True, crash_safe=True).start()
            stack.callback(cluster.stop)
            url = cluster.database()
        with Chaos(Path(tmp), conversations=args.first, workers=args.workers, tokens_per_second=args.rate,
                   database_url=url, servers=args.servers, lease_seconds=lease, cluster=cluster) as chaos:
            for i in range(args.rounds):
                chaos.ask(args.per_round)
                time.sleep(chaos.random.uniform(args.gap / 2, args.gap))
                during = phases[i % len(phases)]
                kind = kinds[i % len(kinds)]
                what = event(chaos, kind, i // len(kinds), during, args)
                print(f"  .. event {i + 1} of {args.rounds}: {what}, during {during}", file=sys.stderr, flush=True)
            chaos.wait(timeout=300)
            chaos.quiet()
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
