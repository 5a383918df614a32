"""Shared fixtures: the fake model server, the app in-process, the app as a real process,
and Debian's Chromium driven by Playwright. Nothing here reaches beyond 127.0.0.1."""
from __future__ import annotations

import asyncio
import atexit
import copy
import inspect
import itertools
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import httpx
import pytest
from anyio import ClosedResourceError
from bs4 import BeautifulSoup

from tests.fakes.everything import Everything
from tests.fakes.openai_server import FakeModelServer, text
from tests.marks import Marks
from tests import zygote

from app.store import schema

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


# ---- the order of files across pytest-xdist's workers ------------------------------------
# `make test` runs the suite in a few processes (pytest-xdist, `--dist loadfile`: each file
# whole in one worker, so a file's module-scoped servers and browser start once). Files are
# handed out in collection order, so a long file collected last would run alone at the end:
# under xdist the slowest files come first, by the seconds each took in the last runs (kept in
# pytest's cache, .pytest_cache) or, on a fresh clone, by SLOW_FILES (measured; the rest keep
# their order after them). A run in one process keeps the plain order.
SLOW_FILES = (  # seconds of one file in one worker, the slowest first (a `-n 3` run, 2 cores, 2026-12-07)
    "test_attacks.py", "test_axe.py", "test_builtin_serve.py", "test_ingest.py", "test_move.py",
    "test_llama_server.py", "test_browser_knowledge.py", "test_chaos_outage.py", "test_accounts.py",
    "test_servers.py", "test_composer.py", "test_browser_model_upload.py", "test_browser_connections.py",
    "test_layers.py", "test_fuzz.py", "test_browser_web_search.py", "test_everything_asks.py", "test_approval.py",
    "test_chaos_pause.py", "test_browser_sidebar.py",
)
FILE_SECONDS = "tabletalk/file-seconds"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # one process (or xdist's controller, which runs nothing)
    cache = getattr(config, "cache", None)  # none under -p no:cacheprovider
    seconds: dict[str, float] = dict(cache.get(FILE_SECONDS, {})) if cache else {}
    # a slow file not timed yet goes ahead of every timed one, in SLOW_FILES' order: on a fresh
    # clone, and on one whose only runs were `make test-fast`'s (which times no browser or process
    # file: they went last)
    ahead = max(seconds.values(), default=0.0)
    for i, name in enumerate(SLOW_FILES):
        seconds.setdefault(f"tests/{name}", ahead + len(SLOW_FILES) - i)
    items.sort(key=lambda item: -seconds.get(file_of(item.nodeid), 0.0))  # stable: a file keeps its order


class FileSeconds:
    """Sums the seconds of each file's tests (setup, call, teardown) as reported to the
    controller, into pytest's cache at the end, merged with what was."""

    def __init__(self, cache: pytest.Cache) -> None:
        self.cache = cache
        self.took: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.took[file_of(report.nodeid)] = self.took.get(file_of(report.nodeid), 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        if self.took:
            self.cache.set(FILE_SECONDS, self.cache.get(FILE_SECONDS, {}) | self.took)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Marks(), "tabletalk-marks")  # the fast set's marks, checked (tests/marks.py)
    # the controller of an xdist run (a targeted run in one process, or `-k`, would keep a part's seconds)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput") \
            and getattr(config, "cache", None):
        config.pluginmanager.register(FileSeconds(config.cache), "tabletalk-file-seconds")


OWNER = "owner"
PASSWORD = "a long test password"
COOKIE = "tabletalk_session"


@cache
def password_hash() -> str:
    # argon2 takes ~0.1 s a hash on purpose: one for the whole test run.
    from app.accounts.passwords import hash_password

    return hash_password(PASSWORD)


