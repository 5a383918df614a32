"""The suite's app in this process (conftest.in_process): an app whose stop fails says which
test it was, where its lifespan was, and what else its loop was waiting on."""
import asyncio
from contextlib import asynccontextmanager

import pytest
from litestar import Litestar

from tests.conftest import LifespanFailed, in_process


def test_a_lifespan_failing_at_shutdown_names_the_test_where_it_was_and_what_was_pending():
    """The shape of issue 39: at shutdown the lifespan awaits a future that another task
    awaited bare and was cancelled in, so the lifespan raises CancelledError though nothing
    cancelled it. The TestClient says only "CancelledError"; in_process says the rest."""

    @asynccontextmanager
    async def lifespan(app):
        loop = asyncio.get_running_loop()
        closed = loop.create_future()  # one future two tasks wait on, as a stream's close is

        async def closing():
            await closed

        async def waiting_for_ever():
            await loop.create_future()

        first = loop.create_task(closing(), name="closing")
        loop.create_task(waiting_for_ever(), name="left behind")
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
    assert 'test_in_process.py", line 33, in lifespan\n    await closed' in said, "where the lifespan was"
    [left] = [line for line in said.splitlines() if line.startswith("  left behind: ")]
    assert "<locals>.waiting_for_ever (tests/test_in_process.py:26)" in left, "what the other task awaits"
    assert "waiting on <Future pending" in left
