"""The live feed under load: bytes per answer, commit-to-follower delay, memory per follower.

    .venv/bin/python benchmarks/feed.py [--quick] [--tokens T] [--rate TPS]
        [--followers 1,100,1000] [--updates U] [--idle N]

Each phase starts its own `tabletalk serve --workers 1` (a real process in its own process
group, with its own temporary TABLETALK_DATA) whose AI_URL points at the fake OpenAI
server (tests/fakes/openai_server.py) running in this process. Followers are raw HTTP/1.1
connections made here with asyncio protocols (no HTTP client library: a thousand of them
must be cheap), reading `GET /c/{chat}/events` exactly as htmx would.

1. Bytes on the wire per answer. One follower; a person's message is POSTed
   (`/c/{chat}/ask`, with the CSRF token and `HX-Request`) and the fake answers with a
   ~T-token Markdown text (paragraphs, lists, a table, code fences; tests/fixtures/
   long_answer.md when it exists) at TPS tokens/s. Counted: the SSE response body (after
   chunked decoding) from just before the POST to the end of the SSE message in which
   the text item's state span turns `class="state done"`, against the length of that
   item's final `<article id="iN" ...>...</article>` as the conversation page renders it.
2. Commit -> follower delay with 1, 100 and 1,000 followers of one conversation. This
   process writes rows into the server's SQLite database (app.store.db / app.store.Store, as
   another process would): a text item whose text grows by ` t=<ns>` every ~50 ms (random
   30-70 ms, so writes fall at random points of the server's 50 ms poll), the commit time
   taken with time.monotonic() right after the commit; each follower notes
   time.monotonic() when a message carrying that marker arrives (CLOCK_MONOTONIC is one
   clock for every process). The server sees another process's commit by polling
   `PRAGMA data_version` every 50 ms, so this delay includes 0-50 ms of poll wait. For the
   in-process path, `POST /c/{chat}/ask` with `probe p=<ns>` is measured too, from just
   before the request is sent to the follower's receipt: an upper bound (it includes the
   HTTP request, the CSRF check and the form parse).
3. Memory per idle follower: the RSS of granian's worker process (the child of the serve
   process) before and after opening N (10,000) idle SSE streams on one conversation.
   RLIMIT_NOFILE is raised to its hard limit here before the servers start, so they
   inherit it.

Every loop is bounded in count and in time; only 127.0.0.1 is used.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.store import db as dbm  # noqa: E402
from app.store import Store  # noqa: E402
from app.tables import item  # noqa: E402
from tests.fakes.openai_server import FakeModelServer, rate, text  # noqa: E402

from _shared import HOST, Table, free_port, own_cpu, pct  # noqa: E402  (beside this script)

MODEL = "fake-model"
CLK_TCK = os.sysconf("SC_CLK_TCK")
FIXTURE = ROOT / "tests" / "fixtures" / "long_answer.md"
WORDS = re.compile(r"\s*\S+\s*")  # how the fake splits text into tokens

GOAL_RATIO = 1.5
GOAL_P99_MS = 100
GOAL_MEMORY = 1 << 30

MARK = re.compile(rb" ([tp])=(\d+)(?=\D)")


# --- the answer ---------------------------------------------------------------------

_TOPICS = [
    ("Write-ahead logging", "journal_mode", "WAL lets readers go on while one writer commits"),
    ("Busy timeouts", "busy_timeout", "a writer that finds the lock taken waits instead of failing"),
    ("Immediate transactions", "BEGIN IMMEDIATE", "taking the write lock up front avoids upgrade deadlocks"),
    ("Checkpoints", "wal_autocheckpoint", "the log is folded back into the database now and then"),
    ("Prepared statements", "executemany", "the hot path should not build SQL strings per row"),
    ("Indexes that pay", "CREATE INDEX", "a partial index keeps the pending-work query tiny"),
    ("Backups", "VACUUM INTO", "a consistent copy can be taken while the app keeps serving"),
    ("Cross-process wake-ups", "data_version", "one cheap poll per process sees other writers"),
]


def _section(n: int, title: str, name: str, gist: str) -> str:
    para = (
        f"{title} matters more than it first appears. In practice {gist}, and the effect is easy "
        f"to see once a page follows a growing answer: every flush is a commit, and every commit "
        f"is read by the feed. The setting `{name}` is the lever here; it is cheap to set once "
        f"per connection and costly to forget. Measure before and after, because the numbers on "
        f"a laptop with a fast SSD are not the numbers on a small virtual machine with network "
        f"storage, and [the SQLite documentation](https://www.sqlite.org/docs.html) is explicit "
        f"about which guarantees hold where."
    )
    bullets = "\n".join(
        f"- **{w}**: {d}"
        for w, d in [
            ("Latency", f"how long a commit that touches `{name}` takes under load"),
            ("Throughput", "rows a second that one writer sustains with the readers attached"),
            ("Durability", "what survives a power cut with `synchronous = NORMAL`"),
            ("Operations", "what an administrator must know to run it without surprises"),
        ]
    )
    steps = "\n".join(
        f"{i}. {s}"
        for i, s in enumerate(
            [
                "Open one connection per process and keep it.",
                f"Set `{name}` right after connecting, before any other statement.",
                "Wrap every multi-row change in one transaction.",
            ],
            start=1,
        )
    )
    code = (
        "```python\n"
        "import sqlite3\n\n"
        f"def open_db(path: str) -> sqlite3.Connection:\n"
        f"    conn = sqlite3.connect(path, isolation_level=None)\n"
        f"    conn.execute(\"PRAGMA journal_mode = WAL\")\n"
        f"    conn.execute(\"PRAGMA busy_timeout = 10000\")\n"
        f"    # section {n}: {title.lower()}\n"
        f"    for row in conn.execute(\"SELECT name, value FROM settings\"):\n"
        f"        print(row[0], '=', row[1])\n"
        f"    return conn\n"
        "```"
    )
    parts = [f"## {n}. {title}", para, bullets, steps, code]
    if n % 2 == 0:
        parts.append(
            "| Setting | Default | Suggested | Why |\n"
            "|---|---|---|---|\n"
            f"| `{name}` | off | on | {gist} |\n"
            "| `synchronous` | FULL | NORMAL | fewer fsyncs with WAL, still consistent |\n"
            "| `foreign_keys` | OFF | ON | the schema's promises are enforced |\n"
            "| `cache_size` | -2000 | -20000 | the working set stays in memory |"
        )
    else:
        parts.append(f"> Note: {gist}. Check it on the machine you deploy to, not only on yours.")
    return "\n\n".join(parts)


def build_answer(tokens: int) -> str:
    """A realistic Markdown answer of at least `tokens` tokens (whole sections)."""
    out = ["Here is a practical guide to running SQLite under a live web app, section by section."]
    n = 0
    while len(WORDS.findall("\n\n".join(out))) < tokens and n < 200:
        title, name, gist = _TOPICS[n % len(_TOPICS)]
        n += 1
        out.append(_section(n, title if n <= len(_TOPICS) else f"{title} (again)", name, gist))
    out.append("That is the whole of it: measure, set the pragmas once, and keep transactions short.")
    return "\n\n".join(out)


def answer_text(tokens: int, cut: bool) -> tuple[str, str]:
    """The answer the fake streams: the fixture when there is one (with `cut`, only its
    first blocks up to ~`tokens`, never inside a code fence), else a built one."""
    if not FIXTURE.exists():
        return build_answer(tokens), "built in (headings, paragraphs, lists, tables, code fences)"
    whole = FIXTURE.read_text()
    name = str(FIXTURE.relative_to(ROOT))
    if not cut or len(WORDS.findall(whole)) <= tokens:
        return whole, name
    blocks, kept = whole.split("\n\n"), ""
    for i in range(1, len(blocks) + 1):
        head = "\n\n".join(blocks[:i])
        if len(WORDS.findall(head)) > tokens:
            break
        if head.count("```") % 2 == 0:
            kept = head
    return (kept or whole), f"{name} (first blocks)"


# --- the server under test ----------------------------------------------------------

# What `tabletalk serve --workers 1` does (app/admin/cli.py), with granian's `backpressure` (its cap
# on concurrent requests per worker, default backlog/workers = 1024) set: only to show what
# the app itself does beyond that cap. The app's code is used as it is.
PASSWORD = "benchmark password"
SESSION = [""]  # the Cookie header of the signed-in owner, once a Web has signed in

GRANIAN_RAISED = """
import sys
from app import config
from app.admin import cli
from app.accounts.setup import set_up_from_settings
from app.store import Store, db as dbm
from granian import Granian
from granian.constants import Interfaces
conf = config.load()
cli.migrate(conf)
set_up_from_settings(Store(dbm.connect(conf.database)), conf)
port, backpressure = int(sys.argv[1]), int(sys.argv[2])
Granian(target="app.web.app:create_app", factory=True, interface=Interfaces.ASGI, address="127.0.0.1",
        port=port, workers=1, workers_kill_timeout=5, log_access=False,
        backlog=backpressure, backpressure=backpressure).serve()
