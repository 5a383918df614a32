"""What the loop reports, as events in three nested lifecycles: agent start/end, step
start/end, and message / tool start, update, end."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..tools import Result
from .messages import Message, ToolCall
from .pieces import SoFar


# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentStart:
    pass


@dataclass(frozen=True)
class AgentEnd:
    messages: tuple[Message, ...]  # what the run added to the history


@dataclass(frozen=True)
class StepStart:
    pass


@dataclass(frozen=True)
class StepEnd:
    message: Message | None
    results: tuple[Message, ...] = ()


@dataclass(frozen=True)
class MessageStart:
    kind: str  # text | reasoning


@dataclass(frozen=True)
class MessageUpdate:
    kind: str
    delta: str
    so_far: SoFar  # all of it so far, joined when read

    @property
    def text(self) -> str:
        return str(self.so_far)


@dataclass(frozen=True)
class MessageEnd:
    """A model step is over: its whole message (text and tool calls) and its reasoning.

    `complete` is False when the model failed part way; what it wrote is kept.
    """

    message: Message
    reasoning: str = ""
    complete: bool = True


@dataclass(frozen=True)
class ToolStart:
    call: ToolCall


@dataclass(frozen=True)
class ToolDispatched:
    """The call is being sent to its tool: from here on it may have run."""

    call: ToolCall


@dataclass(frozen=True)
class ToolUpdate:
    call: ToolCall
    output: str


@dataclass(frozen=True)
class ToolEnd:
    call: ToolCall
    output: str
    ok: bool
    result: Result | None = None


@dataclass(frozen=True)
class ToolDeclined:
    """The call did not run: the person declined it (or the run was told not to)."""

    call: ToolCall
    reason: str


@dataclass(frozen=True)
class ToolHandedOver:
    """A call of a function the caller runs itself (an API client's, `Tool.client`): not
    run here; the run ends after this step, and the call goes back to the caller."""

    call: ToolCall


@dataclass(frozen=True)
class Usage:
    prompt: int
    completion: int
    cached: int = 0
    counted: bool = False  # not the server's usage: its tokenizer's count of the words sent


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass(frozen=True)
class Notice:
    text: str


Event = (
    AgentStart | AgentEnd | StepStart | StepEnd | MessageStart | MessageUpdate | MessageEnd
    | ToolStart | ToolDispatched | ToolUpdate | ToolEnd | ToolDeclined | ToolHandedOver | Usage | Failed | Notice
)
Emit = Callable[[Event], None]
