"""The runner under load: many conversations answered at once by one worker, and a kill -9.

    .venv/bin/python benchmarks/runs.py [--runs N] [--rate TPS] [--tokens T] [--kill-runs K]

`tabletalk serve --workers 1` runs as a real process (its own process group, its own
temporary TABLETALK_DATA) against the fake OpenAI server started in this process, which
answers every conversation with the same T-token text paced at TPS tokens a second.
The conversations and their messages are written as rows through the app's own Store, in
one transaction, so all N become pending at once; the server's feed sees the commit
through its `PRAGMA data_version` poll and its runner picks them up, exactly as it would
pick up messages posted by another worker.

Two phases, each on a fresh data folder:

1. Throughput: N answers at once. Tokens/s, row writes/s (the rev counter's delta: every
   insert or update of a row a page shows takes one rev), the delay from a chunk leaving
   the model server to its text being committed in SQLite (p50/p99), and the CPU seconds
   of the serving process tree per 1,000 tokens.
2. Resume: K answers in flight, SIGKILL to the server's whole process group, start again
   on the same folder; the time until every conversation's answer grows again, then a
   check that each message has exactly one text answer, equal to what the model sent.

How the delay is measured: the fake notes time.monotonic() for each chunk it writes, per
conversation (a subclass keyed by the conversation id written in the message). A second
process (so it does not share a GIL with the fake) reads `items` over its own read-only
connection every 10 ms, only rows whose rev moved (`rev > last`), and notes when each
answer's committed length first reached the cumulative length after chunk k (every answer
is the same text, so those lengths are known in advance). CLOCK_MONOTONIC is one clock for
every process on Linux. The poll makes each delay up to 10 ms too long (5 ms on average).
"""
from __future__ import annotations

import argparse
import bisect
import contextlib
import contextvars
import http.client
import itertools
import multiprocessing as mp
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.store import db as dbm  # noqa: E402
from app.store import Store  # noqa: E402
from tests.fakes.openai_server import FakeModelServer, rate, text  # noqa: E402

from _shared import Table, free_port, own_cpu, pct  # noqa: E402  (beside this script)

MODEL = "fake-model"
POLL_SECONDS = 0.01
CLK_TCK = os.sysconf("SC_CLK_TCK")
WORDS = ("the quick brown fox jumps over a lazy dog while seven tired wizards quietly brew "
         "strong coffee and discuss markdown code tables and lists").split()
MARK = re.compile(r"bench-(\d+)")
GOAL_P99_MS = 250
GOAL_RESUME_S = 2.0


def answer_of(tokens: int) -> str:
    return " ".join(itertools.islice(itertools.cycle(WORDS), tokens))


# --- the model server ---------------------------------------------------------------

_TIMES: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("chunk_times", default=None)


def chat_of(body: dict) -> int:
    """The conversation a request is for: its last user message says `bench-<id>`."""
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            found = MARK.search(content or "")
            return int(found.group(1)) if found else -1
    return -1


class RecordingServer(FakeModelServer):
    """The fake, noting when each chunk of each conversation's stream was written.

    `record_times`/`sent_at` is one list for all streams; a delay per conversation needs
    to know whose chunk each time is, so each stream gets its own list (a context
    variable set in the stream's own task).
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        # chat -> [(when the request arrived, time of each chunk written)], one per request
        self.streams: dict[int, list[tuple[float, list[float]]]] = defaultdict(list)

    async def _stream_turn(self, body, steps, req, reader, writer):
        times: list[float] = []
        self.streams[chat_of(body)].append((time.monotonic(), times))
        token = _TIMES.set(times)
        try:
            return await super()._stream_turn(body, steps, req, reader, writer)
        finally:
            _TIMES.reset(token)

    async def _write(self, st, payload: bytes) -> None:
        times = _TIMES.get()
        if times is not None:
            times.append(time.monotonic())
        await super()._write(st, payload)


# --- the watcher of committed text (its own process) --------------------------------

def watch_lengths(path: str, thresholds: list[int], ready, stop, out) -> None:
    """For each text item: when its committed length first reached each threshold."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    seen: dict[int, tuple[int, list[float]]] = {}  # item id -> (chat, times)
    last = 0
    ready.set()
    while not stop.is_set():
        t = time.monotonic()  # what a poll sees was committed before its snapshot, so before ~t
        rows = db.execute(
            "SELECT id, chat, length(text), rev FROM items WHERE rev > ? AND kind = 'text'", (last,)
        ).fetchall()
        for item_id, chat, length, rev in rows:
            last = max(last, rev)
            entry = seen.get(item_id)
            if entry is None:
                entry = seen[item_id] = (chat, [])
            reached = entry[1]
            upto = bisect.bisect_right(thresholds, length)
            while len(reached) < upto:
                reached.append(t)
        time.sleep(max(0.0, POLL_SECONDS - (time.monotonic() - t)))
    out.send(seen)
    out.close()