"""


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Served:
    """`tabletalk serve --workers 1` in a process group of its own (as tests/conftest.py).

    With `backpressure`, the same app under granian started from GRANIAN_RAISED instead."""

    def __init__(self, data: Path, ai_url: str, backpressure: int | None = None, workers: int = 1):
        self.data = data
        self.backpressure = backpressure
        self.workers = workers
        self.env = {**os.environ, "TABLETALK_DATA": str(data), "AI_URL": ai_url, "AI_KEY": "", "AI_MODEL": MODEL,
                    "TABLETALK_PASSWORD": PASSWORD, "TABLETALK_OWNER": "owner"}
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = data.parent / f"serve-{data.name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> "Served":
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            if self.backpressure:
                command = [sys.executable, "-c", GRANIAN_RAISED, str(self.port), str(self.backpressure)]
            else:
                command = [sys.executable, "-m", "app.admin.cli", "serve", "--host", HOST, "--port", str(self.port),
                           "--workers", str(self.workers)]
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tabletalk serve exited:\n{self.log.read_text()[-3000:]}")
            try:
                c = http.client.HTTPConnection(HOST, self.port, timeout=1)
                c.request("GET", "/healthz")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"tabletalk serve did not come up:\n{self.log.read_text()[-3000:]}")

    @property
    def worker(self) -> int:
        """Granian's worker: the child of the serve process (not the built-in model's
        supervisor, app.serve.supervise, which is one too)."""
        kids = [k for k in children(self.proc.pid) if b"app.builtin" not in _cmdline(k)]
        if len(kids) != 1:
            raise RuntimeError(f"expected one worker under {self.proc.pid}, found {kids}")
        return kids[0]

    def stop(self, timeout: float = 15) -> float:
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        t = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        return time.monotonic() - t

    def tracebacks(self) -> int:
        """How many tracebacks the server logged; the first one goes to stderr."""
        body = self.log.read_text(errors="replace") if self.log.exists() else ""
        if "Traceback" in body:
            start = body.rfind("\n", 0, body.index("Traceback")) + 1
            sys.stderr.write(f"--- first traceback in {self.log.name}:\n{body[start:start + 4000]}\n")
        return body.count("Traceback")


def children(pid: int) -> list[int]:
    return processes(PARENT, pid)


PARENT, GROUP = 1, 2  # fields of /proc/PID/stat after the process's name: ppid, pgrp


def processes(field: int, value: int) -> list[int]:
    """The processes whose /proc/PID/stat `field` (PARENT or GROUP) is `value`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[field]) == value:
                found.append(int(name))
    return sorted(found)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    f = stat[stat.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- a raw SSE follower -------------------------------------------------------------

class Follower(asyncio.Protocol):
    """One `GET /c/{chat}/events` stream over a bare socket.

    `decode`: keep the decoded body (chunked transfer decoding) for byte counting.
    `marks`: note when each ` t=<n>` / ` p=<n>` marker first arrives (time.monotonic()).
    """

    def __init__(self, path: str, port: int, decode: bool = False, marks: bool = False):
        self.request = (f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: text/event-stream\r\n"
                        f"Cookie: {SESSION[0]}\r\nCache-Control: no-cache\r\n\r\n").encode()
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[float] = loop.create_future()  # first body bytes arrived
        self.ended: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()
        self.in_body = False
        self.status = 0
        self.chunked = False
        self.raw = 0  # bytes read from the socket, headers and chunk framing included
        self.decode = decode
        self.body = bytearray()
        self._cbuf = bytearray()
        self._need: int | None = None
        self.seen: dict[tuple[bytes, int], float] | None = {} if marks else None
        self._tail = b""
        self.error: str | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.raw += len(data)
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = bytes(self.head[:end]), bytes(self.head[end + 4:])
            self.head = bytearray()
            self.in_body = True
            lines = head.split(b"\r\n")
            try:
                self.status = int(lines[0].split()[1])
            except (IndexError, ValueError):
                self.status = -1
            self.chunked = any(l.lower().startswith(b"transfer-encoding:") and b"chunked" in l.lower() for l in lines)
            if self.status != 200:
                self.error = f"HTTP {lines[0].decode('latin-1', 'replace')}"
                if not self.ready.done():
                    self.ready.set_exception(RuntimeError(self.error))
                return
        if self.decode:
            self._decode(data)
        if self.seen is not None and data:
            window = self._tail + data
            for m in MARK.finditer(window):
                key = (m.group(1), int(m.group(2)))
                if key not in self.seen:
                    self.seen[key] = now
            self._tail = window[-40:]
        if data and not self.ready.done():
            self.ready.set_result(now)

    def _decode(self, data: bytes) -> None:
        if not self.chunked:
            self.body += data
            return
        self._cbuf += data
        for _ in range(100_000):  # bounded: at most one pass per chunk in the buffer
            if self._need is None:
                i = self._cbuf.find(b"\r\n")
                if i < 0:
                    return
                size = int(bytes(self._cbuf[:i]).split(b";")[0], 16)
                del self._cbuf[:i + 2]
                if size == 0:
                    return
                self._need = size
            if len(self._cbuf) < self._need + 2:
                return
            self.body += self._cbuf[:self._need]
            del self._cbuf[:self._need + 2]
            self._need = None

    def connection_lost(self, exc) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"closed before the first message ({exc or 'EOF'})"))
        if not self.ended.done():
            self.ended.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class NoResponse(Exception):
    pass


