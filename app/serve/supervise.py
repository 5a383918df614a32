"""`tabletalk serve`'s keeper of the built-in model: it carries out an install the owner chose
on a page, starts the model server once it is installed, starts it again when it dies (with
a growing pause, so a server that cannot start does not spin), and stops it with the app.

A process of its own (`python -m app.serve.keeper`, which says when one runs: only while
the row asks for one), ended with serve: granian forks workers from serve's process at any
time (a dead one is started again), and a fork must not copy a thread that may hold a lock.
It reads the `builtin_model` row twice a second and writes what it does there, so every page
follows; once the row asks for nothing (an install failed, say) and no server runs, it ends.
It serves the model the row names: SmolLM2, or a GGUF the owner brought (app/builtin/
brought.py), switched to at once when the owner chooses another, and given up for SmolLM2,
with words in the row, when it stops the server GIVE_UP times before it ever answered.
The model server listens on loopback only, on a free port (the last one when it is free);
where is written to model/server.json for the workers' model clients (`url_of`). The model
server runs in a session of its own (a Ctrl-C in the terminal reaches Tabletalk, which stops
it). The supervisor is not serve's child (keeper forks once more at start): serve's children
are granian's workers alone. It watches serve's pid and stops when serve is gone, however
serve ended; the kernel ends the model server when the supervisor dies (PR_SET_PDEATHSIG),
so a kill -9 of either leaves nothing running.
"""
from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx2

from ..store import Store, db as dbm
from ..config import Config
from ..store.outage import unavailable
from ..builtin import ASKING, NAME, WINDOW, Paths, alive, brought, runtime
from ..tables import Builtin
from ..builtin.install import InstallError, Installer, Progress
from ..providers.client import Providers
from .. import config as configuration

log = logging.getLogger(__name__)

LOOK_SECONDS = 0.5  # how often the row (and the server process) is looked at
START_SECONDS = 120.0  # a server that loads its model for longer than this is stopped and started again
BACKOFF = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0)  # pauses before each restart after a death
STEADY_SECONDS = 60.0  # up this long, a death is a new one: the pause starts from the first again
STOP_SECONDS = 5.0  # SIGTERM, then this long before SIGKILL
GIVE_UP = 3  # deaths in a row of a brought model that never answered, before SmolLM2 is served again

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child, between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the supervisor still stops it at a clean exit


