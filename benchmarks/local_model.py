"""The built-in model's runtimes side by side (llama.cpp's server from xllamacpp's wheel, and
llama-cpp-python built here, the fallback), each through Tabletalk and directly; and the time
from "Use the built-in model" to the first answer on a clean data folder.

    .venv/bin/python benchmarks/local_model.py [--runs N] [--prompt TEXT] [--threads N]
                                               [--runtimes xllamacpp,llama-cpp-python] [--fresh]
    .venv/bin/python benchmarks/local_model.py --upload [--runs N]

Needs the wheels `make llama` keeps in .cache/wheels; the old runtime, llama-cpp-python, only
when its wheel (built once with `CMAKE_ARGS=-DGGML_NATIVE=OFF pip wheel --no-deps -w
.cache/wheels llama-cpp-python==0.3.36`, and its server's dependencies beside it) is there
too, else that side is left out and said so. For each runtime the built-in model is installed
from .cache/wheels into a temporary data folder, offline (as the page's "Use the built-in
model" does; the install's time is reported), `tabletalk serve` starts and supervises its
server (SmolLM2-135M-Instruct Q4_1, TABLETALK_MODEL_THREADS threads), and then N rounds, the
runtimes alternating within each round (A B, A B ...: both in one sitting, the load shared),
each measuring, one after the other:

1. Through Tabletalk: a message posted to a conversation with the composer's form while
   the conversation's live stream (`GET /c/ID/events`, what a page follows) is open.
   First token: from the POST until the first stream message that carries the answer's
   text (so it includes Tabletalk's request set-up, the model's prompt processing, the
   runner's 50 ms writes, the feed and the 40-character reveal grid). Tokens/s: the answer's
   tokens after those that first message showed (the server's own tokenizer) over the time
   from that message to the one that marks the answer done.
2. Directly: the very request Tabletalk sent (recorded by a pass-through proxy in front of
   the model server: the workers are pointed at it through the address file the supervisor
   writes, model/server.json) sent again straight to the server. First token: until the
   first chunk with content. Tokens/s: the chunks with content (one token each) over the
   time from the first to the last.

The model samples (Tabletalk sends no temperature), so answers differ in length between
the two; each side's tokens/s is its own tokens over its own time. Before each measurement
the server is left idle (Tabletalk's title request after a first answer runs to its end) and
sent a small unrelated request (it keeps the last prompt's state, which would make the
second of two identical requests look quicker). Each round's prompt is its own ("Round N.
..."). llama.cpp's server also keeps earlier prompts in memory and takes what a new one
shares with them (the agent's instructions, through Tabletalk, as it does for a person): the
direct request, Tabletalk's again, is sent to it with `cache_prompt: false`, so both
runtimes' direct first tokens process the whole prompt. LOCAL_MODEL_DEBUG=1 prints what the page's
stream received, with times.

--upload: a GGUF model uploaded on /model instead (the runtimes are left alone): SmolLM2's own
file (94 MB, from .cache/llama), or a made one of 100 MB, sent N times each way, the page's
script's (the file as the body, Content-Range) and the plain form's (multipart), to a
`tabletalk serve` of one worker on a temporary data folder. For each: the time, and the
worker's memory (/proc/PID/status): its RSS before and after, and its peak while the body
streamed (VmHWM, reset before each upload through /proc/PID/clear_refs, which takes root):
the body is written as it comes, a megabyte at a time, so the peak must not grow by the
file's size.

--fresh: a clean data folder, no TABLETALK_MODEL_WHEELS and an empty pip cache of its own
(PIP_CACHE_DIR), the owner's "Use the built-in model" posted as the page posts it, then a
message once it is ready: the times from the choice to ready, to the first answer's first
token, and to its end (the issue's goal: an answer within 30 s on 2 cores). Prints a table
and the load average, and exits.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.store import db as dbm, schema  # noqa: E402
from app import builtin  # noqa: E402
from app.builtin import runtime  # noqa: E402
from app.builtin.install import Installer  # noqa: E402
from app.store import Store  # noqa: E402
from tests.conftest import Served  # noqa: E402
from tests.fakes import gguf as made  # noqa: E402

from _shared import HOST, Table, free_port  # noqa: E402  (beside this script)

WHEELS = ROOT / ".cache/wheels"


class Proxy:
    """Bytes passed through to the model server as they come; the streamed chat requests'
    bodies kept, and when bytes last moved (to wait for an idle server)."""

    def __init__(self, upstream_port: int):
        self.upstream = upstream_port
        self.port = free_port()
        self.bodies: list[bytes] = []
        self.arrived: list[float] = []  # when each body was whole
        self.answered: list[tuple[float, bytes]] = []  # the server's bytes as they came (for LOCAL_MODEL_DEBUG)
        self.moved = time.monotonic()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start():
            await asyncio.start_server(self._client, HOST, self.port)
            ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(HOST, self.upstream)
        seen = bytearray()

        async def pump(src, dst, keep: bool):
            try:
                while data := await src.read(65536):
                    self.moved = time.monotonic()
                    if keep:
                        seen.extend(data)
                        self._requests(seen)
                    else:
                        self.answered.append((time.monotonic(), data[:120]))
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    def _requests(self, seen: bytearray) -> None:
        while (end := seen.find(b"\r\n\r\n")) >= 0:
            head = bytes(seen[:end]).decode("latin-1")
            length = re.search(r"(?im)^content-length:\s*(\d+)", head)
            size = int(length[1]) if length else 0
            if len(seen) < end + 4 + size:
                return
            body = bytes(seen[end + 4:end + 4 + size])
            del seen[:end + 4 + size]
            if head.startswith("POST") and "/chat/completions" in head.split("\r\n", 1)[0]:
                try:
                    if json.loads(body).get("stream"):
                        self.bodies.append(body)
                        self.arrived.append(time.monotonic())
                except ValueError:
                    pass

    def idle(self, quiet: float = 1.5, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() - self.moved < quiet and time.monotonic() < deadline:
            time.sleep(0.1)


def tokens_of(server: str, text: str) -> int:
    """`text`'s tokens by the server's own tokenizer (llama.cpp's /tokenize, else llama-cpp-python's)."""
    r = httpx.post(f"{server}/tokenize", json={"content": text}, timeout=30)
    if r.status_code == 404:
        r = httpx.post(f"{server}/extras/tokenize", json={"input": text}, timeout=30)
    r.raise_for_status()
    return len(r.json()["tokens"])


def direct(server: str, body: bytes) -> tuple[float, float, int]:
    """(first token s, tokens/s, tokens) of one streamed request straight to the server."""
    t0 = time.monotonic()
    first = last = 0.0
    n = 0
    with httpx.stream("POST", f"{server}/v1/chat/completions", content=body,
                      headers={"content-type": "application/json"}, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                continue
            chunk = json.loads(line[5:])
            for choice in chunk.get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    last = time.monotonic()
                    first = first or last
                    n += 1
    return first - t0, (n - 1) / (last - first) if n > 1 and last > first else float("nan"), n


def through_tabletalk(s: Served, data: Path, server: str, prompt: str, proxy: Proxy) -> tuple[float, float, int]:
    """(first token s, tokens/s, tokens) of one answer as a page following it receives it."""
    chat = s.empty_chat()
    db = sqlite3.connect(data / "tabletalk.db")
    since = db.execute("SELECT rev FROM revs").fetchone()[0]
    messages: list[tuple[float, str]] = []
    opened = threading.Event()
    stop = threading.Event()

    def follow():
        with s.client(timeout=httpx.Timeout(300, connect=10)) as c, \
                c.stream("GET", f"{chat}/events?since={since}") as r:
            opened.set()
            buf = ""
            for piece in r.iter_text():
                buf += piece
                while "\n\n" in buf:
                    message, buf = buf.split("\n\n", 1)
                    messages.append((time.monotonic(), message))
                if stop.is_set():
                    return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    opened.wait(10)
    with s.client() as c:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get(chat).text)[1]
        t0 = time.monotonic()
        r = c.post(f"{chat}/ask", data={"_csrf_token": token, "text": prompt}, follow_redirects=False)
        assert r.status_code == 303, r.text
    chat_id = int(chat.rsplit("/", 1)[1])

    def answer():
        row = db.execute("SELECT id, text FROM items WHERE chat = ? AND kind = 'text' AND done = 1", [chat_id]).fetchone()
        errors = db.execute("SELECT text FROM items WHERE chat = ? AND kind = 'error'", [chat_id]).fetchall()
        if errors:
            raise SystemExit(f"the answer failed: {errors}")
        return row

    deadline = time.monotonic() + 300
    while (found := answer()) is None:
        if time.monotonic() > deadline:
            raise SystemExit("no answer through Tabletalk in 300 s")
        time.sleep(0.05)
    item, text = found
    time.sleep(0.5)  # the feed's last message
    stop.set()
    dom = f"i{item}"
    shows = [t for t, m in messages if t >= t0 and (f'"{dom}-0"' in m or f't={dom}-' in m or f't="{dom}-' in m)]
    ends = [t for t, m in messages if t >= t0 and f'id="{dom}-s"' in m and "done" in m]
    db.close()
    if os.environ.get("LOCAL_MODEL_DEBUG"):
        print("requests at", [round(a - t0, 3) for a in proxy.arrived if a >= t0], file=sys.stderr)
        for t, b in [(t, b) for t, b in proxy.answered if t >= t0][:8]:
            print(f"  server {t - t0:7.3f} {b!r}", file=sys.stderr)
        for t, m in messages:
            print(f"{t - t0:7.3f} {m[:300]!r}", file=sys.stderr)
    if not shows or not ends:
        raise SystemExit(f"the stream did not show the answer {dom} ({len(messages)} messages)")
    n = tokens_of(server, text)
    # the rate from the first text shown: the tokens it showed at once are not counted
    first_shown = next(m for t, m in messages if t == shows[0])
    at_once = tokens_of(server, re.sub(r"<[^>]+>|^data:|^id:\d+", "", first_shown.split(f'{dom}-', 1)[1], flags=re.M))
    after = n - at_once
    return shows[0] - t0, after / (ends[0] - shows[0]) if ends[0] > shows[0] and after > 0 else float("nan"), n


ENV = {"AI_URL": "", "OLLAMA_HOST": "", "LOCAL_AI_URL": "", "AI_ACCOUNTS": "", "AI_MODEL": f"local:{builtin.NAME}"}
FLUSH = json.dumps({"model": builtin.NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                    "stream": True}).encode()


class Side:
    """One runtime: installed into a data folder of its own, served by a `tabletalk serve` of
    its own, with the proxy in front of its model server."""

    def __init__(self, which: runtime.Runtime, threads: int, table: Table):
        self.runtime = which
        self.data = Path(tempfile.mkdtemp(prefix=f"tabletalk-{which.package}-")) / "data"
        self.env = ENV | {"TABLETALK_DATA": str(self.data), "TABLETALK_MODEL_THREADS": str(threads)}
        self.table = table
        self.results: dict[str, list[tuple[float, float, int]]] = {"tabletalk": [], "direct": []}

    def label(self, what: str) -> str:
        return f"{self.runtime.name}: {what}"

    def start(self) -> None:
        t = time.monotonic()
        Installer(builtin.Paths(self.data), lambda p: None, WHEELS, runtime=self.runtime).run()
        self.table.add(self.label("install from .cache/wheels (offline)"), f"{time.monotonic() - t:.1f} s")
        db = dbm.connect(self.data / "tabletalk.db")
        schema.migrate(db)
        Store(db).set_builtin(state="ready")
        db.conn.close()
        t = time.monotonic()
        self.served = Served(self.data, self.env).start()
        while not builtin.url_of(self.data):
            if time.monotonic() - t > 120:
                raise SystemExit(f"the built-in model's server ({self.runtime.name}) did not come up")
            time.sleep(0.1)
        self.table.add(self.label("serve start -> model server up"), f"{time.monotonic() - t:.1f} s")
        self.server = builtin.url_of(self.data).removesuffix("/v1")
        self.proxy = Proxy(int(self.server.rsplit(":", 1)[1]))
        address = builtin.Paths(self.data).address
        found = json.loads(address.read_text())
        address.write_text(json.dumps({**found, "url": f"http://{HOST}:{self.proxy.port}/v1"}))
        direct(self.server, FLUSH)  # the model's first run is slower: not counted

    def round(self, prompt: str) -> None:
        # the server keeps the last prompt's state: an unrelated request first, so neither
        # side finds the other's prompt ready
        self.proxy.idle()
        direct(self.server, FLUSH)
        self.results["tabletalk"].append(through_tabletalk(self.served, self.data, self.server, prompt, self.proxy))
        self.proxy.idle()
        direct(self.server, FLUSH)
        replay = self.proxy.bodies[-1]
        if self.runtime is runtime.XLLAMACPP:  # llama.cpp keeps earlier prompts: this one would be a whole hit
            replay = json.dumps({**json.loads(replay), "cache_prompt": False}).encode()
        self.results["direct"].append(direct(self.server, replay))

    def report(self, runs: int) -> None:
        for side, how in (("direct", "directly"), ("tabletalk", "through Tabletalk")):
            first = statistics.median(r[0] for r in self.results[side])
            rate = statistics.median(r[1] for r in self.results[side])
            tokens = statistics.median(r[2] for r in self.results[side])
            self.table.add(self.label(f"first token, {how} (median of {runs})"), f"{first * 1000:.0f} ms")
            self.table.add(self.label(f"tokens/s, {how}"), f"{rate:.1f} (answers of ~{tokens:.0f} tokens)")
        pairs = list(zip(self.results["tabletalk"], self.results["direct"]))
        self.table.add(self.label("first token each run, directly / through Tabletalk"),
                       ", ".join(f"{d[0] * 1000:.0f}/{tt[0] * 1000:.0f}" for tt, d in pairs) + " ms")
        self.table.add(self.label("first token: Tabletalk adds (median)"),
                       f"{statistics.median(tt[0] - d[0] for tt, d in pairs) * 1000:.0f} ms")
        self.table.add(self.label("tokens/s through Tabletalk / directly (median)"),
                       f"{statistics.median(tt[1] / d[1] for tt, d in pairs):.2f}")
        sent = json.loads(self.proxy.bodies[-1])
        usage = httpx.post(f"{self.server}/v1/chat/completions", json={**sent, "stream": False, "max_tokens": 1},
                           timeout=300).json()["usage"]
        self.table.add(self.label("prompt tokens of Tabletalk's request"),
                       f"{usage['prompt_tokens']} ({len(sent.get('tools') or [])} tools)")

    def stop(self) -> None:
        if hasattr(self, "served"):
            self.served.stop()


def fresh(table: Table, prompt: str, threads: int) -> None:
    """From the owner's choice on a clean data folder, with nothing cached, to the first answer."""
    folder = Path(tempfile.mkdtemp(prefix="tabletalk-fresh-"))
    data = folder / "data"
    env = ENV | {"TABLETALK_DATA": str(data), "TABLETALK_MODEL_WHEELS": "", "PIP_CACHE_DIR": str(folder / "pip-cache"),
                 "TABLETALK_MODEL_THREADS": str(threads)}
    s = Served(data, env).start()
    try:
        with s.client() as c:
            token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/").text)[1]
            chosen = time.monotonic()
            r = c.post("/model/builtin", data={"_csrf_token": token}, headers={"referer": f"{s.url}/"},
                       follow_redirects=False)
            assert r.status_code == 303, r.text
        db = sqlite3.connect(data / "tabletalk.db")
        try:
            while (row := db.execute("SELECT state, serving, error FROM builtin_model").fetchone())[:2] != ("ready", "up"):
                if row[0] == "failed":
                    raise SystemExit(f"the install failed: {row[2]}")
                if time.monotonic() - chosen > 600:
                    raise SystemExit(f"not ready in 600 s: {row}")
                time.sleep(0.05)
        finally:
            db.close()
        ready = time.monotonic()
        server = builtin.url_of(data).removesuffix("/v1")
        proxy = Proxy(int(server.rsplit(":", 1)[1]))  # through_tabletalk reads what it records
        address = builtin.Paths(data).address
        address.write_text(json.dumps({**json.loads(address.read_text()), "url": f"http://{HOST}:{proxy.port}/v1"}))
        asked = time.monotonic()
        first, _, _ = through_tabletalk(s, data, server, prompt, proxy)
        ended = time.monotonic()
    finally:
        s.stop()
    table.add("fresh: 'Use the built-in model' -> ready (installed, server up)", f"{ready - chosen:.1f} s")
    table.add("fresh: 'Use the built-in model' -> the first answer's first token", f"{asked + first - chosen:.1f} s")
    table.add("fresh: 'Use the built-in model' -> the first answer done", f"{ended - chosen:.1f} s")