@cache
def migrated_sqlite() -> Path:
    """A SQLite database the app's migrations made, once per test process: a test's new
    database starts as a copy of it (`fresh_sqlite`), the bytes those migrations would write
    there (~60 ms a test less). Its folder goes when the process ends."""
    from app.store import db as dbm

    folder = Path(tempfile.mkdtemp(prefix="tabletalk-migrated-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    db = dbm.connect(folder / "tabletalk.db")
    schema.migrate(db)
    db.conn.close()  # the last connection: the WAL is checkpointed into the file and removed
    assert not (folder / "tabletalk.db-wal").exists()
    return folder / "tabletalk.db"


def fresh_sqlite(path: Path) -> Path:
    """`path`, a migrated SQLite database when there is none there yet (see migrated_sqlite)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_sqlite(), path)
    return path


def database(data: Path) -> Path | str:
    """The database the app of a test keeps its rows in: DATABASE_URL's when the test runs
    on PostgreSQL (`on_both_engines`), else the data folder's SQLite file."""
    return os.environ.get("DATABASE_URL") or data / "tabletalk.db"


@contextmanager
def app_store(data: Path, migrate: bool = False, url: str | None = None) -> Iterator:
    """The app's Store on the database of a test's data folder (`database`: either engine;
    `url` when the app was given another DATABASE_URL than this process's), for a test that
    writes or reads rows beside a running app; closed afterwards. With `migrate` the schema
    is brought up to date first (a database no app has opened yet)."""
    from app.store import db as dbm
    from app.store import Store

    data.mkdir(parents=True, exist_ok=True)
    where = url or database(data)
    db = dbm.connect(where if isinstance(where, str) else fresh_sqlite(where))
    try:
        if migrate:
            schema.migrate(db)
        yield Store(db)
    finally:
        db.conn.close()


def signed_in(data: Path, name: str = OWNER, owner: bool = True, url: str | None = None) -> str:
    """A session token for `name` (their account made first when it does not exist yet) in
    the data folder's database (or `url`'s), as signing in with PASSWORD would give."""
    from app.accounts.rules import Accounts

    with app_store(data, migrate=True, url=url) as store:
        people = Accounts(store)
        found = people.hash_of(name)
        person = found[0] if found else people.add(name, password_hash(), owner=owner)
        return people.start_session(person.id)


FAKE_MODELS = {"fake-model": 8192, "other-model": 4096}


def fake_model_server() -> FakeModelServer:
    """The fake model server of an app test, not started: two models, side requests (naming a
    conversation) answered apart from the script."""
    server = FakeModelServer(models=FAKE_MODELS)
    server.plain_default = [text("A fitting title")]  # side requests (naming) leave the script alone
    return server


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with fake_model_server() as server:
        yield server


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL cluster for the session, started when a test first needs it."""
    from tests.pg import Cluster

    cluster = Cluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster) -> Iterator[str]:
    """A fresh empty PostgreSQL database of its own, dropped afterwards."""
    url = pg_cluster.database()
    yield url
    pg_cluster.drop(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request) -> str:
    """The database engine a store test runs on: each such test runs on both."""
    return request.param


@pytest.fixture
def store(request, tmp_path: Path, engine: str):
    """A migrated database of its own, opened through the Store, without the app: SQLite's
    file, or a fresh database on the test session's PostgreSQL cluster (not the app's of
    the same test: TABLETALK_TEST_POSTGRES=1 gives that one `pg_url`)."""
    from app.store import db as dbm
    from app.store import Store

    url = None
    if engine == "postgresql":
        cluster = request.getfixturevalue("pg_cluster")
        db = dbm.connect(url := cluster.database(migrated=True))
    else:
        db = dbm.connect(fresh_sqlite(tmp_path / "t.db"))
    schema.migrate(db)
    yield Store(db)
    db.conn.close()
    if url:
        cluster.drop(url)


def database_of(store) -> str:
    """What `dbm.connect` takes to open the `store` fixture's database again (another
    connection, or a Feed of its own): its PostgreSQL URL or SQLite's file."""
    from app.store import db as dbm

    if dbm.postgres(store.db):
        return store.db.url
    return next(r[2] for r in store.db.conn.execute("PRAGMA database_list").fetchall() if r[1] == "main")


ENGINES = ["sqlite", "postgresql"]
ON_POSTGRES = os.environ.get("TABLETALK_TEST_POSTGRES") == "1"


def sqlite_only(why: str):
    """Marks an app test SQLite's by nature (its file, its disk): skipped, saying `why`, when
    TABLETALK_TEST_POSTGRES=1 runs the app tests on PostgreSQL."""
    return pytest.mark.skipif(ON_POSTGRES, reason=f"SQLite only: {why}")


