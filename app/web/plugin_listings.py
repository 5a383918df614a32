"""The tools of an agent's plugins as its page shows them: each plugin's listing as this
worker last saw it, else as its row keeps it, else read now; and what the Plugins tab shows
beside each plugin's name.

What is shown for each plugin (app/plugins/tools.py keeps it in the row at every listing): its
transport, its status and when it was read, and its tools as of that status.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

from ..plugins import stdio as mcp_stdio, tools as mcp_tools
from ..tables import Assistant, Plugin
from ..serve.worker import Worker

TRANSPORTS = {mcp_tools.STREAMABLE: "Streamable HTTP", mcp_tools.SSE: "SSE", mcp_tools.STDIO: "stdio (a command on this machine)"}

# Plugin tool listings last seen in this worker, so the Tools tab need not reach every
# plugin on each visit; refreshed at each run's start (runner) and by the Refresh button.
_listings: dict[tuple, mcp_tools.Listing] = {}


def listed(p: Plugin) -> tuple:
    """A listing's key: what reaching the plugin takes, with its id and agent, so a listing is
    never shown for another plugin that came to have the same id, nor after an edit."""
    return (p.id, p.agent, p.name, p.kind, p.address, p.header, p.secret, p.command, p.args, p.env)


def forget_listings(s: Worker) -> None:
    """The listings of plugins whose rows are gone (their agent was deleted), forgotten."""
    for key in list(_listings):
        if s.store.plugin_row(key[0]) is None:
            _listings.pop(key, None)


def forget_listing(p: Plugin) -> None:
    """This worker's listing of a plugin that is deleted, or reached another way now, forgotten."""
    _listings.pop(listed(p), None)


def private_ok(s: Worker, agent: Assistant) -> bool:
    return mcp_tools.private_ok(s.config.private_plugins, s.store.owner(), agent.person)


def stdio_ok(s: Worker, agent: Assistant) -> bool:
    return mcp_stdio.allowed(s.config.stdio_plugins, s.store.owner(), agent.person)


async def read(s: Worker, agent: Assistant, p: Plugin) -> mcp_tools.Listing:
    """List the plugin's tools now, and keep what it said (the row, this worker's cache). A
    command slower than a few seconds (its package downloading) reads "starting…", and its
    listing goes on and lands in the row."""
    listing = await mcp_tools.list_now(replace(p, enabled=True), private_ok=private_ok(s, agent),
                                       stdio_ok=stdio_ok(s, agent), tokens=s.store, store=s.store)
    if not listing.starting:
        _listings[listed(p)] = listing
    if not listing.starting or mcp_tools.under_way(p, private_ok(s, agent)):
        mcp_tools.record(s.store, p, listing)
    return listing


async def listing_of(s: Worker, agent: Assistant, p: Plugin) -> mcp_tools.Listing:
    """The plugin's tools for the Tools tab: as last seen here, else as its row keeps them
    (with its status), else read now."""
    seen = _listings.get(listed(p))
    if seen is not None and seen.ok:
        return seen
    kept = mcp_tools.kept_listing(p, private_ok=private_ok(s, agent))
    if kept is not None:  # marked with the status that says it is down (Tools tab: "as listed before")
        return replace(kept, status=seen.status if seen is not None else p.status)
    if seen is not None:
        return seen
    if p.status and not mcp_tools.status_ok(p.status):
        return mcp_tools.Listing([], p.status)
    return await read(s, agent, p)


async def rows(s: Worker, agent: Assistant) -> list[tuple[Plugin, dict[str, Any]]]:
    """The agent's plugins as the tab shows them; an enabled one never read is read first."""
    found = s.store.plugins(agent.id)
    unread = [p for p in found if p.enabled and not p.status]
    if unread:
        await asyncio.gather(*(read(s, agent, p) for p in unread))
        found = s.store.plugins(agent.id)
    return [(p, shown(p)) for p in found]


def shown(p: Plugin) -> dict[str, Any]:
    """What the plugins tab shows of a plugin beside its name."""
    try:
        tools = [t for t in json.loads(p.listed) if isinstance(t, dict)] if p.listed else []
    except ValueError:
        tools = []
    unoffered = {t.get("name"): "it runs only as an MCP task" for t in tools
                 if (t.get("execution") or {}).get("taskSupport") == "required"}
    unoffered |= {t.get("name"): str(t[mcp_tools.LEFT_OUT]) for t in tools if mcp_tools.LEFT_OUT in t}
    when = time.strftime("%H:%M", time.localtime(p.status_at)) if p.status_at else ""
    day = time.strftime("%Y-%m-%d", time.localtime(p.status_at)) if p.status_at else ""
    if day and day != time.strftime("%Y-%m-%d"):
        when = f"{day} {when}"
    return {"transport": TRANSPORTS.get(p.transport, ""), "read": when, "ok": mcp_tools.status_ok(p.status),
            "tools": [{"name": t.get("name", ""), "description": (t.get("description") or t.get("title") or ""),
                       "summary": mcp_tools.person_line(str(t.get("description") or ""), str(t.get("title") or "")),
                       "unoffered": unoffered.get(t.get("name"), "")} for t in tools],
            "env": "\n".join(f"{k}={v}" for k, v in p.env), "args": "\n".join(p.args)}
