"""What parallel uploads cost the server's memory: one person sends N messages at once, each
with F text files of S MB, to a real `tabletalk serve --workers 1`, and the server's resident
memory (every process of it, granian's and its worker's) is sampled every 10 ms from before
the first byte until every message is answered.

    .venv/bin/python benchmarks/uploads.py                      # 3 messages of 10 x 9 MB (the goal's)
    .venv/bin/python benchmarks/uploads.py --messages 1 --files 2 --size 1   # a quick look

The files are distinct ASCII text (so each is stored, and read for the model, on its own):
written to a temporary folder first and streamed from there by the client, so the client's
memory is not the server's. The model server is the fake OpenAI server of tests/fakes (in
this process, on loopback): each message's answer is asked for, its attachments read for
the request as any model's would be. Goal (issue 38): three parallel 90 MB messages add at
most 50 MB to the server's memory.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import httpx  # noqa: E402

from _serving import Served, tree_cpu  # noqa: E402
from _shared import Table  # noqa: E402
from tests.conftest import COOKIE, signed_in  # noqa: E402
from tests.fakes.openai_server import FakeModelServer  # noqa: E402

MB = 1024 * 1024


def rss(pids) -> int:
    """Resident bytes of these processes, together."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        total += int(found.group(1)) * 1024 if found else 0
    return total


class Sampler(threading.Thread):
    """The server's resident memory every `every` seconds, its highest kept."""

    def __init__(self, root: int, every: float = 0.01):
        super().__init__(daemon=True)
        self.root, self.every, self.peak, self.stopped = root, every, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.peak = max(self.peak, rss(tree_cpu(self.root)))
            time.sleep(self.every)


def text_file(path: Path, size: int, tag: str) -> None:
    line = (f"{tag}: the quick brown fox jumps over the lazy dog " * 2)[:99] + "\n"
    block = (line * (MB // len(line) + 1)).encode()[:MB]
    with open(path, "wb") as f:
        for k in range(size // MB):
            f.write(block[:-16] + f"{k:015d}\n".encode())
        f.write(block[: size % MB])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=3, help="messages sent at once (default 3)")
    ap.add_argument("--files", type=int, default=10, help="files a message (default 10)")
    ap.add_argument("--size", type=float, default=9, help="MB a file (default 9)")
    args = ap.parse_args()
    size = int(args.size * MB)
    table = Table(echo=True)
    with tempfile.TemporaryDirectory(prefix="tabletalk-uploads-") as tmp, FakeModelServer() as model:
        model.default = ["Read."]
        folder = Path(tmp)
        data = folder / "data"
        token = signed_in(data)
        paths = []
        for m in range(args.messages):
            for f in range(args.files):
                paths.append(folder / f"m{m}-f{f}.txt")
                text_file(paths[-1], size, f"message {m} file {f}")
        served = Served(data, model.url, "fake-model", data / "tabletalk.db", 10)
        served.env |= {"TABLETALK_UPLOAD_MAX": str(max(size, 10 * MB)),
                       "TABLETALK_UPLOAD_COUNT": str(max(args.files, 10))}
        served.start()
        try:
            served.wait_healthy()
            base = f"http://127.0.0.1:{served.port}"
            with httpx.Client(base_url=base, cookies={COOKIE: token}, timeout=600) as client:
                for _ in range(3):  # warm: the pages, the templates, a message without files
                    client.get("/")
                token_form = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
                first = client.post("/c", data={"_csrf_token": token_form, "text": "warm up"}, follow_redirects=False)
                chat = first.headers["location"]
                time.sleep(2)
                client.get(chat)
                before = rss(tree_cpu(served.proc.pid))
                sampler = Sampler(served.proc.pid)
                sampler.start()

                def send(m: int) -> tuple[int, float]:
                    started = time.monotonic()
                    handles = [open(p, "rb") for p in paths[m * args.files:(m + 1) * args.files]]
                    try:
                        r = client.post(chat + "/ask", data={"_csrf_token": token_form, "text": f"message {m}"},
                                        files=[("file", (p.name, h, "text/plain")) for p, h in
                                               zip(paths[m * args.files:], handles)],
                                        headers={"HX-Request": "true"})
                    finally:
                        for h in handles:
                            h.close()
                    return r.status_code, time.monotonic() - started

                started = time.monotonic()
                with ThreadPoolExecutor(args.messages) as pool:
                    results = list(pool.map(send, range(args.messages)))
                sent = time.monotonic() - started
                received = sampler.peak  # the highest while the uploads were received and stored
                deadline = time.monotonic() + 300
                while 'data-running="1"' in client.get(chat).text and time.monotonic() < deadline:
                    time.sleep(0.2)
                sampler.stopped.set()
                sampler.join()
                after = rss(tree_cpu(served.proc.pid))
            stored = sum(f.stat().st_size for f in (data / "files").rglob("*") if f.is_file())
        finally:
            served.stop()
    total = args.messages * args.files * size
    table.add("messages at once x files x size",
              f"{args.messages} x {args.files} x {args.size:g} MB = {total / MB:,.0f} MB")
    table.add("statuses", ", ".join(str(s) for s, _ in results), "all 204")
    table.add("sent in", f"{sent:.1f} s")
    table.add("server memory before", f"{before / MB:,.1f} MB")
    table.add("added while received and stored", f"{(received - before) / MB:,.1f} MB")
    table.add("server memory at its peak", f"{sampler.peak / MB:,.1f} MB")
    table.add("added at the peak (answers included)", f"{(sampler.peak - before) / MB:,.1f} MB", "<= 50 MB")
    table.add("server memory once answered", f"{after / MB:,.1f} MB")
    table.add("bytes stored (files/)", f"{stored / MB:,.1f} MB")
    table.add("model requests", str(len(model.streamed)))
    table.print()


if __name__ == "__main__":
    main()
