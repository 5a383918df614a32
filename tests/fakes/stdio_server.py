"""An MCP server of ours over stdio, run as a command (`python -m tests.fakes.stdio_server`),
for the stdio plugin tests: `whoami()` says the process id and the value of `GREETING` (its
environment as given), `count()` counts the calls this process answered (one process per
conversation session), `fail_start` in the arguments makes it exit before it answers."""
from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer


def main() -> None:
    if "fail_start" in sys.argv:
        print("cannot start: the fake was told to fail", file=sys.stderr)
        sys.exit(3)
    mcp = MCPServer("stdio-fake", log_level="WARNING")
    calls = [0]

    @mcp.tool(description="This process's id and the GREETING it was given.")
    def whoami() -> str:
        return f"pid {os.getpid()}, GREETING={os.environ.get('GREETING', '(none)')}, SECRET_HOME={'HOME' in os.environ}"

    @mcp.tool(description="How many calls this process answered, this one included.")
    def count() -> str:
        calls[0] += 1
        return str(calls[0])

    mcp.run("stdio")


if __name__ == "__main__":
    main()
