"""The cost of a followed answer: server CPU, bytes on the wire, chunk -> follower delay.

    .venv/bin/python benchmarks/answer_cost.py [--sizes 1,4,10] [--followers 0,1,10]
        [--rate 200] [--no-delay] [--delay-followers N] [--answers N] [--other-worker]

For each answer size and follower count it starts `tabletalk serve --workers 1` (its own
process group and temporary TABLETALK_DATA; AI_URL at the fake OpenAI server run in
this process), signs in, opens N followers of a new conversation (raw HTTP/1.1 sockets
reading `GET /c/{chat}/events` with `Accept-Encoding: br, gzip` like a browser, the body
decompressed as it comes), POSTs a message and waits until every follower has the
message in which the text item turns `class="state done"`. The fake streams the answer
one word-token a chunk at `--rate` (200) chunks a second.

- **answer**: tests/fixtures/long_answer.md (~2,100 tokens, 8.4 KB of Markdown), or that
  text `k` times over for a size `k` (4: ~8,000 tokens, 10: ~20,000).
- **server CPU s**: utime + stime of the serve process and all its descendants, from just
  before the POST to the done message (the fake and this script are not counted).
- **wire B / decoded B** (N >= 1, the first follower): the SSE bytes read from the socket
  after the POST (HTTP chunk framing included), and the same after decompression.
- **delay p50 / p99** (`--no-delay` skips it): a second answer of plain marker words
  (`w00001 w00002 ...`, in paragraphs, the same pace) followed by one follower
  (`--delay-followers N`: N, every one's delays counted); for each chunk, the time from the
  fake's write (`sent_at`) to the first follower message that shows its word. A follower
  on the worker running the answer is handed the words as they are read (the fast path).
- `--answers N`: N answers at once, one follower each: the server's CPU and every chunk's
  delay; `--other-worker`: two workers, the delay to a follower on each.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for where in (str(ROOT), str(Path(__file__).resolve().parent)):
    if where not in sys.path:
        sys.path.insert(0, where)

import brotli  # noqa: E402

import feed as fb  # noqa: E402  (benchmarks/feed.py: the served app, a raw follower, pages)
from app.store import Store  # noqa: E402
from app.store import db as dbm  # noqa: E402
from _shared import HOST, Table, pct  # noqa: E402
from runs import RecordingServer  # noqa: E402  (the fake, noting each stream's chunk times)
from tests.fakes.openai_server import rate, text  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "long_answer.md"
DONE = re.compile(rb'id="(i\d+)-s" class="state done"')


class Reader(fb.Follower):
    """A follower that asks for compression, as a browser does, and decodes what it gets."""

    def __init__(self, path: str, port: int, **kw):
        super().__init__(path, port, decode=True, **kw)
        self.request = self.request.replace(b"\r\n\r\n", b"\r\nAccept-Encoding: br, gzip\r\n\r\n", 1)
        self.decoder = None
        self.plain = bytearray()  # the decoded SSE body
        self.arrived: list[tuple[float, int]] = []  # (time, len(plain)) after each read
        self._done_from = 0

    def data_received(self, data: bytes) -> None:
        was = len(self.body)
        super().data_received(data)
        fresh = bytes(self.body[was:])
        if not fresh:
            return
        if self.decoder is None:
            self.decoder = self._decoder()
        self.plain += self.decoder(fresh)
        self.arrived.append((time.monotonic(), len(self.plain)))

    def _decoder(self):
        coding = self.headers.get(b"content-encoding", b"")
        if coding == b"br":
            d = brotli.Decompressor()
            return d.process
        if coding == b"gzip":
            z = zlib.decompressobj(wbits=31)
            return z.decompress
        return lambda b: b

    @property
    def headers(self) -> dict[bytes, bytes]:
        return getattr(self, "_headers", {})

    def done(self, after: int) -> bool:
        return DONE.search(self.plain, after) is not None


_orig_data_received = fb.Follower.data_received


def _keep_headers(self, data: bytes) -> None:  # the base class drops the response head
    if not self.in_body:
        head = bytes(self.head) + data
        end = head.find(b"\r\n\r\n")
        if end >= 0:
            self._headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(b":") for line in head[:end].split(b"\r\n")[1:])
            }
    _orig_data_received(self, data)


fb.Follower.data_received = _keep_headers  # type: ignore[method-assign]


def tree_cpu(pid: int) -> float:
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += fb.cpu_seconds(p)
        except OSError:
            continue
        todo.extend(fb.children(p))
    return total


def threads_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of the serve process's tree, by (pid, thread name, tid)."""
    out, todo = {}, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                stat = Path(f"/proc/{p}/task/{tid}/stat").read_text()
                name = stat[stat.index("(") + 1: stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2:].split()
                out[f"{p}/{name}/{tid}"] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
        todo.extend(fb.children(p))
    return out


