"""stdio plugins: an MCP server that is a command run on this machine.

Only the owner's agents may have one, and only when TABLETALK_STDIO_PLUGINS=1: the command
runs as the user Tabletalk runs as, with that user's rights. It is started without a shell
(the program and its arguments as given, nothing expanded), with the environment the mcp
package passes on (PATH, HOME, USER, SHELL, TERM, LOGNAME) and the plugin's own variables,
in Tabletalk's working folder. Each conversation's session with the plugin is a process of
its own, started on the first call and stopped when the session closes (idle for 10
minutes, the conversation deleted, Tabletalk stopping): see app/plugins/sessions.py.

What the command writes to its standard error is kept (the last 4 KB) and its end shown
when the server could not be started or exited.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import asynccontextmanager
from typing import Any

from anyio import EndOfStream
from anyio.streams.text import TextReceiveStream

from app.tables import Plugin

STDERR_SHOWN = 300  # characters of the command's standard error a status quotes
ARGS_MAX = 100
ENV_MAX = 100


class StdioError(Exception):
    """Why a stdio plugin could not run, in the words of its status."""


def allowed(setting: bool, owner: int | None, agent_person: int | None) -> bool:
    """TABLETALK_STDIO_PLUGINS (`setting`) and the owner's agent: no one else's agent may run
    a command on this machine."""
    return setting and owner is not None and agent_person == owner


DOWNLOADERS = ("npx", "uvx", "bunx", "pnpx", "pipx")  # programs that fetch a package on its first run
INTERPRETERS = ("node", "deno", "bun", "python", "python3")
_PREFIXES = ("mcp-server-", "mcp_server_", "server-", "mcp-", "mcp_")
_SUFFIXES = ("-mcp-server", "-mcp", "_mcp", "-server")


def program_name(command: str, args: tuple[str, ...] = ()) -> str:
    """What a command plugin is named when no name is given: its package or program without
    the words every MCP server has (`npx -y @modelcontextprotocol/server-memory` is "memory",
    `uvx mcp-server-git` "git", `python -m mcp_server_time` "time"), not "npx"."""
    program = os.path.basename(command)
    given = [a for a in args if a.strip()]
    if program in DOWNLOADERS or program.startswith(INTERPRETERS):
        if "-m" in given[:-1]:
            given = [given[given.index("-m") + 1]]
        spec = next((a for a in given if not a.startswith("-")), "")
        if spec:
            parts = spec.replace("\\", "/").split("/")
            if "node_modules" in parts[:-1]:  # node …/node_modules/@scope/package/dist/index.js
                after = parts[parts.index("node_modules") + 1:]
                program = _package(after[:2] if after[0].startswith("@") else after[:1])
            elif program in DOWNLOADERS:  # npx -y @scope/package@1.2.3
                program = _package([parts[-2], parts[-1].split("@")[0]] if len(parts) > 1 else
                                   [parts[-1].split("@")[0] or parts[-1]])
            else:
                program = os.path.splitext(parts[-1])[0]
    name = program
    for prefix in _PREFIXES:
        if name.lower().startswith(prefix) and len(name) > len(prefix):
            name = name[len(prefix):]
            break
    for suffix in _SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[:-len(suffix)]
            break
    return name


def _package(parts: list[str]) -> str:
    """A package's name from its npm name's parts (scope and name): the scope when the name
    says nothing (`@playwright/mcp` is "playwright")."""
    name = parts[-1]
    if len(parts) > 1 and name.lower() in ("mcp", "server", "mcp-server"):
        return parts[0].lstrip("@")
    return name


class WholeLines(TextReceiveStream):
    """The command's standard output decoded, handed on only in whole lines (each piece ends
    with a newline, but the last before the end). The mcp package's reader joins what it
    holds to each piece it receives and splits the whole again, so a message of one long
    line cost time as its square: a 19 MB answer ~12 s of the worker's loop, every page of
    that worker stalled meanwhile. Given whole lines, its reader holds nothing between
    pieces, and each byte is looked at a bounded number of times."""

    def __post_init__(self, encoding: str, errors: str) -> None:
        super().__post_init__(encoding, errors)
        self._held: list[str] = []  # the line begun, in the pieces it came in

    async def receive(self) -> str:
        while True:
            try:
                piece = await super().receive()
            except EndOfStream:
                if not self._held:
                    raise
                rest, self._held = "".join(self._held), []
                return rest  # a last line without its newline
            end = piece.rfind("\n")
            if end < 0:
                self._held.append(piece)
                continue
            lines = "".join([*self._held, piece[:end + 1]])
            self._held = [piece[end + 1:]] if end + 1 < len(piece) else []
            return lines


@asynccontextmanager
async def streams(p: Plugin, attempt: Any = None):
    """The streams of the plugin's command, started here and stopped on leaving."""
    from mcp.client import stdio as sdk
    from mcp.client.stdio import StdioServerParameters, stdio_client

    sdk.TextReceiveStream = WholeLines  # its reader's stream of the command's output (above)
    if not p.command:
        raise StdioError("refused: a command plugin needs a program to run")
    params = StdioServerParameters(command=p.command, args=list(p.args), env=dict(p.env))
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            async with stdio_client(params, errlog=errlog) as pair:
                yield pair
        except OSError as exc:
            raise StdioError(f"could not start {os.path.basename(p.command)}: {exc.strerror or exc}") from None
        finally:
            if attempt is not None:
                attempt.stderr = tail(errlog)


def tail(errlog: Any) -> str:
    try:
        errlog.flush()
        errlog.seek(0, os.SEEK_END)
        size = errlog.tell()
        errlog.seek(max(0, size - 4096))
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(lines[-3:])[-STDERR_SHOWN:]
