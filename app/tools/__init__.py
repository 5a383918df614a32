"""Tools an agent can call: the interface, and the built-in ones.

A tool has a name, a description, JSON-schema parameters and an async `run(args, ctx)`
that returns a `Result`. `idempotent` says whether running it twice is harmless, which
decides what happens to a call cut off by a restart (it is run again, or reported as
interrupted to the model).
"""
from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from ..knowledge.ranking import Meaning
from ..tables import Found, Picks, Skill


NAME_LIMIT = 64  # the Chat Completions API's limit on a function name
T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    url: str
    title: str = ""
    document: str = ""  # a passage of the person's knowledge: its document's name (one chip each)


@dataclass(frozen=True)
class Result:
    text: str  # what the model is sent
    sources: tuple[Source, ...] = ()
    file: int | None = None
    shown: str = ""  # what the page shows instead of `text`, when that differs ('' = the text)
    unsent: bool = False  # `file` is for the person only: not sent to the model


# What the built-in tools read and write of the rows: a small protocol for each (app.store.Store
# is all of them; the tools layer stands below the store and names only what it uses).

class Plans(Protocol):
    """update_plan's: the conversation's checklist."""

    def set_plan(self, chat: int, text: str) -> Any: ...


class Memories(Protocol):
    """remember's: the agent's memories, checked and added in one transaction."""

    def write(self) -> AbstractContextManager[Any]: ...

    def memories(self, agent: int) -> list[dict[str, Any]]: ...

    def outside_text(self, chat: int, inside: tuple[str, ...]) -> bool: ...

    def add_memory(self, agent: int, text: str, *, outside: bool = False, chat: int | None = None) -> int: ...


class Skills(Protocol):
    """load_skill's: the shared skills."""

    def skills(self) -> list[Skill]: ...


class Passages(Protocol):
    """search_knowledge's: what the conversation may see of the person's documents, searched."""

    def knowledge_scope(self, chat: int, agent: int | None, picks: Picks = Picks()) -> Any: ...

    def search_passages(self, query: str, scope: Any, limit: int = 8, meaning: Meaning | None = None
                        ) -> list[Found]: ...


class ToolStore(Plans, Memories, Skills, Passages, Protocol):
    """Every row a built-in tool may read or write: nothing else of the store reaches a tool."""


@dataclass
class ToolContext:
    """What a running tool may know and use: its conversation and agent, the person's Stop, a
    sink for progress, and the rows the built-in tools keep things in. A plugin's tool gets
    what its calls need (the worker's sessions, the run's rows) when it is given to a run
    (app/plugins/tools.py), not here."""

    chat: int
    agent: int | None
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    progress: Callable[[str], None] = lambda text: None
    # Marks the call sent to its tool, durably, before the request leaves (once; later calls
    # do nothing). A tool with `dispatches` calls it itself; for the others it is called
    # just before `run`.
    dispatched: Callable[[], None] = lambda: None
    store: ToolStore | None = None  # None: the tools that keep something refuse, in words
    # A call a restart cut after it was sent, to be taken up rather than sent again: what its
    # tool kept for that (a plugin's, while its server's question waited: app/plugins/resume.py;
    # set by the turn for that call only).
    resume: Mapping[str, str] | None = None
    # A question's vector by the embedding model, for search_knowledge (AI_EMBEDDINGS; None:
    # none is set, the documents are searched by their words alone).
    meaning: Callable[[str], Awaitable[Meaning]] | None = None
    # What the person picked with "/" for the message being answered: searched too.
    picks: Picks = field(default_factory=Picks)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Awaitable[Result]]
    idempotent: bool = False
    plugin: str = ""  # the plugin's name for a plugin's tool ("" for a built-in one)
    # What the agent's settings (may use, waits for approval) are keyed by: a plugin's tool is
    # its plugin's id and its own MCP name, so a tool that comes to show the same name (another
    # plugin, a renamed one) never inherits them. A built-in's key is its name.
    key: str = ""

    @property
    def identity(self) -> str:
        return self.key or self.name
    dispatches: bool = False  # it calls ctx.dispatched() itself, when its request leaves
    summary: str = ""  # what it does in a line for a person (an agent's Tools tab); the description is the model's
    destructive: bool = False  # its server says it may destroy or overwrite (MCP's destructiveHint: true)
    # A function an API client brought (docs/api.md): the model may call it, the client runs
    # it. Its calls are handed back (agent.ToolHandedOver), never run here.
    client: bool = False

    def schema(self) -> dict[str, Any]:
        """The tool as the Chat Completions API describes it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


async def _handed_back(args: dict[str, Any], ctx: ToolContext) -> Result:
    raise RuntimeError("a client's function runs at the client, never here")


def client_tool(schema: dict[str, Any]) -> Tool:
    """A function as an API client describes it (the Chat Completions API's `tools` entry,
    checked by the web): offered to the model, its calls handed back to the client."""
    function = schema["function"]
    return Tool(name=function["name"], description=function.get("description") or "",
                parameters=function.get("parameters") or {"type": "object", "properties": {}},
                run=_handed_back, client=True)


def names(csv: str) -> set[str]:
    return {n.strip() for n in csv.split(",") if n.strip()}


def chosen(tool: Tool, keys: set[str]) -> bool:
    """Whether a setting's keys name this tool: by its identity, or by the name settings were
    saved under before tools had identities (a plugin's tool renamed for a clash has a name
    of its own, so an old name never reaches another tool), or as every tool of its plugin."""
    if tool.identity in keys or tool.name in keys:
        return True
    plugin, dot, _ = tool.identity.partition(".")  # "plugin7.*": every tool of plugin 7, later ones too
    return bool(dot) and f"{plugin}.*" in keys


def allowed(tools: list[Tool], use: str) -> list[Tool]:
    """The tools an agent may use: `use` is "" for all of them, else identities, commas."""
    if not use.strip():
        return list(tools)
    keys = names(use)
    return [t for t in tools if chosen(t, keys)]


def unique(tools: list[Tool], taken: set[str]) -> list[Tool]:
    """`tools` with names no tool in `taken` (built-ins, earlier plugins) has, nor each other:
    a clash renames the later tool (its name ends in a hash of its identity), so a plugin can
    never shadow a built-in or another plugin's tool. Adds the names to `taken`."""
    out = []
    for tool in tools:
        name = tool.name
        if name in taken:
            digest = hashlib.sha256(tool.identity.encode()).hexdigest()
            for size in (8, 16, 64):
                name = f"{tool.name[: NAME_LIMIT - size - 1].rstrip('_')}_{digest[:size]}"
                if name not in taken:
                    break
            tool = replace(tool, name=name)
        taken.add(name)
        out.append(tool)
    return out


async def unless_stopped(abort: asyncio.Event, work: Awaitable[T], stopped: Exception) -> T:
    """The result of `work`, or `stopped` raised as soon as `abort` (the person's Stop) is set:
    a tool waiting on the network ends at once, its request closed before it says so."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    await asyncio.gather(task, return_exceptions=True)
    raise stopped
