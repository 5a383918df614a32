"""The API's streams against the web page's (docs/api.md): what the OpenAI-compatible API adds
to an answer's first word, and how 50 API streams at once on one worker keep up.

    .venv/bin/python benchmarks/api_stream.py [--runs 10] [--streams 50] [--rate 20] [--words 200]

`tabletalk serve --workers 1` (temporary TABLETALK_DATA, AI_URL at the scripted model server
run in this script, as benchmarks/first_token.py).

- **First word**: `--runs` times each, alternating: a message sent on the page while its live
  stream is open (first_token.py's measure: the POST -> the first word in the page's stream),
  and a `POST /v1/chat/completions` with `"stream": true` on a bare socket (the request sent
  -> the first word in a content delta). Each answer's first word is written at once, the rest
  at `first_token.py`'s 120 a second. "Adds" is that time less the model's own (its request ->
  its first word): what Tabletalk adds, on each path.
- **Many streams**: `--streams` API streams asked at once, each answered at `--rate` words a
  second for `--words` words; every word's delay from the model writing it to the client
  reading it (p50, p99, max), then the same with as many conversations followed on the page
  (the web app's chunk -> follower), for the comparison the issue asks for.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for where in (str(ROOT), str(Path(__file__).resolve().parent)):
    if where not in sys.path:
        sys.path.insert(0, where)

import feed as fb  # noqa: E402
import first_token  # noqa: E402
from _shared import HOST, Table  # noqa: E402
from answer_cost import Reader, marker_answer  # noqa: E402
from runs import RecordingServer  # noqa: E402
from tests.fakes.openai_server import rate, text  # noqa: E402

from app.accounts.api_keys import ApiKeys  # noqa: E402
from app.store import Store, db as dbm  # noqa: E402
from app.tables import Person  # noqa: E402

WORD = re.compile(rb"w(\d{5})")
TAG = re.compile(rb"<[^>]*>")
FRAMING = re.compile(rb"^data:(.*)$", re.M)  # an SSE message's data lines, without the field's name


class ApiStream(fb.Follower):
    """`POST /v1/chat/completions` streamed, over a bare socket: when each marker word of the
    answer first arrives, and when the stream's [DONE] does."""

    def __init__(self, port: int, key: str, agent: str, words: str):
        super().__init__("/v1/chat/completions", port, decode=True)
        body = json.dumps({"model": agent, "stream": True, "messages": [{"role": "user", "content": words}]}).encode()
        self.request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer {key}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        self.words: dict[int, float] = {}
        self.scanned = 0
        self.finished = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        now = time.monotonic()
        start = max(self.scanned - 6, 0)
        for m in WORD.finditer(self.body, start):
            self.words.setdefault(int(m.group(1)), now)
        self.scanned = len(self.body)
        if b"data: [DONE]" in self.body[start:] and not self.finished.done():
            self.finished.set_result(now)


def api_key(data: Path) -> str:
    db = dbm.connect(data / "tabletalk.db")
    try:
        store = Store(db)
        keys = ApiKeys(store)
        keys.decide("everyone", set(), "100000", "300")  # the benchmark's requests, not the default limit of 60 a minute
        token, _ = keys.make(Person("owner", owner=True, id=store.owner()), "benchmark")
        return token
    finally:
        db.conn.close()


async def api_first(served: fb.Served, key: str, fake: RecordingServer, n: int, chunk_rate: float,
                    words: int) -> dict:
    answer = marker_answer(words)
    fake.script([text(answer[:7]), rate(chunk_rate), text(answer[7:])])
    loop = asyncio.get_running_loop()
    # as first_token.one waits for its page's stream: the last answer's own writes (its end,
    # its title) are over, so the runner's scan is not in its gap (SCAN_GAP_SECONDS) when the
    # request comes; either path waits out the gap otherwise (~100 ms)
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    _, s = await loop.create_connection(lambda: ApiStream(served.port, key, "agent-1", f"bench-{n} Write it"),
                                        HOST, served.port)
    while 1 not in s.words:
        if time.monotonic() > t0 + 30:
            raise TimeoutError("the first word did not come through the API")
        await asyncio.sleep(0.002)
    shown = s.words[1]
    arrived, chunks = fake.streams[n][0]
    first_chunk = chunks[1] if len(chunks) > 1 else chunks[0]
    await asyncio.wait_for(s.finished, 60)
    s.close()
    await asyncio.sleep(0.3)
    return {"total": shown - t0, "adds": shown - t0 - (first_chunk - arrived), "chunk_to_client": shown - first_chunk}


def delays(fake: RecordingServer, key: int, seen: dict[int, float]) -> list[float]:
    """Each word's delay from the model's write to the client's read."""
    _, chunks = fake.streams[key][0]
    return [seen[w] - chunks[w] for w in seen if w < len(chunks)]


async def many_api(served: fb.Served, key: str, fake: RecordingServer, streams: int, chunk_rate: float,
                   words: int) -> list[float]:
    base = 700_000
    fake.default = [rate(chunk_rate), text(marker_answer(words))]
    loop = asyncio.get_running_loop()
    opened = [await loop.create_connection(lambda i=i: ApiStream(served.port, key, "agent-1", f"bench-{base + i} Go"),
                                           HOST, served.port) for i in range(streams)]
    await asyncio.wait_for(asyncio.gather(*(s.finished for _, s in opened)), 60 + words / chunk_rate * 3)
    out = []
    for i, (_, s) in enumerate(opened):
        out.extend(delays(fake, base + i, s.words))
        s.close()
    await asyncio.sleep(1.0)
    return out


