"""Plugins: MCP servers whose tools an agent may call.

`list_tools(plugin)` connects, lists the server's tools and wraps each one as our `Tool`,
named `{plugin}_{tool}`; its `status` says in plain words how many tools there are or why
they could not be read. `refresh(plugins)` does that for many plugins at once.

Transport: Streamable HTTP first, then SSE when the server says it speaks only that
(app/plugins/link.py). The transport that worked is remembered by the listed tools.

A tool call goes through the conversation's session with the plugin, kept open from call
to call and run to run (app/plugins/sessions.py): stateful servers keep their state. A
listed tool is called once it is given to a run (`for_run`): the worker's sessions, the
run's rows and what its server's questions need come with the run, not with each call.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio

# The mcp package is imported when a plugin is first reached, not at start: it costs ~0.4 s
# of a restart, and a restarted server should resume its runs as soon as it can.
if TYPE_CHECKING:
    import mcp_types as types
    from mcp import Client

from app.plugins import asks as mcp_asks, content as mcp_content, sessions as mcp_sessions, stdio as mcp_stdio
from app.plugins.attempt import Attempt
from app.plugins.errors import PluginError
from app.plugins.link import (MAX_BYTES, SSE, STDIO, STREAMABLE, Link, bad_address, connect, private_ok, too_large,
                              tools_changed, where, why)
from app.plugins.oauth_tokens import TokenRows
from app.tables import Plugin
from app.tools import NAME_LIMIT, Result, Tool, ToolContext, unique

__all__ = ["Listing", "PluginError", "PluginRun", "call", "for_run", "list_tools", "masked", "private_ok", "refresh",
           "tool_name"]

log = logging.getLogger(__name__)

CALL_TIMEOUT = 600.0  # seconds a call may go without a word from its server (TABLETALK_PLUGIN_TIMEOUT)
MAX_PAGES = 20  # tools/list pages followed before the listing is called complete


@dataclass(frozen=True)
class Listing:
    """A plugin's tools as the agent sees them, and its status in plain words."""

    tools: list[Tool]
    status: str
    transport: str = ""  # STREAMABLE, SSE or STDIO when the listing worked
    names: dict[str, str] = field(default_factory=dict)  # our tool name -> the MCP tool's name
    offers: tuple[str, ...] = ()  # "prompts", "resources": what else the server has
    hidden: tuple[str, ...] = ()  # tools not offered, and why ("x: runs only as a task")
    found: tuple[dict[str, Any], ...] = ()  # the MCP tool definitions as listed (kept in the row)
    starting: bool = False  # a command's first listing still under way (its package downloading)
    read: float = 0.0  # when (time.time()) the tools were listed, for one that worked
    instructions: str = ""  # what the server says about using it (`initialize`), kept in the row

    @property
    def ok(self) -> bool:
        return bool(self.transport)


def masked(secret: str) -> str:
    """The secret as a page may show it: its last two characters, when that gives little away."""
    return "••••" + secret[-2:] if len(secret) >= 12 else "••••"


# --------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


def tool_name(plugin: str, tool: str, taken: Iterable[str] = ()) -> str:
    """`{plugin}_{tool}` as a Chat Completions function name: other characters become `_`,
    and a name that is too long or already taken ends in a hash of the original instead."""
    whole = f"{plugin}_{tool}"
    name = _NOT_NAME.sub("_", whole).strip("_") or "tool"
    taken = set(taken)
    if len(name) <= NAME_LIMIT and name not in taken:
        return name
    digest = hashlib.sha256(whole.encode()).hexdigest()
    for size in (8, 16, 64):
        candidate = f"{name[: NAME_LIMIT - size - 1].rstrip('_')}_{digest[:size]}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free name for {whole!r}")  # a sha256 clash: not in this universe


def identity(p: Plugin, mcp_name: str) -> str:
    """A plugin tool's key for the agent's settings: the plugin's id and a hash of the MCP
    name (which may hold commas, the settings' separator)."""
    return f"plugin{p.id}.{hashlib.sha256(mcp_name.encode()).hexdigest()[:16]}"