async def open_follower(port: int, path: str, timeout: float, **kw) -> Follower:
    loop = asyncio.get_running_loop()
    try:
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: Follower(path, port, **kw), HOST, port), timeout)
    except TimeoutError:
        raise TimeoutError(f"TCP connect took over {timeout:g} s") from None
    try:
        await asyncio.wait_for(asyncio.shield(proto.ready), timeout)
    except TimeoutError:
        proto.close()
        got = "no response bytes" if proto.raw == 0 else f"{proto.raw} bytes but no first message"
        raise NoResponse(f"TCP connected and request sent, {got} within {timeout:g} s") from None
    except BaseException:
        proto.close()
        raise
    return proto


@dataclass
class Ramp:
    followers: list[Follower] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    stalled: bool = False


async def open_many(port: int, path: str, n: int, *, concurrency: int = 200, timeout: float = 15.0,
                    deadline: float = 120.0, stall: float = 15.0, **kw) -> Ramp:
    """Open up to `n` followers, at most `concurrency` connecting at once. Gives up when no
    follower got its first message for `stall` seconds, or after `deadline` seconds."""
    ramp = Ramp()
    t0 = time.monotonic()
    last_progress = t0
    sem = asyncio.Semaphore(concurrency)
    stop = asyncio.Event()

    async def one() -> None:
        nonlocal last_progress
        async with sem:
            if stop.is_set():
                return
            try:
                f = await open_follower(port, path, timeout, **kw)
            except Exception as e:  # noqa: BLE001 - reported, by kind
                kind = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                ramp.failures[kind] = ramp.failures.get(kind, 0) + 1
                return
            ramp.followers.append(f)
            last_progress = time.monotonic()

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, timeout=1.0)
        now = time.monotonic()
        if now - last_progress > stall or now - t0 > deadline:
            ramp.stalled = True
            stop.set()
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            not_started = sum(1 for t in tasks if t.cancelled())
            if not_started:
                ramp.failures["not attempted or cut off (ramp stalled)"] = not_started
            break
    ramp.seconds = time.monotonic() - t0
    return ramp


