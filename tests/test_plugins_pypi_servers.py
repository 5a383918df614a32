"""The MCP servers people install from PyPI, as commands (stdio): mcp-server-time and
mcp-server-git, pinned in the Makefile's MCP_PY_TOOLS and installed by `make mcp-py` into a
venv of their own (.cache/mcp-py). Listed, called, named after their program, as a new user
would run them (docs/plugins.md)."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from app.plugins.sessions import Sessions
from app.plugins.stdio import program_name
from app.plugins.tools import PluginRun, for_run, list_tools
from app.tables import Plugin
from app.tools import ToolContext
from tests.fakes.everything import ROOT

pytestmark = pytest.mark.process  # tests/marks.py

BIN = ROOT / ".cache/mcp-py/bin"
TIME = BIN / "mcp-server-time"
GIT = BIN / "mcp-server-git"
installed = pytest.mark.skipif(not TIME.exists() or not GIT.exists(), reason="make mcp-py installs them")


async def listed_tools(p: Plugin, sessions: Sessions) -> dict:
    listing = await list_tools(p, private_ok=False, stdio_ok=True, timeout=60)
    assert listing.ok, listing.status
    return {t.name: t for t in for_run(listing.tools, PluginRun(sessions))}


@installed
async def test_mcp_server_time_tells_the_time_in_a_zone():
    p = Plugin(agent=1, name=program_name(str(TIME)), address="", kind="stdio", command=str(TIME),
               args=("--local-timezone", "UTC"), id=401)
    assert p.name == "time"
    sessions = Sessions()
    try:
        tools = await listed_tools(p, sessions)
        assert {"time_get_current_time", "time_convert_time"} <= set(tools)
        said = (await tools["time_get_current_time"].run({"timezone": "Europe/Oslo"}, ToolContext(chat=1, agent=1)))
        assert json.loads(said.text)["timezone"] == "Europe/Oslo"
    finally:
        await sessions.close_all()


@installed
@pytest.mark.skipif(not shutil.which("git"), reason="mcp-server-git runs git")
async def test_mcp_server_git_reads_a_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("first\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "The first commit"], check=True)
    p = Plugin(agent=1, name=program_name(str(GIT)), address="", kind="stdio", command=str(GIT),
               args=("--repository", str(repo)), id=402)
    assert p.name == "git"
    sessions = Sessions()
    try:
        tools = await listed_tools(p, sessions)
        assert {"git_git_status", "git_git_log"} <= set(tools)
        log = (await tools["git_git_log"].run({"repo_path": str(repo)}, ToolContext(chat=1, agent=1))).text
        assert "The first commit" in log
    finally:
        await sessions.close_all()