# --------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------


async def list_tools(p: Plugin, *, private_ok: bool, timeout: float = 10,
                     call_timeout: float = CALL_TIMEOUT, stdio_ok: bool = False,
                     tokens: TokenRows | None = None) -> Listing:
    """The plugin's tools (see _list_tools), remembered for `refresh` (see DOWN_SECONDS).
    `tokens`: where the OAuth tokens of a plugin connected so are kept (the worker's store)."""
    listing = await _list_tools(p, private_ok=private_ok, timeout=timeout, call_timeout=call_timeout,
                                stdio_ok=stdio_ok, tokens=tokens)
    _remember(p, private_ok, listing)
    return listing


def _remember(p: Plugin, private_ok: bool, listing: Listing) -> None:
    key = _identity(p, private_ok)
    if listing.ok:
        _last[key] = listing
        _down.pop(key, None)
    elif listing.status in ("timed out", "unreachable") or (p.kind == "stdio" and not listing.status.startswith(
            "refused")):  # a command that failed is not started again at every message
        _down[key] = (time.monotonic() + DOWN_SECONDS, listing.status)


async def _list_tools(p: Plugin, *, private_ok: bool, timeout: float = 10,
                      call_timeout: float = CALL_TIMEOUT, stdio_ok: bool = False,
                      tokens: TokenRows | None = None) -> Listing:
    """The plugin's tools as our Tools (`{p.name}_{tool}`), and its status: "3 tools", or
    why not ("refused: ...", "unreachable", "401: the server refused the secret",
    "timed out", "not an MCP server"). Never raises for the plugin's failures.
    `call_timeout` is how long each listed tool's call may take."""
    if p.kind == "stdio":
        if not stdio_ok:
            return Listing([], STDIO_OFF)
    elif bad := bad_address(p.address):
        return Listing([], bad)
    status = "not an MCP server"
    deadline = anyio.current_time() + timeout  # one budget for both transports
    for transport in (STDIO,) if p.kind == "stdio" else (STREAMABLE, SSE):
        attempt = Attempt()
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                async with connect(p, transport, private_ok=private_ok, attempt=attempt,
                                   timeout=timeout, read_timeout=timeout, tokens=tokens) as client:
                    found = await _all_tools(client)
                    left_out = tuple(client.left_out)
                    instructions = client.instructions
                    caps = client.server_capabilities
                    with anyio.move_on_after(2):  # the listing's session ends here (Streamable HTTP's DELETE):
                        await client.end()  # a server with a cap on sessions would refuse new ones
        except Exception as exc:
            status = why(exc, attempt, p)
            log.info("plugin %s over %s: %s (%s)", p.name, transport, status, type(exc).__name__)
            if transport == STREAMABLE and status == "not an MCP server" and attempt.sse_only:
                continue
            return Listing([], status + where(p.address) if status == "not an MCP server" else status)
        offers = tuple(o for o in ("prompts", "resources") if getattr(caps, o, None) is not None)
        return _listing(p, found, transport, private_ok=private_ok, call_timeout=call_timeout, offers=offers,
                        left_out=left_out, instructions=instructions)
    return Listing([], status + where(p.address) if status == "not an MCP server" else status)


STDIO_OFF = "refused: commands run on this machine are off (TABLETALK_STDIO_PLUGINS), or this agent is not the owner's"


async def _all_tools(client: Client) -> list[types.Tool]:
    found: list[types.Tool] = []
    cursor = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        found.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return found


