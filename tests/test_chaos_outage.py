"""PostgreSQL stopped and started while answers stream (pg_ctl stop -m fast: its sessions
ended; -m immediate: a crash, the committed rows replayed from the WAL), under two servers,
and while one of them starts: runs whose writes failed resume from their last committed
step once it is back, and a server started during the outage waits for it and serves. The
invariants are kill -9's (tests/chaos.py): each message answered once, whole, no tool run
twice, no committed row lost, nothing left at done = 0, and no traceback in the logs."""
import pytest

from tests.chaos import Chaos
from tests.pg import Cluster

pytestmark = [pytest.mark.process, pytest.mark.postgres]


@pytest.fixture(scope="module")
def cluster():
    """A cluster of this module's own: its tests stop it, which the session's other tests'
    cluster must not be. Crash-safe: after `pg_ctl stop -m immediate` what was committed is there."""
    cluster = Cluster(crash_safe=True).start()
    yield cluster
    cluster.stop()


def check(f, conversations: int = 6) -> None:
    print(f.table())
    assert f.problems == [] and f.pending == 0 and f.stuck_calls == 0 and f.left_undone == 0
    assert f.answered == conversations, "every conversation answered once, whole"
    assert f.cut_and_done == 0 and f.repeated == 0 and f.answered_early == 0
    assert f.calls_repeated == 0, "no tool ran twice"
    assert f.rows_seen > 0 and f.rows_lost == 0
    assert f.tool_calls + f.may_have_run >= conversations
    assert f.tracebacks == 0


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgresql_restarted_mid_answer_loses_nothing_and_the_answers_resume(cluster, mode, tmp_path):
    url = cluster.database()
    with Chaos(tmp_path, conversations=6, workers=1, servers=2, tokens_per_second=20, database_url=url,
               cluster=cluster) as chaos:
        # a call first: the calls are made as the answers begin, and one is in flight only for
        # a moment once they are over (text first left none to find: the event came anyway, missed)
        chaos.restart_database(during="call", mode=mode, down=3)
        chaos.restart_database(during="text", mode=mode, down=3)
        chaos.wait(timeout=120)
        chaos.quiet()
        f = chaos.outcome()
    assert f.db_restarts == 2 and f.missed == 0
    check(f)


def test_a_server_started_while_postgresql_is_down_waits_for_it_and_serves(cluster, tmp_path):
    url = cluster.database()
    with Chaos(tmp_path, conversations=6, workers=1, servers=2, tokens_per_second=20, database_url=url,
               cluster=cluster) as chaos:
        chaos.start_during_outage(down=4)
        chaos.wait(timeout=120)
        chaos.quiet()
        f = chaos.outcome()
    assert f.db_restarts == 1 and f.server_kills == 1 and f.missed == 0
    check(f)
