"""A stdio plugin's tools are not listed at every message (that started its command each
time): its listing is kept (in memory and in its row, so a restart does not start from
nothing) and read again when its server says its tools changed (through the conversation's
live session), when it is old (in the background, the run going on with the last one), or
on Refresh. A first start that takes long (npx downloading) is not cut off: the run goes on
without it ("starting…") and the listing lands in the row. Counted with the fake server's
STARTS file: one line per start of the command."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from app.plugins import link as mcp_link, tools as mcp_tools
from app.plugins.sessions import Sessions
from app.plugins.tools import PluginRun, for_run, list_tools, refresh, starting
from app.store import Store, db as dbm, schema
from app.tables import Assistant, Plugin
from app.tools import ToolContext
from tests.conftest import fresh_sqlite

pytestmark = pytest.mark.process  # tests/marks.py

FAKE = Path(__file__).resolve().parent / "fakes" / "stdio_server.py"


@pytest.fixture
def rows(tmp_path):
    db = dbm.connect(fresh_sqlite(tmp_path / "t.db"))
    schema.migrate(db)
    yield Store(db)
    db.conn.close()


def added(store: Store, tmp_path: Path, *args: str, name: str = "fake") -> tuple[Plugin, Path]:
    agent = store.add_agent(Assistant(name=f"agent of {name}"))
    starts = tmp_path / f"starts-{name}"
    p = store.add_plugin(Plugin(agent=agent.id, name=name, address="", kind="stdio", command=sys.executable,
                                args=(str(FAKE), *args), env=(("STARTS", str(starts)),)))
    return p, starts


def started(starts: Path) -> int:
    return len(starts.read_text().splitlines()) if starts.exists() else 0


async def until(check, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


async def listed(store: Store, p: Plugin, **more) -> mcp_tools.Listing:
    """What a run is offered of the plugin now (its row as a run reads it)."""
    found = await refresh([store.plugin_row(p.id)], private_ok=False, stdio_ok=True, store=store, **more)
    return found[p.id]


async def test_a_command_is_listed_once_not_at_every_message_nor_after_a_restart(rows, tmp_path):
    p, starts = added(rows, tmp_path)
    first = await listed(rows, p)
    assert first.status == "5 tools" and started(starts) == 1
    assert rows.plugin_row(p.id).status == "5 tools", "the listing is kept in the row"
    for _ in range(3):
        assert {t.name for t in (await listed(rows, p)).tools} == {"fake_whoami", "fake_count", "fake_grow", "fake_die", "fake_lines"}
    assert started(starts) == 1, "later messages use the kept listing"
    mcp_tools._last.clear()  # a restart: this process knows nothing
    assert (await listed(rows, p)).status == "5 tools"
    assert started(starts) == 1, "the row's listing is used after a restart"


async def test_tools_changed_are_listed_again_through_the_conversations_session(rows, tmp_path):
    p, starts = added(rows, tmp_path)
    sessions = Sessions()
    try:
        first = await listed(rows, p)
        tools = {t.name: t for t in for_run(first.tools, PluginRun(sessions))}
        assert (await tools["fake_grow"].run({}, ToolContext(chat=7, agent=p.agent))).text == "grown"
        assert started(starts) == 2, "the listing's process, then the conversation's"
        await until(lambda: mcp_link.tools_changed.get(p.id, 0) > first.read)
        again = await listed(rows, p, sessions=sessions, chat=7)
        assert "fake_extra" in {t.name for t in again.tools} and again.status == "6 tools"
        assert started(starts) == 2, "listed through the conversation's live process"
        assert (await listed(rows, p)).status == "6 tools", "kept for the next message, in any conversation"
    finally:
        await sessions.close_all()


async def test_an_old_listing_is_used_while_it_is_read_again_in_the_background(rows, tmp_path, monkeypatch):
    p, starts = added(rows, tmp_path)
    first = await listed(rows, p)
    monkeypatch.setattr(mcp_tools, "STDIO_FRESH", 0.0)
    before = rows.plugin_row(p.id).status_at
    old = await listed(rows, p)
    assert old.tools and old.status == "5 tools", "the run goes on with the last listing at once"
    await until(lambda: started(starts) == 2 and not mcp_tools.under_way(p, False))
    await until(lambda: (rows.plugin_row(p.id).status_at or 0) >= first.read)
    assert rows.plugin_row(p.id).status_at >= before


async def test_a_slow_first_start_goes_on_in_the_background_and_lands_in_the_row(rows, tmp_path, monkeypatch):
    monkeypatch.setattr(mcp_tools, "WAIT_FIRST", 0.3)
    p, starts = added(rows, tmp_path, "slow_start=3")
    first = await listing_of_a_run(rows, p)
    assert first.status == "starting…" and first.starting and not first.tools
    assert rows.plugin_row(p.id).status == "starting…", "the tab says so meanwhile"
    await until(lambda: rows.plugin_row(p.id).status == "5 tools")
    assert started(starts) == 1, "the slow start was not killed and started again"
    assert (await listed(rows, p)).status == "5 tools" and started(starts) == 1


async def listing_of_a_run(store: Store, p: Plugin) -> mcp_tools.Listing:
    """The plugin's listing as a run records it (agent_tools, without the app's config)."""
    listing = await listed(store, p)
    if not listing.starting or mcp_tools.under_way(p, False):
        mcp_tools.record(store, store.plugin_row(p.id), listing)
    return listing


def test_a_downloader_says_it_may_be_downloading():
    npx = Plugin(agent=1, name="x", address="", kind="stdio", command="/usr/bin/npx", args=("-y", "pkg"))
    assert starting(npx) == "starting… (npx may be downloading)"


async def test_a_command_that_does_not_answer_says_so_with_its_own_words(rows, tmp_path):
    p, _ = added(rows, tmp_path, "hang", name="hung")
    listing = await list_tools(p, private_ok=False, stdio_ok=True, timeout=2)
    assert listing.status == "timed out: waiting for something that never comes"


async def test_a_command_that_fails_is_not_started_again_at_every_message(rows, tmp_path):
    p, starts = added(rows, tmp_path, "fail_start", name="failing")
    for _ in range(3):
        said = await listed(rows, p)
        assert said.status.startswith("the command ended without answering as an MCP server: cannot start"), said
    assert started(starts) == 1