async def close_all(followers: list[Follower], wait: float = 5.0) -> None:
    for f in followers:
        f.close()
    if followers:
        await asyncio.wait([f.ended for f in followers], timeout=wait)


# --- pages --------------------------------------------------------------------------

class Web:
    """A person's browser, for the few page requests (sync http.client on 127.0.0.1)."""

    def __init__(self, port: int):
        self.port = port
        self.cookies: dict[str, str] = {}
        _, _, page = self.request("GET", "/signin")
        status, _, _ = self.request("POST", "/signin", form={"_csrf_token": self.token(page), "name": "owner",
                                                             "password": PASSWORD, "next": "/"})
        if status != 303:
            raise RuntimeError(f"signing in answered {status}")
        # the raw followers send the same session cookie
        SESSION[0] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def request(self, method: str, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
        from urllib.parse import urlencode

        c = http.client.HTTPConnection(HOST, self.port, timeout=30)
        h = dict(headers or {})
        if self.cookies:
            h["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            h["Content-Type"] = "application/x-www-form-urlencoded"
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        text_ = r.read().decode()
        for k, v in r.getheaders():
            if k.lower() == "set-cookie":
                name, _, rest = v.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, text_

    def token(self, page: str) -> str:
        m = re.search(r'name="_csrf_token" value="([^"]+)"', page)
        if not m:
            raise RuntimeError("no CSRF token on the page")
        return m.group(1)

    def new_conversation(self, data: Path, person: int | None = None) -> tuple[int, int, str]:
        """(chat, rev the page was rendered at, csrf token) of an empty conversation of the
        owner's (or `person`'s, whom this Web is signed in as), written into the server's
        database: the pages make a conversation only with its first message, and a benchmark
        opens its followers before the message is sent."""
        db = dbm.connect(data / "tabletalk.db")
        try:
            store = Store(db)
            person = person if person is not None else store.owner()
            agent = store.default_agent(person)
            chat = store.new_conversation(agent.id if agent else None, person=person).id
        finally:
            db.conn.close()
        return (chat, *self.page_state(chat))

    def page_state(self, chat: int) -> tuple[int, str]:
        _, _, page = self.request("GET", f"/c/{chat}")
        m = re.search(r'hx-sse:connect="/c/\d+/events\?since=(\d+)"', page)
        return int(m.group(1)), self.token(page)

    def ask(self, chat: int, message: str, token: str) -> int:
        status, _, body = self.request("POST", f"/c/{chat}/ask", form={"text": message, "_csrf_token": token},
                                       headers={"HX-Request": "true"})
        if status not in (204, 303):
            raise RuntimeError(f"POST /c/{chat}/ask answered {status}: {body[:300]}")
        return status


# --- sizes --------------------------------------------------------------------------

def kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


# --- 1. bytes per answer ------------------------------------------------------------

# a start or end tag; attribute values may hold ">" (append targets: [id="x"]>:last-child)
TAG_RE = re.compile(r"""<(/?)([A-Za-z][A-Za-z0-9-]*)(?:[^>"']|"[^"]*"|'[^']*')*?(/?)>""")
VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())


def top_level(html: str) -> list[str]:
    """The top-level elements of one SSE message's HTML, in order."""
    out, depth, start = [], 0, 0
    for m in TAG_RE.finditer(html):
        closing, name, selfclosing = m.group(1), m.group(2).lower(), m.group(3)
        if closing:
            depth -= 1
            if depth == 0:
                out.append(html[start:m.end()])
        elif name in VOID or selfclosing:
            if depth == 0:
                out.append(html[m.start():m.end()])
        else:
            if depth == 0:
                start = m.start()
            depth += 1
    return out


def piece_kind(piece: str, n: int) -> str:
    """What a top-level piece of a feed message does (for the byte breakdown)."""
    m = TAG_RE.match(piece)
    head = m.group(0) if m else piece[:200]
    if head.startswith('<div id="status"'):
        return "#status"
    if head.startswith('<h1 id="title"'):
        return "#title"
    if 'hx-swap="beforeend"' in head:
        return "append to a block"
    if f'id="i{n}-s"' in head:
        return "state span"
    if f'hx-target="#i{n}-b"' in head:
        return "new blocks (upsert)"
    if head.startswith(f'<div class="md" id="i{n}-') and "hx-swap-oob" in head:
        return "block replaced whole"
    if 'hx-target="#items"' in head:
        return "whole items (upsert)"
    if 'hx-swap-oob="delete"' in head:
        return "deletions"
    return "other"


def sse_messages(body: bytes) -> list[tuple[int, str]]:
    """(bytes on the wire, html) of each SSE message in `body` (comments have html '')."""
    out = []
    for raw in body.split(b"\n\n"):
        if not raw:
            continue
        lines = raw.decode("utf-8", "replace").split("\n")
        html = "\n".join(l[6:] if l.startswith("data: ") else l[5:] for l in lines if l.startswith("data:"))
        out.append((len(raw) + 2, html))
    return out


async def bytes_per_answer(args, fake: FakeModelServer, folder: Path, table: Table) -> None:
    answer, source = answer_text(args.tokens, cut=args.quick or args.cut)
    tokens = len(WORDS.findall(answer))
    fake.default = [rate(args.rate), text(answer)]
    server = Served(folder / "bytes", fake.url).start()
    web = Web(server.port)
    try:
        chat, rev, token = web.new_conversation(server.data)
        f = await open_follower(server.port, f"/c/{chat}/events?since={rev}", 10, decode=True)
        await asyncio.sleep(0.2)  # the first (catch-up) message is in; what follows is the answer
        start, raw0 = len(f.body), f.raw
        t0 = time.monotonic()
        web.ask(chat, "Write me a long practical guide to SQLite under a live web app, in Markdown.", token)
        done_re = None
        end = None
        limit = t0 + tokens / args.rate * 3 + 60
        scan = start
        while time.monotonic() < limit and f.ended.done() is False:
            await asyncio.sleep(0.02)
            body = bytes(f.body)
            if done_re is None:
                m = re.search(rb'<article id="i(\d+)" data-key="[^"]*" class="item text', body[start:])
                if m:
                    n = int(m.group(1))
                    done_re = re.compile(rb'id="i%d-s" class="state done"' % n)
            if done_re is not None:
                m = done_re.search(body, max(start, scan - 64))
                if m:
                    stop_at = body.find(b"\n\n", m.end())
                    if stop_at >= 0:
                        end = stop_at + 2
                        break
                scan = len(body)
        t1 = time.monotonic()
        raw_bytes = f.raw - raw0
        f.close()
        if end is None:
            table.add("[bytes] answer streamed to one follower",
                      f"NOT DONE after {t1 - t0:.0f} s ({len(f.body) - start:,} bytes so far)", "done")
            return
        sent = bytes(f.body[start:end])
        if args.dump:
            Path(args.dump).write_bytes(sent)
        _, _, page = web.request("GET", f"/c/{chat}")
        m = re.search(r'<article id="i%d"[^>]*>.*?</article>' % n, page, re.S)
        final = m.group(0).encode() if m else b""
        ratio = len(sent) / len(final) if final else float("nan")
        msgs = sse_messages(sent)
        framing = sum(w - len(h.encode()) for w, h in msgs)
        data_msgs = sum(1 for _, h in msgs if h)
        kinds: dict[str, list[int]] = {}
        for _, h in msgs:
            for piece in top_level(h):
                kinds.setdefault(piece_kind(piece, n), []).append(len(piece.encode()))
        unparsed = len(sent) - framing - sum(sum(v) for v in kinds.values())

        table.add("[bytes] answer", f"{tokens:,} word-pieces (~{len(answer) // 4:,} model tokens) at {args.rate:g}/s, "
                  f"{len(answer):,} chars; {source}",
                  "~2,000 tokens at ~50 tok/s")
        table.add("  streamed for (POST -> state done seen)", f"{t1 - t0:.1f} s ({data_msgs} SSE messages)")
        table.add("  SSE body bytes received (POST -> done message)", f"{len(sent):,} B ({kib(len(sent))})")
        table.add("  socket bytes (incl. HTTP chunk framing)", f"{raw_bytes:,} B")
        table.add(f'  final <article id="i{n}"> on the page', f"{len(final):,} B ({kib(len(final))})")
        table.add("  ratio received / final HTML", f"{ratio:.2f}", f"<= {GOAL_RATIO}")
        table.add("  of which SSE framing (id:/data: lines)", f"{framing:,} B ({framing / len(sent):.0%})")
        for kind, sizes in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
            table.add(f"  of which {kind}",
                      f"{sum(sizes):,} B ({sum(sizes) / len(sent):.0%}; {len(sizes)} x, avg {sum(sizes) / len(sizes):,.0f} B)")
        if unparsed:
            table.add("  of which unparsed", f"{unparsed:,} B")
        table.add("  server log", f"{server.tracebacks()} tracebacks", "0")
    finally:
        server.stop()


# --- 2. commit -> follower delay ----------------------------------------------------

class LoopLag:
    """How late this process's own event loop wakes (its followers read late by as much)."""

    def __init__(self):
        self.lags: list[float] = []
        self.task: asyncio.Task | None = None

    async def _run(self) -> None:
        for _ in range(100_000):
            t = time.monotonic()
            await asyncio.sleep(0.005)
            self.lags.append(time.monotonic() - t - 0.005)

    def __enter__(self):
        self.lags.clear()
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc):
        self.task.cancel()


