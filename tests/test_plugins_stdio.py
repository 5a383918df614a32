"""Plugins that are a command run on this machine (stdio MCP servers): only the owner's
agents, only with TABLETALK_STDIO_PLUGINS=1; one process per conversation session, started
on the first call and stopped when the session closes. Tried with an mcp-package server of
ours and with server-everything's stdio mode (the installed npm package, run by node)."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from app.builtin import alive
from app.plugins.sessions import Sessions
from app.plugins.stdio import WholeLines
from app.plugins.tools import PluginError, PluginRun, for_run, list_tools
from app.tables import Plugin
from app.tools import ToolContext
from tests.conftest import csrf, soup
from tests.fakes.everything import LOOPBACK, PACKAGE

pytestmark = pytest.mark.process  # tests/marks.py

FAKE = Path(__file__).resolve().parent / "fakes" / "stdio_server.py"


def command(*args: str, name: str = "fake", env: tuple = ()) -> Plugin:
    return Plugin(agent=1, name=name, address="", kind="stdio", command=sys.executable, args=(str(FAKE), *args),
                  env=env, id=hash(name) % 10_000)


async def tools_of(p: Plugin, sessions: Sessions) -> dict:
    """The command's tools, given to a run whose calls are made in `sessions`."""
    listing = await list_tools(p, private_ok=False, stdio_ok=True)
    assert listing.ok, listing.status
    assert listing.transport == "stdio"
    return {t.name: t for t in for_run(listing.tools, PluginRun(sessions))}


async def test_a_command_runs_once_per_conversation_session_and_stops_when_closed():
    sessions = Sessions()
    tools = await tools_of(command(env=(("GREETING", "hello"),)), sessions=sessions)
    try:
        who = (await tools["fake_whoami"].run({}, ToolContext(chat=1, agent=1))).text
        assert "GREETING=hello" in who and "SECRET_HOME=True" in who, who
        pid = int(re.search(r"pid (\d+)", who)[1])
        counted = [(await tools["fake_count"].run({}, ToolContext(chat=1, agent=1))).text
                   for _ in range(2)]
        assert counted == ["1", "2"], "the same process from call to call"
        other = (await tools["fake_count"].run({}, ToolContext(chat=2, agent=1))).text
        assert other == "1", "another conversation has a process of its own"
        assert alive(pid)
        await sessions.close_chat(1)
        assert not alive(pid), "the conversation's session closed: its process is stopped"
        sessions.idle = 0
        await sessions.sweep()
        assert not sessions.open, "idle sessions close, and their processes stop"
    finally:
        await sessions.close_all()


async def test_a_command_that_dies_mid_call_says_the_call_may_have_run():
    sessions = Sessions()
    tools = await tools_of(command(), sessions=sessions)
    try:
        with pytest.raises(PluginError) as ended:
            await tools["fake_die"].run({}, ToolContext(chat=1, agent=1))
        assert str(ended.value) == ("The command of fake ended during the call: it may or may not have finished. "
                                    "Its last words on standard error: dying now")
    finally:
        await sessions.close_all()


async def test_a_commands_result_has_the_same_size_limit():
    sessions = Sessions()
    tools = await tools_of(command(), sessions=sessions)
    try:
        ctx = ToolContext(chat=1, agent=1)
        with pytest.raises(PluginError) as failed:  # about 19 MB
            await tools["fake_lines"].run({"count": 1_600_000}, ctx)
        assert str(failed.value) == ("fake’s answer was larger than 16 MB, the most Tabletalk takes from a plugin, "
                                     "so it was not read")
        assert (await tools["fake_lines"].run({"count": 2}, ctx)).text == "line 1\nline 2\n"
    finally:
        await sessions.close_all()