def _listing(p: Plugin, found: list[types.Tool], transport: str, *, private_ok: bool,
             call_timeout: float, offers: tuple[str, ...] = (), read: float | None = None,
             left_out: Iterable[tuple[str, str]] = (), instructions: str = "") -> Listing:
    """`read`: when it was listed (None: now). `left_out`: tools of the listing that cannot be
    called, with why (name, reason): kept in the row marked `leftOut`, for the tab."""
    tools: list[Tool] = []
    names: dict[str, str] = {}
    hidden: list[str] = []
    left_out = tuple(left_out)
    kept = tuple({k: v for k, v in t.model_dump(mode="json", by_alias=True, exclude_none=True).items()
                  if k in _KEPT} for t in found) + tuple({"name": name, LEFT_OUT: why} for name, why in left_out)
    hidden.extend(f"{name}: {why}" for name, why in left_out)
    for mcp_tool in found:
        if mcp_tool.execution is not None and mcp_tool.execution.task_support == "required":
            hidden.append(f"{mcp_tool.name}: runs only as an MCP task, which Tabletalk does not run")
            continue  # a plain call would always fail
        name = tool_name(p.name, mcp_tool.name, names)
        names[name] = mcp_tool.name
        hints = mcp_tool.annotations
        schema = defaults_optional(dict(mcp_tool.input_schema or {}))
        schema.setdefault("type", "object")
        if schema["type"] == "object":
            schema.setdefault("properties", {})
        tools.append(Tool(
            name=name,
            description=(mcp_tool.description or mcp_tool.title or "").strip(),
            summary=person_line(mcp_tool.description or "", mcp_tool.title or ""),
            parameters=schema,
            run=PluginCall(p, mcp_tool.name, transport, private_ok, call_timeout),
            idempotent=bool(hints and (hints.read_only_hint or hints.idempotent_hint)),
            destructive=bool(hints and hints.destructive_hint is True and not hints.read_only_hint),
            plugin=p.name,
            key=identity(p, mcp_tool.name),
            dispatches=True,
        ))
    count = len(tools)
    return Listing(tools, f"{count} tool" if count == 1 else f"{count} tools", transport, names, offers,
                   tuple(hidden), kept, read=time.time() if read is None else read,
                   instructions=instructions[:INSTRUCTIONS_MAX])


_KEPT = ("name", "title", "description", "inputSchema", "annotations", "execution")  # of a listed tool, in the row
LEFT_OUT = "leftOut"  # in the row, a tool of the listing that cannot be called: why
INSTRUCTIONS_MAX = 4000  # characters of a server's instructions kept (and put in the system prompt)

LINE_MAX = 120  # characters of a tool's line for a person


def person_line(description: str, title: str = "") -> str:
    """What a plugin's tool does in a line for a person: its description's first sentence (the
    rest is written for the model: when to call it, its arguments' rules), at most LINE_MAX
    characters; without a description, the title its server gives it for people."""
    text = " ".join(description.split())
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if not first:
        return title.strip()[:LINE_MAX]
    return first if len(first) <= LINE_MAX else first[:LINE_MAX - 1].rsplit(" ", 1)[0] + "…"


def status_ok(status: str) -> bool:
    """Whether a plugin's status is a listing that worked ("3 tools")."""
    return re.fullmatch(r"\d+ tools?", status) is not None


def kept_listing(p: Plugin, *, private_ok: bool, call_timeout: float = CALL_TIMEOUT) -> Listing | None:
    """The plugin's tools as its row keeps them from its last listing that worked (None when
    it has none): what a run offers while the plugin is down and this process never listed it."""
    import mcp_types as types

    try:
        kept = json.loads(p.listed) if p.listed else []
        found = [types.Tool.model_validate(t) for t in kept if LEFT_OUT not in t]
        left_out = [(str(t["name"]), str(t[LEFT_OUT])) for t in kept if LEFT_OUT in t]
    except (ValueError, TypeError, KeyError):
        return None
    if not found or not p.transport:
        return None
    return _listing(p, found, p.transport, private_ok=private_ok, call_timeout=call_timeout, offers=p.offers,
                    read=(p.status_at or 0.0) if status_ok(p.status) else 0.0, left_out=left_out,
                    instructions=p.instructions)