async def delays(args, fake: FakeModelServer, folder: Path, table: Table) -> None:
    fake.default = [text("ok")]
    server = Served(folder / "delay", fake.url).start()
    web = Web(server.port)
    store = Store(dbm.connect(server.data / "tabletalk.db"))
    rng = random.Random(7)
    worker = server.worker
    try:
        chat, _, token = web.new_conversation(server.data)
        for n in args.followers:
            rev = store.rev()
            ramp = await open_many(server.port, f"/c/{chat}/events?since={rev}", n, marks=True,
                                   deadline=60, stall=15)
            fs = ramp.followers
            label = f"[delay] {n:,} follower{'s' if n != 1 else ''}"
            if len(fs) < n:
                table.add(label, f"only {len(fs):,}/{n:,} connected in {ramp.seconds:.1f} s: {ramp.failures}", f"{n:,}")
            if not fs:
                continue
            await asyncio.sleep(0.3)
            # cross-process: this process commits, the server's 50 ms data_version poll sees it
            probe = store.add(item("text", chat, text="Latency probe:"))
            await asyncio.sleep(0.3)
            commits: dict[int, float] = {}
            write_ms: list[float] = []
            cpu0, mine0 = cpu_seconds(worker), own_cpu()
            t_phase = time.monotonic()
            body = "Latency probe:"
            with LoopLag() as lag:
                for _ in range(args.updates):
                    await asyncio.sleep(rng.uniform(0.03, 0.07))
                    mark = time.monotonic_ns()
                    # a growing text is revealed on markdown's 40-character grid: 40 characters
                    # after each marker put it inside what the follower is shown at once
                    body += f" t={mark} " + "x" * 40
                    t_w = time.monotonic()
                    store.update(probe.id, text=body)
                    t_c = time.monotonic()
                    commits[mark] = t_c
                    write_ms.append((t_c - t_w) * 1000)
                await wait_marks(fs, b"t", commits, 3.0)
            wall = time.monotonic() - t_phase
            cpu = cpu_seconds(worker) - cpu0
            mine = own_cpu() - mine0
            ds, missing, last = [], 0, []
            for mark, t_c in commits.items():
                arrivals = []
                for f in fs:
                    t_a = f.seen.get((b"t", mark))
                    if t_a is None:
                        missing += 1
                    else:
                        arrivals.append(t_a - t_c)
                ds.extend(arrivals)
                if arrivals:
                    last.append(max(arrivals))
            store.update(probe.id, done=True)
            total = len(commits) * len(fs)
            table.add(f"{label}: commit in another process -> follower, p50",
                      f"{pct(ds, 50) * 1000:.1f} ms ({len(commits)} commits x {len(fs):,} followers)")
            table.add("  p99", f"{pct(ds, 99) * 1000:.1f} ms", f"< {GOAL_P99_MS} ms at 1,000")
            table.add("  max / slowest follower per commit p50 / missing",
                      f"{max(ds, default=float('nan')) * 1000:.1f} ms / {pct(last, 50) * 1000:.1f} ms / "
                      f"{missing}/{total}")
            table.add("  commit itself (this process) p50 / p99",
                      f"{pct(write_ms, 50):.2f} / {pct(write_ms, 99):.2f} ms")
            table.add("  CPU: server worker / this process (followers)",
                      f"{cpu / wall:.0%} / {mine / wall:.0%} of a core; own loop lag p99 {pct(lag.lags, 99) * 1000:.1f} ms")

            # in-process: the server itself commits (POST /ask) and wakes its feed at once
            sent: dict[int, float] = {}
            for _ in range(args.asks):
                await asyncio.sleep(rng.uniform(0.2, 0.3))
                mark = time.monotonic_ns()
                t_s = time.monotonic()
                sent[mark] = t_s
                await asyncio.to_thread(web.ask, chat, f"probe p={mark}", token)
            await wait_marks(fs, b"p", sent, 3.0)
            pd, pmiss = [], 0
            for mark, t_s in sent.items():
                for f in fs:
                    t_a = f.seen.get((b"p", mark))
                    if t_a is None:
                        pmiss += 1
                    else:
                        pd.append(t_a - t_s)
            table.add("  in-process: POST /ask sent -> follower (upper bound) p50 / p99",
                      f"{pct(pd, 50) * 1000:.1f} / {pct(pd, 99) * 1000:.1f} ms "
                      f"({len(sent)} asks, missing {pmiss}/{len(sent) * len(fs)})")
            await close_all(fs)
            await asyncio.sleep(0.5)
        table.add("  server log", f"{server.tracebacks()} tracebacks", "0")
    finally:
        store.db.conn.close()
        server.stop()


