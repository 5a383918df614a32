"""The marks that tell the fast tests from the rest, and the check that keeps them complete.

`make test-fast` runs `-m "not browser and not process and not postgres"`: the tests that
start nothing beyond this process (the in-process app, the fake model server, MCP servers
built with the mcp package run in a thread). So a test must carry

- `browser`: it drives Chromium (the `browser` fixture, Playwright);
- `postgres`: it uses the test session's PostgreSQL cluster (the `pg_cluster` fixture, also
  behind `pg_url`, the `store` fixture's PostgreSQL param and `on_both_engines`);
- `process`: it starts any other process: `tabletalk serve` (`Served`), a command
  (`sys.executable -m app.admin.cli ...`, an npm package, llama.cpp's server, a stdio plugin).

They are given from the fixtures a test uses (FIXTURE_MARKS, here at collection), so a test
that takes `served` or `everything` need not repeat them. `process` is written by hand (`pytestmark = pytest.mark.process`), and an
audit hook (sys.addaudithook: `subprocess.Popen`, `os.posix_spawn`, `os.fork`, `os.exec`)
notes every process a test starts: a test without one of the three marks that starts one
fails, naming the command, so the fast set cannot grow a process unseen. A module- or
session-scoped fixture starts its process in the setup of the first test that uses it, which
is where it is caught; what a teardown starts (a session fixture stopping its server) is not
counted.
"""
from __future__ import annotations

import sys

import pytest

MARKS = ("browser", "process", "postgres")
# fixtures (conftest's, or a module's own of the same name) that always start what a mark names
FIXTURE_MARKS = {"browser": "browser", "pg_cluster": "postgres", "served": "process", "shared_served": "process",
                 "module_served": "process", "served_with_plugin": "process",
                 "everything": "process", "with_plugin": "process"}
SPAWNS = ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.spawn",
          "tabletalk.zygote.fork")  # (tests/zygote.py: `tabletalk serve` forked by another process)
# what a library runs to learn about the machine, once, whichever test comes first
# (platform.processor(), as argon2-cffi asks it): no server, nothing the fast set waits on
PROBES = ("uname ",)


class Marks:
    """Registered by tests/conftest.py's pytest_configure."""

    def __init__(self) -> None:
        self.started: list[str] = []
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple) -> None:
        if event in SPAWNS:
            command = self._command(event, args)
            if not command.startswith(PROBES):
                self.started.append(command)

    @staticmethod
    def _command(event: str, args: tuple) -> str:
        try:
            argv = args[1] if event == "subprocess.Popen" or len(args) > 1 else (args[0] if args else ())
            words = [str(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
            return " ".join(words)[:200] or event
        except Exception:  # an audit hook must never raise into the code it watches
            return event

    @pytest.hookimpl(tryfirst=True)  # before -m deselects by them
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            wanted = {mark for fixture, mark in FIXTURE_MARKS.items() if fixture in getattr(item, "fixturenames", ())}
            # the engine's param (`engine`, or a module's `env` over ENGINES): the store fixture
            # and on_both_engines ask for the cluster only when it is PostgreSQL's
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "postgresql" in [v for v in params.values() if isinstance(v, str)]:
                wanted.add("postgres")
            for mark in sorted(wanted):
                if not item.get_closest_marker(mark):
                    item.add_marker(mark)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        if not self.started or call.when == "teardown":  # a session's cluster stops after the last test
            self.started = []
            return
        started, self.started = self.started, []
        if any(item.get_closest_marker(m) for m in MARKS) or report.failed:
            return
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} started a process without the `process` mark "
                           f"(tests/marks.py): {started[:3]}")
