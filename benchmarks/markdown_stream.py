"""Bytes a follower receives while a Markdown answer streams, and keyed()'s speed.

    .venv/bin/python benchmarks/markdown_stream.py [--steps 4,10,40] [--seed 1] [--reveal N]

The answer is tests/fixtures/long_answer.md (~8,400 characters, ~2,000 tokens: headings,
paragraphs with bold, italic, inline code and links, a nested bullet list, a numbered
list, a table, four fenced code blocks in four languages, a blockquote, a reference
link). It streams as a model sends it: tokens of 3-5 characters; the runner writes every
50 ms, so between two renders the text grows by ~step characters (step 10 = 2.5 tokens
per flush = 50 tokens/s). Each flush renders the text growing, through one `Rendering` (as
the feed renders an answer it follows), and counts what the feed (app/web/live.py) would
send a follower for it:

- a new block: its html;
- an unchanged block: nothing;
- a changed block that `append_at(old, new)` accepts: the inserted html + 60 bytes
  (the `<hx-partial hx-target=... hx-swap="beforeend">` wrapper);
- any other changed block: its whole html + 40 bytes (`hx-swap-oob="true"`);
- a block that is gone: 50 bytes (`<div id=... hx-swap-oob="delete"></div>`).

The answer ends with one more render, growing=False (the final HTML),
counted the same way. The ratio is bytes sent / the final HTML's bytes; the goal is
<= 1.5 at step 10. keyed() time is per growing call (mean, p99: the calls between two
grid points get the first one's render from a cache) and per call that rendered
("render ms": the mean over the calls at a new grid point). "lag" is how many
characters of visible text a growing render shows fewer than the final render of the
same prefix (the reveal grid plus what waits at the edge), mean and p95 over the renders.

For comparison, the same streams rendered with growing=False throughout (the behaviour
before `growing`), and with growing=True but no reveal grid (`Pace(reveal=1)`: each
flush shows all it can, so a follower gets an update per flush). `--reveal N` renders at
`Pace(reveal=N)` (the grid: characters a growing render moves on by).
"""
from __future__ import annotations

import argparse
import html as html_lib
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.markdown import PACE, Pace, Rendering, append_at, counting, keyed, render  # noqa: E402

ANSWER_PATH = ROOT / "tests" / "fixtures" / "long_answer.md"
KEY = "i-42"
APPEND_OVERHEAD = 60
REPLACE_OVERHEAD = 40
DELETE_BYTES = 50
GOAL = 1.5


def load_answer() -> str:
    return ANSWER_PATH.read_text(encoding="utf-8")


def flushes(text: str, step: float, seed: int = 1) -> list[str]:
    """The text as the runner writes it: tokens of 3-5 characters, `step / 4` tokens a
    50 ms flush on average (fractional rates accumulate), the last flush the whole text."""
    rnd = random.Random(seed)
    cuts, pos = [], 0
    while pos < len(text):
        pos = min(len(text), pos + rnd.randint(3, 5))
        cuts.append(pos)
    out, owed, i = [], 0.0, 0
    per_flush = step / 4.0
    while i < len(cuts):
        owed += per_flush
        take = int(owed)
        if take == 0:
            continue
        owed -= take
        i = min(len(cuts), i + take)
        out.append(text[: cuts[i - 1]])
    return out


@dataclass
class Feed:
    """What one follower holds of the item, and what it was sent."""

    held: dict[str, str] = field(default_factory=dict)
    sent: int = 0
    appends: int = 0
    replaces: int = 0
    new: int = 0
    gone: int = 0
    append_bytes: int = 0
    replace_bytes: int = 0

    def send(self, blocks) -> None:
        ids = set()
        for b in blocks:
            ids.add(b.id)
            old = self.held.get(b.id)
            if old is None:
                self.sent += len(b.html)
                self.new += 1
            elif old != b.html:
                found = append_at(old, b.html)
                if found is not None:
                    self.sent += len(found[1]) + APPEND_OVERHEAD
                    self.append_bytes += len(found[1]) + APPEND_OVERHEAD
                    self.appends += 1
                else:
                    self.sent += len(b.html) + REPLACE_OVERHEAD
                    self.replace_bytes += len(b.html) + REPLACE_OVERHEAD
                    self.replaces += 1
            self.held[b.id] = b.html
        for id_ in [i for i in self.held if i not in ids]:
            del self.held[id_]
            self.sent += DELETE_BYTES
            self.gone += 1