def marker_answer(words: int) -> str:
    out, line = [], []
    for n in range(1, words + 1):
        line.append(f"w{n:05d}")
        if n % 60 == 0:
            out.append(" ".join(line) + "\n\n")
            line = []
    if line:
        out.append(" ".join(line))
    return "".join(out)


async def one_answer(served: fb.Served, fake: RecordingServer, answer: str, followers: int,
                     chunk_rate: float, delays: bool = False, profile: str = "", gil: bool = False) -> dict:
    web = fb.Web(served.port)
    chat, since, token = web.new_conversation(served.data)
    readers: list[Reader] = []
    loop = asyncio.get_running_loop()
    for _ in range(followers):
        _, r = await loop.create_connection(lambda: Reader(f"/c/{chat}/events?since={since}", served.port),
                                            HOST, served.port)
        await asyncio.wait_for(asyncio.shield(r.ready), 15)
        readers.append(r)
    await asyncio.sleep(0.3)  # the first messages are in
    marks = [(len(r.plain), r.raw) for r in readers]
    fake.reset()
    fake.record_times = True
    fake.script([rate(chunk_rate), text(answer)])
    fake.plain_default = [text("A title")]
    threads0 = threads_cpu(served.proc.pid) if os.environ.get("THREADS_CPU") else {}
    cpu0 = tree_cpu(served.proc.pid)
    t0 = time.monotonic()
    spy = None
    if profile:  # py-spy (pip install py-spy) on granian's worker, the serve process's grandchild
        worker = next(iter(fb.children(served.worker) or [served.worker]))
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(worker), "--format", "raw", "--nonblocking",
                                "--rate", os.environ.get("SPY_RATE", "250"), *(["--gil"] if gil else []), *(["--native"] if os.environ.get("SPY_NATIVE") else []), "-o", profile], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await loop.run_in_executor(None, web.ask, chat, "Write the answer", token)
    deadline = t0 + 60 + len(answer) / 4 / chunk_rate * 3
    if followers:
        while not all(r.done(m[0]) for r, m in zip(readers, marks)):
            if time.monotonic() > deadline:
                raise TimeoutError("the followers did not see the answer done")
            await asyncio.sleep(0.02)
    else:
        # No page open: this process reads the database (a page's GET would render the
        # answer in the server and count as its CPU).
        db = sqlite3.connect(f"file:{served.data / 'tabletalk.db'}?mode=ro", uri=True)
        try:
            while not db.execute("SELECT 1 FROM items WHERE chat = ? AND kind = 'text' AND done = 1",
                                 [chat]).fetchone():
                if time.monotonic() > deadline:
                    raise TimeoutError("the answer did not finish")
                await asyncio.sleep(0.05)
        finally:
            db.close()
    cpu = tree_cpu(served.proc.pid) - cpu0
    if os.environ.get("THREADS_CPU"):
        after = threads_cpu(served.proc.pid)
        for key in sorted(after, key=lambda k: -(after[k] - threads0.get(k, 0)))[:8]:
            print(f"  thread {key}: {after[key] - threads0.get(key, 0):.3f} s", file=sys.stderr)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    out = {"cpu": cpu, "seconds": time.monotonic() - t0}
    if readers:
        r, (plain0, raw0) = readers[0], marks[0]
        out["wire"] = r.raw - raw0
        out["decoded"] = len(r.plain) - plain0
        out["coding"] = r.headers.get(b"content-encoding", b"identity").decode()
        out["body"] = bytes(r.plain[plain0:])
    if delays and readers:  # every follower's: with 100 of them, the last served counts too
        out["delays"] = [ms for r, m in zip(readers, marks) for ms in delays_of(r, m[0], answer, list(fake.sent_at))]
    for r in readers:
        r.close()
    return out