def memory(pid: int) -> dict[str, int]:
    """A process's resident memory now and at its peak (VmRSS, VmHWM), in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    return found


def uploads(table: Table, runs: int) -> None:
    """A GGUF uploaded both ways, `runs` times each: time and the worker's memory."""
    folder = Path(tempfile.mkdtemp(prefix="tabletalk-upload-"))
    smol = sorted((ROOT / ".cache/llama").glob(f"lib/python*/site-packages/{builtin.GGUF}"))
    if smol:
        model = smol[0]
    else:  # a made one: a header, then 100 MB of zeros as its one tensor
        model = folder / "made.gguf"
        model.write_bytes(made.gguf(made.model(), {"token_embd.weight": (100 * 1024 * 1024 // 4,)}))
    size = model.stat().st_size
    data = folder / "data"
    s = Served(data, ENV | {"TABLETALK_DATA": str(data)}).start()
    try:
        pid = s.worker_pids()[-1]
        with s.client(timeout=300) as c:
            token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/model").text)[1]

            def script(name: str) -> httpx.Response:
                with open(model, "rb") as f:
                    return c.post("/model/upload", params={"file": name, "key": "benchmark0" + name[-1]}, content=f,
                                  headers={"X-CSRFToken": token, "Content-Type": "application/octet-stream",
                                           "Content-Range": f"bytes 0-{size - 1}/{size}"})

            def form(name: str) -> httpx.Response:
                with open(model, "rb") as f:
                    return c.post("/model/upload", data={"_csrf_token": token}, files={"file": (name, f)})

            for way, send in (("the page's script", script), ("a plain form", form)):
                send("Warm-up-0.gguf")  # the route's code and its page loaded once
                (data / "models" / "Warm-up-0.gguf").unlink()
                seconds, peaks, grew = [], [], []
                for n in range(1, runs + 1):
                    before = memory(pid)["VmRSS"]
                    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
                    t = time.monotonic()
                    r = send(f"Upload-{n}.gguf")
                    seconds.append(time.monotonic() - t)
                    assert r.status_code in (200, 303), r.text[:300]
                    after = memory(pid)
                    peaks.append(after["VmHWM"] - before)
                    grew.append(after["VmRSS"] - before)
                    table.add(f"{way}, upload {n}: RSS before -> peak -> after",
                              f"{before / 1e6:.1f} -> {after['VmHWM'] / 1e6:.1f} -> {after['VmRSS'] / 1e6:.1f} MB")
                    (data / "models" / f"Upload-{n}.gguf").unlink()
                median = statistics.median(seconds)
                table.add(f"{way}: {size / 1e6:.0f} MB uploaded (median of {runs})",
                          f"{median:.2f} s, {size / 1e6 / median:.0f} MB/s")
                table.add(f"{way}: the worker's peak over its RSS before (largest of {runs})",
                          f"{max(peaks) / 1e6:.1f} MB", f"far below the file's {size / 1e6:.0f} MB")
                table.add(f"{way}: the worker's RSS after over before (largest of {runs})", f"{max(grew) / 1e6:.1f} MB")
    finally:
        s.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prompt", default="Write a short paragraph about the sea.")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runtimes", default="xllamacpp,llama-cpp-python")
    parser.add_argument("--fresh", action="store_true", help="also: the owner's choice to the first answer, from the index")
    parser.add_argument("--upload", action="store_true", help="only: a GGUF uploaded on /model, time and memory")
    args = parser.parse_args(argv)
    if args.upload:
        table = Table(echo=True)
        uploads(table, args.runs)
        table.add("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        table.print()
        return 0
    if runtime.XLLAMACPP.wheel_in(WHEELS) is None:
        raise SystemExit("run `make llama` first: it keeps the built-in model's wheels in .cache/wheels")
    table = Table(echo=True)
    table.add("threads (TABLETALK_MODEL_THREADS)", str(args.threads))
    sides = []
    for name in args.runtimes.split(","):
        which = next(r for r in runtime.RUNTIMES if r.name == name)
        if which.wheel_in(WHEELS) is None:
            table.add(f"{which.name}: left out", f"no {which.wheel}-*.whl in {WHEELS}")
            continue
        sides.append(Side(which, args.threads, table))
    try:
        for side in sides:
            side.start()
        for n in range(1, args.runs + 1):
            for side in sides:  # a prompt of each round's own: no runtime finds it cached whole
                side.round(f"Round {n}. {args.prompt}")
        for side in sides:
            side.report(args.runs)
    finally:
        for side in sides:
            side.stop()
    if args.fresh:
        fresh(table, args.prompt, args.threads)
    table.add("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