def on_both_engines(request, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`env` for an app on the engine of the test's param: a module runs its app tests on
    both by overriding `env` with `@pytest.fixture(params=ENGINES)` and this."""
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_url")
        monkeypatch.setenv("DATABASE_URL", url)
        return env | {"DATABASE_URL": url}
    return on_sqlite(env, monkeypatch)


def on_sqlite(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """`env` for an app on SQLite's file whatever TABLETALK_TEST_POSTGRES says: a module whose
    app must be SQLite's (a SQLite install moved to PostgreSQL) overrides `env` with this."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return {k: v for k, v in env.items() if k != "DATABASE_URL"}


def engine_setting(request, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The DATABASE_URL setting of a test's app, for a test that builds its settings by hand
    rather than taking `env`: under TABLETALK_TEST_POSTGRES=1 a fresh PostgreSQL database of
    the test's own (`pg_url`), set in this process too so conftest's helpers (`database`,
    `rows`, `app_store`, `api.open`) follow it; else none (SQLite's file in the data folder)."""
    if ON_POSTGRES:
        url = request.getfixturevalue("pg_url")
        monkeypatch.setenv("DATABASE_URL", url)
        return {"DATABASE_URL": url}
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return {}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def env(request, monkeypatch: pytest.MonkeyPatch, data: Path, fake: FakeModelServer) -> dict[str, str]:
    """The app's settings for a test: its own data folder, the fake model server; SQLite,
    unless the test asks for both engines (on_both_engines) or TABLETALK_TEST_POSTGRES=1
    runs every app test on PostgreSQL."""
    values = {"TABLETALK_DATA": str(data), "AI_URL": fake.url, "AI_KEY": "", "AI_MODEL": ""}
    values |= engine_setting(request, monkeypatch)
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values


def awaiting(task: asyncio.Task) -> str:
    """Where a pending task is suspended: its coroutine, then each coroutine it awaits, down
    to the future it waits on (Task.get_stack gives only the outermost frame)."""
    chain, coro = [], task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            chain.append(repr(coro))
            break
        where = frame.f_code.co_filename
        where = os.path.relpath(where, ROOT) if where.startswith(f"{ROOT}{os.sep}") else where
        chain.append(f"{frame.f_code.co_qualname} ({where}:{frame.f_lineno})")
        coro = (getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
                or getattr(coro, "ag_await", None))
    waiter = getattr(task, "_fut_waiter", None)  # asyncio's own: the future its last await yielded
    if waiter is not None:
        chain.append(f"waiting on {waiter!r}"[:300])
    return " -> ".join(chain)


# anyio names a TestClient portal's own tasks after their functions: its loop's, and each
# call into it (the lifespan's shutdown among them). Every other task on that loop is the app's.
PORTAL_TASK = "anyio.from_thread."


def connections_taken() -> int:
    """PostgreSQL connections this process's pools have lent out and not had back."""
    from app.store.postgres import Pool

    return sum(pool.lent for pool in list(Pool._open.values()))  # the class's own register of open pools


def pending(tasks) -> list[str]:
    """Each task not done yet, with where it is suspended, one line each."""
    return sorted(f"  {t.get_name()}: {awaiting(t)}" for t in tasks if not t.done())


class LifespanWatch:
    """What an in-process app's loop held when its lifespan ended: how it ended (the
    exception, with where the lifespan was then), and every task of the app still pending
    on that loop, each with where it is suspended. Read in the lifespan's own thread, at the
    moment its task ends (a done callback of its future, run while the portal's loop still
    runs). Litestar's TestClient ends every lifespan with ClosedResourceError (its last
    send, on the stream its shutdown closed), a clean stop too: that one is said as none."""

    def __init__(self, client) -> None:
        self.said = ""
        self.left: list[str] = []  # the app's tasks still pending as its lifespan ended
        client.lifespan_handler.task.add_done_callback(self._ended)  # the lifespan's task's future

    def _ended(self, future) -> None:
        # the portal is handling the exception now (a cancellation leaves none in the future)
        exc = sys.exc_info()[1] or (None if future.cancelled() else future.exception())
        if isinstance(exc, ClosedResourceError) and isinstance(exc.__context__, (type(None), ClosedResourceError)):
            where = "(no error)\n"
        else:
            where = "".join(traceback.format_exception(exc)) if exc is not None else "(cancelled, no traceback)\n"
        try:
            loop = asyncio.get_running_loop()
            me = asyncio.current_task(loop)
            tasks = [t for t in asyncio.all_tasks(loop) if t is not me]
            self.left = pending(t for t in tasks if not t.get_name().startswith(PORTAL_TASK))
            on_loop = pending(tasks)
        except Exception as e:  # not on the loop's thread (it had stopped), or a task that cannot be read
            self.said = f"the lifespan ended with:\n{where}(its loop's tasks could not be listed: {e!r})"
            return
        self.said = f"the lifespan ended with:\n{where}tasks pending on its loop then:\n" + "\n".join(on_loop)


class LifespanFailed(AssertionError):
    """The in-process app did not stop cleanly, or left work behind: which test, and what
    its loop was doing."""


def left_behind(tasks: list[str], connections: int) -> str:
    """What a stopped app still holds, said; "" when nothing."""
    said = []
    if tasks:
        said.append("its tasks still pending at its stop (asyncio.run or the portal would cancel them unseen):\n"
                    + "\n".join(tasks))
    if connections > 0:
        said.append(f"{connections} PostgreSQL connection(s) it took and did not give back to the pool")
    return "\n".join(said)


@contextmanager
def in_process(app, **kw) -> Iterator:
    """`app` in this process through litestar's TestClient, its lifespan running. When the
    lifespan fails at shutdown (the TestClient then says only "CancelledError", or the
    exception without where the app was), the error names the test, the exception with
    where the lifespan was, and every task pending on the app's loop with what it awaits.
    A stop that leaves work behind fails too, as a person's server would be left with it:
    a task of the app still pending as its lifespan ended, a PostgreSQL connection not given
    back to the pool."""
    from litestar.testing import TestClient

    taken = connections_taken()
    client = TestClient(app, **kw)
    client.__enter__()
    watch = LifespanWatch(client)
    try:
        yield client
    finally:
        test = os.environ.get("PYTEST_CURRENT_TEST", "(no test)")
        try:
            client.__exit__(None, None, None)
        except BaseException as exc:
            raise LifespanFailed(f"the app of {test} did not stop cleanly: {exc!r}\n"
                                 f"{watch.said or 'its lifespan ended without error'}") from exc
    if left := left_behind(watch.left, connections_taken() - taken):
        raise LifespanFailed(f"the app of {test} left work behind at its stop: {left}")


async def serve_in_loop(until) -> None:
    """The runner on the test's database in this event loop (`api.serve(until=...)`, as the
    README runs it), failing as `in_process` does when its stop leaves work behind: a task
    it started still pending, a PostgreSQL connection not given back (asyncio.run, ending,
    would cancel such a task unseen)."""
    from app import api

    before, taken = asyncio.all_tasks(), connections_taken()
    await api.serve(until=until)
    if left := left_behind(pending(asyncio.all_tasks() - before), connections_taken() - taken):
        test = os.environ.get("PYTEST_CURRENT_TEST", "(no test)")
        raise LifespanFailed(f"the runner of {test} left work behind at its stop: {left}")


@contextmanager
def app_client(data: Path, **kw) -> Iterator:
    """The app in this process (settings from the environment), its lifespan (feed,
    runner) running, the owner signed in."""
    from app.web.app import create_app

    token = signed_in(data)
    with in_process(create_app(), **({"raise_server_exceptions": False} | kw)) as c:
        c.cookies.set(COOKIE, token)
        yield c


@pytest.fixture
def client(env: dict[str, str], data: Path):
    with app_client(data) as c:
        yield c


@pytest.fixture
def make_client(env, monkeypatch, data):
    """A client for an app started with extra settings: `with make_client(NAME="v") as c:`;
    the owner signed in."""

    @contextmanager
    def make(**settings: str):
        for k, v in settings.items():
            monkeypatch.setenv(k, v)
        with app_client(Path(os.environ["TABLETALK_DATA"])) as c:
            yield c

    return make


@pytest.fixture
def elsewhere(request, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Settings for a second app of a test, on a data folder of its own and (under
    TABLETALK_TEST_POSTGRES=1) a fresh database of its own: `make_client(**elsewhere)`."""
    values = {"TABLETALK_DATA": str(tmp_path / "elsewhere")}
    if not ON_POSTGRES:
        yield values
        return
    cluster = request.getfixturevalue("pg_cluster")
    url = cluster.database()
    yield values | {"DATABASE_URL": url}
    cluster.drop(url)


def soup(response) -> BeautifulSoup:
    return BeautifulSoup(response.text, "html.parser")


class OnTheLoop:
    """An object of an in-process app whose methods run on the app's own event loop, where
    every use of its SQLite connection is: a call from the test's thread could run inside a
    transaction the app has open on that one connection ("cannot open savepoint - SQL
    statements in progress", or a write that becomes a savepoint of the app's). What a call
    returns is the test's; an attribute that is an object of the app (or its connection) is
    wrapped in turn."""

    def __init__(self, portal, target):
        self._portal, self._target = portal, target

    def __getattr__(self, name: str):
        value = getattr(self._target, name)
        if inspect.isroutine(value):
            return lambda *a, **k: self._portal.call(lambda: value(*a, **k))
        held = type(value).__module__.split(".")[0] in ("app", "sqlite3", "sqlite_utils")
        return OnTheLoop(self._portal, value) if held else value


def store_of(client) -> OnTheLoop:
    """The Store of the app `client` serves in this process (app_client, in_process), its
    calls made on the app's loop (OnTheLoop)."""
    return OnTheLoop(client.blocking_portal, client.app.state.tabletalk.store)


def new_chat(client) -> str:
    """An empty conversation to test in, made through the app's own store (the pages never
    make one: a conversation begins with its first message, see `start_chat`); its path.
    `client` is an in-process one (app_client), signed in."""
    from app.accounts.rules import Accounts

    store = store_of(client)
    person = Accounts(store).session(client.cookies.get(COOKIE))
    assert person is not None, "the client is signed in"
    agent = store.default_agent(person.id)
    return f"/c/{store.new_conversation(agent.id if agent else None, person=person.id).id}"


def start_chat(client, words: str, files=None, token: str | None = None, **extra) -> str:
    """A new conversation begun as the new-conversation page does: its first message (and
    files) in one POST /c, answered with 303 to the conversation; its path."""
    r = client.post("/c", data={"_csrf_token": token or csrf(client), "text": words, **extra}, files=files,
                    follow_redirects=False)
    assert r.status_code == 303 and re.fullmatch(r"/c/\d+", r.headers["location"]), r.text
    return r.headers["location"]


def ask(client, chat: str, words: str, ok: bool = True, **extra):
    """Send a message as the composer does (`extra`: model, when, thinking ...); with `ok`
    it must be taken (303)."""
    r = client.post(chat + "/ask", data={"_csrf_token": csrf(client), "text": words, **extra}, follow_redirects=False)
    if ok:
        assert r.status_code == 303, r.text
    return r


def idle(client, chat: str):
    """Wait until the conversation has nothing pending; return its page."""
    return wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and p, timeout=15)


ITEMS = "SELECT id, kind, text, state, done, turn, model FROM items ORDER BY id"


def rows(data: Path, sql: str = ITEMS, params=()) -> list[dict]:
    """The database's rows for `sql` (`?` placeholders for `params`), as dicts: the
    PostgreSQL database of DATABASE_URL when set, else the data folder's SQLite file.
    Without `sql`, every item with its text whole, as the app reads it: past one chunk a
    growing text's `items.text` is empty, its text in chunks (Runs.grow_items)."""
    if sql == ITEMS and not params:
        with app_store(data) as store:
            return [{"id": it.id, "kind": it.kind, "text": it.text, "state": it.state, "done": int(it.done),
                     "turn": it.turn, "model": it.model} for it in store._items(store._all(sql))]
    if os.environ.get("DATABASE_URL"):
        from app.store import db as dbm

        pg = dbm.connect(os.environ["DATABASE_URL"])
        try:
            return [dict(r) for r in pg.execute(sql, params)]
        finally:
            pg.conn.close()
    db = sqlite3.connect(data / "tabletalk.db")
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql, params)]
    finally:
        db.close()


def texts(data: Path) -> list[dict]:
    """The answers' text items (rows(data)'s), in id order, each text whole."""
    return [r for r in rows(data) if r["kind"] == "text"]


def whole_texts(db) -> list[dict]:
    """The text items of a database the test holds open (`db`: a connection of app.store.db),
    as dicts of id, text and done, each text whole (Base._items)."""
    from app.store import Store

    store = Store(db)
    return [{"id": it.id, "text": it.text, "done": int(it.done)}
            for it in store._items(store._all("SELECT * FROM items WHERE kind = 'text' ORDER BY id"))]


def sse_value(line: str, name: str) -> str | None:
    """The value of an SSE line `name:value` (one space after the colon dropped, as the
    spec says), else None."""
    if not line.startswith(name + ":"):
        return None
    value = line[len(name) + 1:]
    return value[1:] if value[:1] == " " else value


def csrf(client, path: str = "/") -> str:
    page = client.get(path)
    match = re.search(r'name="_csrf_token" value="([^"]+)"', page.text)
    assert match, "every page with a form carries a CSRF token"
    return match.group(1)


def wait_for(predicate, timeout: float = 30.0, every: float = 0.05):
    """The predicate's first truthy value. The bound only ends a wait that would never end: a
    passing wait returns as soon as it can, and 30 s holds on a loaded 2-core machine (10 s did
    not: an answer to a one-pixel image took longer in a fresh-clone make test beside a burner)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NEWCOMERS = itertools.count(1)


# `tabletalk serve` forked from a process that imported it once (tests/zygote.py): ~0.9 s of
# CPU less a start. TABLETALK_TEST_FORK=0: each start a process from nothing.
FORK = os.environ.get("TABLETALK_TEST_FORK", "1") != "0"
atexit.register(zygote.close)


class Served:
    """`tabletalk serve` as a real process (granian), for tests about serving."""

    def __init__(self, data: Path, env: dict[str, str], workers: int = 1, account: bool = True):
        self.data = data
        self.env = {**os.environ, **env}
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = data.parent / f"serve-{self.port}.log"
        self.database_url = self.env.get("DATABASE_URL")  # PostgreSQL's, else SQLite's file in `data`
        self.cookies = {COOKIE: signed_in(data, url=self.database_url)} if account else {}  # the owner's session
        self.person: int | None = None  # whose session `cookies` is: None, the owner's (see `newcomer`)

    def newcomer(self, name: str = "") -> "Served":
        """This server as someone new sees it: `name`'s account (by default a name no one has;
        a member, with an agent of their own) made now and signed in. A test of a shared server
        (`shared_served`) that looks at a whole sidebar, or changes an agent, is alone with what
        it makes this way."""
        name = name or f"Newcomer {next(NEWCOMERS)}"
        seen = copy.copy(self)
        seen.cookies = {COOKIE: signed_in(self.data, name=name, owner=False, url=self.database_url)}
        with self.store() as store:
            seen.person = store.person_named(name)[0].id
        return seen

    def store(self):
        """The Store on this server's database (`with served.store() as store:`), closed after."""
        return app_store(self.data, url=self.database_url)

    def client(self, **kw) -> httpx.Client:
        """An HTTP client signed in as the owner (or the newcomer)."""
        return httpx.Client(base_url=self.url, cookies=self.cookies, **kw)

    def empty_chat(self) -> str:
        """An empty conversation of the owner's (or the newcomer's) to test in, written straight
        into the database (the pages never make one); its path."""
        with self.store() as store:
            person = self.person or store.owner()
            agent = store.default_agent(person)
            return f"/c/{store.new_conversation(agent.id if agent else None, person=person).id}"

    def context(self, browser, **kw):
        """A browser context signed in as the owner (or the newcomer)."""
        context = browser.new_context(base_url=self.url, **kw)
        context.add_cookies([{"name": k, "value": v, "url": self.url} for k, v in self.cookies.items()])
        return context

    @contextmanager
    def watched_page(self, browser, console: bool = True, **kw):
        """A signed-in page that must raise no error (and, with `console`, log none) before
        its context closes."""
        context = self.context(browser, **kw)
        errors: list[str] = []
        p = context.new_page()
        p.on("pageerror", lambda e: errors.append(str(e)))
        if console:
            p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        yield p
        context.close()
        assert errors == [], f"the page {'logged errors' if console else 'raised'}: {errors}"

    def start(self) -> "Served":
        return self.launch().ready()

    def launch(self) -> "Served":
        """The process started, not waited for (`ready` waits)."""
        self.data.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "ab")
        self.launched_at = out.tell()  # where this start's lines begin in the log
        args = ["serve", "--port", str(self.port), "--workers", str(self.workers)]
        if FORK:  # from this worker's zygote: the imports made once (tests/zygote.py)
            out.close()
            self.proc = zygote.fork(args, self.env, ROOT, self.log)
        else:
            self.proc = subprocess.Popen([sys.executable, "-m", "app.admin.cli", *args], cwd=ROOT, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def ready(self, timeout: float = 20) -> "Served":
        """Waits until /healthz answers 200 and every worker has started: one worker's 200
        says nothing of the others (a test that stopped the database then found its second
        worker still starting, and waiting for it)."""
        deadline = time.monotonic() + timeout
        # one client for the whole wait: a new one each look (httpx.get) made a TLS context
        # each, ~20 ms of CPU, ten looks a start, 180 starts a run
        with httpx.Client(timeout=1) as health:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"tabletalk serve exited: {self.log.read_text()[-3000:]}")
                try:
                    if (health.get(f"{self.url}/healthz").status_code == 200
                            and self.log.read_bytes()[self.launched_at:].count(b"Started worker-") >= self.workers):
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        raise RuntimeError(f"tabletalk serve did not come up: {self.log.read_text()[-3000:]}")

    def signal(self, sig: int) -> None:
        assert self.proc
        os.killpg(self.proc.pid, sig)

    def worker_pids(self) -> list[int]:
        """The PIDs of the workers granian spawned, first to last (respawned ones included)."""
        return [int(p) for p in re.findall(r"Spawning worker-\d+ with PID: (\d+)", self.log.read_text())]

    def stacks(self, pid: int) -> str:
        """What each thread of worker `pid` is doing: what its faulthandler prints to the log on
        SIGUSR2 (the worker goes on)."""
        before = len(self.log.read_bytes())
        try:
            os.kill(pid, signal.SIGUSR2)
        except ProcessLookupError:
            return f"(worker {pid} is gone)"
        wait_for(lambda: b"most recent call first" in self.log.read_bytes()[before:], 10, every=0.1)
        time.sleep(0.2)  # the other threads' stacks follow the first
        # whole: a thread deep in an import prints a stack longer than any cut (its head,
        # "Current thread", was cut off once at 6,000 characters)
        return self.log.read_bytes()[before:].decode(errors="replace")

    def stop(self, timeout: float = 10) -> float:
        """SIGTERM, then wait; returns the seconds it took to exit."""
        if not self.proc or self.proc.poll() is not None:
            return 0.0
        t = time.monotonic()
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait()
        return time.monotonic() - t


