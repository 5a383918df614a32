"""The runner under load: many conversations answered at once, and a kill -9; on SQLite or
on PostgreSQL, by one server or several sharing one database.

    .venv/bin/python benchmarks/runs.py [--runs N] [--rate TPS] [--tokens T] [--kill-runs K]
        [--postgres | --database postgresql://...] [--servers S] [--lease SECONDS]

`tabletalk serve --workers 1` runs as real processes (each its own process group and its
own temporary TABLETALK_DATA; with --postgres or --database all S of them on one
DATABASE_URL) against the fake OpenAI server started in this process, which answers every
conversation with the same T-token text paced at TPS tokens a second. The conversations
and their messages are written as rows through the app's own Store, in one transaction, so
all N become pending at once; each server's feed sees the commit (SQLite: its
`PRAGMA data_version` poll; PostgreSQL: NOTIFY) and the runners take them, each lease once,
splitting them between the servers.

Two phases, each on a fresh data folder (and a fresh database of --postgres's cluster):

1. Throughput: N answers at once. Tokens/s, row writes/s (the rev counter's delta: every
   insert or update of a row a page shows takes one rev), the delay from a chunk leaving
   the model server to its text being committed (p50/p99), the CPU seconds of every serve
   process tree per 1,000 tokens (and PostgreSQL's own, when the cluster is ours), how the
   conversations were split between the servers, and duplicates.
2. Resume: K answers in flight, SIGKILL to a server's whole process group. One server: it
   starts again on the same folder and database. Several: the one holding the most runs is
   killed and the others take its conversations over once their leases expire (--lease,
   TABLETALK_LEASE_SECONDS). The time until every cut answer grows again, then a check
   that each message has exactly one text answer, equal to what the model sent, and that
   no conversation's model request was made more often than the kill explains.

How the delay is measured: the fake notes time.monotonic() for each chunk it writes, per
conversation (a subclass keyed by the conversation id written in the message). A second
process (so it does not share a GIL with the fake) reads `items` over its own connection
every 10 ms, only rows whose rev moved (`rev > last`), and notes when each answer's
committed length first reached the cumulative length after chunk k (every answer is the
same text, so those lengths are known in advance). CLOCK_MONOTONIC is one clock for every
process on Linux. The poll makes each delay up to 10 ms too long (5 ms on average).
"""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import itertools
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.store import db as dbm  # noqa: E402
from app.store import Store  # noqa: E402
from tests.fakes.openai_server import FakeModelServer, rate, text  # noqa: E402

from _serving import TEXT_LENGTH, Engine, Served, Watcher, cpu_delta, tree_cpu  # noqa: E402  (beside this script)
from _shared import Table, own_cpu, pct  # noqa: E402

MODEL = "fake-model"
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


def ask_many(store: Store, n: int) -> list[int]:
    """N conversations with one message each, committed at once."""
    chats = []
    with store.write():
        for _ in range(n):
            chat = store.new_conversation(None).id
            store.ask(chat, f"bench-{chat}: tell me about the fox")
            chats.append(chat)
    return chats


def marks(chats) -> str:
    return ",".join(str(int(c)) for c in chats)


def unanswered(db, chats: list[int]) -> int:
    return db.execute(f"SELECT count(*) FROM items WHERE kind = 'user' AND done = 0 AND chat IN ({marks(chats)})"
                      ).fetchone()[0]


def wait_answered(db, chats: list[int], timeout: float, watch=None) -> bool:
    """Until every message is answered (a look every 0.25 s: this process's thread shares the
    GIL with the fake model server's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watch is not None:
            watch()
        if unanswered(db, chats) == 0:
            return True
        time.sleep(0.25)
    return False


@dataclass
class Check:
    turns: int = 0
    duplicated: int = 0  # text answers beyond the first, summed over messages
    missing: int = 0
    wrong: int = 0  # one answer, but not the text the model sent
    errors: int = 0


def check_answers(db, chats: list[int], expected: str) -> Check:
    c = Check()
    texts: dict[int, list[str]] = defaultdict(list)
    for turn, body in db.execute(f"SELECT turn, text FROM items WHERE kind = 'text' AND chat IN ({marks(chats)})"):
        texts[turn].append(body)
    for (turn,) in db.execute(f"SELECT id FROM items WHERE kind = 'user' AND chat IN ({marks(chats)})"):
        c.turns += 1
        got = texts.get(turn, [])
        c.duplicated += max(0, len(got) - 1)
        c.missing += not got
        c.wrong += len(got) == 1 and got[0] != expected
    errors = db.execute(f"SELECT text FROM items WHERE kind = 'error' AND chat IN ({marks(chats)})").fetchall()
    c.errors = len(errors)
    if errors:
        sys.stderr.write(f"--- {len(errors)} error items, the first: {errors[0][0][:300]}\n")
    return c


def log_trouble(logs: list[Path]) -> str:
    """A summary of the servers' logs; the first traceback goes to stderr."""
    body = "".join(log.read_text(errors="replace") for log in logs if log.exists())
    if "Traceback" in body:
        start = body.rfind("\n", 0, body.index("Traceback")) + 1
        sys.stderr.write(f"--- first traceback in the servers' logs:\n{body[start:start + 4000]}\n")
    return f"{body.count('Traceback')} tracebacks, {len(re.findall(r'ERROR|CRITICAL', body))} errors"


