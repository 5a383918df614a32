"""What `tabletalk serve` costs to start and to keep: time to /healthz, memory of every process.

    .venv/bin/python benchmarks/start.py [--runs 3] [--conversations 300] [--imports]

Each run starts `tabletalk serve --workers 1` (a process group of its own, AI_URL at the
fake OpenAI server run in this script, TABLETALK_PASSWORD set as the other benchmarks do)
on a data folder and measures:

- **start -> /healthz**: from just before the process is started until /healthz first
  answers 200 (polled every 10 ms).
- **RSS / PSS of every process** serve started: the processes of its group (serve itself,
  granian's worker, the built-in model's supervisor when it runs) and their descendants,
  from /proc/PID/status (VmRSS) and /proc/PID/smaps_rollup (Pss: a page shared by N
  processes counts 1/N in each, so the sum is what the group takes), 2 s after /healthz
  (idle) and again after one answer of the fake (~2,000 tokens at once) with one page
  open on it.

Data folders: `fresh` (empty: the first start makes the database), `populated`
(`--conversations` conversations of 4 messages and answers each, written once with
`app.store.Store` and used by every run, so its later starts are starts on a folder that
has run before).

`--imports` also prints `python -X importtime -c "import app.web.app"`'s total and its
heaviest packages (cumulative), the import a start of serve pays.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import re
import shutil
import sqlite3
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

import feed as fb  # noqa: E402  (benchmarks/feed.py: the served app, a raw follower, pages)
from _shared import HOST, Table  # noqa: E402
from tests.fakes.openai_server import FakeModelServer, text  # noqa: E402

from app.store import schema

FIXTURE = ROOT / "tests" / "fixtures" / "long_answer.md"


def group(pgid: int) -> list[int]:
    """The processes of a process group, and every descendant of them (a session of its own:
    the built-in model's server)."""
    found = fb.processes(fb.GROUP, pgid)
    todo = list(found)
    while todo:
        kids = fb.children(todo.pop())
        for k in kids:
            if k not in found:
                found.append(k)
                todo.append(k)
    return sorted(found)


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def name_of(pid: int, serve: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    line = b" ".join(cmd).decode(errors="replace")
    if pid == serve:
        return "serve"
    if "app.serve.supervise" in line:
        return "supervisor"
    if "llama_cpp.server" in line or "xllamacpp" in line:
        return "model server"
    return "worker" if "app.admin.cli" in line or "granian" in line or "python" in line else line[:30]


def memory(serve: int) -> dict[str, tuple[int, int]]:
    """name -> (RSS KiB, PSS KiB) of each process of serve's group."""
    out: dict[str, tuple[int, int]] = {}
    for pid in group(serve):
        try:
            rss = fb.rss_kib(pid)
        except OSError:
            continue
        name = name_of(pid, serve)
        while name in out:
            name += "'"
        out[name] = (rss, pss_kib(pid))
    return out


def populate(data: Path, conversations: int) -> None:
    from app.store import Store
    from app.store import db as dbm
    from app.tables import item

    data.mkdir(parents=True, exist_ok=True)
    db = dbm.connect(data / "tabletalk.db")
    schema.migrate(db)
    store = Store(db)
    answer = FIXTURE.read_text()[:2000]
    from app.accounts.rules import Accounts
    from app.accounts.passwords import hash_password

    people = Accounts(store)
    owner = people.add("owner", hash_password(fb.PASSWORD), owner=True).id
    agent = store.default_agent(owner)
    with store.write():
        for n in range(conversations):
            chat = store.new_conversation(agent.id if agent else None, person=owner).id
            for k in range(4):
                user = store.add(item("user", chat, f"question {n}.{k}", done=True))
                store.add(item("text", chat, answer, turn=user.id, model=fb.MODEL, done=True))
    db.conn.close()


def start(data: Path, fake_url: str) -> tuple[fb.Served, float]:
    served = fb.Served(data, fake_url)
    served.data.mkdir(parents=True, exist_ok=True)
    out = open(served.log, "ab")
    t0 = time.monotonic()
    served.proc = subprocess.Popen(
        [sys.executable, "-m", "app.admin.cli", "serve", "--host", HOST, "--port", str(served.port), "--workers", "1"],
        cwd=ROOT, env=served.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    deadline = t0 + 60
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise RuntimeError(f"tabletalk serve exited:\n{served.log.read_text()[-3000:]}")
        try:
            c = http.client.HTTPConnection(HOST, served.port, timeout=1)
            c.request("GET", "/healthz")
            ok = c.getresponse().status == 200
            c.close()
            if ok:
                return served, time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"tabletalk serve did not come up:\n{served.log.read_text()[-3000:]}")


async def one_answer(served: fb.Served) -> None:
    web = fb.Web(served.port)
    chat, since, token = web.new_conversation(served.data)
    loop = asyncio.get_running_loop()
    _, follower = await loop.create_connection(lambda: fb.Follower(f"/c/{chat}/events?since={since}", served.port),
                                               HOST, served.port)
    await asyncio.wait_for(asyncio.shield(follower.ready), 15)
    await loop.run_in_executor(None, web.ask, chat, "Write the answer", token)
    db = sqlite3.connect(f"file:{served.data / 'tabletalk.db'}?mode=ro", uri=True)
    deadline = time.monotonic() + 60
    try:
        while not db.execute("SELECT 1 FROM items WHERE chat = ? AND kind = 'text' AND done = 1", [chat]).fetchone():
            if time.monotonic() > deadline:
                raise TimeoutError("the answer did not finish")
            await asyncio.sleep(0.05)
    finally:
        db.close()
    await asyncio.sleep(1.0)  # the title, the last messages
    follower.close()


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def imports(table: Table) -> None:
    runs = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import app.web.app"], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        rows = []
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
            if m:
                rows.append((int(m[2]), len(m[3]) // 2, m[4]))
        runs.append(rows)
    totals = [sum(c for c, depth, _ in rows if depth == 0) for rows in runs]
    table.add("python -X importtime: import app.web.app (median of 3)", f"{statistics.median(totals) / 1e6:.2f} s")
    last = runs[-1]
    # each package by the cumulative time of its outermost imports (importtime prints an
    # import's children, deeper, before it)
    stack: list[tuple[int, str]] = []
    outer: dict[str, int] = {}
    for cumulative, depth, name in reversed(last):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        top = name.split(".")[0]
        if top != "app" and not any(n.split(".")[0] == top for _, n in stack):
            outer[top] = outer.get(top, 0) + cumulative
        stack.append((depth, name))
    heavy = sorted(outer.items(), key=lambda kv: -kv[1])[:10]
    table.add("heaviest packages (cumulative, last run)", ", ".join(f"{k} {v / 1000:.0f} ms" for k, v in heavy))


async def run(args) -> int:
    table = Table(echo=True)
    fake = FakeModelServer(models={fb.MODEL: 32768}).start()
    fake.default = [text(FIXTURE.read_text())]
    fake.plain_default = [text("A title")]
    print(f"load average at start: {fb.loadavg()}", file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix="tabletalk-start-"))
    populated = folder / "populated" / "data"
    populate(populated, args.conversations)
    try:
        for kind in ("fresh", "populated"):
            times: list[float] = []
            idle: list[dict[str, tuple[int, int]]] = []
            after: list[dict[str, tuple[int, int]]] = []
            for n in range(args.runs):
                data = populated if kind == "populated" else folder / f"fresh{n}" / "data"
                served, took = start(data, fake.url)
                try:
                    times.append(took)
                    time.sleep(2.0)
                    idle.append(memory(served.proc.pid))
                    await one_answer(served)
                    after.append(memory(served.proc.pid))
                finally:
                    served.stop()
            table.add(f"{kind}: start -> /healthz s (each run)", ", ".join(f"{t:.2f}" for t in times))
            for label, snaps in (("idle", idle), ("after one answer", after)):
                names = sorted({k for s in snaps for k in s})
                parts = []
                for name in names:
                    rss = [s[name][0] for s in snaps if name in s]
                    pss = [s[name][1] for s in snaps if name in s]
                    parts.append(f"{name} {mib(statistics.median(rss))}/{mib(statistics.median(pss))}")
                total_rss = statistics.median(sum(v[0] for v in s.values()) for s in snaps)
                total_pss = statistics.median(sum(v[1] for v in s.values()) for s in snaps)
                table.add(f"{kind}, {label}: RSS/PSS MiB (median)",
                          f"{'; '.join(parts)}; all {mib(total_rss)}/{mib(total_pss)} ({len(snaps[0])} processes)")
        if args.imports:
            imports(table)
    finally:
        fake.stop()
        shutil.rmtree(folder, ignore_errors=True)
    table.add("load average (1, 5, 15 min) at the end", fb.loadavg())
    table.print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="starts per data folder")
    p.add_argument("--conversations", type=int, default=300, help="conversations in the populated folder")
    p.add_argument("--imports", action="store_true", help="also the import time of the app (python -X importtime)")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