def free_port(prefer: int = 0) -> int:
    """`prefer` when nothing listens there (the server keeps its address across restarts), else any."""
    for port in ((prefer, 0) if prefer else (0,)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free port on 127.0.0.1")


def port_of(url: str) -> int:
    try:
        return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0


class Supervisor:
    def __init__(self, config: Config, wheels: Path | None = None, serve: int = 0):
        self.config = config
        self.serve = serve  # the `tabletalk serve` it works for: gone, it stops (however serve ended)
        self.paths = Paths(config.data)
        self.wheels = wheels
        self._stopping = threading.Event()
        self._installer: Installer | None = None
        self.proc: subprocess.Popen | None = None
        self._up_since = 0.0
        self._deaths = 0  # in a row, for the pause before the next start
        self._next_start = 0.0
        self.serving = ""  # the row's `model` the server runs for ('' SmolLM2)
        self._name = NAME  # what the server calls its model
        self._answered = False  # the server came up since the model it serves was chosen

    def stop(self, *_: object) -> None:
        """Stop the install or the model server, then `run` returns (serve is ending). A signal
        handler: it only sets a flag and ends the install's running command."""
        self._stopping.set()
        if self._installer is not None:
            self._installer.cancel()

    # --- the loop -------------------------------------------------------------------

    def run(self) -> None:
        db = dbm.connect(self.config.database)
        store = Store(db)
        try:
            row = store.builtin()
            if row.state == "installing" and not alive(row.pid):
                store.set_builtin(state="failed", error="The install was cut off (Tabletalk stopped). Choose it again to go on.",
                                  pid=0, finished=dbm.now())
            if row.state == "ready" and not self.paths.installed():
                store.set_builtin(state="failed", error=f"The built-in model's files are gone from {self.paths.root}. "
                                  "Choose it again to install it.", serving="")
            while not self._stopping.is_set():
                if self.serve and not alive(self.serve):
                    break  # serve was killed outright
                try:
                    self._look(store)
                except Exception as e:  # a bug here must not end the supervision
                    if why := unavailable(e):  # an outage, said as one: it looks again
                        log.warning("the built-in model's supervisor: %s; it looks again", why)
                    else:
                        log.exception("the built-in model's supervisor failed; it goes on")
                    self._stopping.wait(5)
                self._stopping.wait(LOOK_SECONDS)
            self._stop_server(store)
        finally:
            db.conn.close()

    def _look(self, store: Store) -> None:
        row = store.builtin()
        if row.state not in ASKING and self.proc is None:
            self._stopping.set()  # nothing to do: a worker starts a supervisor again when the row asks
        elif row.state == "wanted":
            self._install(store)
        elif row.state == "ready":
            self._keep(store, row)

    # --- the install ----------------------------------------------------------------

    def _install(self, store: Store) -> None:
        store.set_builtin(state="installing", pid=os.getpid(), started=dbm.now(), error="")

        def report(p: Progress) -> None:
            store.set_builtin(step=p.step, steps=p.steps, what=p.what, percent=p.percent, line=p.line)

        self._installer = Installer(self.paths, report, self.wheels)
        try:
            self._installer.run()
        except InstallError as e:
            if self._stopping.is_set():  # stopped with Tabletalk: the next `tabletalk serve` goes on
                store.set_builtin(state="wanted", pid=0, what="", percent=-1,
                                  line="Tabletalk stopped during the install; it starts again with Tabletalk.")
            else:
                store.set_builtin(state="failed", error=str(e), pid=0, finished=dbm.now())
            return
        except Exception as e:
            log.exception("installing the built-in model failed")
            store.set_builtin(state="failed", error=f"The install failed ({type(e).__name__}: {e}).", pid=0,
                              finished=dbm.now())
            return
        finally:
            self._installer = None
        store.set_builtin(state="ready", pid=0, finished=dbm.now(), serving="", restarts=0)

    # --- the server -----------------------------------------------------------------

    def _keep(self, store: Store, row: Builtin) -> None:
        if self.proc is not None and row.model != self.serving:
            # the owner chose another model: this server stops, and the chosen one starts at once
            store.set_builtin(serving="starting")
            self.paths.address.unlink(missing_ok=True)  # no request goes to it meanwhile
            self._end(self.proc)
            self.proc = None
            self._deaths, self._next_start = 0, 0.0
        if self.proc is None:
            if time.monotonic() >= self._next_start:
                self._start_server(store, row)
            return
        code = self.proc.poll()
        if code is None:
            if row.serving == "starting" and self._answers(row.url):
                self._up(store, row)
            elif row.serving == "starting" and time.monotonic() - self._up_since > START_SECONDS:
                log.warning("the built-in model server did not answer in %.0f s; starting it again", START_SECONDS)
                self._end(self.proc)
                self._died(store, row, "did not answer in time")
            return
        self._died(store, row, f"exited with {code}")

    def _chosen(self, store: Store, row: Builtin) -> tuple[Path, str, int]:
        """The model file the row asks for, its name and its window: a brought one while it is
        there and its header checks, else SmolLM2 (and the row says why)."""
        if row.model:
            found = brought.one(self.config.data, row.model)
            if found is not None and not found.problem:
                return brought.folder(self.config.data) / found.file, found.name, found.window
            why = found.problem if found else f"it is no longer in {brought.folder(self.config.data)}"
            store.set_builtin(model="", error=f"{row.model} cannot be served: {why}. SmolLM2 is served instead.")
        gguf = self.paths.gguf()
        assert gguf is not None  # installed: its files are there (checked at the supervisor's start)
        return gguf, NAME, WINDOW

    def _start_server(self, store: Store, row: Builtin) -> None:
        gguf, name, window = self._chosen(store, row)
        chosen = row.model if name != NAME else ""  # (a brought one that cannot be served: SmolLM2)
        if chosen != self.serving:
            self.serving, self._answered = chosen, False
        self._name = name
        port = free_port(port_of(row.url))
        url = f"http://127.0.0.1:{port}/v1"
        argv = runtime.server_argv(runtime.installed(self.paths) or runtime.XLLAMACPP, self.paths.python, gguf, port,
                                   self.config.model_threads, name, window)
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with open(self.paths.server_log, "ab") as out:
            out.write(f"\n== start {time.strftime('%Y-%m-%d %H:%M:%S')} on port {port}: {gguf.name}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=die_with_parent)
        self._up_since = time.monotonic()
        store.set_builtin(serving="starting", url=url)

    def _answers(self, url: str) -> bool:
        try:
            return httpx2.get(f"{url}/models", timeout=2).status_code == 200
        except httpx2.HTTPError:
            return False

    def _up(self, store: Store, row: Builtin) -> None:
        assert self.proc is not None
        tmp = self.paths.address.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": row.url, "pid": self.proc.pid, "model": self._name}))
        tmp.replace(self.paths.address)
        self._up_since = time.monotonic()
        self._answered = True
        refresh_choices(self.config, store)  # first: a page that says it is up lists it
        store.set_builtin(serving="up")

    def _died(self, store: Store, row: Builtin, how: str) -> None:
        self.proc = None
        self.paths.address.unlink(missing_ok=True)
        if row.serving == "up" and time.monotonic() - self._up_since >= STEADY_SECONDS:
            self._deaths = 0
        pause = BACKOFF[min(self._deaths, len(BACKOFF) - 1)]
        self._deaths += 1
        self._next_start = time.monotonic() + pause
        log.warning("the built-in model server %s; starting it again in %g s (see %s)", how, pause,
                    self.paths.server_log)
        if self.serving and not self._answered and self._deaths >= GIVE_UP:
            # a brought model that stops the runtime before it ever answers is not tried forever
            log.warning("%s stopped the built-in model's server %d times: serving SmolLM2 again", self.serving, GIVE_UP)
            store.set_builtin(serving="restarting", restarts=row.restarts + 1, model="",
                              error=f"{self.serving} stopped llama.cpp's server {GIVE_UP} times before it answered "
                                    f"(it {how}; {self.paths.server_log} says why). SmolLM2 is served instead.")
            self._deaths, self._next_start = 0, 0.0
            return
        store.set_builtin(serving="restarting", restarts=row.restarts + 1)

    def _stop_server(self, store: Store) -> None:
        if self.proc is not None:
            self._end(self.proc)
            self.proc = None
        self.paths.address.unlink(missing_ok=True)
        if store.builtin().serving:
            store.set_builtin(serving="stopped")

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            proc.wait()


def refresh_choices(config: Config, store: Store) -> None:
    """The model list read again, now that the built-in model answers (every page's picker)."""

    async def read() -> None:
        providers = Providers(config, store.connections)
        try:
            store.replace_choices(await providers.choices())
        finally:
            await providers.close()

    try:
        asyncio.run(read())
    except Exception:
        log.exception("reading the model list after the built-in model started failed")


def run(serve: int) -> None:
    """The supervisor's process (keeper.main, once it holds the lock): until serve ends it."""

    logging.basicConfig(level=logging.INFO, format="%(asctime)s built-in model: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per health check otherwise
    config = configuration.load()
    keeper = Supervisor(config, config.model_wheels, serve=serve)
    signal.signal(signal.SIGTERM, keeper.stop)
    signal.signal(signal.SIGINT, keeper.stop)
    keeper.run()
