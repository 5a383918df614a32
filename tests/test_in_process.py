"""The suite's app in this process (conftest.in_process): an app whose stop fails says which
test it was, where its lifespan was, and what else its loop was waiting on."""
import asyncio
import re
from contextlib import asynccontextmanager

import pytest
from litestar import Litestar

from tests.conftest import LifespanFailed, in_process


def test_a_lifespan_failing_at_shutdown_names_the_test_where_it_was_and_what_was_pending():
    """The shape of issue 39: at shutdown the lifespan awaits a future that another task
    awaited bare and was cancelled in, so the lifespan raises CancelledError though nothing
    cancelled it. The TestClient says only "CancelledError"; in_process says the rest."""
    held = []  # a loop holds its tasks weakly: the collector would end the one left behind unseen

    @asynccontextmanager
    async def lifespan(app):
        loop = asyncio.get_running_loop()
        closed = loop.create_future()  # one future two tasks wait on, as a stream's close is

        async def closing():
            await closed

        async def waiting_for_ever():
            await loop.create_future()

        first = loop.create_task(closing(), name="closing")
        held.append(loop.create_task(waiting_for_ever(), name="left behind"))
        yield
        await asyncio.sleep(0)  # `closing` waits on the future now
        first.cancel()  # and cancels it as it is cancelled
        await closed

    with pytest.raises(LifespanFailed) as failed:
        with in_process(Litestar(lifespan=[lifespan])):
            pass
    said = str(failed.value)
    assert "tests/test_in_process.py::test_a_lifespan_failing_at_shutdown" in said and "(teardown)" not in said
    assert "did not stop cleanly: CancelledError()" in said
    assert re.search(r'test_in_process.py", line \d+, in lifespan\n    await closed\n', said), "where the lifespan was"
    [left] = [line for line in said.splitlines() if line.startswith("  left behind: ")]
    assert "<locals>.waiting_for_ever (tests/test_in_process.py:" in left, "what the other task awaits"
    assert "waiting on <Future pending" in left


def test_an_app_that_leaves_a_task_running_at_its_stop_fails_naming_it():
    """A task the app started and did not end by its stop: asyncio.run, or the TestClient's
    portal, would cancel it unseen as the loop closes; a person's server would be left with
    it until its process ends."""
    held = []  # a loop holds its tasks weakly: the collector would end this one unseen

    @asynccontextmanager
    async def lifespan(app):
        async def forever():
            await asyncio.Event().wait()

        held.append(asyncio.get_running_loop().create_task(forever(), name="left running"))
        yield

    with pytest.raises(LifespanFailed) as failed:
        with in_process(Litestar(lifespan=[lifespan])):
            pass
    said = str(failed.value)
    assert "tests/test_in_process.py::test_an_app_that_leaves_a_task" in said and "left work behind" in said
    [left] = [line for line in said.splitlines() if line.startswith("  left running: ")]
    assert "<locals>.forever (tests/test_in_process.py:" in left


def test_an_app_that_stops_cleanly_passes():
    """The check cannot fail every app: one whose task ends with its stop passes."""

    @asynccontextmanager
    async def lifespan(app):
        stop = asyncio.Event()
        task = asyncio.get_running_loop().create_task(stop.wait(), name="ended at the stop")
        yield
        stop.set()
        await task

    with in_process(Litestar(lifespan=[lifespan])):
        pass


def test_an_app_that_keeps_a_postgresql_connection_at_its_stop_fails_saying_so(pg_url):
    from app.store import db as dbm

    kept = []

    @asynccontextmanager
    async def lifespan(app):
        kept.append(dbm.connect(pg_url))  # a Database opened at start and not closed at the stop
        yield

    try:
        with pytest.raises(LifespanFailed) as failed:
            with in_process(Litestar(lifespan=[lifespan])):
                pass
    finally:
        kept[0].conn.close()
    assert "1 PostgreSQL connection(s) it took and did not give back to the pool" in str(failed.value)
