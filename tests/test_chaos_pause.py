"""A worker paused past its lease (SIGSTOP for 8 s with TABLETALK_LEASE_SECONDS=3, then SIGCONT)
while six slow answers stream, some after a tool call or an approval: another worker takes
its conversations once the leases expire, and the paused one, going on, writes nothing more
of them. As for kill -9 (tests/chaos.py checks it): each message answered once, whole, no
tool run twice, no committed row lost, nothing left at done = 0, no message marked answered
while its answer's rows are not done. In-process, without the processes: test_lost_lease.py."""
import pytest

from tests.chaos import Chaos
from tests.conftest import engine_setting

pytestmark = pytest.mark.process

LEASE = 3
PAUSE = 8


def check(f) -> None:
    print(f.table())
    assert f.problems == [] and f.pending == 0 and f.stuck_calls == 0 and f.left_undone == 0
    assert f.answered == 6, "every conversation answered once, whole"
    assert f.cut_and_done == 0 and f.repeated == 0 and f.answered_early == 0
    assert f.calls_repeated == 0, "no tool ran twice"
    assert f.rows_seen > 0 and f.rows_lost == 0
    assert f.tool_calls + f.may_have_run >= 6
    assert f.tracebacks == 0


def test_a_worker_paused_past_its_lease_with_two_workers_changes_nothing(request, monkeypatch, tmp_path):
    """`serve --workers 2` (SQLite's file, or PostgreSQL under TABLETALK_TEST_POSTGRES=1): one
    worker stopped mid-call, then mid-answer."""
    url = engine_setting(request, monkeypatch).get("DATABASE_URL")
    with Chaos(tmp_path, conversations=6, workers=2, tokens_per_second=20, database_url=url,
               lease_seconds=LEASE) as chaos:
        chaos.pause(during="call", seconds=PAUSE, whole=False)
        chaos.pause(during="text", seconds=PAUSE, whole=False)
        chaos.wait(timeout=120)
        chaos.quiet()
        f = chaos.outcome()
    assert f.pauses == 2 and f.paused_runs >= 2 and f.missed == 0, "each pause stopped a worker that held runs"
    check(f)


def test_a_server_paused_past_its_lease_beside_another_on_postgresql_changes_nothing(pg_url, tmp_path):
    """Two `tabletalk serve` on one PostgreSQL database: one server's process group stopped
    mid-call, then mid-answer; the other answers what it held."""
    with Chaos(tmp_path, conversations=6, workers=1, servers=2, tokens_per_second=20, database_url=pg_url,
               lease_seconds=LEASE) as chaos:
        chaos.pause(during="call", seconds=PAUSE)
        chaos.pause(during="text", seconds=PAUSE)
        chaos.wait(timeout=120)
        chaos.quiet()
        f = chaos.outcome()
    assert f.pauses == 2 and f.paused_runs >= 2 and f.missed == 0, "each pause stopped a worker that held runs"
    check(f)