def rev(db) -> int:
    return db.execute("SELECT rev FROM revs").fetchone()[0]


class Owners:
    """Which server runs each conversation: its lease's owner names the worker's pid."""

    def __init__(self, db, servers: list[Served]):
        self.db, self.servers, self.of = db, servers, {}
        self.pids = [s.pids() for s in servers]

    def look(self) -> None:
        for chat, owner in self.db.execute("SELECT chat, owner FROM runs"):
            pid = int(owner.split(":")[1])
            self.of[chat] = next((i for i, pids in enumerate(self.pids) if pid in pids), -1)

    def split(self, chats: list[int]) -> str:
        counts = Counter(self.of.get(c, -1) for c in chats)
        shares = [str(counts.get(i, 0)) for i in range(len(self.servers))]
        return " / ".join(shares) + (f" (+{counts[-1]} never seen leased)" if counts.get(-1) else "")


def start_servers(args, engine: Engine, fake, folder: Path, phase: str, cleanup) -> tuple[list[Served], object]:
    fake.streams.clear()  # a phase's ids may be the last phase's again (a fresh database)
    target = engine.target(folder / f"{phase}-1")
    servers = [Served(folder / f"{phase}-{i + 1}", fake.url, MODEL, target, args.lease) for i in range(args.servers)]
    for server in servers:
        cleanup.callback(server.stop)
        server.start()
    for server in servers:
        server.wait_healthy()
    return servers, target


def throughput(args, engine: Engine, fake: RecordingServer, folder: Path, pieces: list[str], table: Table) -> None:
    answer = "".join(pieces)
    thresholds = list(itertools.accumulate(len(p) for p in pieces))
    stream_seconds = args.tokens / args.rate
    with contextlib.ExitStack() as cleanup:
        servers, target = start_servers(args, engine, fake, folder, "throughput", cleanup)
        watcher = Watcher(target, thresholds)
        cleanup.callback(watcher.close)
        store = Store(dbm.connect(target))
        cleanup.callback(store.db.conn.close)
        db = store.db.conn
        owners = Owners(db, servers)
        roots = [s.proc.pid for s in servers]
        cpu0, pg0, mine0 = tree_cpu(*roots), tree_cpu(*engine.server_pids()), own_cpu()
        chats = ask_many(store, args.runs)
        t_asked = time.monotonic()
        rev0, t_rev0 = rev(db), time.monotonic()
        ok = wait_answered(db, chats, timeout=stream_seconds * 4 + 60, watch=owners.look)
        rev1, t_rev1 = rev(db), time.monotonic()
        cpu1, pg1, mine1 = tree_cpu(*roots), tree_cpu(*engine.server_pids()), own_cpu()
        seen = watcher.stop()
        check = check_answers(db, chats, answer)
        left = unanswered(db, chats)
        for server in servers:
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
    cpu, pg_cpu = cpu_delta(cpu0, cpu1), cpu_delta(pg0, pg1)
    rev_rate = (rev1 - rev0) / (t_rev1 - t_rev0)
    extra = sum(max(0, len(fake.streams.get(c, [])) - 1) for c in chats)

    n, tps = args.runs, args.rate
    table.add(f"[throughput] {args.servers} server(s) on {engine.name()}",
              f"{n} x {args.tokens} tokens at {tps:g} tok/s", f"{GOAL_RUNS} at {GOAL_RATE:g} tok/s")
    table.add("  answered (done) / errors / missing / wrong",
              f"{n - left} / {check.errors} / {check.missing} / {check.wrong}" + ("" if ok else " (timed out)"),
              f"{n} / 0 / 0 / 0")
    if args.servers > 1:
        table.add("  conversations run by each server", owners.split(chats), "about even")
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
    table.add("  CPU s per 1,000 tokens (every serve process tree)", f"{cpu / max(tokens, 1) * 1000:.3f} s"
              f" ({cpu:.1f} s CPU = {cpu / wall * 100:.0f}% of a core)", "")
    if engine.server_pids():
        table.add("  CPU s per 1,000 tokens (PostgreSQL's processes)", f"{pg_cpu / max(tokens, 1) * 1000:.3f} s"
                  f" ({pg_cpu:.1f} s CPU = {pg_cpu / wall * 100:.0f}% of a core)", "")
    table.add("  CPU s of this process (fake model server)", f"{mine1 - mine0:.1f} s ({(mine1 - mine0) / wall * 100:.0f}% of a core)", "")
    table.add("  duplicated answers / model requests beyond one each", f"{check.duplicated} / {extra}", "0 / 0")
    table.add("  servers' logs", log_trouble([s.log for s in servers]), "0 tracebacks")