def delays_of(r: Reader, plain0: int, answer: str, times: list[float]) -> list[float]:
    """ms from each chunk's write (`times`, the fake's) to the follower message showing its word."""
    sent = times[1:]  # the first chunk is the empty role delta
    got = []
    for k, word in enumerate(answer.split()[: len(sent)]):
        at = r.plain.find(word.encode(), plain0)
        if at < 0:
            continue
        arrival = next(t for t, size in r.arrived if size > at)
        got.append((arrival - sent[k]) * 1000)
    return got


async def worker_delays(served: fb.Served, fake: RecordingServer, chunk_rate: float, words: int = 2000,
                        streams: int = 8) -> dict[str, list[float]]:
    """With `serve --workers 2`: `streams` followers of one answer of marker words, each on
    the worker the kernel gave it; the chunk -> follower delays of one follower on the worker
    that runs the answer ("same") and of one on the other ("other"), when each has one."""
    web = fb.Web(served.port)
    chat, since, token = web.new_conversation(served.data)
    loop = asyncio.get_running_loop()
    readers: list[Reader] = []
    for _ in range(streams):
        _, r = await loop.create_connection(lambda: Reader(f"/c/{chat}/events?since={since}", served.port),
                                            HOST, served.port)
        await asyncio.wait_for(asyncio.shield(r.ready), 15)
        readers.append(r)
    await asyncio.sleep(0.3)
    marks = [len(r.plain) for r in readers]
    answer = marker_answer(words)
    fake.reset()
    fake.record_times = True
    fake.script([rate(chunk_rate), text(answer)])
    fake.plain_default = [text("A title")]
    await loop.run_in_executor(None, web.ask, chat, "Write the answer", token)
    db = sqlite3.connect(f"file:{served.data / 'tabletalk.db'}?mode=ro", uri=True)
    runner = ""
    deadline = time.monotonic() + 60 + words / chunk_rate * 3
    try:
        while not all(r.done(m) for r, m in zip(readers, marks)):
            if not runner:
                row = db.execute("SELECT owner FROM runs WHERE chat = ?", [chat]).fetchone()
                runner = row[0].split(":")[1] if row and row[0] else ""
            if time.monotonic() > deadline:
                raise TimeoutError("the followers did not see the answer done")
            await asyncio.sleep(0.02)
    finally:
        db.close()
    out: dict[str, list[float]] = {}
    for r, m in zip(readers, marks):
        pid = re.match(rb": worker (\d+)", bytes(r.plain[:64]))
        side = "same" if pid and pid.group(1).decode() == runner else "other"
        if side not in out:
            out[side] = delays_of(r, m, answer, list(fake.sent_at))
        r.close()
    return out


PER_PERSON = 25  # answers one person asks in --answers (under PERSON_QUEUE_MAX, 30)


def member(served: fb.Served, k: int) -> tuple[fb.Web, int]:
    """A page client of a new member `bench-k` (their account and session written into the
    database, as tests/conftest.py's `signed_in` does), and their id."""
    from app.accounts.passwords import hash_password
    from app.accounts.rules import Accounts

    db = dbm.connect(served.data / "tabletalk.db")
    try:
        people = Accounts(Store(db))
        person = people.add(f"bench-{k}", hash_password(fb.PASSWORD)).id
        token = people.start_session(person)
    finally:
        db.conn.close()
    web = fb.Web.__new__(fb.Web)  # signed in already: no /signin
    web.port, web.cookies = served.port, {"tabletalk_session": token}
    return web, person


