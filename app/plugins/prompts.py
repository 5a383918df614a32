"""A plugin's prompts and resources, for the composer.

A prompt (MCP `prompts/get`) is a message the server writes from arguments the person fills
in: its text is sent as the person's message. A resource (`resources/read`) is content the
server holds: it is attached to a message as a file. Both are read over a short connection
of their own (like the tool listing), from plugins whose `initialize` says they have them.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any

import anyio

from app.plugins.attempt import Attempt
from app.plugins.errors import PluginError, leaves
from app.plugins.link import SSE, STDIO, STREAMABLE, connect, why
from app.plugins.oauth_tokens import TokenRows
from app.tables import Plugin

log = logging.getLogger(__name__)

TIMEOUT = 10.0
MAX_PAGES = 10
ARGUMENT_MAX = 10_000  # characters of one argument the person gives
PROMPT_TEXT_MAX = 100_000  # characters of a prompt's message (the composer's limit)


@dataclass(frozen=True)
class Argument:
    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...] = ()


@dataclass(frozen=True)
class Resource:
    uri: str
    name: str
    description: str = ""
    mime: str = ""
    size: int | None = None


@dataclass
class Offers:
    """One plugin's prompts and resources, or why they could not be read."""

    plugin: Plugin
    prompts: list[Prompt] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)
    problem: str = ""


def _transports(p: Plugin) -> tuple[str, ...]:
    if p.kind == "stdio":
        return (STDIO,)
    return (p.transport,) if p.transport in (STREAMABLE, SSE) else (STREAMABLE, SSE)


async def _with_link(p: Plugin, private_ok: bool, tokens: TokenRows | None, work: Any) -> Any:
    """`work(link)` over a short connection to the plugin (its OAuth tokens, if it has some, kept
    in `tokens`); PluginError in plain words."""
    attempt = Attempt()
    last = "not an MCP server"
    for transport in _transports(p):
        attempt.clear()
        try:
            with anyio.fail_after(TIMEOUT):
                async with connect(p, transport, private_ok=private_ok, attempt=attempt, timeout=TIMEOUT,
                                   read_timeout=TIMEOUT, tokens=tokens) as link:
                    return await work(link)
        except PluginError:
            raise
        except Exception as exc:
            from mcp.shared.exceptions import MCPError
            refused = next((e for e in leaves(exc) if isinstance(e, MCPError)), None)
            if refused is not None and not attempt.failed_http:
                raise PluginError(f"{p.name}: {refused.message}") from None
            last = why(exc, attempt, p)
            if transport == STREAMABLE and last == "not an MCP server" and attempt.sse_only:
                continue
            raise PluginError(f"{p.name}: {last}") from None
    raise PluginError(f"{p.name}: {last}")


async def offers(plugins: list[Plugin], *, private_ok: bool, stdio_ok: bool,
                 tokens: TokenRows | None = None) -> list[Offers]:
    """The prompts and resources of the plugins that said they have some, read in parallel."""

    async def one(p: Plugin) -> Offers:
        found = Offers(p)
        if p.kind == "stdio" and not stdio_ok:
            found.problem = "commands run on this machine are off"
            return found

        async def read(link: Any) -> None:
            caps = link.server_capabilities
            if getattr(caps, "prompts", None) is not None:
                cursor = None
                for _ in range(MAX_PAGES):
                    page = await link.list_prompts(cursor)
                    found.prompts += [Prompt(x.name, x.title or x.name, (x.description or "").strip(), tuple(
                        Argument(a.name, (a.description or "").strip(), bool(a.required)) for a in x.arguments or ()))
                        for x in page.prompts]
                    if not (cursor := page.next_cursor):
                        break
            if getattr(caps, "resources", None) is not None:
                cursor = None
                for _ in range(MAX_PAGES):
                    page = await link.list_resources(cursor)
                    found.resources += [Resource(str(x.uri), x.title or x.name or str(x.uri),
                                                 (x.description or "").strip(), x.mime_type or "", x.size)
                                        for x in page.resources]
                    if not (cursor := page.next_cursor):
                        break

        try:
            await _with_link(p, private_ok, tokens, read)
        except PluginError as e:
            found.problem = str(e)
        return found

    # those whose last listing said they have neither are not asked (one never listed is)
    wanted = [p for p in plugins if p.enabled and (not p.transport or "prompts" in p.offers or "resources" in p.offers)]
    return list(await asyncio.gather(*(one(p) for p in wanted)))


