"""An agent's plugins tab: adding a plugin (an address, or a command when the owner allows
it), editing one (name, address, header, secret; a command's program, arguments and
environment), and the Refresh / Enable / Disable / Delete buttons; what the tab shows is
in agent_view.py and plugin_listings.py.
"""
from __future__ import annotations

import re
from typing import Any

from litestar import Request, Response, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath

from ..plugins import stdio as mcp_stdio, tools as mcp_tools
from ..tables import Assistant, Plugin, site_name
from ..tools import names
from ..tools.standard import builtin_tools
from ..serve.worker import Worker
from .agent_view import PLUGIN_NAME_MAX, agent_view, back
from .plugin_listings import forget_listing, read, stdio_ok
from .toolkit import Refused, agent_or_404, form_field, parse_id, worker

ADDRESS_MAX = 2_000
SECRET_MAX = 4_000
HEADER_MAX = 100
COMMAND_MAX = 1_000
ARG_MAX = 4_000
READ_MAX = 100_000  # what a field may carry before it is called too long beside the field (not a 413)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --------------------------------------------------------------------------
# Checking what the form sent
# --------------------------------------------------------------------------


async def field(request: Request, name: str, most: int, what: str) -> str:
    value = (await form_field(request, name, READ_MAX)).strip()
    if len(value) > most:
        raise Refused(field=name,
                      message=f"{what} is too long: at most {most:,} characters (this one has {len(value):,}).")
    return value


def reserved(name: str) -> bool:
    """A plugin name whose tools would read as a built-in's (a plugin `fetch` with a tool
    `page` is `fetch_page`): such a plugin is named `fetch_2` instead."""
    return any(t.name == name or t.name.startswith(name + "_") for t in builtin_tools())


def check_name(s: Worker, agent: Assistant, name: str, this: int | None = None) -> str:
    if len(name) > PLUGIN_NAME_MAX:
        raise Refused(field="name",
                      message=f"A plugin's name is at most {PLUGIN_NAME_MAX} characters: it begins each of its "
                              f"tools' names.")
    if not _NAME.fullmatch(name):
        raise Refused(field="name",
                      message="A plugin's name has letters, digits, - and _ only, and begins with a letter or a "
                              "digit: it begins each of its tools' names.")
    if reserved(name):
        raise Refused(field="name",
                      message=f"“{name}” would make its tools read as built-in ones: choose another name.")
    if any(p.name.lower() == name.lower() and p.id != this for p in s.store.plugins(agent.id)):
        raise Refused(field="name", message=f"This agent has a plugin named “{name}” already.")
    return name


def free_name(s: Worker, agent: Assistant, base: str) -> str:
    """The name a new plugin gets when none is given: after its site, made unique."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "_", base).strip("_-")[:PLUGIN_NAME_MAX] or "plugin"
    taken = {p.name.lower() for p in s.store.plugins(agent.id)}
    name, n = base, 2
    while name.lower() in taken or reserved(name):
        name, n = f"{base[:PLUGIN_NAME_MAX - 4]}_{n}", n + 1
    return name


def check_address(address: str) -> str:
    if not address:
        raise Refused(field="address", message="A plugin's address is an http:// or https:// URL.")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in address):
        raise Refused(field="address", message="An address has no spaces or control characters.")
    if problem := mcp_tools.bad_address(address):
        raise Refused(field="address",
                      message="A plugin's address is an http:// or https:// URL with a host name."
                      if "http" in problem else "That address is not a valid URL.")
    return address


def check_header(header: str) -> str:
    if header and not all(c.isascii() and (c.isalnum() or c in "-_") for c in header):
        raise Refused(field="header", message="A header name has letters, digits, - and _ only.")
    return header


def check_secret(secret: str) -> str:
    if secret and (not secret.isascii() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in secret)):
        raise Refused(field="secret",
                      message="A secret is sent as a header: plain ASCII characters only, no line breaks.")
    return secret


def check_command(command: str, args_text: str, env_text: str) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    if not command:
        raise Refused(field="command",
                      message="A command plugin needs the program to run (e.g. /usr/bin/node).")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in command):
        raise Refused(field="command", message="The program's name has no control characters.")
    args = tuple(a for a in (line.strip() for line in args_text.splitlines()) if a)
    if len(args) > mcp_stdio.ARGS_MAX:
        raise Refused(field="args", message=f"At most {mcp_stdio.ARGS_MAX} arguments, one a line.")
    if any("\0" in a for a in args):
        raise Refused(field="args", message="An argument has no NUL characters.")
    env: list[tuple[str, str]] = []
    for line in env_text.splitlines():
        if not line.strip():
            continue
        key, eq, value = line.strip().partition("=")
        if not eq or not _ENV.fullmatch(key):
            raise Refused(field="env", message=f"Each line is NAME=value, the name of letters, digits and _: "
                                               f"not “{line.strip()[:40]}”.")
        if "\0" in value:
            raise Refused(field="env", message="A value has no NUL characters.")
        env.append((key, value))
    if len(env) > mcp_stdio.ENV_MAX:
        raise Refused(field="env", message=f"At most {mcp_stdio.ENV_MAX} variables.")
    return command, args, tuple(env)


# --------------------------------------------------------------------------
# Routes
# --------------------------------------------------------------------------


async def refused(request: Request, s: Worker, agent: Assistant, e: Refused, typed: dict[str, str],
                  editing: int | None = None) -> Response:
    return await agent_view(request, s, agent, "plugins", 400, problem=(e.field, e.message), plugin_typed=typed,
                            editing=editing)


@post("/agents/{agent_id:str}/plugins")
async def add_plugin(request: Request, agent_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    kind = (await form_field(request, "kind", 10)).strip() or "http"
    typed = await typed_back(request) | {"kind": kind}
    try:
        name = await field(request, "name", PLUGIN_NAME_MAX * 4, "A plugin's name")
        if kind == "stdio":
            command, args, env = await stdio_fields(request, s, agent)
            name = check_name(s, agent, name) if name else free_name(s, agent, mcp_stdio.program_name(command, args))
            made = Plugin(agent=agent.id, name=name, address="", kind="stdio", command=command, args=args, env=env)
        elif kind == "http":
            address = check_address(await field(request, "address", ADDRESS_MAX, "An address"))
            header = check_header(await field(request, "header", HEADER_MAX, "A header name"))
            secret = check_secret(await field(request, "secret", SECRET_MAX, "A secret"))
            if secret and not header:
                header = "Authorization"
            name = check_name(s, agent, name) if name else free_name(s, agent, site_name(address))
            made = Plugin(agent=agent.id, name=name, address=address, header=header, secret=secret)
        else:
            raise HTTPException(status_code=400, detail="A plugin is an address (http) or a command (stdio).")
    except Refused as e:
        return await refused(request, s, agent, e, typed)
    added = s.store.add_plugin(made)
    if agent.tools.strip():  # some tools were unticked: the new plugin's tools are ticked all the same
        s.store.update_agent(agent.id, tools=",".join(sorted(names(agent.tools) | {every(added)})))
    listing = await read(s, agent, added)
    if wary := {t.identity for t in listing.tools if t.destructive}:  # they wait for approval unless unticked
        fresh = s.store.agent(agent.id) or agent
        s.store.update_agent(agent.id, approve=",".join(sorted(names(fresh.approve) | wary)))
    return back(request, agent, "plugins", "added")


def every(p: Plugin) -> str:
    """The agent's setting for every tool of the plugin, those it lists later included."""
    return f"plugin{p.id}.*"