@pytest.fixture
def served(data: Path, env: dict[str, str]) -> Iterator[Served]:
    s = Served(data, env).start()
    yield s
    s.stop()


# ---- one served app for a whole file (docs/testing.md, "Shared servers") -------------------
# `tabletalk serve` costs ~1.1-1.7 s of CPU to start (its parent and worker: imports,
# migrations); a browser file whose tests each make what they look at (a conversation, an
# agent, a setting put back) shares one app and its fake model server: `shared_served` and
# `shared_fake`, the fake's script, recorded requests and models as new at each test's start.
FAKE_KNOBS = ("models", "thinkers", "default", "plain_default", "template_tools", "concepts", "embed",
              "embed_error", "record_times", "sends_usage", "require_key")


@pytest.fixture(scope="module")
def module_fake() -> Iterator[FakeModelServer]:
    with fake_model_server() as server:
        server.knobs = {k: copy.copy(getattr(server, k)) for k in FAKE_KNOBS}  # what each test starts from
        yield server


@pytest.fixture(scope="module")
def served_settings() -> dict[str, str]:
    """Settings the module's served app starts with beyond the test ones (a module overrides
    this: `{"CHAT_PRIVATE_PLUGINS": "1"}`)."""
    return {}


@pytest.fixture(scope="module")
def module_served(request, tmp_path_factory, module_fake: FakeModelServer,
                  served_settings: dict[str, str]) -> Iterator[Served]:
    """`tabletalk serve` for the whole module, on a data folder (and, under
    TABLETALK_TEST_POSTGRES=1, a database) of its own, the owner signed in."""
    values = {"TABLETALK_DATA": str(tmp_path_factory.mktemp("shared") / "data"), "AI_URL": module_fake.url,
              "AI_KEY": "", "AI_MODEL": ""} | served_settings
    cluster = request.getfixturevalue("pg_cluster") if ON_POSTGRES else None
    with pytest.MonkeyPatch.context() as mp:
        if cluster:  # conftest's helpers (`rows`, `app_store`) follow DATABASE_URL
            values["DATABASE_URL"] = cluster.database()
            mp.setenv("DATABASE_URL", values["DATABASE_URL"])
        else:
            mp.delenv("DATABASE_URL", raising=False)
        s = Served(Path(values["TABLETALK_DATA"]), values).start()
        module_fake.answering = s  # what `shared_fake` waits on between tests
        try:
            yield s
        finally:
            s.stop()
            if cluster:
                cluster.drop(values["DATABASE_URL"])


