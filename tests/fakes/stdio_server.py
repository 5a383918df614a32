"""An MCP server of ours over stdio, run as a command (`python -m tests.fakes.stdio_server`),
for the stdio plugin tests: `whoami()` says the process id and the value of `GREETING` (its
environment as given), `count()` counts the calls this process answered (one process per
conversation session), `die()` exits mid-call, `lines(count)` numbered lines, `grow()` adds a tool `extra` and says so (`notifications/tools/list_changed`).
In the arguments: `fail_start` makes it exit before it answers, `slow_start=S` waits S seconds
before it answers (a package downloading), `hang` never answers; `STARTS` in the environment
names a file each start adds a line to (how many times the command was started)."""
from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer


def main() -> None:
    if starts := os.environ.get("STARTS"):
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    if "fail_start" in sys.argv:
        print("cannot start: the fake was told to fail", file=sys.stderr)
        sys.exit(3)
    for arg in sys.argv:
        if arg.startswith("slow_start="):
            print("downloading the package…", file=sys.stderr, flush=True)
            time.sleep(float(arg.split("=", 1)[1]))
    if "hang" in sys.argv:
        print("waiting for something that never comes", file=sys.stderr, flush=True)
        time.sleep(3600)
    mcp = MCPServer("stdio-fake", log_level="WARNING")
    calls = [0]

    @mcp.tool(description="This process's id and the GREETING it was given.")
    def whoami() -> str:
        return f"pid {os.getpid()}, GREETING={os.environ.get('GREETING', '(none)')}, SECRET_HOME={'HOME' in os.environ}"

    @mcp.tool(description="How many calls this process answered, this one included.")
    def count() -> str:
        calls[0] += 1
        return str(calls[0])

    @mcp.tool(description="Adds the tool extra, and tells the client its tools changed.")
    async def grow(ctx: Context) -> str:
        mcp.add_tool(lambda: "extra", name="extra", description="A tool added by grow.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    @mcp.tool(description="Numbered lines, as many as asked.")
    def lines(count: int) -> str:
        return "".join(f"line {i}\n" for i in range(1, count + 1))

    @mcp.tool(description="Says its last words on standard error and exits mid-call.")
    def die() -> str:
        print("dying now", file=sys.stderr, flush=True)
        os._exit(1)

    mcp.run("stdio")


if __name__ == "__main__":
    main()