DONE = {"enable": "enabled", "disable": "disabled", "delete": "deleted", "refresh": "refreshed", "save": "edited"}


@post("/agents/{agent_id:str}/plugins/{plugin_id:str}")
async def change_plugin(request: Request, agent_id: FromPath[str], plugin_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    p = s.store.plugin_row(parse_id(plugin_id, "plugin"))
    if p is None or p.agent != agent.id:
        raise NotFoundException("No such plugin.")
    action = (await form_field(request, "action", 20)).strip()
    if action == "enable":
        s.store.update_plugin(p.id, enabled=True)
    elif action == "disable":
        s.store.update_plugin(p.id, enabled=False)
    elif action == "delete":
        s.store.delete_plugin(p.id)
        await s.sessions.close_plugin(p.id)
        forget_listing(p)
        s.store.update_agent(agent.id, tools=",".join(sorted(names(agent.tools) - {every(p)})))
    elif action == "refresh":  # this worker's processes and sessions of it are started again too
        await s.sessions.close_plugin(p.id)
        await read(s, agent, p)
    elif action == "save":
        return await save(request, s, agent, p)
    else:
        raise HTTPException(status_code=400, detail="The action is save, enable, disable, delete or refresh.")
    return back(request, agent, "plugins", DONE[action])


async def save(request: Request, s: Worker, agent: Assistant, p: Plugin) -> Response:
    """The edit form: the name, and how the plugin is reached. A secret left blank is kept
    (the page never shows it); `forget` removes it."""
    typed = await typed_back(request)
    try:
        name = check_name(s, agent, await field(request, "name", PLUGIN_NAME_MAX * 4, "A plugin's name"), this=p.id)
        if p.kind == "stdio":
            command, args, env = await stdio_fields(request, s, agent)
            changes: dict[str, Any] = {"name": name, "command": command, "args": args, "env": env}
        else:
            address = check_address(await field(request, "address", ADDRESS_MAX, "An address"))
            header = check_header(await field(request, "header", HEADER_MAX, "A header name"))
            secret = check_secret(await field(request, "secret", SECRET_MAX, "A secret")) or p.secret
            if (await form_field(request, "forget", 5)) == "1":
                secret = ""
            if secret and not header:
                header = "Authorization"
            changes = {"name": name, "address": address, "header": header, "secret": secret}
    except Refused as e:
        return await refused(request, s, agent, e, typed, editing=p.id)
    changed = {k: v for k, v in changes.items() if getattr(p, k) != v}
    if changed:
        s.store.update_plugin(p.id, **changed)
        forget_listing(p)
        if set(changed) - {"name"}:  # reached another way: its sessions and listing are of the old way
            await s.sessions.close_plugin(p.id)
            s.store.forget_mcp_sessions(p.id)
            s.store.update_plugin(p.id, status_at=None)
        fresh = s.store.plugin_row(p.id)
        if fresh is not None and fresh.enabled:
            await read(s, agent, fresh)
    return back(request, agent, "plugins", DONE["save"])


routes = [add_plugin, change_plugin]


async def typed_back(request: Request) -> dict[str, str]:
    """What the person typed into a plugin's form, to show back beside a refusal (cut short)."""
    return {k: (await form_field(request, k, READ_MAX)).strip()[:ARG_MAX * 4]
            for k in ("name", "address", "header", "command", "args", "env")}


async def stdio_fields(request: Request, s, agent) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A stdio plugin's program, arguments and environment from its form, checked; refused
    when commands run on this machine are off for this agent."""
    if not stdio_ok(s, agent):
        raise Refused(field="stdio", message="Commands run on this machine are off: the owner may turn them on "
                                             "(TABLETALK_STDIO_PLUGINS=1), for the owner's agents only.")
    return check_command(await field(request, "command", COMMAND_MAX, "The program"),
                         await field(request, "args", ARG_MAX * 10, "The arguments"),
                         await field(request, "env", ARG_MAX * 10, "The environment"))