async def many_web(served: fb.Served, web: fb.Web, fake: RecordingServer, streams: int, chunk_rate: float,
                   words: int) -> list[float]:
    fake.default = [rate(chunk_rate), text(marker_answer(words))]
    loop = asyncio.get_running_loop()
    followed = []
    for _ in range(streams):
        chat, since, token = web.new_conversation(served.data)
        _, r = await loop.create_connection(lambda: Reader(f"/c/{chat}/events?since={since}", served.port),
                                            HOST, served.port)
        followed.append((chat, token, r))
    await asyncio.gather(*(asyncio.wait_for(asyncio.shield(r.ready), 15) for _, _, r in followed))
    for chat, token, _ in followed:
        await loop.run_in_executor(None, web.ask, chat, f"bench-{chat} Go", token)
    seen: dict[int, dict[int, float]] = {chat: {} for chat, _, _ in followed}
    deadline = time.monotonic() + 60 + words / chunk_rate * 3
    while any(len(fake.streams[chat][0][1]) <= words if fake.streams.get(chat) else True for chat, _, _ in followed):
        if time.monotonic() > deadline:
            raise TimeoutError("the web answers did not finish")
        await asyncio.sleep(0.05)
    await asyncio.sleep(2.0)  # the model wrote every word: what the pages get of them, within this
    out = []
    for chat, _, r in followed:  # the page's words, each at the time of the read that brought it
        shown, position = b"", 0
        for at, size in r.arrived:
            # the text the page gained: a growing block's added text (<hx-a>) may end inside a
            # word and the next message go on with it, so the text of the messages is read
            # joined, without their markup and framing
            fresh = TAG.sub(b"", b"".join(FRAMING.findall(bytes(r.plain[position:size]))))
            for m in WORD.finditer(shown + fresh, max(len(shown) - 6, 0)):
                seen[chat].setdefault(int(m.group(1)), at)
            shown, position = (shown + fresh)[-16:], size
        out.extend(delays(fake, chat, seen[chat]))
        r.close()
    return out


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f})"


def spread(xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
    return (f"p50 {statistics.median(xs) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {xs[-1] * 1000:.0f} ms "
            f"({len(xs):,} words)")


async def run(args) -> int:
    table = Table(echo=True)
    fake = RecordingServer(models={fb.MODEL: 32768}).start()
    fake.record_times = True
    fake.plain_default = [text("A title")]
    print(f"load average at start: {fb.loadavg()}", file=sys.stderr)
    web_runs, api_runs = [], []
    try:
        with tempfile.TemporaryDirectory(prefix="api-stream-") as tmp:
            served = fb.Served(Path(tmp) / "data", fake.url).start()
            try:
                web = fb.Web(served.port)
                key = api_key(served.data)
                await first_token.one(served, web, fake, 120.0, 120)  # warm: imports, caches
                await api_first(served, key, fake, 900_000, 120.0, 120)
                for i in range(args.runs):
                    web_runs.append(await first_token.one(served, web, fake, 120.0, 120))
                    api_runs.append(await api_first(served, key, fake, 900_001 + i, 120.0, 120))
                cpu = fb.cpu_seconds(served.worker)
                api_delays = await many_api(served, key, fake, args.streams, args.rate, args.words)
                api_cpu = fb.cpu_seconds(served.worker) - cpu
                cpu = fb.cpu_seconds(served.worker)
                web_delays = await many_web(served, web, fake, args.streams, args.rate, args.words)
                web_cpu = fb.cpu_seconds(served.worker) - cpu
                tracebacks = served.tracebacks()
            finally:
                served.stop()
    finally:
        fake.stop()
    table.add("page: POST -> first word in its stream", ms([r["total"] for r in web_runs]))
    table.add("API: POST -> first word in a content delta", ms([r["total"] for r in api_runs]))
    table.add("page: Tabletalk adds", ms([r["adds"] for r in web_runs]))
    table.add("API: Tabletalk adds", ms([r["adds"] for r in api_runs]))
    added = statistics.median(r["adds"] for r in api_runs) - statistics.median(r["adds"] for r in web_runs)
    table.add("the API adds to the page's first word (medians)", f"{added * 1000:+.0f} ms", "<= +20 ms")
    table.add(f"{args.streams} API streams at once: model write -> client read", spread(api_delays),
              "p99 within the pages'")
    table.add(f"{args.streams} pages at once: model write -> page read", spread(web_delays))
    table.add("worker CPU: the API streams / the pages", f"{api_cpu:.1f} s / {web_cpu:.1f} s")
    table.add("tracebacks in the server's log", str(tracebacks))
    table.add("load average (1, 5, 15 min) at the end", fb.loadavg())
    table.print()
    return 1 if tracebacks else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--streams", type=int, default=50)
    p.add_argument("--rate", type=float, default=20.0, help="words a second of each of the many streams")
    p.add_argument("--words", type=int, default=200)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