QUIET_SECONDS = 10.0


def quiet(served: Served) -> None:
    """Waits until `served` answers no conversation (no lease held in its database) but those
    waiting for the person (a call for approval, a plugin's question: they send nothing until
    answered, and no later test answers them), at most QUIET_SECONDS. Such a run once held
    every later test of its file up for the whole wait (50 s in test_browser_sidebar.py)."""
    deadline = time.monotonic() + QUIET_SECONDS
    if not rows(served.data, "SELECT chat FROM runs", ()):
        return
    with served.store() as store:
        while time.monotonic() < deadline:
            leased = [r["chat"] for r in rows(served.data, "SELECT chat FROM runs", ())]
            if all(store.awaits_person(chat) for chat in leased):
                return
            time.sleep(0.05)


@pytest.fixture
def shared_fake(request, module_fake: FakeModelServer) -> Iterator[FakeModelServer]:
    """The module's fake model server as new: no script, no requests recorded (a run of an
    earlier test may still send one: its naming, answered by plain_default), its first models.
    A test that changed its models has them put back, and the module's served app (when the
    test used it) lists them again. An earlier test's run still going is waited for first (at
    most QUIET_SECONDS): its next request would take this test's script."""
    if (answering := getattr(module_fake, "answering", None)) is not None:
        quiet(answering)
    module_fake.reset()
    for k, v in module_fake.knobs.items():
        setattr(module_fake, k, copy.copy(v))
    yield module_fake
    knobs = module_fake.knobs
    if module_fake.models != knobs["models"] or module_fake.thinkers != knobs["thinkers"]:
        module_fake.models, module_fake.thinkers = copy.copy(knobs["models"]), copy.copy(knobs["thinkers"])
        if "module_served" in request.fixturenames:
            with request.getfixturevalue("module_served").client(timeout=10) as c:
                assert c.post("/models/refresh", data={"_csrf_token": csrf(c)}).status_code < 400


