"""Tools an agent can call: the interface, and the built-in ones.

A tool has a name, a description, JSON-schema parameters and an async `run(args, ctx)`
that returns a `Result`. `idempotent` says whether running it twice is harmless, which
decides what happens to a call cut off by a restart (it is run again, or reported as
interrupted to the model).
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Source:
    url: str
    title: str = ""


@dataclass(frozen=True)
class Result:
    text: str
    sources: tuple[Source, ...] = ()
    file: int | None = None


@dataclass
class Context:
    """What a running tool may know and use.

    `store` is the plumbing for tools that keep something in the conversation or the agent
    (the plan, memories, skills); tools that only reach out (pages, plugins) leave it alone.
    """

    chat: int
    agent: int | None
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    progress: Callable[[str], None] = lambda text: None
    # Marks the call sent to its tool, durably, before the request leaves (once; later calls
    # do nothing). A tool with `dispatches` calls it itself; for the others it is called
    # just before `run`.
    dispatched: Callable[[], None] = lambda: None
    store: Any = None  # app.store.Store; Any keeps tools importable without the storage layer
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any], Context], Awaitable[Result]]
    idempotent: bool = False
    dispatches: bool = False  # it calls ctx.dispatched() itself, when its request leaves

    def schema(self) -> dict[str, Any]:
        """The tool as the Chat Completions API describes it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def names(csv: str) -> set[str]:
    return {n.strip() for n in csv.split(",") if n.strip()}


def allowed(tools: list[Tool], use: str) -> list[Tool]:
    """The tools an agent may use: `use` is "" for all of them, else names, commas."""
    if not use.strip():
        return list(tools)
    chosen = names(use)
    return [t for t in tools if t.name in chosen]
