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


@asynccontextmanager
async def streams(p: Plugin, attempt: Any = None):
    """The streams of the plugin's command, started here and stopped on leaving."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

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