async def wait_marks(fs: list[Follower], kind: bytes, marks: dict[int, float], timeout: float) -> None:
    """Wait (bounded) until every follower has every marker."""
    end = time.monotonic() + timeout
    want = [(kind, m) for m in marks]
    while time.monotonic() < end:
        if all(all(k in f.seen for k in want) for f in fs):
            return
        await asyncio.sleep(0.05)


# --- 3. memory per idle follower ----------------------------------------------------

async def memory(args, fake: FakeModelServer, folder: Path, table: Table, backpressure: int | None = None) -> int:
    """Returns how many followers were open at once."""
    fake.default = [text("ok")]
    server = Served(folder / ("memory-raised" if backpressure else "memory"), fake.url, backpressure).start()
    web = Web(server.port)
    label = ("[memory] idle followers of one conversation" if not backpressure else
             f"[memory, NOT tabletalk serve: same app, granian backpressure={backpressure:,}]")
    try:
        chat, rev, _ = web.new_conversation(server.data)
        path = f"/c/{chat}/events?since={rev}"
        worker = server.worker
        warm = await open_many(server.port, path, 50)  # every code path loaded once
        await close_all(warm.followers)
        await asyncio.sleep(args.settle / 2)
        before_w, before_m = rss_kib(worker), rss_kib(server.proc.pid)
        n = args.idle
        ramp = await open_many(server.port, path, n, concurrency=256, timeout=10, deadline=240, stall=12)
        reached = len(ramp.followers)
        await asyncio.sleep(args.settle)
        alive = sum(1 for f in ramp.followers if not f.ended.done())
        after_w, after_m = rss_kib(worker), rss_kib(server.proc.pid)
        cpu_idle0 = cpu_seconds(worker)
        await asyncio.sleep(args.settle)
        cpu_idle = (cpu_seconds(worker) - cpu_idle0) / args.settle
        fds = len(os.listdir(f"/proc/{worker}/fd"))
        # a page request while they are open: is the worker still serving?
        t = time.monotonic()
        try:
            status, _, _ = await asyncio.wait_for(asyncio.to_thread(web.request, "GET", f"/c/{chat}"), 15)
            page = f"HTTP {status} in {(time.monotonic() - t) * 1000:.0f} ms"
        except Exception as e:  # noqa: BLE001 - reported
            page = f"failed after {time.monotonic() - t:.1f} s: {type(e).__name__} {e}"
        await close_all(ramp.followers, wait=20)
        await asyncio.sleep(args.settle)
        closed_w = rss_kib(worker)
        grown = (after_w - before_w) * 1024
        per = grown / reached if reached else float("nan")
        table.add(label, f"{reached:,}/{n:,} open in {ramp.seconds:.1f} s ({alive:,} still open {args.settle:g} s later)", f"{n:,}")
        if ramp.failures:
            table.add("  failures (by error)", "; ".join(f"{v:,} x {k}" for k, v in ramp.failures.items()), "none")
        table.add("  worker RSS before / after", f"{before_w / 1024:,.1f} MiB / {after_w / 1024:,.1f} MiB")
        table.add("  per follower (RSS growth / followers)", f"{per / 1024:,.1f} KiB ({grown / 2**20:,.1f} MiB total)")
        if reached and reached < 10_000:
            table.add("  extrapolated to 10,000 followers (linear)",
                      f"{(before_w * 1024 + per * 10_000) / 2**20:,.0f} MiB", "< 1 GiB")
        under = "yes" if after_w * 1024 < GOAL_MEMORY else "NO"
        table.add("  worker RSS under 1 GiB", under if reached >= 10_000 else f"{under}, but at {reached:,} followers only",
                  "yes at 10,000")
        table.add("  serve (main) process RSS before / after", f"{before_m / 1024:,.1f} / {after_m / 1024:,.1f} MiB")
        table.add("  worker open fds / CPU while idle", f"{fds:,} / {cpu_idle:.0%} of a core")
        table.add("  GET the conversation page while they are open", page)
        table.add("  worker RSS after closing them all", f"{closed_w / 1024:,.1f} MiB")
        table.add("  server log", f"{server.tracebacks()} tracebacks", "0")
        return reached
    finally:
        server.stop()