class Chunks:
    """A byte stream that gives the chunks it was made of, one a receive, then ends."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = list(pieces)

    async def receive(self) -> bytes:
        if not self.pieces:
            raise anyio.EndOfStream
        return self.pieces.pop(0)

    async def aclose(self) -> None:
        pass


async def received(pieces: list[bytes]) -> list[str]:
    stream = WholeLines(Chunks(pieces))
    return [text async for text in stream]


@pytest.mark.parametrize("pieces, expected", [
    ([b'{"a": 1}\n'], ['{"a": 1}\n']),
    ([b'{"a"', b': 1}\n{"b"', b': 2}\n'], ['{"a": 1}\n', '{"b": 2}\n']),  # a line across pieces, two in one
    ([b'one\ntwo\nthr', b'ee\n'], ['one\ntwo\n', 'three\n']),
    (["é€😀\n".encode()[:3], "é€😀\n".encode()[3:7], "é€😀\n".encode()[7:]], ["é€😀\n"]),  # characters cut in two
    ([b'whole\n', b'no newline at the end'], ['whole\n', 'no newline at the end']),
    ([b'x' * 1000 for _ in range(100)] + [b'\n'], ['x' * 100_000 + '\n']),
    ([], []),
])
async def test_a_commands_output_is_handed_on_in_whole_lines(pieces, expected):
    """What the mcp package's reader receives of a command's output (app/plugins/stdio.py,
    WholeLines): whole lines, whatever pieces the pipe gave, so it joins nothing again."""
    got = await received(pieces)
    assert got == expected
    assert all(t.endswith("\n") for t in got[:-1])


RAW = Path(__file__).resolve().parent / "fakes" / "raw_stdio_server.py"


async def test_malformed_tools_are_left_out_and_named_the_others_kept():
    raw = Plugin(agent=1, name="raw", address="", kind="stdio", command=sys.executable, args=(str(RAW),), id=11)
    listing = await list_tools(raw, private_ok=False, stdio_ok=True)
    assert listing.status == "4 tools", listing.status
    assert {t.name for t in listing.tools} == {"raw_good", "raw_empty", "raw_loose", "raw_odd"}
    assert listing.hidden == ("stringy: its inputSchema is of type string, not object: a call's arguments are an object",
                              "noschema: it has no inputSchema")
    tools = {t.name: t for t in listing.tools}
    assert tools["raw_empty"].parameters == {"type": "object", "properties": {}}, "an empty schema: no arguments"
    assert "required" not in tools["raw_loose"].parameters or tools["raw_loose"].parameters["required"] == ["a"], \
        "a required name it does not describe is not required by our check"
    sessions = Sessions()
    try:
        given = {t.name: t for t in for_run(listing.tools, PluginRun(sessions))}
        odd = (await given["raw_odd"].run({}, ToolContext(chat=1, agent=1))).text
        assert odd == "before\n[a content block of type 'hologram', which MCP does not define: left out]\nafter"
    finally:
        await sessions.close_all()


async def test_a_command_that_cannot_start_says_why():
    failed = await list_tools(command("fail_start", name="bad"), private_ok=False, stdio_ok=True)
    assert failed.status == "the command ended without answering as an MCP server: cannot start: the fake was told to fail"
    missing = Plugin(agent=1, name="none", address="", kind="stdio", command="/nonexistent/program", id=3)
    assert (await list_tools(missing, private_ok=False, stdio_ok=True)).status == \
        "could not start program: No such file or directory"


async def test_commands_do_not_run_unless_allowed(tmp_path):
    marker = tmp_path / "ran"
    p = Plugin(agent=1, name="touch", address="", kind="stdio", command="/usr/bin/touch", args=(str(marker),), id=4)
    listing = await list_tools(p, private_ok=True, stdio_ok=False)
    assert listing.status.startswith("refused: commands run on this machine are off")
    assert not marker.exists(), "nothing was run"


@pytest.mark.skipif(not PACKAGE.exists() or not shutil.which("node"), reason="make npm-tools installs server-everything")
async def test_server_everything_over_stdio_keeps_its_session_state():
    p = Plugin(agent=1, name="ev", address="", kind="stdio", command=shutil.which("node"),
               args=("--import", LOOPBACK.as_uri(), str(PACKAGE), "stdio"), id=9)
    sessions = Sessions()
    tools = await tools_of(p, sessions=sessions)
    assert {"ev_echo", "ev_get-sum", "ev_toggle-simulated-logging"} <= set(tools)
    try:
        ctx = ToolContext(chat=1, agent=1)
        assert (await tools["ev_echo"].run({"message": "über stdio"}, ctx)).text == "Echo: über stdio"
        first = (await tools["ev_toggle-simulated-logging"].run({}, ctx)).text
        second = (await tools["ev_toggle-simulated-logging"].run({}, ctx)).text
        assert first.startswith("Started simulated") and second.startswith("Stopped simulated"), (first, second)
        assert sessions.opened == 1
    finally:
        await sessions.close_all()


# --- the page -----------------------------------------------------------------------


def agent_url(client) -> str:
    return soup(client.get("/agents")).select_one(".agent-list a")["href"]


def test_the_owner_adds_a_command_when_the_setting_allows_it(make_client):
    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        url = agent_url(client)
        page = soup(client.get(url + "?tab=plugins"))
        assert "Add a command run on this machine" in page.text
        r = client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "kind": "stdio", "name": "local",
                                                "command": sys.executable, "args": f"{FAKE}\n",
                                                "env": "GREETING=hi there\n"})
        assert r.status_code == 200 and "Plugin added." in r.text
        item = soup(client.get(url + "?tab=plugins")).select_one("li.plugin")
        assert item.select_one("strong").text == "local"
        assert item.select_one("span.muted").text == f"{sys.executable} {FAKE}"
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "kind": "stdio", "name": "spaced",
                                            "command": sys.executable, "args": f"{FAKE}\nhello world\nsecond"})
        spaced = soup(client.get(url + "?tab=plugins")).select("li.plugin")[1]
        assert spaced.select_one("span.muted").text == f"{sys.executable} {FAKE} 'hello world' second", \
            "an argument's boundaries are seen"
        assert "over stdio (a command on this machine)" in item.text and "5 tools" in item.text
        assert item.select_one('textarea[name="env"]').text == "GREETING=hi there"
        tools = [c.text for c in soup(client.get(url + "?tab=tools")).select("table.tools code")]
        assert "local_whoami" in tools


def test_the_tab_names_the_tools_left_out_and_why(make_client):
    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        url = agent_url(client)
        client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "kind": "stdio", "name": "raw",
                                            "command": sys.executable, "args": str(RAW)})
        item = soup(client.get(url + "?tab=plugins")).select_one("li.plugin")
        assert "4 tools" in item.text
        assert "Its 4 tools (and 2 not offered)" in item.select_one("details.plugin-tools summary").text
        badges = [b.text for b in item.select("details.plugin-tools .badge")]
        assert badges == ["not offered: its inputSchema is of type string, not object: a call's arguments are an object",
                          "not offered: it has no inputSchema"]


@pytest.mark.parametrize("fields,says", [
    ({"command": ""}, "needs the program to run"),
    ({"command": sys.executable, "env": "not a pair"}, "Each line is NAME=value"),
    ({"command": sys.executable, "env": "1X=y"}, "Each line is NAME=value"),
])
def test_bad_command_fields_are_refused_beside_them(make_client, fields, says):
    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        url = agent_url(client)
        r = client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "kind": "stdio", **fields})
        assert r.status_code == 400 and says in soup(r).select_one(".problem").text
        assert soup(client.get(url + "?tab=plugins")).select("li.plugin") == []


def test_without_the_setting_no_command_can_be_added(client, tmp_path):
    url = agent_url(client)
    assert "Add a command run on this machine" not in client.get(url + "?tab=plugins").text
    marker = tmp_path / "ran"
    r = client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "kind": "stdio",
                                            "command": "/usr/bin/touch", "args": str(marker)})
    assert r.status_code == 400 and "Commands run on this machine are off" in r.text
    assert not marker.exists() and soup(client.get(url + "?tab=plugins")).select("li.plugin") == []


def test_a_command_plugins_tool_is_used_in_a_run(make_client, fake):
    from tests.conftest import start_chat, wait_for
    from tests.fakes.openai_server import tool_call

    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        url = agent_url(client)
        token = csrf(client, url)
        client.post(url + "/plugins", data={"_csrf_token": token, "kind": "stdio", "name": "local",
                                            "command": sys.executable, "args": str(FAKE), "env": "GREETING=hi"})
        fake.script([tool_call("local_whoami", {})], "It said hi.")
        chat = start_chat(client, "who are you", token=token)
        page = wait_for(lambda: (p := soup(client.get(chat))).select_one('#status[data-running="0"]') and
                        p.select_one("article.call") and p)
        call = page.select_one("article.call")
        assert call.select_one(".state").text == "done"
        assert "GREETING=hi" in call.select_one("pre.output").text


def test_a_servers_instructions_reach_the_model_under_its_plugins_name(make_client, fake):
    from tests.conftest import start_chat, wait_for

    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        url = agent_url(client)
        token = csrf(client, url)
        client.post(url + "/plugins", data={"_csrf_token": token, "kind": "stdio", "name": "raw",
                                            "command": sys.executable, "args": str(RAW)})
        fake.script("Noted.")
        chat = start_chat(client, "hello", token=token)
        wait_for(lambda: soup(client.get(chat)).select_one('#status[data-running="0"]'))
        system = next(m["content"] for m in fake.streamed[-1]["messages"] if m["role"] == "system")
        assert "From the server of the plugin raw (its tools begin with raw_):\nCall good before anything else." \
            in system


def test_another_persons_agent_cannot_run_a_command(make_client, data, tmp_path):
    from tests.conftest import COOKIE, signed_in

    with make_client(TABLETALK_STDIO_PLUGINS="1") as client:
        client.cookies.set(COOKIE, signed_in(data, "Bea", owner=False))
        url = agent_url(client)
        assert "Add a command run on this machine" not in client.get(url + "?tab=plugins").text
        marker = tmp_path / "ran"
        r = client.post(url + "/plugins", data={"_csrf_token": csrf(client, url), "kind": "stdio",
                                                "command": "/usr/bin/touch", "args": str(marker)})
        assert r.status_code == 400 and "Commands run on this machine are off" in soup(r).select_one(".problem").text
        assert not marker.exists()
