"""The feed's side of a followed answer, in-process: CPU of each dispatch, bytes, parse volume.

    .venv/bin/python benchmarks/dispatch_cost.py [--sizes 1,4,10] [--rounds 3] [--words 10]

No server and no socket: a temporary SQLite database, the worker's `Feed` with the pages'
renderer (`live.chat_changes`, `sidebar.list_changes`) and one follower of a conversation.
The answer (tests/fixtures/long_answer.md, `k` times over for a size `k`) grows by
`--words` (10) words a write, as the runner writes it at 200 chunks a second (one write a
50 ms beat), each write committed with `Store.update` and followed by one `Feed.dispatch`.

Printed per answer: the process CPU of the dispatches alone (`time.process_time`: the
writes and this script are not counted), the messages and bytes the follower got (a
digest of them, to see that a change sends the same bytes), and the characters given to
markdown-it's block parser (`markdown.counting()`). Each size runs in a process of its own;
round 1 is its first answer (Pygments'
lexers and Jinja's templates made on first use); later rounds answer again in the same
conversation, as a warm worker does. On a machine shared with other work this moves far
less than answer_cost.py's whole-server figures.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.markdown import counting  # noqa: E402
from app.tables import asked, item  # noqa: E402
from _shared import Growing, followed_conversation  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "long_answer.md"


def answer_rounds(size: int, rounds: int, per_write: int) -> list[dict]:
    words = re.findall(r"\S+\s*", "\n\n".join([FIXTURE.read_text()] * size))
    with followed_conversation("dispatch-cost-") as (feed, store, chat):
        follower = feed.follow(chat, None, lists=True)
        out = []
        for _ in range(rounds):
            user = store.add(asked(chat, "Write the answer"))
            answer = store.add(item("text", chat, "", turn=user.id))
            feed.dispatch()
            follower.messages.clear()
            cpu, sent, messages, digest, parsed = 0.0, 0, 0, hashlib.sha256(), 0
            ends = [*range(per_write, len(words), per_write), len(words)]
            grown = Growing(store, answer.id)
            for k, end in enumerate(ends):
                grown.add("".join(words[end - per_write if k else 0:end]), done=k == len(ends) - 1)
                if k == len(ends) - 1:
                    store.update(user.id, done=True)
                with counting() as work:
                    started = time.process_time()
                    feed.dispatch()
                    cpu += time.process_time() - started
                parsed += work.parsed
                while follower.messages:
                    _, data = follower.messages.popleft()
                    sent, messages = sent + len(data), messages + 1
                    digest.update(data)
            out.append({"words": len(words), "writes": len(ends), "cpu": cpu, "messages": messages,
                        "bytes": sent, "parsed": parsed, "digest": digest.hexdigest()[:10]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,4,10", help="answer sizes: the fixture k times")
    p.add_argument("--rounds", type=int, default=3, help="answers per size in one process (1: fresh)")
    p.add_argument("--words", type=int, default=10, help="words a write")
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=True, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.header:
        print("size | round | words | writes | dispatch CPU s | messages | bytes | parsed chars | digest")
    if len(sizes) > 1:  # each size in a fresh process: the render caches are per process
        for size in sizes:
            subprocess.run([sys.executable, __file__, "--sizes", str(size), "--rounds", str(args.rounds),
                            "--words", str(args.words), "--no-header"], check=True)
        return 0
    for size in sizes:
        for n, r in enumerate(answer_rounds(size, args.rounds, args.words), start=1):
            print(f"x{size} | {n} | {r['words']:,} | {r['writes']:,} | {r['cpu']:.3f} | {r['messages']:,} | "
                  f"{r['bytes']:,} | {r['parsed']:,} | {r['digest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