def resume(args, engine: Engine, fake: RecordingServer, folder: Path, pieces: list[str], table: Table) -> int:
    answer = "".join(pieces)
    thresholds = list(itertools.accumulate(len(p) for p in pieces))
    k = args.kill_runs
    with contextlib.ExitStack() as cleanup:
        servers, target = start_servers(args, engine, fake, folder, "resume", cleanup)
        store = Store(dbm.connect(target))
        cleanup.callback(store.db.conn.close)
        db = store.db.conn
        owners = Owners(db, servers)
        t_asked = time.monotonic()
        chats = ask_many(store, k)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every answer has begun to grow
            going = db.execute(f"SELECT count(DISTINCT chat) FROM items WHERE kind = 'text' AND {TEXT_LENGTH} > 0 "
                               f"AND chat IN ({marks(chats)})").fetchone()[0]
            if going >= k:
                break
            time.sleep(0.01)
        t_going = time.monotonic()
        time.sleep(args.tokens / args.rate / 3)  # cut the answers a third of the way in
        owners.look()
        held = Counter(owners.of.get(c, -1) for c in chats)
        victim = servers[max(range(len(servers)), key=lambda i: held.get(i, 0))]
        cut_chats = [c for c in chats if owners.of.get(c) == servers.index(victim)] if len(servers) > 1 else chats
        victim.kill()
        t_killed = time.monotonic()
        before = db.execute("SELECT coalesce(max(id), 0) FROM items").fetchone()[0]
        partial = db.execute(f"SELECT count(*), coalesce(avg({TEXT_LENGTH}), 0) FROM items "
                             f"WHERE kind = 'text' AND done = 0 AND chat IN ({marks(cut_chats)})").fetchone()
        completed_before = db.execute(f"SELECT count(*) FROM items WHERE kind = 'text' AND done = 1 "
                                      f"AND chat IN ({marks(chats)})").fetchone()[0]
        watcher = Watcher(target, thresholds[:1])  # only "has it grown again": the first chunk committed
        cleanup.callback(watcher.close)
        t_restart = time.monotonic()
        if len(servers) == 1:
            victim.start()
            t_healthy = victim.wait_healthy()
        ok = wait_answered(db, chats, timeout=args.tokens / args.rate * 4 + args.lease + 60)
        seen = watcher.stop()
        check = check_answers(db, chats, answer)
        left = unanswered(db, chats)
        for server in servers:
            server.stop()

    first_growth: dict[int, float] = {}
    for item_id, (chat, reached) in seen.items():
        if item_id > before and reached and chat in cut_chats:
            first_growth[chat] = min(first_growth.get(chat, reached[0]), reached[0])
    again = [fake.streams[c][-1][0] for c in cut_chats if len(fake.streams.get(c, [])) > 1]
    all_going = max(first_growth.values()) - t_restart if len(first_growth) == len(cut_chats) else None
    # a conversation cut by the kill asks the model twice (the cut step made again); any other once
    extra = sum(max(0, len(fake.streams.get(c, [])) - (2 if c in cut_chats else 1)) for c in chats)
    kind = "restart" if len(servers) == 1 else "kill"
    goal = f"< {GOAL_RESUME_S:g} s" if len(servers) == 1 and not engine.postgres else f"<= lease ({args.lease:g} s) + 2 s"
    table.add(f"[resume] {args.servers} server(s) on {engine.name()}: runs in flight at SIGKILL",
              f"{k}; the killed server ran {len(cut_chats)} ({partial[0]} partial answers, avg {partial[1]:.0f} chars;"
              f" {completed_before} already complete)", f"{GOAL_KILL}")
    table.add("  before the kill: all answers growing after", f"{t_going - t_asked:.2f} s (killed {t_killed - t_going:.1f} s later)", "")
    if len(servers) == 1:
        table.add("  restart -> server answers /healthz", f"{t_healthy - t_restart:.2f} s", "")
    table.add(f"  {kind} -> all cut requests at the model server again",
              f"{max(again) - t_restart:.2f} s ({len(again)}/{len(cut_chats)})" if again else "none", "")
    table.add(f"  {kind} -> every cut answer growing again",
              f"{all_going:.2f} s" if all_going is not None else f"not all: {len(first_growth)}/{len(cut_chats)}", goal)
    table.add("  answered / errors / missing / wrong",
              f"{k - left} / {check.errors} / {check.missing} / {check.wrong}" + ("" if ok else " (timed out)"),
              f"{k} / 0 / 0 / 0")
    table.add("  duplicated answers / model requests beyond the kill's", f"{check.duplicated} / {extra}", "0 / 0")
    table.add("  servers' logs (all starts)", log_trouble([s.log for s in servers]), "0 tracebacks")
    return check.duplicated + extra