def record(store: Any, p: Plugin, listing: Listing) -> None:
    """What a listing says, into the plugin's row when it says something new (or it was read a
    minute after the row's time): status, transport, the tools as listed, what else it offers.
    A kept listing used again is not a reading: the row's time stays when it was read."""
    at = listing.read if status_ok(listing.status) and listing.read else time.time()
    changes: dict[str, Any] = {}
    if listing.status != p.status:
        changes["status"] = listing.status
    if listing.ok and listing.found:
        listed = json.dumps(list(listing.found), separators=(",", ":"))
        if listed != p.listed:
            changes["listed"] = listed
        if listing.transport != p.transport:
            changes["transport"] = listing.transport
        if listing.offers != p.offers:
            changes["offers"] = listing.offers
        if listing.instructions != p.instructions:
            changes["instructions"] = listing.instructions
    elif status_ok(listing.status) and not listing.tools and p.listed:  # it lists no tools now
        changes["listed"] = ""
    if changes or p.status_at is None or at - p.status_at > 60:
        store.update_plugin(p.id, status_at=at, **changes)


# A plugin that timed out or could not be reached is not asked again for DOWN_SECONDS: each
# run meanwhile offers the tools it listed last (a call to one says why it fails), and its
# status says what happened and when. One that knows its tools (or was down before) gets
# WAIT_KNOWN seconds to answer before its last listing is used (the fresh one still lands,
# for the next run), so no message waits on a dead plugin for more than about a second
# after the first. In this process's memory.
DOWN_SECONDS = 60.0
WAIT_KNOWN = 1.0
WAIT_KNOWN_STDIO = 5.0  # a command is started for each listing: a second is too short for node or python
# A stdio plugin's listing is not read at each message (that started its command each time:
# 3-4 s and ~4.5 s of CPU a message with five of them). Its last listing (this process's,
# else its row's) is used while it is younger than STDIO_FRESH and its server has not said
# its tools changed (`notifications/tools/list_changed`, link.tools_changed); an older one is
# read again through the conversation's live session with the command when there is one,
# else by a listing of its own in the background while the run uses the last one.
STDIO_FRESH = 600.0
# How long a stdio listing may take. Its first start may download the package (`npx -y`, `uvx`):
# it is never killed for taking a minute. A run waits WAIT_FIRST for a plugin never listed,
# then goes on without its tools ("starting…") while the listing goes on and is kept.
STDIO_START = 300.0
WAIT_FIRST = 10.0
_last: dict[tuple, Listing] = {}  # the last listing that worked, by plugin identity
_down: dict[tuple, tuple[float, str]] = {}  # until when a plugin is not asked, and why
_pending: dict[tuple, asyncio.Task] = {}  # listings under way, shared by the runs that wait


def _identity(p: Plugin, private_ok: bool) -> tuple:
    return (p.id, p.name, p.address, p.header, hashlib.sha256(p.secret.encode()).hexdigest(), private_ok,
            p.kind, p.command, p.args, p.env)


def _stale(last: Listing | None, why: str) -> Listing:
    when = time.strftime("%H:%M")
    if last is None or not last.tools:
        return Listing([], f"{why} ({when})")
    count = len(last.tools)
    return Listing(last.tools, f"{why} ({when}); its {count} tool{'s' if count != 1 else ''} as listed before",
                   last.transport, last.names, last.offers, last.hidden, read=last.read)


