"""What five stdio plugins on an agent add to each message: the time a run takes to gather
its tools (app/plugins/tools.py's `agent_tools`, what a message does before its first model
request) with five stdio plugins on the agent, against an agent with none, in a conversation
that already called each plugin once (so each has a live process, as in a conversation
under way), and the CPU the children used meanwhile.

The five: @modelcontextprotocol/server-filesystem, server-memory and server-everything (node,
from `make npm-tools`), and two of tests/fakes/stdio_server.py (python, the mcp package);
five of the python one when the npm packages are missing.

    .venv/bin/python benchmarks/plugin_listing.py [--messages 8] [--fresh 0]

`--fresh 0`: every listing counts as old (tools.STDIO_FRESH), so each message lists the
tools again through the conversation's live sessions: the cost of that path.
"""
from __future__ import annotations

import argparse
import asyncio
import inspect
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import load  # noqa: E402
from app.plugins import tools as mcp_tools  # noqa: E402
from app.plugins.sessions import Sessions  # noqa: E402
from app.store import Store, db as dbm, schema  # noqa: E402
from app.tables import Assistant, Plugin  # noqa: E402
from app.tools import ToolContext  # noqa: E402

NPM = ROOT / ".cache/npm/node_modules/@modelcontextprotocol"
FAKE = ROOT / "tests/fakes/stdio_server.py"
GOAL = 0.2  # seconds a message may take more with five stdio plugins


def commands(folder: Path) -> list[tuple[str, str, tuple[str, ...], str]]:
    """(name, program, arguments, a tool to call once) of the five plugins."""
    node = shutil.which("node")
    fake = ("py", sys.executable, (str(FAKE),), "whoami")
    if node is None or not (NPM / "server-memory/dist/index.js").exists():
        return [(f"py{i}", fake[1], fake[2], fake[3]) for i in range(5)]
    return [("fs", node, (str(NPM / "server-filesystem/dist/index.js"), str(folder)), "list_allowed_directories"),
            ("mem", node, (str(NPM / "server-memory/dist/index.js"),), "read_graph"),
            ("ev", node, (str(NPM / "server-everything/dist/index.js"), "stdio"), "echo"),
            ("py1", fake[1], fake[2], fake[3]), ("py2", fake[1], fake[2], fake[3])]


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def gather(store, config, agent, run, chat) -> float:
    kwargs = {"chat": chat} if "chat" in inspect.signature(mcp_tools.agent_tools).parameters else {}
    started = time.perf_counter()
    await mcp_tools.agent_tools(store, config, agent, set(), run, **kwargs)
    return time.perf_counter() - started


async def main(messages: int) -> None:
    with tempfile.TemporaryDirectory(prefix="plugin-listing-") as tmp:
        db = dbm.connect(Path(tmp) / "tabletalk.db")
        schema.migrate(db)
        store = Store(db)
        owner = store.add_person("owner", "x", owner=True)
        config = load()
        config = replace(config, stdio_plugins=True)
        bare = store.add_agent(Assistant(name="none", person=owner))
        agent = store.add_agent(Assistant(name="five", person=owner))
        (Path(tmp) / "files").mkdir()
        plugins = [(store.add_plugin(Plugin(agent=agent.id, name=name, address="", kind="stdio", command=program,
                                            args=args)), tool)
                   for name, program, args, tool in commands(Path(tmp) / "files")]
        chat = store.new_conversation(agent.id).id
        sessions = Sessions()
        run = mcp_tools.PluginRun(sessions, store)
        try:
            first = await gather(store, config, agent, run, chat)  # the first message lists each once
            tools = {t.name: t for t in mcp_tools.for_run(
                await mcp_tools.agent_tools(store, config, agent, set(), run), run)}
            assert len({t.split("_")[0] for t in tools}) == 5, sorted(tools)
            for p, tool in plugins:  # each plugin called once: a live process in this conversation
                args = {"message": "hi"} if tool == "echo" else {}
                await tools[f"{p.name}_{tool}"].run(args, ToolContext(chat=chat, agent=agent.id))
            await asyncio.sleep(1)
            none = sorted([await gather(store, config, bare, run, chat) for _ in range(messages)])
            cpu = children_cpu()
            five = sorted([await gather(store, config, agent, run, chat) for _ in range(messages)])
            await asyncio.sleep(0.5)  # listings a run left going land
            cpu = children_cpu() - cpu
        finally:
            await sessions.close_all()
            await mcp_tools.stop_listings()
            db.conn.close()
    median = lambda xs: xs[len(xs) // 2]  # noqa: E731
    extra = median(five) - median(none)
    print("metric | value | goal")
    print(f"plugins | {', '.join(p.name for p, _ in plugins)} |")
    print(f"first message, five stdio plugins (none listed before) | {first:.2f} s |")
    print(f"a message, no plugins (median of {messages}) | {median(none) * 1000:.1f} ms |")
    print(f"a message, five stdio plugins (median of {messages}, slowest) | {median(five) * 1000:.1f} ms "
          f"({five[-1] * 1000:.1f} ms) |")
    print(f"per-message overhead of five stdio plugins | {extra:.3f} s | ≤ {GOAL} s")
    print(f"children's CPU over those {messages} messages | {cpu:.2f} s |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=8)
    parser.add_argument("--fresh", type=float, default=None, help="seconds a stdio listing is used (the app's)")
    given = parser.parse_args()
    if given.fresh is not None:
        mcp_tools.STDIO_FRESH = given.fresh
    asyncio.run(main(given.messages))
