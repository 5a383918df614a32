"""The MCP servers people add first, as commands (stdio), installed by `make npm-tools`
(pinned in the Makefile's NPM_TOOLS): @modelcontextprotocol/server-filesystem and
@modelcontextprotocol/server-memory. Listed, called, their state kept in the conversation's
session, and on the page added as a person would (named after the package). A regression
set for what a new user met with them (docs/plugins.md)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.plugins.sessions import Sessions
from app.plugins.tools import PluginError, PluginRun, for_run, list_tools
from app.tables import Plugin
from app.tools import ToolContext
from tests.conftest import csrf, soup
from tests.fakes.everything import ROOT

pytestmark = [pytest.mark.process,  # tests/marks.py
              pytest.mark.skipif(not shutil.which("node"), reason="the npm servers run under node")]

BIN = ROOT / ".cache/npm/node_modules/.bin"
FILESYSTEM = BIN / "mcp-server-filesystem"
MEMORY = BIN / "mcp-server-memory"
installed = pytest.mark.skipif(not FILESYSTEM.exists() or not MEMORY.exists(),
                               reason="make npm-tools installs server-filesystem and server-memory")


async def listed_tools(p: Plugin, sessions: Sessions) -> dict:
    listing = await list_tools(p, private_ok=False, stdio_ok=True, timeout=60)
    assert listing.ok, listing.status
    return {t.name: t for t in for_run(listing.tools, PluginRun(sessions))}


@installed
async def test_server_filesystem_reads_and_writes_in_its_folder_only(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "note.txt").write_text("hello from the folder\n")
    p = Plugin(agent=1, name="fs", address="", kind="stdio", command=str(FILESYSTEM), args=(str(folder),), id=301)
    sessions = Sessions()
    try:
        tools = await listed_tools(p, sessions)
        assert {"fs_read_text_file", "fs_write_file", "fs_list_directory", "fs_list_allowed_directories"} <= set(tools)
        ctx = ToolContext(chat=1, agent=1)
        read = await tools["fs_read_text_file"].run({"path": str(folder / "note.txt")}, ctx)
        assert read.text.strip() == "hello from the folder"
        await tools["fs_write_file"].run({"path": str(folder / "new.txt"), "content": "written"}, ctx)
        assert (folder / "new.txt").read_text() == "written"
        with pytest.raises(PluginError) as outside:  # the server's own refusal, in its words
            await tools["fs_read_text_file"].run({"path": str(tmp_path / "secret.txt")}, ctx)
        assert "outside allowed directories" in str(outside.value) or "Access denied" in str(outside.value), \
            str(outside.value)
        assert sessions.opened == 1, "one process for the conversation's calls"
    finally:
        await sessions.close_all()


@installed
async def test_server_memory_keeps_its_graph_in_the_conversations_session(tmp_path):
    p = Plugin(agent=1, name="mem", address="", kind="stdio", command=str(MEMORY),
               env=(("MEMORY_FILE_PATH", str(tmp_path / "memory.jsonl")),), id=302)
    sessions = Sessions()
    try:
        tools = await listed_tools(p, sessions)
        assert {"mem_create_entities", "mem_read_graph", "mem_search_nodes"} <= set(tools)
        ctx = ToolContext(chat=1, agent=1)
        entity = {"name": "Ada", "entityType": "person", "observations": ["writes programs"]}
        await tools["mem_create_entities"].run({"entities": [entity]}, ctx)
        graph = json.loads((await tools["mem_read_graph"].run({}, ctx)).text)
        assert [e["name"] for e in graph["entities"]] == ["Ada"]
        assert "Ada" in (tmp_path / "memory.jsonl").read_text(), "kept in the file it was given"
    finally:
        await sessions.close_all()


@installed
def test_added_on_the_page_they_are_named_after_their_package(make_client, tmp_path):
    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        url = soup(client.get("/agents")).select_one(".agent-list a")["href"]
        token = csrf(client, url)
        for program, args in ((FILESYSTEM, str(tmp_path)), (MEMORY, "")):
            r = client.post(url + "/plugins", data={"_csrf_token": token, "kind": "stdio", "command": str(program),
                                                    "args": args, "env": f"MEMORY_FILE_PATH={tmp_path / 'm.jsonl'}"})
            assert r.status_code == 200, r.text
        items = soup(client.get(url + "?tab=plugins")).select("li.plugin")
        assert [i.select_one("strong").text for i in items] == ["filesystem", "memory"]
        assert all("tools" in i.text and "over stdio" in i.text for i in items), [i.text for i in items]
        rows = {r.select_one("code").text: r for r in soup(client.get(url + "?tab=tools")).select("table.tools tr")
                if r.select_one("code")}
        wary = {name for name, r in rows.items() if r.select_one('input[name="approve"]').has_attr("checked")}
        assert wary == {"filesystem_write_file", "filesystem_edit_file", "filesystem_move_file",
                        "memory_delete_entities", "memory_delete_relations", "memory_delete_observations"}, \
            "the tools its server marks destructive wait for approval from the start"
        assert "may delete or overwrite" in rows["filesystem_write_file"].text
        assert "may delete or overwrite" not in rows["filesystem_read_text_file"].text
