"""Bytes a follower receives while a Markdown answer streams, and keyed()'s speed.

    .venv/bin/python benchmarks/markdown_stream.py [--steps 4,10,40] [--seed 1]

The answer is tests/fixtures/long_answer.md (~8,400 characters, ~2,000 tokens: headings,
paragraphs with bold, italic, inline code and links, a nested bullet list, a numbered
list, a table, four fenced code blocks in four languages, a blockquote, a reference
link). It streams as a model sends it: tokens of 3-5 characters; the runner writes every
50 ms, so between two renders the text grows by ~step characters (step 10 = 2.5 tokens
per flush = 50 tokens/s). Each flush renders `keyed(text, key, growing=True)` and counts
what the feed (app/web/live.py) would send a follower for it:

- a new block: its html;
- an unchanged block: nothing;
- a changed block that `append_at(old, new)` accepts: the inserted html + 60 bytes
  (the `<hx-partial hx-target=... hx-swap="beforeend">` wrapper);
- any other changed block: its whole html + 40 bytes (`hx-swap-oob="true"`);
- a block that is gone: 50 bytes (`<div id=... hx-swap-oob="delete"></div>`).

The answer ends with one more render, `keyed(text, key)` (growing=False: the final HTML),
counted the same way. The ratio is bytes sent / the final HTML's bytes; the goal is
<= 1.5 at step 10. The same stream rendered with growing=False throughout (the old
behaviour) is shown for comparison. keyed() time is per growing call (mean, p99).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.markdown import append_at, keyed  # noqa: E402

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

    @property
    def ratio(self) -> float:
        return self.feed.sent / self.final_bytes


def simulate(text: str, step: float, growing: bool = True, seed: int = 1) -> Run:
    feed = Feed()
    times: list[float] = []
    prefixes = flushes(text, step, seed)
    for prefix in prefixes:
        t0 = time.perf_counter()
        blocks = keyed(prefix, KEY, growing=growing) if growing else keyed(prefix, KEY)
        times.append((time.perf_counter() - t0) * 1000)
        feed.send(blocks)
    final = keyed(text, KEY)  # the answer is done: the final render
    feed.send(final)
    assert feed.held == {b.id: b.html for b in final}
    return Run(step, len(prefixes), sum(len(b.html) for b in final), feed, times)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="4,10,40", help="characters per flush")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    text = load_answer()
    steps = [float(s) for s in args.steps.split(",")]
    keyed(text, KEY)  # warm: lexers, highlight of the closed fences, inline cache
    runs = [simulate(text, step, True, args.seed) for step in steps]
    olds = [simulate(text, step, False, args.seed) for step in steps]

    print(f"answer: {len(text):,} chars, {ANSWER_PATH.relative_to(ROOT)}")
    head = (f"{'step':>5} {'renders':>7} {'final B':>8} {'sent B':>8} {'ratio':>6} "
            f"{'appends':>7} {'repl':>5} {'new':>4} {'gone':>4} {'repl B':>7} "
            f"{'ms mean':>7} {'ms p99':>6} {'old ratio':>9} {'goal':>6}")
    print(head)
    print("-" * len(head))
    ok = True
    for run, old in zip(runs, olds):
        f = run.feed
        goal = f"<= {GOAL}" if run.step == 10 else ""
        if run.step == 10 and run.ratio > GOAL:
            ok = False
        print(f"{run.step:>5g} {run.renders:>7} {run.final_bytes:>8,} {f.sent:>8,} "
              f"{run.ratio:>6.2f} {f.appends:>7} {f.replaces:>5} {f.new:>4} {f.gone:>4} "
              f"{f.replace_bytes:>7,} {statistics.mean(run.times_ms):>7.2f} "
              f"{p99(run.times_ms):>6.2f} {old.ratio:>9.2f} {goal:>6}")
    print("(ratio = sent / final HTML, growing=True; old ratio = the same stream with "
          "growing=False; ms = keyed(growing=True) per call)")
    print("goal met" if ok else "GOAL MISSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
