"""TABLETALK_LEASE_SECONDS: how long a runner holds a conversation without renewing it."""
import pytest

from app import config as configuration
from app.config import Config
from app.plugins.sessions import Sessions
from app.run.runner import LEASE_SECONDS, Runner


def test_the_lease_is_a_setting_with_todays_default(monkeypatch):
    monkeypatch.delenv("TABLETALK_LEASE_SECONDS", raising=False)
    assert configuration.load().lease_seconds == LEASE_SECONDS == 10
    monkeypatch.setenv("TABLETALK_LEASE_SECONDS", "2.5")
    assert configuration.load().lease_seconds == 2.5
    for bad, said in [("0.5", "at least 1"), ("soon", "must be a number"), ("-3", "above zero")]:
        monkeypatch.setenv("TABLETALK_LEASE_SECONDS", bad)
        with pytest.raises(SystemExit, match=said):
            configuration.load()


def test_a_runner_takes_and_renews_its_leases_for_that_long(store, tmp_path, monkeypatch):
    from app.store import db as dbm

    monkeypatch.setenv("TABLETALK_DATA", str(tmp_path))
    monkeypatch.setenv("TABLETALK_LEASE_SECONDS", "4")
    config: Config = configuration.load()
    runner = Runner(config, store, feed=None, providers=None, sessions=Sessions())
    assert runner.renew_seconds == pytest.approx(4 / 3)
    chat = store.new_conversation(None).id
    before = dbm.now()
    assert runner.lease(chat)
    [(expires,)] = store.db.conn.execute("SELECT expires FROM runs WHERE chat = ?", [chat]).fetchall()
    assert before + 4 <= expires <= dbm.now() + 4
    assert not store.lease(chat, "another server", 10), "held for those 4 s"


async def test_work_beside_a_run_that_fails_logs_a_bug_and_not_an_outage(store, tmp_path, monkeypatch, caplog):
    """A conversation's naming (Runner.side) that fails loses nothing but the title: a bug is
    logged with its traceback once, an outage of the database not at all (the scan says it),
    and neither is left for asyncio's "Task exception was never retrieved"."""
    import asyncio
    import gc
    import logging

    from app.store.postgres import Unreachable

    monkeypatch.setenv("TABLETALK_DATA", str(tmp_path))
    runner = Runner(configuration.load(), store, feed=None, providers=None, sessions=Sessions())

    async def fails(e: Exception) -> None:
        raise e

    caplog.set_level(logging.DEBUG)
    runner.side(fails(Unreachable("the database at 127.0.0.1:5432 is unreachable (connection refused)")))
    runner.side(fails(KeyError("a bug")))
    while runner._side:
        await asyncio.sleep(0)
    gc.collect()
    said = [(r.getMessage(), type(r.exc_info[1]) if r.exc_info else None) for r in caplog.records]
    assert said == [("work beside a run failed", KeyError)]