async def many_answers(served: fb.Served, fake: RecordingServer, answers: int, words: int,
                       chunk_rate: float) -> dict:
    """`answers` conversations answered at once, each with one follower: the server's CPU
    and every chunk's delay to its conversation's follower (marker words, as --no-delay's)."""
    owner = fb.Web(served.port)
    loop = asyncio.get_running_loop()
    # One person may have PERSON_QUEUE_MAX (30) messages waiting: the answers are asked by
    # as many people as that takes, PER_PERSON each (the owner first), each with a session.
    people = [(owner, None)] + [member(served, k) for k in range(1, -(-answers // PER_PERSON))]
    chats = [(web, *web.new_conversation(served.data, person))
             for web, person in (people[i // PER_PERSON] for i in range(answers))]
    readers: dict[int, Reader] = {}
    own_session = fb.SESSION[0]
    for web, chat, since, _ in chats:
        fb.SESSION[0] = "; ".join(f"{k}={v}" for k, v in web.cookies.items())  # the follower's person's
        _, r = await loop.create_connection(lambda: Reader(f"/c/{chat}/events?since={since}", served.port),
                                            HOST, served.port)
        await asyncio.wait_for(asyncio.shield(r.ready), 15)
        readers[chat] = r
    fb.SESSION[0] = own_session
    await asyncio.sleep(0.3)
    marks = {chat: len(r.plain) for chat, r in readers.items()}
    answer = marker_answer(words)
    fake.reset()
    fake.streams.clear()
    fake.script(*[[rate(chunk_rate), text(answer)] for _ in range(answers)])
    fake.plain_default = [text("A title")]
    cpu0 = tree_cpu(served.proc.pid)
    t0 = time.monotonic()

    def ask_all() -> None:  # one after the other, as people would (a few ms each)
        for web, chat, _, token in chats:
            web.ask(chat, f"bench-{chat} Write the answer", token)

    await loop.run_in_executor(None, ask_all)
    deadline = t0 + 120 + words / chunk_rate * 3
    while not all(r.done(marks[chat]) for chat, r in readers.items()):
        if time.monotonic() > deadline:
            raise TimeoutError("the followers did not see every answer done")
        await asyncio.sleep(0.05)
    cpu = tree_cpu(served.proc.pid) - cpu0
    seconds = time.monotonic() - t0
    delays: list[float] = []
    for chat, r in readers.items():
        streams = fake.streams.get(chat) or []
        if streams:
            delays += delays_of(r, marks[chat], answer, streams[0][1])
        r.close()
    return {"cpu": cpu, "seconds": seconds, "delays": delays}


async def run(args) -> int:
    fb.raise_nofile()
    table = Table(echo=True)
    base = FIXTURE.read_text()
    fake = RecordingServer(models={fb.MODEL: 32768}).start()
    print(f"load average at start: {fb.loadavg()}", file=sys.stderr)
    try:
        for size in args.sizes:
            answer = "\n\n".join([base] * size)
            label = f"{len(answer):,} B Markdown (x{size}){', warm' if args.warm else ''}"
            for n in args.followers:
                with tempfile.TemporaryDirectory(prefix="answer-cost-") as tmp:
                    served = fb.Served(Path(tmp) / "data", fake.url).start()
                    try:
                        if args.warm:  # a first answer, not counted: what a process does once
                            await one_answer(served, fake, answer, n, args.rate)
                        got = await one_answer(served, fake, answer, n, args.rate, profile=args.profile, gil=args.gil)
                    finally:
                        served.stop()
                if args.dump and "body" in got:
                    Path(args.dump).write_bytes(got["body"])
                table.add(f"{label}, {n} followers: server CPU s", f"{got['cpu']:.2f} ({got['seconds']:.1f} s)",
                          "<= 0.25 (1), <= 0.15 (0)" if size == 1 and n <= 1 else "")
                if "wire" in got:
                    table.add(f"{label}, {n} followers: wire B / decoded B ({got['coding']})",
                              f"{got['wire']:,} / {got['decoded']:,}",
                              "<= 13,000 wire" if size == 1 else "")
        if not args.no_delay:
            with tempfile.TemporaryDirectory(prefix="answer-cost-") as tmp:
                served = fb.Served(Path(tmp) / "data", fake.url).start()
                try:
                    got = await one_answer(served, fake, marker_answer(2000), args.delay_followers, args.rate,
                                           delays=True)
                finally:
                    served.stop()
            d = got["delays"]
            table.add(f"chunk -> follower p50 / p99 ms (1 answer, {args.delay_followers} followers, all counted)",
                      f"{pct(d, 50):.0f} / {pct(d, 99):.0f} ({len(d)} chunks), server CPU {got['cpu']:.2f} s",
                      "<= 10 / <= 40" if args.delay_followers == 1 else "p99 <= 100")
        if args.other_worker:
            with tempfile.TemporaryDirectory(prefix="answer-cost-") as tmp:
                served = fb.Served(Path(tmp) / "data", fake.url, workers=2).start()
                try:
                    got = await worker_delays(served, fake, args.rate)
                finally:
                    served.stop()
            for side, d in sorted(got.items()):
                table.add(f"chunk -> follower p50 / p99 ms, 2 workers: a follower on the {side} worker",
                          f"{pct(d, 50):.0f} / {pct(d, 99):.0f} ({len(d)} chunks)",
                          "<= 10 / <= 40" if side == "same" else "<= 40 / <= 100")
        if args.answers:
            with tempfile.TemporaryDirectory(prefix="answer-cost-") as tmp:
                served = fb.Served(Path(tmp) / "data", fake.url).start()
                try:
                    got = await many_answers(served, fake, args.answers, args.words, args.rate)
                finally:
                    served.stop()
            d = got["delays"]
            table.add(f"{args.answers} answers at once, 1 follower each: server CPU s",
                      f"{got['cpu']:.2f} ({got['seconds']:.1f} s)", "")
            table.add(f"{args.answers} answers at once: chunk -> follower p50 / p99 ms",
                      f"{pct(d, 50):.0f} / {pct(d, 99):.0f} ({len(d)} chunks)", "p99 <= 100")
    finally:
        fake.stop()
    print(f"load average at end: {fb.loadavg()}", file=sys.stderr)
    table.print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--sizes", type=ints, default=[1], help="answer sizes: the fixture k times (1,4,10)")
    p.add_argument("--followers", type=ints, default=[0, 1, 10], help="follower counts (0,1,10,100)")
    p.add_argument("--rate", type=float, default=200.0, help="chunks a second")
    p.add_argument("--no-delay", action="store_true", help="skip the delay measurement")
    p.add_argument("--delay-followers", type=int, default=1,
                   help="followers of the delay measurement's answer, every one's delays counted (100)")
    p.add_argument("--warm", action="store_true",
                   help="answer once (not counted) before each measured answer in the same server")
    p.add_argument("--answers", type=int, default=0,
                   help="also N answers at once, one follower each (CPU, delay p50/p99)")
    p.add_argument("--words", type=int, default=2000, help="with --answers: marker words per answer")
    p.add_argument("--other-worker", action="store_true",
                   help="serve --workers 2: the delay to a follower on the worker running the answer and on the other")
    p.add_argument("--profile", default="", help="py-spy the worker during each answer into this file (raw)")
    p.add_argument("--gil", action="store_true", help="with --profile: only samples that hold the GIL (CPU in Python)")
    p.add_argument("--dump", help="write the first follower's decoded SSE body (last run) to this file")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