class Watcher:
    def __init__(self, path: Path, thresholds: list[int]):
        ctx = mp.get_context("spawn")  # not fork: this process has the fake's thread running
        self.ready, self.stop_event = ctx.Event(), ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=watch_lengths, args=(str(path), thresholds, self.ready, self.stop_event, send),
                                daemon=True)
        self.proc.start()
        send.close()
        if not self.ready.wait(30):
            raise RuntimeError("the watcher process did not start")

    def stop(self) -> dict[int, tuple[int, list[float]]]:
        self.stop_event.set()
        seen = self.recv.recv()
        self.proc.join(10)
        return seen

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)


# --- the server under test ----------------------------------------------------------

class Served:
    """`tabletalk serve --workers 1` as a process group of its own (as tests/conftest.py)."""

    def __init__(self, data: Path, ai_url: str):
        self.data = data
        self.env = {**os.environ, "TABLETALK_DATA": str(data), "AI_URL": ai_url, "AI_KEY": "", "AI_MODEL": MODEL}
        self.port = free_port()
        self.log = data.parent / f"serve-{data.name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--workers", "1"],
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def healthy(self) -> bool:
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            c.request("GET", "/healthz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except OSError:
            return False

    def wait_healthy(self, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tabletalk serve exited:\n{self.log.read_text()[-3000:]}")
            if self.healthy():
                return time.monotonic()
            time.sleep(0.01)
        raise RuntimeError(f"tabletalk serve did not come up:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds (user + system) of `root` and every process below it, by pid."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # fields[0] is field 3 (state)
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    members, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        for child, pp in parent.items():
            if pp == p and child not in members:
                members.add(child)
                frontier.append(child)
    return {p: cpu[p] for p in members if p in cpu}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(p, 0.0) for p, v in after.items())


def ask_many(store: Store, n: int) -> list[int]:
    """N conversations with one message each, committed at once."""
    chats = []
    with store.write():
        for _ in range(n):
            chat = store.new_conversation(None).id
            store.ask(chat, f"bench-{chat}: tell me about the fox")
            chats.append(chat)
    return chats


def unanswered(db: sqlite3.Connection) -> int:
    return db.execute("SELECT count(*) FROM items WHERE kind = 'user' AND done = 0").fetchone()[0]


def wait_answered(db: sqlite3.Connection, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if unanswered(db) == 0:
            return True
        time.sleep(0.05)
    return False


@dataclass
class Check:
    turns: int = 0
    duplicated: int = 0  # text answers beyond the first, summed over messages
    missing: int = 0
    wrong: int = 0  # one answer, but not the text the model sent
    errors: int = 0


def check_answers(db: sqlite3.Connection, expected: str) -> Check:
    c = Check()
    texts: dict[int, list[str]] = defaultdict(list)
    for turn, body in db.execute("SELECT turn, text FROM items WHERE kind = 'text'"):
        texts[turn].append(body)
    for (turn,) in db.execute("SELECT id FROM items WHERE kind = 'user'"):
        c.turns += 1
        got = texts.get(turn, [])
        c.duplicated += max(0, len(got) - 1)
        c.missing += not got
        c.wrong += len(got) == 1 and got[0] != expected
    c.errors = db.execute("SELECT count(*) FROM items WHERE kind = 'error'").fetchone()[0]
    return c


def log_trouble(log: Path) -> str:
    """A summary of the server's log; its first traceback goes to stderr."""
    body = log.read_text(errors="replace") if log.exists() else ""
    if "Traceback" in body:
        start = body.rfind("\n", 0, body.index("Traceback")) + 1
        sys.stderr.write(f"--- first traceback in {log.name}:\n{body[start:start + 4000]}\n")
    return f"{body.count('Traceback')} tracebacks, {len(re.findall(r'ERROR|CRITICAL', body))} errors"


def rev(db: sqlite3.Connection) -> int:
    return db.execute("SELECT rev FROM revs").fetchone()[0]


def throughput(args, fake: RecordingServer, folder: Path, pieces: list[str], table: Table) -> None:
    answer = "".join(pieces)
    thresholds = list(itertools.accumulate(len(p) for p in pieces))
    data = folder / "throughput"
    path = data / "tabletalk.db"
    stream_seconds = args.tokens / args.rate
    server = Served(data, fake.url)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(server.stop)
        server.start()
        server.wait_healthy()
        watcher = Watcher(path, thresholds)
        cleanup.callback(watcher.close)
        store = Store(dbm.connect(path))
        cleanup.callback(store.db.conn.close)
        db = sqlite3.connect(path, isolation_level=None)
        cleanup.callback(db.close)
        cpu0, mine0 = tree_cpu(server.proc.pid), own_cpu()
        chats = ask_many(store, args.runs)
        t_asked = time.monotonic()
        rev0, t_rev0 = rev(db), time.monotonic()
        ok = wait_answered(db, timeout=stream_seconds * 4 + 60)
        rev1, t_rev1 = rev(db), time.monotonic()
        cpu1, mine1 = tree_cpu(server.proc.pid), own_cpu()
        seen = watcher.stop()
        check = check_answers(db, answer)
        left = unanswered(db)
        server.stop()

    # Delays: chunk k of a conversation left the fake at times[1 + k] (times[0] is the
    # opening role chunk), and was committed by the first poll where the length reached
    # thresholds[k].
    delays, unseen, last_commit, per_stream_rate = [], 0, t_asked, []
    started = []
    for chat in chats:
        streams = fake.streams.get(chat, [])
        if not streams:
            unseen += len(pieces)
            continue
        arrived, times = streams[0]
        started.append(arrived)
        sent = times[1:1 + len(pieces)]
        if len(sent) > 1:
            per_stream_rate.append((len(sent) - 1) / (sent[-1] - sent[0]))
        committed = [reached for item_id, (c, reached) in seen.items() if c == chat]
        reached = max(committed, key=len) if committed else []
        for k, t_sent in enumerate(sent):
            if k < len(reached):
                delays.append(reached[k] - t_sent)
                last_commit = max(last_commit, reached[k])
            else:
                unseen += 1
    tokens = sum(min(len(s[0][1]) - 1, len(pieces)) for s in (fake.streams.get(c, []) for c in chats) if s)
    wall = max(last_commit - t_asked, 1e-9)
    cpu = cpu_delta(cpu0, cpu1)
    rev_rate = (rev1 - rev0) / (t_rev1 - t_rev0)

    n, tps = args.runs, args.rate
    table.add("[throughput] conversations (rows via Store, 1 txn)", f"{n} x {args.tokens} tokens at {tps:g} tok/s",
              f"{GOAL_RUNS} at {GOAL_RATE:g} tok/s")
    table.add("  answered (done) / errors / missing / wrong",
              f"{n - left} / {check.errors} / {check.missing} / {check.wrong}" + ("" if ok else " (timed out)"),
              f"{n} / 0 / 0 / 0")
    table.add("  all requests at the model server after",
              f"{max(started) - t_asked:.2f} s" if started else "none", "")
    table.add("  model pace achieved per stream (median)", f"{pct(per_stream_rate, 50):.1f} tok/s", f"{tps:g} tok/s")
    table.add("  tokens/s overall (tokens / phase wall time)",
              f"{tokens / wall:,.0f} ({tokens:,} tokens in {wall:.2f} s)",
              f"~{n * tps:,.0f} (ideal wall {stream_seconds:.1f} s)")
    table.add("  row writes/s (rev counter delta / time)", f"{rev_rate:,.0f} ({rev1 - rev0:,} revs in {t_rev1 - t_rev0:.2f} s)",
              f"design: 1 per growing answer per 50 ms tick (<= {n / 0.05:,.0f})")
    table.add("  chunk sent -> text committed, p50", f"{pct(delays, 50) * 1000:.0f} ms", "")
    table.add("  chunk sent -> text committed, p99", f"{pct(delays, 99) * 1000:.0f} ms", f"< {GOAL_P99_MS} ms")
    table.add("  chunk sent -> text committed, max", f"{max(delays, default=float('nan')) * 1000:.0f} ms"
              + (f" ({unseen} chunks never seen committed)" if unseen else ""), "")
    table.add("  CPU s per 1,000 tokens (serve process tree)", f"{cpu / max(tokens, 1) * 1000:.3f} s"
              f" ({cpu:.1f} s CPU = {cpu / wall * 100:.0f}% of a core)", "")
    table.add("  CPU s of this process (fake model server)", f"{mine1 - mine0:.1f} s ({(mine1 - mine0) / wall * 100:.0f}% of a core)", "")
    table.add("  duplicated answers", str(check.duplicated), "0")
    table.add("  server log", log_trouble(server.log), "0 tracebacks")


def resume(args, fake: RecordingServer, folder: Path, pieces: list[str], table: Table) -> int:
    answer = "".join(pieces)
    thresholds = list(itertools.accumulate(len(p) for p in pieces))
    data = folder / "resume"
    path = data / "tabletalk.db"
    k = args.kill_runs
    server = Served(data, fake.url)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(server.stop)
        server.start()
        server.wait_healthy()
        store = Store(dbm.connect(path))
        cleanup.callback(store.db.conn.close)
        db = sqlite3.connect(path, isolation_level=None)
        cleanup.callback(db.close)
        t_asked = time.monotonic()
        chats = set(ask_many(store, k))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every answer has begun to grow
            going = db.execute("SELECT count(DISTINCT chat) FROM items WHERE kind = 'text' AND length(text) > 0").fetchone()[0]
            if going >= k:
                break
            time.sleep(0.01)
        t_going = time.monotonic()
        time.sleep(args.tokens / args.rate / 3)  # cut the answers a third of the way in
        server.kill()
        t_killed = time.monotonic()
        before = db.execute("SELECT coalesce(max(id), 0) FROM items").fetchone()[0]
        partial = db.execute("SELECT count(*), coalesce(avg(length(text)), 0) FROM items "
                             "WHERE kind = 'text' AND done = 0").fetchone()
        completed_before = db.execute("SELECT count(*) FROM items WHERE kind = 'text' AND done = 1").fetchone()[0]
        watcher = Watcher(path, thresholds[:1])  # only "has it grown again": the first chunk committed
        cleanup.callback(watcher.close)
        t_restart = time.monotonic()
        server.start()
        t_healthy = server.wait_healthy()
        ok = wait_answered(db, timeout=args.tokens / args.rate * 4 + 60)
        seen = watcher.stop()
        check = check_answers(db, answer)
        left = unanswered(db)
        server.stop()

    first_growth: dict[int, float] = {}
    for item_id, (chat, reached) in seen.items():
        if item_id > before and reached and chat in chats:
            first_growth[chat] = min(first_growth.get(chat, reached[0]), reached[0])
    again = [fake.streams[c][-1][0] for c in chats if len(fake.streams.get(c, [])) > 1]
    all_going = max(first_growth.values()) - t_restart if len(first_growth) == len(chats) else None
    table.add("[resume] runs in flight at SIGKILL (process group)",
              f"{k} ({partial[0]} partial answers, avg {partial[1]:.0f} chars; {completed_before} already complete)",
              f"{GOAL_KILL}")
    table.add("  before the kill: all answers growing after", f"{t_going - t_asked:.2f} s (killed {t_killed - t_going:.1f} s later)", "")
    table.add("  restart -> server answers /healthz", f"{t_healthy - t_restart:.2f} s", "")
    table.add("  restart -> all requests at the model server again",
              f"{max(again) - t_restart:.2f} s ({len(again)}/{k})" if again else "none", "")
    table.add("  restart -> every answer growing again",
              f"{all_going:.2f} s" if all_going is not None else f"not all: {len(first_growth)}/{k}",
              f"< {GOAL_RESUME_S:g} s")
    table.add("  answered / errors / missing / wrong",
              f"{k - left} / {check.errors} / {check.missing} / {check.wrong}" + ("" if ok else " (timed out)"),
              f"{k} / 0 / 0 / 0")
    table.add("  duplicated answers", str(check.duplicated), "0")
    table.add("  server log (both starts)", log_trouble(server.log), "0 tracebacks")
    return check.duplicated


GOAL_RUNS, GOAL_RATE, GOAL_KILL = 500, 20.0, 100


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=GOAL_RUNS, help="conversations answered at once (default %(default)s)")
    p.add_argument("--rate", type=float, default=GOAL_RATE, help="tokens per second per stream (default %(default)s)")
    p.add_argument("--tokens", type=int, default=200, help="tokens in each answer (default %(default)s)")
    p.add_argument("--kill-runs", type=int, default=GOAL_KILL, help="runs in flight at the kill (default %(default)s; 0 skips)")
    args = p.parse_args(argv)

    pieces = list(text(answer_of(args.tokens)).pieces)
    fake = RecordingServer(models={MODEL: 8192})
    fake.default = [rate(args.rate), text("".join(pieces))]
    fake.plain_default = [text("Bench title")]  # the conversation's name, asked for after the first answer
    table = Table()
    duplicated = 0
    with fake, tempfile.TemporaryDirectory(prefix="tabletalk-bench-") as tmp:
        folder = Path(tmp)
        print(f"tabletalk serve --workers 1, fake model at {fake.url}; conversations and messages are written as "
              f"rows with app.store.Store (one transaction), not posted through the form.", flush=True)
        try:
            if args.runs:
                throughput(args, fake, folder, pieces, table)
            if args.kill_runs:
                duplicated = resume(args, fake, folder, pieces, table)
        except Exception as e:  # a table of what was measured is still worth printing
            table.add("benchmark failed", f"{type(e).__name__}: {e}".splitlines()[0][:200])
            for log in folder.glob("serve-*.log"):
                sys.stderr.write(f"--- {log.name} (tail)\n{log.read_text()[-2000:]}\n")
        if fake.errors:
            table.add("fake model server errors", repr(fake.errors[:3]))
    print()
    table.print()
    if args.kill_runs:
        print(f"\nduplicated answers: {duplicated}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