# --- main ---------------------------------------------------------------------------

def raise_nofile() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def run(args) -> int:
    table = Table(echo=True)
    nofile = raise_nofile()
    table.add("[machine] cores / load average at start / RLIMIT_NOFILE",
              f"{os.cpu_count()} / {loadavg()} / {nofile[0]:,}")
    with FakeModelServer(models={MODEL: 8192}) as fake, tempfile.TemporaryDirectory(prefix="tabletalk-feed-") as tmp:
        fake.plain_default = [text("A fitting title")]
        fake.record_times = True
        folder = Path(tmp)
        t0 = time.monotonic()
        if "bytes" in args.only:
            await bytes_per_answer(args, fake, folder, table)
        fake.record_times = False
        fake.sent_at.clear()
        if "delay" in args.only:
            await delays(args, fake, folder, table)
        if "memory" in args.only:
            reached = await memory(args, fake, folder, table)
            if reached < args.idle and args.raised:
                # what the app does past granian's default cap on concurrent requests
                await memory(args, fake, folder, table, backpressure=args.raised)
        table.add("[machine] load average at end / wall time", f"{loadavg()} / {time.monotonic() - t0:.0f} s")
    print()
    table.print()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a smaller run, well under a minute")
    p.add_argument("--tokens", type=int, help="tokens in the streamed answer (default 2000, quick 300)")
    p.add_argument("--cut", action="store_true", help="cut the fixture to --tokens too (quick does)")
    p.add_argument("--rate", type=float, default=50.0, help="model tokens per second (default 50)")
    p.add_argument("--followers", help="follower counts for the delay phase (default 1,100,1000)")
    p.add_argument("--updates", type=int, help="commits measured per follower count (default 100, quick 30)")
    p.add_argument("--asks", type=int, help="in-process POSTs measured per follower count (default 20, quick 5)")
    p.add_argument("--idle", type=int, help="idle followers for the memory phase (default 10000, quick 1000)")
    p.add_argument("--raised", type=int, default=20_000,
                   help="when serve caps the idle followers, measure again with granian's backpressure "
                        "set to this (0: don't)")
    p.add_argument("--dump", help="write the answer's SSE body (phase 1) to this file")
    p.add_argument("--only", default="bytes,delay,memory", help="phases to run, commas")
    args = p.parse_args(argv)
    q = args.quick
    args.tokens = args.tokens or (300 if q else 2000)
    args.followers = [int(x) for x in (args.followers or "1,100,1000").split(",")]
    args.updates = args.updates or (30 if q else 100)
    args.asks = args.asks or (5 if q else 20)
    args.idle = args.idle or (1000 if q else 10_000)
    args.only = set(args.only.split(","))
    args.settle = 1.0 if q else 2.0  # seconds to let the server settle before reading RSS
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