@dataclass
class Run:
    step: float
    renders: int
    final_bytes: int
    feed: Feed
    times_ms: list[float]
    render_ms: list[float]

    @property
    def ratio(self) -> float:
        return self.feed.sent / self.final_bytes


def simulate(text: str, step: float, growing: bool = True, seed: int = 1, pace: Pace = PACE) -> Run:
    feed = Feed()
    times: list[float] = []
    fresh: list[float] = []  # the calls that rendered (not the same grid point again)
    prefixes = flushes(text, step, seed)
    rendering = Rendering(KEY, pace)
    for prefix in prefixes:
        with counting() as work:
            t0 = time.perf_counter()
            blocks = rendering.blocks(prefix, growing=True) if growing else keyed(prefix, KEY)
            times.append((time.perf_counter() - t0) * 1000)
        if work.renders or not growing:
            fresh.append(times[-1])
        feed.send(blocks)
    final = rendering.blocks(text)  # the answer is done: the final render
    feed.send(final)
    assert feed.held == {b.id: b.html for b in final}
    return Run(step, len(prefixes), sum(len(b.html) for b in final), feed, times, fresh)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


_TAGS = re.compile(r"<[^>]+>")


def visible(html: str) -> int:
    return len(html_lib.unescape(_TAGS.sub("", html)))


def lags(text: str, step: float, seed: int = 1, pace: Pace = PACE) -> list[int]:
    """Characters of visible text each growing render shows fewer than the final render
    of the same prefix."""
    return [
        visible(render(p)) - visible(render(p, growing=True, pace=pace)) for p in flushes(text, step, seed)
    ]


def without_grid(text: str, step: float, seed: int) -> Run:
    return simulate(text, step, True, seed, Pace(reveal=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="4,10,40", help="characters per flush")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reveal", type=int, default=None, help="the reveal grid for this run (REVEAL_STEP)")
    args = parser.parse_args(argv)
    pace = Pace(reveal=args.reveal) if args.reveal is not None else PACE
    text = load_answer()
    steps = [float(s) for s in args.steps.split(",")]
    keyed(text, KEY)  # warm: lexers, highlight of the closed fences, inline cache
    runs = [simulate(text, step, True, args.seed, pace) for step in steps]
    olds = [simulate(text, step, False, args.seed) for step in steps]
    bares = [without_grid(text, step, args.seed) for step in steps]
    behind = [lags(text, step, args.seed, pace) for step in steps]

    print(f"answer: {len(text):,} chars ({ANSWER_PATH.relative_to(ROOT)}), "
          f"REVEAL_STEP={pace.reveal}")
    head = (f"{'step':>5} {'renders':>7} {'final B':>8} {'sent B':>8} {'ratio':>6} "
            f"{'appends':>7} {'repl':>5} {'new':>4} {'gone':>4} {'repl B':>7} "
            f"{'ms mean':>7} {'ms p99':>6} {'render ms':>9} {'lag mean':>8} {'lag p95':>7} "
            f"{'goal':>6}")
    print(head)
    print("-" * len(head))
    ok = True
    for run, lag in zip(runs, behind):
        f = run.feed
        goal = f"<= {GOAL}" if run.step == 10 else ""
        if run.step == 10 and run.ratio > GOAL:
            ok = False
        print(f"{run.step:>5g} {run.renders:>7} {run.final_bytes:>8,} {f.sent:>8,} "
              f"{run.ratio:>6.2f} {f.appends:>7} {f.replaces:>5} {f.new:>4} {f.gone:>4} "
              f"{f.replace_bytes:>7,} {statistics.mean(run.times_ms):>7.2f} "
              f"{percentile(run.times_ms, 0.99):>6.2f} {statistics.mean(run.render_ms):>9.2f} "
              f"{statistics.mean(lag):>8.1f} "
              f"{percentile(lag, 0.95):>7} {goal:>6}")
    print()
    head = (f"{'step':>5} {'growing=False: ratio':>21} {'appends':>7} {'repl':>5}   "
            f"{'growing, no grid: ratio':>23} {'appends':>7} {'repl':>5} {'repl B':>7}")
    print(head)
    print("-" * len(head))
    for old, bare in zip(olds, bares):
        print(f"{old.step:>5g} {old.ratio:>21.2f} {old.feed.appends:>7} {old.feed.replaces:>5}   "
              f"{bare.ratio:>23.2f} {bare.feed.appends:>7} {bare.feed.replaces:>5} "
              f"{bare.feed.replace_bytes:>7,}")
    print("goal met" if ok else "GOAL MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
