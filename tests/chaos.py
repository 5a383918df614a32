"""Chaos against `tabletalk serve`: conversations with MCP tool calls (some waiting for
approval) and streaming answers, while the whole server or one of its workers is killed
(kill -9), paused past its lease (SIGSTOP, then SIGCONT), or the database is stopped and
started again (PostgreSQL's `pg_ctl stop -m fast` or `immediate`); on one server or on
several sharing one PostgreSQL database (`servers`).

Shared by tests/test_chaos.py and tests/test_chaos_pause.py (a few events, bounded in time)
and benchmarks/chaos.py (a longer run that prints the figures). Every conversation asks
"task N": the fake model calls the plugin's `echo("task N")`, then streams a long answer
"Done with task N. ...". At the end every conversation must be answered once, completely
(no answer cut and marked done); no `echo` may have run twice; nothing may be left
unfinished (no row at done = 0); and every row that was committed (done) when an event came
must still be there, unchanged. While it runs, a watcher checks that no person's message is
marked answered while a row of its answer is not done (a stale worker's "answered" under
the new owner's stream).
"""
from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.store import db as dbm
from app.store import Store
from app.store.outage import unavailable
from app.tables import asked, assistant, plugin
from tests.conftest import Served
from tests.fakes.mcp_server import FakeMCPServer
from tests.fakes.openai_server import FakeModelServer, rate, text, tool_call

TOOL = "127_0_0_1_echo"  # the plugin on 127.0.0.1 is named after its site
WORDS = 120


def answer_of(n: int) -> str:
    return f"Done with task {n}. " + " ".join(f"w{i}" for i in range(WORDS))


def _task(body: dict) -> int:
    for m in body.get("messages", []):
        content = m.get("content")
        if m.get("role") == "user" and isinstance(content, str) and (found := re.search(r"task (\d+)", content)):
            return int(found.group(1))
    return -1


def model(tokens_per_second: float):
    """The fake model: call echo for the task, then stream the answer once the result is in."""
    def turn(body: dict):
        last = body["messages"][-1]
        n = _task(body)
        if last["role"] == "user":
            return [tool_call(TOOL, {"text": f"task {n}"})]
        return [rate(tokens_per_second), text(answer_of(n))]
    return turn


@dataclass
class Figures:
    conversations: int = 0
    server_kills: int = 0
    worker_kills: int = 0
    pauses: int = 0              # a worker or a server stopped (SIGSTOP) past its lease, then let go on
    db_restarts: int = 0         # PostgreSQL stopped and started again
    paused_runs: int = 0         # runs the paused workers held when they were stopped
    missed: int = 0              # events that came when nothing of their kind was in flight
    tool_calls: int = 0          # echo calls that reached the plugin
    calls_repeated: int = 0      # echo texts the plugin saw more than once
    may_have_run: int = 0        # calls a kill cut after they were sent (told so, not run again)
    rows_seen: int = 0           # committed rows recorded at the kills (distinct)
    rows_lost: int = 0           # ... missing or changed at the end
    answered: int = 0            # conversations with their whole answer, shown once
    repeated: int = 0            # conversations with more than one answer done
    cut_and_done: int = 0        # answers done that are not whole (cut, and marked complete)
    answered_early: int = 0      # times a message was seen answered while its answer's rows were not done
    stuck_calls: int = 0         # calls not done at the end
    pending: int = 0             # questions not answered at the end
    left_undone: int = 0         # rows at done = 0 at the end
    seconds_to_done: float = 0.0  # from the last kill's restart to all answered
    tracebacks: int = 0
    problems: list[str] = field(default_factory=list)

    def table(self) -> list[tuple[str, str]]:
        return [(k, f"{v:.1f}" if isinstance(v, float) else str(v)) for k, v in vars(self).items() if k != "problems"]


