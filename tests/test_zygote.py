"""The zygote the tests fork `tabletalk serve` from (tests/zygote.py): what it relies on, and
that a forked command is the command (its arguments, environment, output, exit code)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests import zygote
from tests.conftest import ROOT, free_port, wait_for

pytestmark = pytest.mark.process

PROBE = """
import os, sys, traceback
read = []
get, walk = os._Environ.__getitem__, os._Environ.__iter__
def reader():  # the code that asked: the first frame past os's and the mapping's own
    for f in reversed(traceback.extract_stack()[:-2]):
        if not f.filename.endswith(("os.py", "<frozen os>", "_collections_abc.py", "<frozen _collections_abc>")):
            return f"{f.filename}:{f.lineno}"
def getitem(self, key):
    if "/app/" in (where := reader()):
        read.append((key, where))
    return get(self, key)
def iterate(self):
    if "/app/" in (where := reader()):
        read.append(("*", where))
    return walk(self)
os._Environ.__getitem__, os._Environ.__iter__ = getitem, iterate
import app.admin.cli, app.web.app
print(read)
"""


def test_nothing_in_app_reads_the_environment_while_it_is_imported():
    """The zygote imports the app under the pytest worker's environment and each child runs
    under its own: that is the same only while no module reads a setting at import."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"read at import: {done.stdout}"


def test_a_forked_command_has_its_arguments_environment_output_and_exit_code(tmp_path):
    env = {**os.environ, "TABLETALK_DATA": str(tmp_path / "data")}
    log = tmp_path / "log"
    migrated = zygote.fork(["migrate"], env, ROOT, log)
    assert migrated.wait(60) == 0 and migrated.returncode == 0 and migrated.poll() == 0
    assert "applied: " in log.read_text()
    assert (tmp_path / "data" / "tabletalk.db").exists()  # its environment's data folder, not the test's
    again = zygote.fork(["migrate"], env, ROOT, log)
    assert again.wait(60) == 0 and "applied: nothing (up to date)" in log.read_text()

    wrong = zygote.fork(["no-such-command"], env, ROOT, log)
    assert wrong.wait(60) == 2 and "invalid choice" in log.read_text()  # argparse's exit, its words

    # a server in a session of its own: the tests' killpg ends it, and it says how it ended
    served = zygote.fork(["serve", "--port", str(free_port())], env, ROOT, log)
    try:
        assert os.getpgid(served.pid) == served.pid and served.poll() is None
        wait_for(lambda: b"Started worker-" in log.read_bytes())
        with pytest.raises(subprocess.TimeoutExpired):
            served.wait(0.1)
    finally:
        os.killpg(served.pid, signal.SIGKILL)  # its worker with it: one process group
    assert served.wait(30) == -signal.SIGKILL