@pytest.fixture
def shared_served(module_served: Served, shared_fake: FakeModelServer) -> Served:
    """The module's served app (`module_served`, the owner signed in), its fake as new
    (`shared_fake`)."""
    return module_served


def shared_fixtures(newcomer: bool) -> tuple:
    """`served` and `fake` fixtures for a module sharing one served app: `served, fake =
    shared_fixtures(newcomer=True)`. With `newcomer` each test is someone new on it
    (`Served.newcomer`), else the owner."""

    @pytest.fixture
    def served(shared_served: Served) -> Served:
        return shared_served.newcomer() if newcomer else shared_served

    @pytest.fixture
    def fake(shared_fake: FakeModelServer) -> FakeModelServer:
        return shared_fake

    return served, fake


@pytest.fixture(scope="module")
def browser():
    # Module scope: Playwright's sync API keeps an event loop running in this thread while it
    # is open, which async tests in later modules could not share.
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: `make test` installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Where browser tests leave the screenshots a person looks at (TABLETALK_SHOTS, else a folder
# in the system's temporary directory; never inside or beside the checkout).
SHOTS = os.environ.get("TABLETALK_SHOTS") or os.path.join(tempfile.gettempdir(), "tabletalk-shots")


def light_and_dark(page, path: str, **kw) -> None:
    """Screenshots of the page as it is, light and dark: `path` with "{scheme}" in it, each
    taken with the page's colour scheme switched (a theme changes only colours, so a flow is
    walked once and pictured in both, not walked again in a context of its own); the page
    is light again after. `kw` is the screenshot's (full_page=True)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=path.format(scheme=scheme), **kw)
    page.emulate_media(color_scheme="light")


# Tabletalk served with the real server-everything (npm) as the owner's default agent's
# plugin "everything", over Streamable HTTP (browser tests of plugins).
@pytest.fixture
def served_with_plugin(data, env):
    with Everything("streamableHttp") as everything:
        served = Served(data, {**env, "CHAT_PRIVATE_PLUGINS": "1"}).start()
        from app.tables import plugin

        with served.store() as store:
            agent = store.default_agent(store.owner())
            store.add_plugin(plugin(agent.id, everything.url, name="everything"))
            served.agent = agent.id
        yield served
        served.stop()


# server-everything over each transport, function-scoped (a file that wants one server for
# all its tests defines its own `everything`), and a client whose default agent has it as a
# plugin.
@pytest.fixture(params=["streamableHttp", "sse"])
def everything(request):
    with Everything(request.param) as server:
        yield server


@pytest.fixture
def with_plugin(make_client, everything):
    from tests.test_agents_tools import agent_url

    with make_client(CHAT_PRIVATE_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "address": everything.url})
        yield client
