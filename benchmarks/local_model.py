"""The built-in model through Tabletalk against the same server hit directly: what Tabletalk adds.

    .venv/bin/python benchmarks/local_model.py [--runs N] [--prompt TEXT]

Needs the wheels `make llama` keeps in .cache/wheels. The built-in model is installed from
them into a temporary data folder (as the page's "Use the built-in model" does, offline),
`tabletalk serve` starts and supervises its server (llama-cpp-python 0.3.36, SmolLM2-135M-
Instruct Q4_1, portable build), and each of N rounds measures, one after the other:

1. Through Tabletalk: a message posted to a conversation with the composer's form while
   the conversation's live stream (`GET /c/ID/events`, what a page follows) is open.
   First token: from the POST until the first stream message that carries the answer's
   text (so it includes Tabletalk's request set-up, the model's prompt processing, the
   runner's 50 ms writes, the feed and the 40-character reveal grid). Tokens/s: the answer's
   tokens after those that first message showed (the server's own tokenizer,
   /extras/tokenize) over the time from that message to the one that marks the answer done.
2. Directly: the very request Tabletalk sent (recorded by a pass-through proxy in front of
   the model server: the workers are pointed at it through the address file the supervisor
   writes, model/server.json) sent again straight to the server. First token: until the
   first chunk with content. Tokens/s: the chunks with content (one token each) over the
   time from the first to the last.

The model samples (Tabletalk sends no temperature), so answers differ in length between
the two; each side's tokens/s is its own tokens over its own time. Before each measurement
the server is left idle (Tabletalk's title request after a first answer runs to its end) and
sent a small unrelated request (it keeps the last prompt's state, which would make the
second of two identical requests look quicker). LOCAL_MODEL_DEBUG=1 prints what the page's
stream received, with times. Prints a table of medians (and each run's first tokens: on a busy machine they vary more
than Tabletalk's part in them) and the load average, and exits.
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
from app.builtin.install import Installer, llama_wheel  # noqa: E402
from app.store import Store  # noqa: E402
from tests.conftest import Served  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prompt", default="Write a short paragraph about the sea.")
    args = parser.parse_args(argv)
    if llama_wheel(WHEELS) is None:
        raise SystemExit("run `make llama` first: it keeps the built-in model's wheels in .cache/wheels")
    folder = Path(tempfile.mkdtemp(prefix="tabletalk-local-model-"))
    data = folder / "data"
    table = Table(echo=True)
    t = time.monotonic()
    Installer(builtin.Paths(data), lambda p: None, WHEELS).run()
    table.add("install from .cache/wheels (offline)", f"{time.monotonic() - t:.1f} s")
    db = dbm.connect(data / "tabletalk.db")
    schema.migrate(db)
    Store(db).set_builtin(state="ready")
    db.conn.close()
    env = {"TABLETALK_DATA": str(data), "AI_URL": "", "OLLAMA_HOST": "", "LOCAL_AI_URL": "", "AI_ACCOUNTS": "",
           "AI_MODEL": f"local:{builtin.NAME}"}
    t = time.monotonic()
    s = Served(data, env).start()
    try:
        address = builtin.Paths(data).address
        while not builtin.url_of(data):
            if time.monotonic() - t > 120:
                raise SystemExit("the built-in model's server did not come up")
            time.sleep(0.1)
        table.add("serve start -> model server up", f"{time.monotonic() - t:.1f} s")
        server = builtin.url_of(data).removesuffix("/v1")
        upstream = int(server.rsplit(":", 1)[1])
        proxy = Proxy(upstream)
        found = json.loads(address.read_text())
        address.write_text(json.dumps({**found, "url": f"http://{HOST}:{proxy.port}/v1"}))
        results: dict[str, list[tuple[float, float, int]]] = {"tabletalk": [], "direct": []}
        flush = json.dumps({"model": builtin.NAME, "messages": [{"role": "user", "content": "Hi"}],
                            "max_tokens": 4, "stream": True}).encode()
        direct(server, flush)  # the model's first run is slower: not counted
        for _ in range(args.runs):
            # the server keeps the last prompt's state: an unrelated request first, so neither
            # side finds the other's prompt ready
            proxy.idle()
            direct(server, flush)
            results["tabletalk"].append(through_tabletalk(s, data, server, args.prompt, proxy))
            proxy.idle()
            direct(server, flush)
            results["direct"].append(direct(server, proxy.bodies[-1]))
        for side, label in (("direct", "directly"), ("tabletalk", "through Tabletalk")):
            first = statistics.median(r[0] for r in results[side])
            rate = statistics.median(r[1] for r in results[side])
            tokens = statistics.median(r[2] for r in results[side])
            table.add(f"first token, {label} (median of {args.runs})", f"{first * 1000:.0f} ms")
            table.add(f"tokens/s, {label}", f"{rate:.1f} (answers of ~{tokens:.0f} tokens)")
        table.add("first token each run, directly / through Tabletalk", ", ".join(
            f"{d[0] * 1000:.0f}/{tt[0] * 1000:.0f}" for tt, d in zip(results["tabletalk"], results["direct"])) + " ms")
        overhead = [tt[0] - d[0] for tt, d in zip(results["tabletalk"], results["direct"])]
        table.add("first token: Tabletalk adds (median)", f"{statistics.median(overhead) * 1000:.0f} ms")
        ratio = statistics.median(results["tabletalk"][i][1] / results["direct"][i][1] for i in range(args.runs))
        table.add("tokens/s through Tabletalk / directly (median)", f"{ratio:.2f}")
        sent = json.loads(proxy.bodies[-1])
        usage = httpx.post(f"{server}/v1/chat/completions", json={**sent, "stream": False, "max_tokens": 1},
                           timeout=300).json()["usage"]
        table.add("prompt tokens of Tabletalk's request", f"{usage['prompt_tokens']} ({len(sent.get('tools') or [])} tools)")
        table.add("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        s.stop()
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
