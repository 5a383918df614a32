"""`tabletalk serve` for the tests, forked from a process that imported it once.

A test that serves starts `tabletalk serve` (tests/conftest.py, `Served`): ~180 starts a
`make test`. A start from nothing costs ~1.2 s of CPU, almost all of it imports: the command
line ~0.4 s, then granian's worker imports the web app, ~0.45 s more. This process, one per
pytest worker, imports both once (and the libraries a served app imports on first use: openai,
mcp's clients) and forks a child for each start. From `main` on the child
is what `python -m app.admin.cli serve ...` would be: a session of its own (so the tests'
`os.killpg` reaches it and its workers), its arguments, environment (replaced whole), working
folder, stdin from /dev/null, stdout and stderr into the test's log, no other file of ours
open; granian forks its worker from it, which finds the web app imported.

What it is not: a start from nothing. Nothing in app/ reads the environment while it is
imported (a test checks: tests/test_zygote.py), so the imports made here under the pytest
worker's environment are the ones the child would make under its own. The tests that are
about a start itself (what it imports, how long it takes, the command line's words) run
the command as a process of its own; `TABLETALK_TEST_FORK=0` runs every start that way.

Its words, JSON lines. In (stdin): {"args": [...], "env": {...}, "cwd": "...", "log": "..."},
a start; stdin's end ends this process (its children go on: the tests stop them). Out
(stdout): {"pid": N} for each start, in order; {"exited": N, "code": C} when it ends (C as
subprocess.Popen's returncode: the exit status, or minus the signal that ended it).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTED_ENV = dict(os.environ)  # the zygote's own: the pytest process's as it began, not a test's


def child(start: dict) -> None:
    """In the forked child: become the command, run it, never return."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log = os.open(start["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") < 65536 else 65536)
        # Python's objects over fds 0-2, new: this process's were the pipes to the test
        sys.stdin = open(0, closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
        os.chdir(start["cwd"])
        os.environ.clear()
        os.environ.update(start["env"])
        from app.admin import cli

        sys.argv = [cli.__file__, *start["args"]]
        try:
            cli.main(start["args"])
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                code = 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    import app.admin.cli  # noqa: F401  (what serve imports)
    import app.web.app  # noqa: F401  (what its granian worker imports)
    # ... and what a served app imports on first use (each ~0.1-0.6 s of CPU a start when the
    # child imported it: py-spy of a make test's zygotes put 15% of their samples in openai's
    # import alone). Libraries, not app/: what openai reads at import is its module-level
    # client's settings (OPENAI_API_TYPE ...: the app makes its own clients) and OPENAI_LOG,
    # which no test sets.
    import granian  # noqa: F401  (app/serve/granian.py)
    import litestar.plugins.pydantic  # noqa: F401  (Litestar's constructor, with pydantic installed)
    import mcp.client.session  # noqa: F401  (app/plugins/link.py)
    import mcp.client.sse  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401
    import openai  # noqa: F401  (app/providers/client.py, at the first request)

    out = sys.stdout
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child ended: the wake-up pipe says so
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ, "start")
    pending = b""
    selector.register(wake_r, selectors.EVENT_READ, "reap")

    def say(**words) -> None:
        out.write(json.dumps(words) + "\n")
        out.flush()

    while True:
        for key, _ in selector.select():  # (a signal's EINTR is retried by select itself)
            if key.data == "reap":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if not pid:
                        break
                    say(exited=pid, code=os.waitstatus_to_exitcode(status))
                continue
            got = os.read(0, 65536)
            if not got:
                return
            *lines, pending = (pending + got).split(b"\n")
            for line in lines:
                start = json.loads(line)
                sys.stderr.flush()
                begun_r, begun_w = os.pipe()  # closed by the child once in its own session
                pid = os.fork()
                if pid == 0:
                    child(start)
                os.close(begun_w)
                os.read(begun_r, 1)
                os.close(begun_r)
                say(pid=pid)


# ---- the test's side -------------------------------------------------------------------

class Forked:
    """A command the zygote forked, as the tests use a subprocess.Popen: pid, poll, wait,
    returncode."""

    def __init__(self, zygote: "Zygote", pid: int, args: list[str]):
        self.zygote, self.pid, self.args = zygote, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


class Zygote:
    """The zygote process of this pytest process, started at its first fork."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.zygote"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=STARTED_ENV, start_new_session=True)
        self.lock = threading.Lock()  # one start at a time: its pid is the next line
        self.said = threading.Condition()
        self.pids: list[int] = []
        self.codes: dict[int, int] = {}
        self.gone = False
        threading.Thread(target=self._listen, daemon=True, name="zygote").start()

    def _listen(self) -> None:
        for line in self.proc.stdout:
            words = json.loads(line)
            with self.said:
                if "pid" in words:
                    self.pids.append(words["pid"])
                else:
                    self.codes[words["exited"]] = words["code"]
                self.said.notify_all()
        with self.said:
            self.gone = True
            self.said.notify_all()

    def fork(self, args: list[str], env: dict[str, str], cwd: Path, log: Path) -> Forked:
        sys.audit("tabletalk.zygote.fork", args)  # a process started, as tests/marks.py counts them
        with self.lock:
            self.proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd), "log": str(log)}).encode()
                                  + b"\n")
            self.proc.stdin.flush()
            with self.said:
                if not self.said.wait_for(lambda: self.pids or self.gone, 60) or not self.pids:
                    raise RuntimeError(f"the zygote did not start {args}")
                return Forked(self, self.pids.pop(0), args)

    def code(self, pid: int, timeout: float | None) -> int | None:
        """`pid`'s exit code once it has ended, waiting up to `timeout` seconds (None: no bound)."""
        def ended() -> bool:
            return pid in self.codes or self.gone
        with self.said:
            self.said.wait_for(ended, timeout)
            if pid in self.codes:
                return self.codes[pid]
        if self.gone:  # the zygote died: its children were reaped by another
            return None if _alive(pid) else -signal.SIGKILL
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_zygote: Zygote | None = None


def fork(args: list[str], env: dict[str, str], cwd: Path, log: Path) -> Forked:
    """`python -m app.admin.cli *args` in a session of its own, its stdout and stderr appended
    to `log`: forked from this pytest process's zygote (started now if it is not running)."""
    global _zygote
    if _zygote is None or _zygote.gone:
        _zygote = Zygote()
    return _zygote.fork(args, env, cwd, log)


def close() -> None:
    if _zygote is not None:
        _zygote.close()


if __name__ == "__main__":
    main()
