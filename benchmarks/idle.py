"""What an idle server costs: its CPU and how often its worker wakes, with nothing to do.

    .venv/bin/python benchmarks/idle.py [--seconds 30] [--runs 2]

Each run starts `tabletalk serve --workers 1` on a fresh data folder (AI_URL at a closed
port: no model server to list), waits until /healthz answers and 5 s more (the start's own
work over), then for `--seconds` reads the CPU (user + system) of the serve process and all
its descendants, and the wake-ups of granian's worker (the voluntary context switches of
its threads: each is a sleep the loop woke from; the kernel counts them, so reading them
costs the worker nothing). No page is open, no conversation runs: what remains is the
worker's own timers (the feed's looks for other processes' commits, the runner's scans).
CPU from /proc comes in 10 ms ticks.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serving import Served, tree_cpu, cpu_delta  # noqa: E402
from _shared import Table, free_port  # noqa: E402


def wakes(pid: int) -> int:
    """Voluntary context switches of every thread of `pid`."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def worker_of(served: Served) -> int:
    """granian's worker: the serve process's child that runs the app (the one that wakes)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = [p for p in tree_cpu(served.proc.pid) if p != served.proc.pid]
        if children:
            return max(children, key=lambda p: wakes(p))
        time.sleep(0.1)
    raise RuntimeError("no worker process under serve")


def one(seconds: float) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        served = Served(data, f"http://127.0.0.1:{free_port()}/v1", "", data / "tabletalk.db", 10.0)
        served.start()
        try:
            served.wait_healthy()
            time.sleep(5)
            worker = worker_of(served)
            cpu0, wake0, t0 = tree_cpu(served.proc.pid), wakes(worker), time.monotonic()
            time.sleep(seconds)
            cpu1, wake1, t1 = tree_cpu(served.proc.pid), wakes(worker), time.monotonic()
        finally:
            served.stop()
    return cpu_delta(cpu0, cpu1) / (t1 - t0), (wake1 - wake0) / (t1 - t0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=30.0, help="how long each run is measured")
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args(argv)
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), file=sys.stderr)
    table = Table(echo=True)
    for n in range(args.runs):
        cpu, woke = one(args.seconds)
        table.add(f"run {n + 1}: idle server CPU a second (serve + worker)", f"{cpu * 1000:.1f} ms")
        table.add(f"run {n + 1}: worker wake-ups a second", f"{woke:.1f}")
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
