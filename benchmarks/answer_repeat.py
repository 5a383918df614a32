"""The same unfollowed answer N times in one server, its CPU to the nanosecond: for A/B runs.

    .venv/bin/python benchmarks/answer_repeat.py [--answers N] [--rate CPS] [--followers F]

answer_cost.py's answer (tests/fixtures/long_answer.md, 2,124 chunks at 200 a second from the
scripted OpenAI-compatible server) asked N times (5) in one `tabletalk serve --workers 1`
after one warm answer that is not counted, so a figure is not one server start's luck. CPU is
the serve process tree's from /proc/<pid>/task/<tid>/schedstat (nanoseconds on a CPU, every
thread), not /proc's 10 ms ticks. Prints each answer's CPU, the median and the 1-minute load.
To compare two versions, run each from its own checkout (`git archive REV | tar -x -C DIR`;
the server runs the app of the checkout the script is in), alternately: A B A B.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import answer_cost as ac  # noqa: E402

fb = ac.fb


def ns_cpu(pid: int) -> float:
    """CPU seconds of every live thread of `pid`, from schedstat."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            pass
    return total / 1e9


async def run(args) -> int:
    fb.raise_nofile()
    fb.cpu_seconds = ns_cpu  # answer_cost.tree_cpu sums it over the serve process tree
    fake = ac.RecordingServer(models={fb.MODEL: 32768}).start()
    answer = ac.FIXTURE.read_text()
    cpus = []
    load = fb.loadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="answer-repeat-") as tmp:
            served = fb.Served(Path(tmp) / "data", fake.url).start()
            try:
                await ac.one_answer(served, fake, answer, args.followers, args.rate)  # warm: not counted
                for _ in range(args.answers):
                    got = await ac.one_answer(served, fake, answer, args.followers, args.rate)
                    cpus.append(got["cpu"])
            finally:
                served.stop()
    finally:
        fake.stop()
    print(f"{ac.ROOT} load {load} -> {fb.loadavg()}: server CPU s "
          + " ".join(f"{c:.3f}" for c in cpus) + f", median {statistics.median(cpus):.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--answers", type=int, default=5, help="answers measured (after one warm answer)")
    p.add_argument("--rate", type=float, default=200.0, help="chunks a second")
    p.add_argument("--followers", type=int, default=0, help="clients following the conversation")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