GOAL_RUNS, GOAL_RATE, GOAL_KILL = 500, 20.0, 100


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=GOAL_RUNS, help="conversations answered at once (default %(default)s)")
    p.add_argument("--rate", type=float, default=GOAL_RATE, help="tokens per second per stream (default %(default)s)")
    p.add_argument("--tokens", type=int, default=200, help="tokens in each answer (default %(default)s)")
    p.add_argument("--kill-runs", type=int, default=GOAL_KILL, help="runs in flight at the kill (default %(default)s; 0 skips)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--database", metavar="URL", default="",
                       help="a PostgreSQL database for every phase (postgresql://...; its rows are added to)")
    where.add_argument("--postgres", action="store_true",
                       help="a throwaway PostgreSQL cluster started here (tests/pg.py), a fresh database per phase")
    p.add_argument("--servers", type=int, default=1, help="serve processes on the one database (default %(default)s)")
    p.add_argument("--lease", type=float, default=10.0,
                   help="TABLETALK_LEASE_SECONDS of every server (default %(default)s, the app's)")
    args = p.parse_args(argv)
    if args.database and not dbm.is_url(args.database):
        p.error("--database must be a postgresql:// URL")
    if args.servers < 1:
        p.error("--servers must be at least 1")
    if args.servers > 1 and not (args.database or args.postgres):
        p.error("--servers above 1 share one PostgreSQL database: give --postgres or --database URL")

    pieces = list(text(answer_of(args.tokens)).pieces)
    fake = RecordingServer(models={MODEL: 8192})
    fake.default = [rate(args.rate), text("".join(pieces))]
    fake.plain_default = [text("Bench title")]  # the conversation's name, asked for after the first answer
    table = Table()
    bad = 0
    with contextlib.ExitStack() as stack:
        engine = Engine(args.database)
        if args.postgres:
            from tests.pg import Cluster

            cluster = Cluster(durable=True).start()
            stack.callback(cluster.stop)
            engine = Engine(cluster=cluster)
        stack.enter_context(fake)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tabletalk-bench-")))
        print(f"{args.servers} x tabletalk serve --workers 1 on {engine.name()}, fake model at {fake.url}; "
              f"conversations and messages are written as rows with app.store.Store (one transaction), not posted "
              f"through the form.", flush=True)
        try:
            if args.runs:
                throughput(args, engine, fake, folder, pieces, table)
            if args.kill_runs:
                bad = resume(args, engine, fake, folder, pieces, table)
        except Exception as e:  # a table of what was measured is still worth printing
            table.add("benchmark failed", f"{type(e).__name__}: {e}".splitlines()[0][:200])
            for log in folder.glob("serve-*.log"):
                sys.stderr.write(f"--- {log.name} (tail)\n{log.read_text()[-2000:]}\n")
        if fake.errors:
            table.add("fake model server errors", repr(fake.errors[:3]))
    print()
    table.print()
    if args.kill_runs:
        print(f"\nduplicated answers and repeated model requests after the kill: {bad}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
