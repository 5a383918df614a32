"""What the loop and the model boundary speak: a message as the Chat Completions API has it,
its tool calls, the pieces a stream function yields, and the model's failures."""
from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from ..tools import Tool


# --- messages ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it


@dataclass(frozen=True)
class Message:
    """One message as the Chat Completions API has it."""

    role: str  # system | user | assistant | tool
    content: str | list[dict[str, Any]] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
            if not self.content:
                out["content"] = None
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


# --- what the stream function yields ----------------------------------------------------


@dataclass(frozen=True)
class Delta:
    """A piece of a model's streamed reply."""

    text: str = ""
    reasoning: str = ""
    call_index: int | None = None  # a piece of a tool call
    call_id: str = ""
    call_name: str = ""
    call_arguments: str = ""
    usage: dict[str, int] | None = None
    notice: str = ""  # something the person should see while it waits (a retry after a 429)


class ModelError(Exception):
    """The model could not answer; the message is in plain words for the person."""


class Again(ModelError):
    """A failure the request can be made again after, built anew (`prepare` is asked again):
    the model boundary learned what the server cannot take. Each `cause` once per step; the
    message is a notice for the person, not a failure."""

    cause: str = ""
    failure: str = ""  # what the person reads when it cannot be made again ('' = the message)


class StreamFn(Protocol):
    def __call__(self, messages: list[Message], tools: list[Tool]) -> AsyncIterator[Delta]: ...