class Chaos:
    def __init__(self, root: Path, conversations: int = 6, workers: int = 2, tokens_per_second: float = 150,
                 approve_every: int = 3, approve_after: float = 1.5, seed: int = 1, database_url: str | None = None,
                 servers: int = 1, lease_seconds: float | None = None, cluster=None):
        self.root = root
        self.data = root / "data"
        self.database_url = database_url  # PostgreSQL's database, else SQLite's file in the data folder
        self.database = database_url or self.data / "tabletalk.db"
        self.cluster = cluster  # tests/pg.py's Cluster the database is on: it may be restarted
        self.n = conversations
        self.workers = workers
        self.server_count = servers  # more than one shares PostgreSQL's database
        self.lease_seconds = lease_seconds
        self.tps = tokens_per_second
        self.approve_every = approve_every
        self.approve_after = approve_after
        self.random = random.Random(seed)
        self.figures = Figures(conversations=conversations)
        self.seen: dict[int, tuple] = {}
        self.logs: list[Path] = []
        self._stop = threading.Event()
        self.worker_killed = 0.0
        self.early: set[int] = set()  # user rows seen answered while their answer was not done

    # --- setting up ---------------------------------------------------------------------

    def __enter__(self) -> Chaos:
        assert self.server_count == 1 or self.database_url, "servers share a database on PostgreSQL only"
        self.fake = FakeModelServer(models={"fake-model": 32768}).start()
        self.fake.default = model(self.tps)
        self.fake.plain_default = [text("A title")]
        self.mcp = FakeMCPServer().start()
        self.env = {"TABLETALK_DATA": str(self.data), "AI_URL": self.fake.url, "AI_KEY": "", "AI_MODEL": "",
                    "CHAT_PRIVATE_PLUGINS": "1"} | ({"DATABASE_URL": self.database_url} if self.database_url else {})
        if self.lease_seconds:
            self.env["TABLETALK_LEASE_SECONDS"] = str(self.lease_seconds)
        self.servers = [self.serve() for _ in range(self.server_count)]
        self.db = dbm.connect(self.database)
        self.store = Store(self.db)
        owner = self.store.owner()
        self.plain = self.store.default_agent(owner)
        self.careful = self.store.add_agent(assistant(name="Careful", approve=TOOL, person=owner))
        for a in (self.plain, self.careful):
            self.store.add_plugin(plugin(a.id, self.mcp.url))
        self.figures.conversations = 0
        self.ask(self.n)
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.watcher.join(5)
        for served in self.servers:
            served.stop()
        self.db.conn.close()
        self.mcp.stop()
        self.fake.stop()

    @property
    def served(self) -> Served:
        """The first server (the only one unless `servers`)."""
        return self.servers[0]

    def ask(self, count: int) -> None:
        """`count` new conversations, each asking for its task (every `approve_every`th with the
        agent whose echo calls wait for approval), in one transaction."""
        def write() -> None:
            owner = self.store.owner()
            with self.store.write():
                for n in range(self.figures.conversations, self.figures.conversations + count):
                    agent = self.careful if self.approve_every and n % self.approve_every == 0 else self.plain
                    chat = self.store.new_conversation(agent.id, person=owner).id
                    self.store.add(asked(chat, f"Please do task {n}"))

        self.again(write)
        self.figures.conversations += count

    def serve(self, wait: bool = True) -> Served:
        served = Served(self.data, self.env, workers=self.workers)  # signs in: the database must answer
        self.logs.append(served.log)
        return served.start() if wait else served

    @staticmethod
    def again(do, timeout: float = 60):
        """What `do()` returns, done again while the database is unreachable (restarting)."""
        end = time.monotonic() + timeout
        while True:
            try:
                return do()
            except Exception as e:
                if not unavailable(e) or time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def query(self, sql: str, params=(), timeout: float = 60) -> list:
        """The rows of a read, asked again while the database is unreachable."""
        return self.again(lambda: self.db.conn.execute(sql, params).fetchall(), timeout)

    # A person's message marked answered while a row of its answer is not done: a stale
    # worker's "answered" while the new owner streams (or never finishes).
    EARLY = ("SELECT u.id FROM items u JOIN items a ON a.turn = u.id AND a.id <> u.id "
             "WHERE u.kind = 'user' AND u.done = 1 AND a.done = 0")

    def _watch(self) -> None:
        """The person approves each call waiting for approval `approve_after` seconds after it
        asked; and every moment no message may be answered before its answer is done."""
        db = dbm.connect(self.database)
        store = Store(db)
        try:
            while not self._stop.wait(0.2):
                try:
                    self.early.update(r[0] for r in db.conn.execute(self.EARLY).fetchall())
                    for r in store.db.conn.execute("SELECT id FROM items WHERE kind = 'call' AND state = 'approval' "
                                                   "AND created < ?", [time.time() - self.approve_after]).fetchall():
                        with store.write():
                            if store.item(r[0]).state == "approval":
                                store.update(r[0], state="approved")
                except Exception:  # a locked moment during a kill, the database restarting: try again
                    pass
        finally:
            db.conn.close()

    # --- killing ------------------------------------------------------------------------

    def record(self) -> None:
        """Every committed row now: it must be there, unchanged, at the end."""
        for r in self.query("SELECT id, kind, text, output, state FROM items WHERE done = 1"):
            self.seen[r[0]] = tuple(r)

    IN_FLIGHT = {
        # an answer streaming (in its row while it fits one chunk, in chunks past it: docs/architecture.md)
        "text": "kind = 'text' AND done = 0 AND (length(text) > 0 OR EXISTS (SELECT 1 FROM text_chunks "
                "WHERE item = items.id))",
        "call": "kind = 'call' AND done = 0 AND state = 'running'",        # a call being made
        "approval": "kind = 'call' AND done = 0 AND state = 'approval'",   # a call waiting for the person
        "any": "done = 0 AND kind IN ('text', 'call')",
    }

    def busy(self, during: str = "any", timeout: float = 15) -> None:
        """Wait until something of the kind is in flight (failing that, the event comes anyway,
        counted as missed)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.finished():
            if self.query(f"SELECT 1 FROM items WHERE {self.IN_FLIGHT[during]} LIMIT 1"):
                return
            time.sleep(0.02)
        self.figures.missed += 1

    @staticmethod
    def children(pid: int) -> list[int]:
        """A server's worker processes (granian's children)."""
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
        return out

    def workers_now(self, served: Served | None = None) -> list[int]:
        """The worker processes of one server (the first by default)."""
        return self.children((served or self.served).proc.pid)

    def holders(self) -> dict[int, int]:
        """Worker pid -> the runs it holds now (a runner's owner is host:pid:token)."""
        return Counter(int(o.split(":")[1]) for (o,) in self.query("SELECT owner FROM runs"))

    def server_of(self, worker: int) -> Served:
        return next(s for s in self.servers if worker in self.workers_now(s))

    def kill_server(self, during: str = "any") -> None:
        """kill -9 a whole server (the one holding most runs), started again at once."""
        self.busy(during)
        time.sleep(self.random.uniform(0.0, 0.3))
        victim = self._busiest_server()
        victim.signal(signal.SIGKILL)
        victim.proc.wait(10)
        self.record()
        self.figures.server_kills += 1
        self.servers[self.servers.index(victim)] = self.serve()
        self.worker_killed = 0.0

    def _busiest_server(self) -> Served:
        holding = self.holders()
        return max(self.servers, key=lambda s: (sum(holding.get(w, 0) for w in self.workers_now(s)),
                                               self.random.random()))

    def _busiest_worker(self) -> int:
        workers = [w for s in self.servers for w in self.workers_now(s)]
        holding = self.holders()
        busiest = max((holding.get(w, 0) for w in workers), default=0)
        return self.random.choice(sorted(w for w in workers if holding.get(w, 0) == busiest))

    def kill_worker(self, during: str = "any") -> None:
        """kill -9 one worker, preferably one holding runs; granian starts it again and the runs
        it held resume (in either worker) once their leases expire."""
        # granian gives up ("crash loop") when a worker dies within 5.5 s of being started again
        time.sleep(max(0.0, self.worker_killed + 6.0 - time.monotonic()))
        self.busy(during)
        time.sleep(self.random.uniform(0.0, 0.3))
        victim = self._busiest_worker()
        served = self.server_of(victim)
        os.kill(victim, signal.SIGKILL)
        self.record()
        self.figures.worker_kills += 1
        self.worker_killed = time.monotonic()
        end = time.monotonic() + 30
        while time.monotonic() < end:  # granian started another
            if len([p for p in self.workers_now(served) if p != victim]) == self.workers:
                break
            time.sleep(0.1)
        else:
            self.figures.problems.append("granian did not start a worker again")
        assert served.proc.poll() is None, "the server went on with one worker killed"

    # --- pausing ------------------------------------------------------------------------

    def pause(self, during: str = "any", seconds: float | None = None, whole: bool | None = None) -> None:
        """SIGSTOP the worker holding most runs (or, `whole`, its server's process group: by
        default when each server has one worker) for `seconds` (the lease and 5 s by default),
        then SIGCONT: its leases expire meanwhile, others take its conversations, and when it
        goes on it must write nothing more of them."""
        seconds = seconds if seconds is not None else (self.lease_seconds or 10) + 5
        whole = self.workers == 1 if whole is None else whole
        self.busy(during)
        time.sleep(self.random.uniform(0.0, 0.3))
        worker = self._busiest_worker()
        served = self.server_of(worker)
        stop = (lambda sig: served.signal(sig)) if whole else (lambda sig: os.kill(worker, sig))
        stop(signal.SIGSTOP)
        try:
            self.record()
            holding = self.holders()
            self.figures.paused_runs += sum(holding.get(w, 0) for w in (self.workers_now(served) if whole else [worker]))
            self.figures.pauses += 1
            time.sleep(seconds)
        finally:
            stop(signal.SIGCONT)

    # --- the database ---------------------------------------------------------------------

    def restart_database(self, during: str = "any", mode: str = "fast", down: float = 2.0) -> None:
        """PostgreSQL stopped (`pg_ctl stop -m mode`: fast ends its sessions, immediate crashes
        it) while something is in flight, and started again `down` seconds later."""
        assert self.cluster is not None, "a database restart needs the cluster (Chaos(cluster=...))"
        self.busy(during)
        time.sleep(self.random.uniform(0.0, 0.3))
        self.record()
        self.cluster.down(mode)
        self.figures.db_restarts += 1
        try:
            time.sleep(down)
        finally:
            self.cluster.up()

    def start_during_outage(self, down: float = 4.0, mode: str = "fast") -> None:
        """A server killed and started again while PostgreSQL is down: it must wait for the
        database and serve once it is back, not exit."""
        assert self.cluster is not None, "a database outage needs the cluster (Chaos(cluster=...))"
        self.busy("text")
        self.record()
        victim = self._busiest_server()
        started = self.serve(wait=False)
        self.cluster.down(mode)
        self.figures.db_restarts += 1
        try:
            victim.signal(signal.SIGKILL)
            victim.proc.wait(10)
            self.figures.server_kills += 1
            started.launch()
            self.servers[self.servers.index(victim)] = started
            time.sleep(down)
            if started.proc.poll() is not None:
                self.figures.problems.append(f"a server started during the outage exited ({started.proc.returncode})")
        finally:
            self.cluster.up()
        if started.proc.poll() is None:
            started.ready()

    # --- the outcome ----------------------------------------------------------------------

    def finished(self) -> bool:
        return self.query(
            "SELECT count(*) FROM items WHERE done = 0 AND kind IN ('user', 'retry', 'stop')")[0][0] == 0

    def wait(self, timeout: float) -> None:
        started = time.monotonic()
        end = started + timeout
        while time.monotonic() < end and not self.finished():
            time.sleep(0.1)
        # the last answer's "done" and its run's release are one more tick apart
        self.figures.seconds_to_done = time.monotonic() - started

    def quiet(self, timeout: float = 15) -> None:
        """Wait until no run is held (every worker let go of what it answered)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.query("SELECT 1 FROM runs LIMIT 1"):
            time.sleep(0.1)

    def outcome(self) -> Figures:
        f = self.figures
        self.record_end()
        echoed = Counter(self.mcp.echoed)
        f.tool_calls = sum(echoed.values())
        f.calls_repeated = sum(c - 1 for c in echoed.values() if c > 1)
        f.pending = self.query(
            "SELECT count(*) FROM items WHERE done = 0 AND kind IN ('user', 'retry', 'stop')")[0][0]
        f.stuck_calls = self.query("SELECT count(*) FROM items WHERE kind = 'call' AND done = 0")[0][0]
        f.may_have_run = self.query(
            "SELECT count(*) FROM items WHERE kind = 'call' AND interrupted = 1 AND dispatched = 1")[0][0]
        undone = self.query("SELECT id, kind FROM items WHERE done = 0")
        f.left_undone = len(undone)
        if undone:
            f.problems.append(f"rows at done = 0: {[tuple(r) for r in undone[:10]]}")
        self.early.update(r[0] for r in self.query(self.EARLY))
        f.answered_early = len(self.early)
        if self.early:
            f.problems.append(f"messages answered while their answer was not done: {sorted(self.early)[:10]}")
        for n, (chat,) in enumerate(self.query("SELECT id FROM conversations ORDER BY id")):
            # conversations are made in task order, one task each
            texts = [r[0] for r in self.query(
                "SELECT text FROM items WHERE chat = ? AND kind = 'text' AND done = 1", [chat])]
            f.cut_and_done += sum(t != answer_of(n) for t in texts)
            f.repeated += texts.count(answer_of(n)) > 1
            if texts.count(answer_of(n)) == 1 and len(texts) == 1:
                f.answered += 1
            else:
                f.problems.append(f"conversation {chat} (task {n}) has the texts {[t[:40] for t in texts]}")
        for log in self.logs:
            for what in tracebacks(log.read_text(errors="replace") if log.exists() else ""):
                f.tracebacks += 1
                f.problems.append(f"a traceback in {log.name}: {what}")
        return f

    def record_end(self) -> None:
        f = self.figures
        f.rows_seen = len(self.seen)
        now = {r[0]: tuple(r) for r in self.query("SELECT id, kind, text, output, state FROM items")}
        lost = [i for i, row in self.seen.items() if now.get(i) != row]
        f.rows_lost = len(lost)
        if lost:
            f.problems.append(f"rows lost or changed: {lost[:10]}")


def tracebacks(log: str) -> list[str]:
    """Each traceback of a log, as the line that ends it (the exception) and the line before
    it began (what the app said it was doing)."""
    lines = log.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = next((lines[j] for j in range(i + 1, len(lines)) if lines[j] and not lines[j][0].isspace()), "")
            out.append(f"{end[:200]} (after: {lines[i - 1][:120] if i else ''})")
    return out


def healthz(url: str) -> int:
    return httpx.get(url + "/healthz", timeout=5).status_code
