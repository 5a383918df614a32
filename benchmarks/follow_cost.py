"""The followed path in-process, with its event loop: the feed's own loop (polls, wake-ups),
its dispatches and one stream's consumer, for one growing answer written on the beats.

    .venv/bin/python benchmarks/follow_cost.py [--rounds 3] [--words 10] [--followers 1] [--size 1]

dispatch_cost.py times `Feed.dispatch` alone, called back to back. Here the answer is
written as the runner writes it (tests/fixtures/long_answer.md, `--words` words a write,
one write a 50 ms beat, on the beat grid of app/beat.py, through a `Store` whose commits
wake the feed), the feed runs as in a worker (`Feed.start`: its polls for other processes'
commits, its dispatch per wake-up) and each follower is a task reading the SSE stream as
`GET /c/{chat}/events` makes it (app/web/events.follow) and compressing it as the
compression middleware does (gzip, a partial flush a message). No server, socket or HTTP.

Printed per answer: the process CPU (`time.process_time`) of everything but the writes
(timed apart and subtracted), the event loop's waits that slept (each a wake-up), the
messages and bytes the first follower got and their digest (the same bytes as before a
change: the same digest; dispatch_cost.py's digest is of the same messages), and the
gzip bytes. Round 1 is a first answer in the process; later rounds a warm one.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.beat import BEAT_SECONDS, next_beat  # noqa: E402
from app.tables import asked, item  # noqa: E402
from _shared import Growing, followed_conversation  # noqa: E402
from app.web import compress  # noqa: E402
from app.web.stream import follow  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "long_answer.md"


class Counted:
    """The loop's selector, counting the waits that slept (timeout > 0 or None)."""

    def __init__(self, selector):
        self.selector, self.sleeps = selector, 0

    def select(self, timeout=None):
        if timeout is None or timeout > 0:
            self.sleeps += 1
        return self.selector.select(timeout)

    def __getattr__(self, name):
        return getattr(self.selector, name)


async def reader(stream, got: dict) -> None:
    z = zlib.compressobj(6, zlib.DEFLATED, 16 + compress.STREAM_WINDOW_BITS, compress.STREAM_MEMORY_LEVEL)
    async for data in stream:
        if got["on"]:
            got["messages"] += 1
            got["bytes"] += len(data)
            got["digest"].update(data)
            got["wire"] += len(z.compress(data) + z.flush(zlib.Z_PARTIAL_FLUSH))
        else:
            z.compress(data), z.flush(zlib.Z_PARTIAL_FLUSH)


async def answers(rounds: int, per_write: int, followers: int, size: int = 1) -> list[dict]:
    loop = asyncio.get_running_loop()
    counted = Counted(loop._selector)  # type: ignore[attr-defined]
    loop._selector = counted  # type: ignore[attr-defined]
    words = re.findall(r"\S+\s*", "\n\n".join([FIXTURE.read_text()] * size))
    out = []
    with followed_conversation("follow-cost-") as (feed, store, chat):
        feed.start()
        tasks, stats = [], []
        for _ in range(followers):
            f = feed.follow(chat, None, lists=True)
            got = {"on": False, "messages": 0, "bytes": 0, "wire": 0, "digest": hashlib.sha256()}
            tasks.append(asyncio.create_task(reader(follow(feed, f, b"", store.rev(), lambda: True), got)))
            stats.append(got)
        try:
            await asyncio.sleep(0.2)
            for _ in range(rounds):
                user = store.add(asked(chat, "Write the answer"))
                answer = store.add(item("text", chat, "", turn=user.id))
                await asyncio.sleep(0.2)
                for got in stats:
                    got.update(on=True, messages=0, bytes=0, wire=0, digest=hashlib.sha256())
                ends = [*range(per_write, len(words), per_write), len(words)]
                grown = Growing(store, answer.id)
                sleeps, writes = counted.sleeps, 0.0
                started = time.process_time()
                for k, end in enumerate(ends):
                    await asyncio.sleep(max(0.0, next_beat(loop.time()) - loop.time()))
                    t = time.process_time()
                    grown.add("".join(words[end - per_write if k else 0:end]), done=k == len(ends) - 1)
                    if k == len(ends) - 1:
                        store.update(user.id, done=True)
                    writes += time.process_time() - t
                await asyncio.sleep(BEAT_SECONDS)  # the last message is read
                cpu = time.process_time() - started - writes
                got = stats[0] if stats else {"messages": 0, "bytes": 0, "wire": 0, "digest": hashlib.sha256()}
                out.append({"writes": len(ends), "cpu": cpu, "write_cpu": writes, "sleeps": counted.sleeps - sleeps,
                            "messages": got["messages"], "bytes": got["bytes"], "wire": got["wire"],
                            "digest": got["digest"].hexdigest()[:10]})
                for got in stats:
                    got["on"] = False
        finally:
            await feed.aclose()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="answers in one process (1: fresh)")
    p.add_argument("--words", type=int, default=10, help="words a write")
    p.add_argument("--followers", type=int, default=1, help="streams following the conversation")
    p.add_argument("--size", type=int, default=1, help="the answer: the fixture k times (as answer_cost.py's sizes)")
    args = p.parse_args(argv)
    print("round | writes | CPU s (writes apart) | writes' CPU s | loop sleeps | messages | bytes | gzip B | digest")
    for n, r in enumerate(asyncio.run(answers(args.rounds, args.words, args.followers, args.size)), start=1):
        print(f"{n} | {r['writes']} | {r['cpu']:.3f} | {r['write_cpu']:.3f} | {r['sleeps']} | {r['messages']} | "
              f"{r['bytes']:,} | {r['wire']:,} | {r['digest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
