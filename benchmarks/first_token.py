"""The first token: what Tabletalk adds between a message sent and its answer's first words
on the page, against the scripted model server (no built-in model needed).

    .venv/bin/python benchmarks/first_token.py [--runs 10] [--rate 120] [--trace]

`tabletalk serve --workers 1` (temporary TABLETALK_DATA, AI_URL at the fake OpenAI server
run in this script) answers `--runs` messages, each in a new conversation whose live stream
(`GET /c/ID/events`, asking for br/gzip as a browser does) is open before the message is
POSTed with the composer's form. The fake answers each with marker words (`w00001 ...`), the
first at once, then `--rate` chunks a second (120: about the built-in model's pace here).

- **POST -> request at the model**: from just before the POST until the fake has the
  request (its write, the runner taking it up, the turn's set-up, the request's build).
- **first chunk -> on the page**: from the fake's write of the first word until the
  follower's socket delivers the first message that shows it (the stream read on the beat,
  the growth written, the feed's render, the reveal grid, compression, the send).
- **Tabletalk adds**: POST -> first word on the page, less the fake's own time from the
  request to its first word (~0).

`--trace` runs serve through benchmarks/_trace_serve.py, which prints a timestamp at each
hop inside the server; the script prints each hop's median time after the POST.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for where in (str(ROOT), str(Path(__file__).resolve().parent)):
    if where not in sys.path:
        sys.path.insert(0, where)

import feed as fb  # noqa: E402
from _shared import HOST, Table  # noqa: E402
from answer_cost import Reader, marker_answer  # noqa: E402
from runs import RecordingServer  # noqa: E402
from tests.fakes.openai_server import rate, text  # noqa: E402

TRACE = re.compile(r"^TRACE (.+) (\d+\.\d+)$", re.M)


def start(data: Path, fake_url: str, trace: bool) -> fb.Served:
    served = fb.Served(data, fake_url)
    if not trace:
        return served.start()
    data.mkdir(parents=True, exist_ok=True)
    with open(served.log, "ab") as out:
        served.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "_trace_serve.py"), "serve", "--host", HOST,
             "--port", str(served.port), "--workers", "1"],
            cwd=ROOT, env=served.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    # the same wait as Served.start, on the process started here
    import http.client

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection(HOST, served.port, timeout=1)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return served
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(served.log.read_text()[-3000:])


async def one(served: fb.Served, web: fb.Web, fake: RecordingServer, chunk_rate: float, words: int) -> dict:
    chat, since, token = web.new_conversation(served.data)
    loop = asyncio.get_running_loop()
    _, r = await loop.create_connection(lambda: Reader(f"/c/{chat}/events?since={since}", served.port),
                                        HOST, served.port)
    await asyncio.wait_for(asyncio.shield(r.ready), 15)
    await asyncio.sleep(0.3)
    mark = len(r.plain)
    answer = marker_answer(words)
    fake.script([text(answer[:7]), rate(chunk_rate), text(answer[7:])])  # the first word at once
    fake.plain_default = [text("A title")]
    log_at = served.log.stat().st_size
    t0 = time.monotonic()
    await loop.run_in_executor(None, web.ask, chat, f"bench-{chat} Write the answer", token)
    posted = time.monotonic()
    deadline = t0 + 30
    while r.plain.find(b"w00001", mark) < 0:
        if time.monotonic() > deadline:
            raise TimeoutError("the first word did not reach the page")
        await asyncio.sleep(0.005)
    at = r.plain.find(b"w00001", mark)
    shown = next(t for t, size in r.arrived if size > at)
    streams = fake.streams.get(chat) or []
    if not streams:
        raise RuntimeError("the fake had no request for this conversation")
    arrived, chunks = streams[0]
    first_chunk = chunks[1] if len(chunks) > 1 else chunks[0]  # chunk 0: the role delta
    # the rest of the answer and the title: the next run starts on an idle server
    while not r.done(mark):
        if time.monotonic() > deadline + 30:
            raise TimeoutError("the answer did not finish")
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    r.close()
    hops = {}
    for name, when in TRACE.findall(served.log.read_bytes()[log_at:].decode(errors="replace")):
        hops.setdefault(name, float(when) - t0)
    return {"post": posted - t0, "request": arrived - t0, "model": first_chunk - arrived,
            "chunk_to_page": shown - first_chunk, "total": shown - t0, "adds": shown - t0 - (first_chunk - arrived),
            "hops": hops}


async def run(args) -> int:
    table = Table(echo=True)
    fake = RecordingServer(models={fb.MODEL: 32768}).start()
    fake.record_times = True
    print(f"load average at start: {fb.loadavg()}", file=sys.stderr)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="first-token-") as tmp:
            served = start(Path(tmp) / "data", fake.url, args.trace)
            try:
                web = fb.Web(served.port)
                await one(served, web, fake, args.rate, args.words)  # a first answer, not counted (imports, caches)
                for _ in range(args.runs):
                    results.append(await one(served, web, fake, args.rate, args.words))
            finally:
                served.stop()
    finally:
        fake.stop()
    ms = lambda xs: f"{statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f})"  # noqa: E731
    table.add("POST answered (303)", ms([r["post"] for r in results]))
    table.add("POST -> request at the model", ms([r["request"] for r in results]))
    table.add("the fake: request -> first word written", ms([r["model"] for r in results]))
    table.add("first word written -> on the page", ms([r["chunk_to_page"] for r in results]))
    table.add("POST -> first word on the page", ms([r["total"] for r in results]))
    table.add(f"Tabletalk adds (median of {len(results)})", ms([r["adds"] for r in results]))
    if args.trace:
        names = sorted({n for r in results for n in r["hops"]},
                       key=lambda n: statistics.median(r["hops"][n] for r in results if n in r["hops"]))
        for name in names:
            table.add(f"  trace: {name}", ms([r["hops"][name] for r in results if name in r["hops"]]))
    table.add("load average (1, 5, 15 min) at the end", fb.loadavg())
    table.print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--rate", type=float, default=120.0, help="chunks a second after the first")
    p.add_argument("--words", type=int, default=120, help="marker words in each answer")
    p.add_argument("--trace", action="store_true", help="timestamps at each hop inside the server")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