def check_arguments(prompt: Prompt, given: dict[str, str]) -> str:
    """Why the arguments cannot be sent ('' when they can): a required one left empty."""
    for a in prompt.arguments:
        if a.required and not given.get(a.name, "").strip():
            return f"“{a.name}” is required."
        if len(given.get(a.name, "")) > ARGUMENT_MAX:
            return f"“{a.name}” is at most {ARGUMENT_MAX:,} characters."
    return ""


async def prompt_message(p: Plugin, name: str, arguments: dict[str, str], *, private_ok: bool,
                         tokens: TokenRows | None = None) -> tuple[str, list[tuple[str, bytes]]]:
    """The prompt's messages as one message's text (each message's role named when there are
    several speakers), and the files its images and embedded resources become."""
    result = await _with_link(p, private_ok, tokens, lambda link: link.get_prompt(name, arguments))
    parts: list[str] = []
    files: list[tuple[str, bytes]] = []
    roles = {m.role for m in result.messages}
    for m in result.messages:
        text = _content_text(m.content, files, name)
        if text:
            parts.append(f"{m.role.capitalize()}: {text}" if len(roles) > 1 else text)
    text = "\n\n".join(parts).strip()
    if not text and not files:
        raise PluginError(f"{p.name}’s prompt “{name}” came back empty")
    if len(text) > PROMPT_TEXT_MAX:
        raise PluginError(f"{p.name}’s prompt “{name}” is {len(text):,} characters: more than a message may have "
                          f"({PROMPT_TEXT_MAX:,})")
    return text or f"(the prompt “{name}”)", files


def _content_text(content: Any, files: list[tuple[str, bytes]], name: str) -> str:
    kind = getattr(content, "type", "")
    if kind == "text":
        return content.text
    if kind in ("image", "audio"):
        data = base64.b64decode(content.data, validate=False)
        files.append((_file_name(name, content.mime_type), data))
        return ""
    if kind == "resource":
        files.extend(_resource_files(content.resource, name))
        return ""
    if kind == "resource_link":
        return f"[{content.name}]({content.uri})"
    return ""


async def resource_files(p: Plugin, uri: str, *, private_ok: bool,
                         tokens: TokenRows | None = None) -> list[tuple[str, bytes]]:
    """The resource's contents as files to attach (name, bytes)."""
    result = await _with_link(p, private_ok, tokens, lambda link: link.read_resource(uri))
    files = [f for c in result.contents for f in _resource_files(c, _last_part(uri))]
    if not files:
        raise PluginError(f"{p.name}’s resource {uri} came back empty")
    return files


def _resource_files(c: Any, name: str) -> list[tuple[str, bytes]]:
    mime = getattr(c, "mime_type", None) or ""
    named = _last_part(str(getattr(c, "uri", "") or "")) or name
    if getattr(c, "text", None) is not None:
        return [(_file_name(named, mime or "text/plain"), c.text.encode())]
    if getattr(c, "blob", None) is not None:
        return [(_file_name(named, mime or "application/octet-stream"), base64.b64decode(c.blob, validate=False))]
    return []


def _last_part(uri: str) -> str:
    return re.sub(r"[^\w.-]+", "_", uri.rstrip("/").rsplit("/", 1)[-1])[:80].strip("._") or "resource"


def _file_name(name: str, mime: str) -> str:
    base = re.sub(r"[^\w.-]+", "_", name)[:80].strip("._") or "resource"
    if "." in base[1:]:
        return base
    return base + (mimetypes.guess_extension(mime.split(";")[0].strip()) or ("" if not mime.startswith("text/") else ".txt"))
