"""kill -9 chaos against `tabletalk serve`: conversations with MCP tool calls (some waiting for
approval) and streaming answers, while the whole server or one of its workers is killed.

Shared by tests/test_chaos.py (a few kills, bounded in time) and benchmarks/chaos.py (a
longer run that prints the figures). Every conversation asks "task N": the fake model calls
the plugin's `echo("task N")`, then streams a long answer "Done with task N. ...". At the end
every conversation must be answered once, completely; no `echo` may have run twice; no call
may be left unfinished; and every row that was committed (done) when a kill came must still
be there, unchanged.
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
    tool_calls: int = 0          # echo calls that reached the plugin
    calls_repeated: int = 0      # echo texts the plugin saw more than once
    may_have_run: int = 0        # calls a kill cut after they were sent (told so, not run again)
    rows_seen: int = 0           # committed rows recorded at the kills (distinct)
    rows_lost: int = 0           # ... missing or changed at the end
    answered: int = 0            # conversations with their whole answer, shown once
    stuck_calls: int = 0         # calls not done at the end
    pending: int = 0             # questions not answered at the end
    seconds_to_done: float = 0.0  # from the last kill's restart to all answered
    tracebacks: int = 0
    problems: list[str] = field(default_factory=list)

    def table(self) -> list[tuple[str, str]]:
        return [(k, f"{v:.1f}" if isinstance(v, float) else str(v)) for k, v in vars(self).items() if k != "problems"]


class Chaos:
    def __init__(self, root: Path, conversations: int = 6, workers: int = 2, tokens_per_second: float = 150,
                 approve_every: int = 3, approve_after: float = 1.5, seed: int = 1, database_url: str | None = None):
        self.root = root
        self.data = root / "data"
        self.database_url = database_url  # PostgreSQL's database, else SQLite's file in the data folder
        self.database = database_url or self.data / "tabletalk.db"
        self.n = conversations
        self.workers = workers
        self.tps = tokens_per_second
        self.approve_every = approve_every
        self.approve_after = approve_after
        self.random = random.Random(seed)
        self.figures = Figures(conversations=conversations)
        self.seen: dict[int, tuple] = {}
        self.logs: list[Path] = []
        self._stop = threading.Event()
        self.worker_killed = 0.0

    # --- setting up ---------------------------------------------------------------------

    def __enter__(self) -> Chaos:
        self.fake = FakeModelServer(models={"fake-model": 32768}).start()
        self.fake.default = model(self.tps)
        self.fake.plain_default = [text("A title")]
        self.mcp = FakeMCPServer().start()
        self.env = {"TABLETALK_DATA": str(self.data), "AI_URL": self.fake.url, "AI_KEY": "", "AI_MODEL": "",
                    "CHAT_PRIVATE_PLUGINS": "1"} | ({"DATABASE_URL": self.database_url} if self.database_url else {})
        self.served = self.serve()
        self.db = dbm.connect(self.database)
        self.store = Store(self.db)
        owner = self.store.owner()
        self.plain = self.store.default_agent(owner)
        self.careful = self.store.add_agent(assistant(name="Careful", approve=TOOL, person=owner))
        for a in (self.plain, self.careful):
            self.store.add_plugin(plugin(a.id, self.mcp.url))
        self.figures.conversations = 0
        self.ask(self.n)
        self.approver = threading.Thread(target=self._approve, daemon=True)
        self.approver.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.approver.join(5)
        self.served.stop()
        self.db.conn.close()
        self.mcp.stop()
        self.fake.stop()

    def ask(self, count: int) -> None:
        """`count` new conversations, each asking for its task (every `approve_every`th with the
        agent whose echo calls wait for approval), in one transaction."""
        owner = self.store.owner()
        with self.store.write():
            for _ in range(count):
                n = self.figures.conversations
                agent = self.careful if self.approve_every and n % self.approve_every == 0 else self.plain
                chat = self.store.new_conversation(agent.id, person=owner).id
                self.store.add(asked(chat, f"Please do task {n}"))
                self.figures.conversations += 1

    def serve(self) -> Served:
        served = Served(self.data, self.env, workers=self.workers)
        self.logs.append(served.log)
        return served.start()

    def _approve(self) -> None:
        """The person approves each call waiting for approval `approve_after` seconds after it asked."""
        db = dbm.connect(self.database)
        store = Store(db)
        try:
            while not self._stop.wait(0.2):
                try:
                    for r in store.db.conn.execute("SELECT id FROM items WHERE kind = 'call' AND state = 'approval' "
                                                   "AND created < ?", [time.time() - self.approve_after]).fetchall():
                        with store.write():
                            if store.item(r[0]).state == "approval":
                                store.update(r[0], state="approved")
                except Exception:  # a locked moment during a kill: try again
                    pass
        finally:
            db.conn.close()

    # --- killing ------------------------------------------------------------------------

    def record(self) -> None:
        """Every committed row now: it must be there, unchanged, at the end."""
        for r in self.db.conn.execute("SELECT id, kind, text, output, state FROM items WHERE done = 1"):
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
        """Wait until something of the kind is in flight (or, failing that, anything)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and not self.finished():
            if self.db.conn.execute(f"SELECT 1 FROM items WHERE {self.IN_FLIGHT[during]} LIMIT 1").fetchone():
                return
            time.sleep(0.02)

    def workers_now(self) -> list[int]:
        """The server's worker processes (granian's children)."""
        pid = self.served.proc.pid
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

    def kill_server(self, during: str = "any") -> None:
        self.busy(during)
        time.sleep(self.random.uniform(0.0, 0.3))
        self.served.signal(signal.SIGKILL)
        self.served.proc.wait(10)
        self.record()
        self.figures.server_kills += 1
        self.served = self.serve()
        self.worker_killed = 0.0

    def kill_worker(self, during: str = "any") -> None:
        """kill -9 one worker, preferably one holding runs; granian starts it again and the runs
        it held resume (in either worker) once their leases expire."""
        # granian gives up ("crash loop") when a worker dies within 5.5 s of being started again
        time.sleep(max(0.0, self.worker_killed + 6.0 - time.monotonic()))
        self.busy(during)
        time.sleep(self.random.uniform(0.0, 0.3))
        workers = self.workers_now()
        holding = {int(o.split(":")[1]) for (o,) in self.db.conn.execute("SELECT owner FROM runs")} & set(workers)
        victim = self.random.choice(sorted(holding or workers))
        os.kill(victim, signal.SIGKILL)
        self.record()
        self.figures.worker_kills += 1
        self.worker_killed = time.monotonic()
        end = time.monotonic() + 30
        while time.monotonic() < end:  # granian started another
            if len([p for p in self.workers_now() if p != victim]) == self.workers:
                break
            time.sleep(0.1)
        else:
            self.figures.problems.append("granian did not start a worker again")
        assert self.served.proc.poll() is None, "the server went on with one worker killed"

    # --- the outcome ----------------------------------------------------------------------

    def finished(self) -> bool:
        return self.db.conn.execute(
            "SELECT count(*) FROM items WHERE done = 0 AND kind IN ('user', 'retry', 'stop')").fetchone()[0] == 0

    def wait(self, timeout: float) -> None:
        started = time.monotonic()
        end = started + timeout
        while time.monotonic() < end and not self.finished():
            time.sleep(0.1)
        # the last answer's "done" and its run's release are one more tick apart
        self.figures.seconds_to_done = time.monotonic() - started

    def outcome(self) -> Figures:
        f = self.figures
        self.record_end()
        echoed = Counter(self.mcp.echoed)
        f.tool_calls = sum(echoed.values())
        f.calls_repeated = sum(c - 1 for c in echoed.values() if c > 1)
        f.pending = self.db.conn.execute(
            "SELECT count(*) FROM items WHERE done = 0 AND kind IN ('user', 'retry', 'stop')").fetchone()[0]
        f.stuck_calls = self.db.conn.execute("SELECT count(*) FROM items WHERE kind = 'call' AND done = 0").fetchone()[0]
        f.may_have_run = self.db.conn.execute(
            "SELECT count(*) FROM items WHERE kind = 'call' AND interrupted = 1 AND dispatched = 1").fetchone()[0]
        for n, (chat,) in enumerate(self.db.conn.execute("SELECT id FROM conversations ORDER BY id").fetchall()):
            # conversations are made in task order, one task each
            texts = [r[0] for r in self.db.conn.execute(
                "SELECT text FROM items WHERE chat = ? AND kind = 'text' AND done = 1", [chat])]
            if texts.count(answer_of(n)) == 1 and len(texts) == 1:
                f.answered += 1
            else:
                f.problems.append(f"conversation {chat} (task {n}) has the texts {[t[:40] for t in texts]}")
        f.tracebacks = sum(log.read_text(errors="replace").count("Traceback") for log in self.logs if log.exists())
        return f

    def record_end(self) -> None:
        f = self.figures
        f.rows_seen = len(self.seen)
        now = {r[0]: tuple(r) for r in self.db.conn.execute("SELECT id, kind, text, output, state FROM items")}
        lost = [i for i, row in self.seen.items() if now.get(i) != row]
        f.rows_lost = len(lost)
        if lost:
            f.problems.append(f"rows lost or changed: {lost[:10]}")


def healthz(url: str) -> int:
    return httpx.get(url + "/healthz", timeout=5).status_code