def defaults_optional(schema: Any) -> Any:
    """The schema with every property that has a default left out of `required`, at every
    level: the server fills in a default, so a call without it is one the server accepts
    (Playwright MCP's screenshot `scale`), and our check must not refuse it. So is a required
    name the properties do not describe (the model cannot know what to give, and the server
    may well take the call without it)."""
    if isinstance(schema, list):
        return [defaults_optional(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: defaults_optional(v) for k, v in schema.items()}
    properties, required = out.get("properties"), out.get("required")
    if isinstance(properties, dict) and isinstance(required, list):
        kept = [r for r in required
                if r in properties and not (isinstance(properties[r], dict) and "default" in properties[r])]
        if kept:
            out["required"] = kept
        else:
            del out["required"]
    return out


async def refresh(plugins: Iterable[Plugin], *, private_ok: bool, timeout: float = 10,
                  call_timeout: float = CALL_TIMEOUT, stdio_ok: bool = False,
                  tokens: TokenRows | None = None, store: Any = None, sessions: mcp_sessions.Sessions | None = None,
                  chat: int | None = None) -> dict[int | None, Listing]:
    """Every enabled plugin's listing, by plugin id, read concurrently (see DOWN_SECONDS and
    STDIO_FRESH). A listing that outlives the run that began it is kept in its row through
    `store`; `sessions` and `chat`: the conversation's live sessions, which a stdio plugin's
    listing is read through when there is one."""
    enabled = [p for p in plugins if p.enabled]

    async def one(p: Plugin) -> Listing:
        key = _identity(p, private_ok)
        last = _known(p, key, private_ok, call_timeout)
        down = _down.get(key)
        if down and down[0] > time.monotonic():
            return _stale(last, down[1])
        stdio = p.kind == "stdio" and stdio_ok
        if stdio and last is not None:
            if not _old(p, last.read):
                return last
            if sessions is not None and chat is not None and (live := sessions.live(p, chat, STDIO)) is not None:
                fresh = await _list_in(live.client, p, private_ok, call_timeout)
                if fresh is not None:
                    _remember(p, private_ok, fresh)
                    return fresh
        task = _listing_task(p, private_ok=private_ok, timeout=STDIO_START if stdio else timeout,
                             call_timeout=call_timeout, stdio_ok=stdio_ok, tokens=tokens, store=store)
        if stdio and last is not None:  # old: read again for the next run, this one goes on with it
            return last
        if last is not None or down is not None:  # known, or known to have been down
            done, _ = await asyncio.wait({task}, timeout=WAIT_KNOWN_STDIO if p.kind == "stdio" else WAIT_KNOWN)
            if task not in done:
                return _stale(last, "slow to answer" if last is not None else down[1])
        elif stdio:
            done, _ = await asyncio.wait({task}, timeout=WAIT_FIRST)
            if task not in done:
                return Listing([], starting(p), starting=True)
        fresh = await asyncio.shield(task)
        return fresh if fresh.ok or last is None else _stale(last, fresh.status)

    listings = await asyncio.gather(*(one(p) for p in enabled))
    return {p.id: listing for p, listing in zip(enabled, listings)}


def _known(p: Plugin, key: tuple, private_ok: bool, call_timeout: float) -> Listing | None:
    """The plugin's last listing that worked: this process's, or its row's when that is newer
    (another worker, or this one before a restart, read it later)."""
    last = _last.get(key)
    if last is None or (status_ok(p.status) and (p.status_at or 0.0) > last.read):
        return kept_listing(p, private_ok=private_ok, call_timeout=call_timeout) or last
    return last


def _old(p: Plugin, read_at: float) -> bool:
    """Whether a listing read at `read_at` should be read again: too old, or its server said
    its tools changed since."""
    return time.time() - read_at > STDIO_FRESH or (p.id is not None and tools_changed.get(p.id, 0.0) > read_at)


async def _list_in(client: Link | None, p: Plugin, private_ok: bool, call_timeout: float) -> Listing | None:
    """The plugin's tools read through a live session's `client` (None when that failed)."""
    if client is None:
        return None
    client.left_out.clear()
    try:
        with anyio.fail_after(WAIT_KNOWN_STDIO):
            found = await _all_tools(client)
    except Exception as exc:
        log.info("plugin %s: listing in the live session failed (%s)", p.name, type(exc).__name__)
        return None
    caps = client.server_capabilities
    offers = tuple(o for o in ("prompts", "resources") if getattr(caps, o, None) is not None)
    return _listing(p, found, STDIO, private_ok=private_ok, call_timeout=call_timeout, offers=offers,
                    left_out=client.left_out, instructions=client.instructions)


def starting(p: Plugin) -> str:
    """A stdio plugin's status while its first listing takes long (its package downloading)."""
    program = p.command.rsplit("/", 1)[-1]
    return f"starting… ({program} may be downloading)" if program in mcp_stdio.DOWNLOADERS else "starting…"


def _listing_task(p: Plugin, *, private_ok: bool, timeout: float, call_timeout: float, stdio_ok: bool,
                  tokens: TokenRows | None, store: Any) -> asyncio.Task:
    """The plugin's listing under way (shared by whoever waits for it), else a new one. It is
    kept in the plugin's row when it ends, whoever still waits: so a slow command's listing
    lands even when every run went on without it."""
    key = _identity(p, private_ok)
    task = _pending.get(key)
    if task is None or task.done():
        task = _pending[key] = asyncio.get_running_loop().create_task(
            _list_and_keep(p, store, private_ok=private_ok, timeout=timeout, call_timeout=call_timeout,
                           stdio_ok=stdio_ok, tokens=tokens),
            name=f"plugin-listing-{p.name}")
        task.add_done_callback(lambda t: _pending.pop(key, None) if _pending.get(key) is t else None)
    return task


async def _list_and_keep(p: Plugin, store: Any, *, private_ok: bool, **how: Any) -> Listing:
    listing = await list_tools(p, private_ok=private_ok, **how)
    if store is not None and p.id is not None:
        row = store.plugin_row(p.id)
        if row is not None and _identity(row, private_ok) == _identity(p, private_ok):
            record(store, row, listing)
    return listing


def under_way(p: Plugin, private_ok: bool) -> bool:
    """Whether the plugin's listing is going on (a "starting…" status is still true)."""
    task = _pending.get(_identity(p, private_ok))
    return task is not None and not task.done()


async def list_now(p: Plugin, *, private_ok: bool, stdio_ok: bool, tokens: TokenRows | None, store: Any,
                   wait: float = 5) -> Listing:
    """The plugin's tools read now, whatever is kept (a plugin added, the Refresh button): its
    listing under way, else a new one. A command slower than `wait` s (its package downloading)
    reads "starting…", and its listing goes on and lands in its row."""
    stdio = p.kind == "stdio" and stdio_ok
    key = _identity(p, private_ok)
    if (task := _pending.get(key)) is not None and not task.done() and not stdio:
        await asyncio.wait({task}, timeout=wait)  # a run's listing under way: the tab's is fresher
    task = _listing_task(p, private_ok=private_ok, timeout=STDIO_START if stdio else wait, call_timeout=CALL_TIMEOUT,
                         stdio_ok=stdio_ok, tokens=tokens, store=store)
    done, _ = await asyncio.wait({task}, timeout=WAIT_FIRST if stdio else wait + 1)
    if task not in done:
        return Listing([], starting(p) if stdio else "timed out", starting=stdio)
    return task.result()


async def stop_listings() -> None:
    """End this event loop's listings under way (the worker stops). A run that went on
    without its plugin's answer left the listing running for the next run; nobody waits for
    it at the stop, and it outlived the worker's loop. Cancelled, then waited for (5 s at most)."""
    here = asyncio.get_running_loop()
    going = [t for t in _pending.values() if not t.done() and t.get_loop() is here]
    for t in going:
        t.cancel()
    if going:
        await asyncio.wait(going, timeout=5)


async def agent_tools(store: Any, config: Any, agent: Any, taken: set[str], run: PluginRun,
                      chat: int | None = None) -> list[Tool]:
    """The tools of the agent's enabled plugins for `run` in conversation `chat`, as refresh
    finds them, named apart from `taken` (the oldest plugin keeps a name); each listing goes
    into its row."""
    enabled = store.plugins(agent.id, enabled_only=True)
    if not enabled:
        return []
    owner = store.owner()
    ok = private_ok(config.private_plugins, owner, agent.person)
    listings = await refresh(enabled, private_ok=ok, call_timeout=config.plugin_timeout,
                             stdio_ok=mcp_stdio.allowed(config.stdio_plugins, owner, agent.person), tokens=store,
                             store=store.unfenced, sessions=run.sessions, chat=chat)
    found: list[Tool] = []
    for p in enabled:
        listing = listings.get(p.id)
        if listing is not None:
            if not listing.starting or under_way(p, ok):  # (one that ended meanwhile kept its own words)
                record(store, p, listing)
            found.extend(unique(for_run(listing.tools, run), taken))
    return found


# --------------------------------------------------------------------------
# Calling
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginRun:
    """What a run gives its plugins' calls: the worker's sessions they are made in, the rows
    they keep things in (the run's store, held to its lease: a result's image, the server's
    questions; None: nothing is kept), and for the server's questions to the person and
    requests for the model's words, the run's wake-ups and the agent's model (no store or no
    wake-ups: they are refused)."""

    sessions: mcp_sessions.Sessions
    store: Any = None
    changed: Callable[[float], Awaitable[None]] | None = None  # wakes when any row changed (the feed)
    complete: mcp_asks.Complete | None = None  # the agent's model, for sampling
    model: str = ""


@dataclass(frozen=True)
class PluginCall:
    """A plugin tool's `run`: its call in the conversation's session with the plugin, once
    the tool is given to a run (`given`; a tool only listed has none and refuses)."""

    plugin: Plugin
    mcp_name: str
    transport: str
    private_ok: bool
    timeout: float
    given: PluginRun | None = None

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> Result:
        if self.given is None:
            raise PluginError(f"{self.plugin.name}: a listed tool is called only in a run")
        return await call(self.plugin, self.mcp_name, args, ctx, self.given, transport=self.transport,
                          private_ok=self.private_ok, timeout=self.timeout)


def for_run(tools: list[Tool], run: PluginRun) -> list[Tool]:
    """`tools` as `run` calls them: each plugin tool's calls made in its sessions and rows."""
    return [replace(t, run=replace(t.run, given=run)) if isinstance(t.run, PluginCall) else t for t in tools]


async def call(p: Plugin, mcp_name: str, args: dict[str, Any], ctx: ToolContext, run: PluginRun, *,
               transport: str = STREAMABLE, private_ok: bool, timeout: float = CALL_TIMEOUT) -> Result:
    """Call one MCP tool in the conversation's session with the plugin, one of `run`'s. Raises
    PluginError with the server's text for an error result, and with a plain reason for a
    server silent for `timeout` s (progress restarts the count), a lost connection or
    `ctx.abort` (which cancels the call at once)."""

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        text = message or (f"{progress:g}/{total:g}" if total else f"{progress:g}")
        try:
            ctx.progress(text)
        except Exception:  # a broken progress sink must not fail the call
            log.exception("progress of %s_%s", p.name, mcp_name)

    asker = (mcp_asks.Asker(run.store, ctx.chat, p.name, run.changed, run.complete, run.model, ctx.abort)
             if run.store is not None and run.changed is not None else None)
    try:
        result = await mcp_sessions.call_tool(p, mcp_name, args, chat=ctx.chat, transport=transport,
                                              private_ok=private_ok, limit=timeout, abort=ctx.abort,
                                              progressed=progressed, sessions=run.sessions, store=run.store,
                                              dispatched=ctx.dispatched, asker=asker, resume=ctx.resume)
    except asyncio.CancelledError:
        raise  # a Stop or a shutdown: the turn ends its requests (mcp_asks.ended)
    except BaseException:
        if asker is not None:
            asker.call_ended()
        raise
    if asker is not None:
        asker.call_ended()
    if transport == STDIO and mcp_content.size(result) > MAX_BYTES:  # (a pipe has no limit of its own: read whole)
        raise PluginError(too_large(p))
    if result.is_error:
        text = mcp_content.convert(result, mcp_name).text
        raise PluginError(text or f"{mcp_name} failed without saying why")
    return mcp_content.convert(result, mcp_name, run.store, ctx.chat)

