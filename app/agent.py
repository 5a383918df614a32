"""The agent loop: model step -> tool calls -> results -> model step, until the model stops.

Pure: it knows nothing of SQLite or HTTP. It takes the history, the tools, a stream
function (the model boundary) and an `emit` sink, and reports what happens as events in
three nested lifecycles: agent start/end, turn start/end, and message / tool start,
update, end. A model's or a tool's failure is data (a `Failed` event, a failed tool
result), never an exception out of the loop; cancellation is how a run is stopped.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema

from .tools import Context, Result, Tool

MAX_STEPS = 40


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


class StreamFn(Protocol):
    def __call__(self, messages: list[Message], tools: list[Tool]) -> AsyncIterator[Delta]: ...


# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentStart:
    pass


@dataclass(frozen=True)
class AgentEnd:
    messages: tuple[Message, ...]  # what the run added to the history


@dataclass(frozen=True)
class TurnStart:
    pass


@dataclass(frozen=True)
class TurnEnd:
    message: Message | None
    results: tuple[Message, ...] = ()


@dataclass(frozen=True)
class MessageStart:
    kind: str  # text | reasoning


@dataclass(frozen=True)
class MessageUpdate:
    kind: str
    delta: str
    text: str  # all of it so far


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
class Usage:
    prompt: int
    completion: int
    cached: int = 0


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass(frozen=True)
class Notice:
    text: str


Event = (
    AgentStart | AgentEnd | TurnStart | TurnEnd | MessageStart | MessageUpdate | MessageEnd
    | ToolStart | ToolDispatched | ToolUpdate | ToolEnd | ToolDeclined | Usage | Failed | Notice
)
Emit = Callable[[Event], None]
# Asked before a call runs: None to run it, or the reason it must not (given to the model).
# May wait (for the person's approval); a stop cancels the wait.
Gate = Callable[[ToolCall], Awaitable[str | None]]
# The messages the next model step is sent, given the loop's own (history and what the run
# added): where a caller cuts a long history to the model's window (pi-agent-core's
# transformContext). Raises ModelError when nothing fits; the run then fails in plain words.
Prepare = Callable[[list[Message]], list[Message]]
# Messages the person sent while the run was going, to give the model at the next step
# boundary (pi-agent-core's steering messages); [] when there are none.
Steering = Callable[[], list[Message]]


# --- the loop ---------------------------------------------------------------------------


@dataclass
class _Parts:
    text: str = ""
    reasoning: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)


async def run(
    history: list[Message],
    tools: list[Tool],
    stream: StreamFn,
    emit: Emit,
    context: Context | None = None,
    max_steps: int = MAX_STEPS,
    gate: Gate | None = None,
    prepare: Prepare | None = None,
    steering: Steering | None = None,
) -> list[Message]:
    """Run the agent from `history` until the model answers without calling a tool and
    nobody sent it anything meanwhile.

    Returns the messages the run added (steering messages, assistant replies, tool results).
    """
    emit(AgentStart())
    added: list[Message] = []
    by_name = {t.name: t for t in tools}
    steered = steering() if steering else []  # sent while the run waited to begin
    for _ in range(max_steps):
        added.extend(steered)
        emit(TurnStart())
        try:
            request = prepare([*history, *added]) if prepare else [*history, *added]
        except ModelError as e:
            emit(Failed(str(e)))
            emit(TurnEnd(None))
            break
        reply = await model_step(request, tools, stream, emit)
        if reply is None:
            emit(TurnEnd(None))
            break
        added.append(reply)
        results = []
        for call in reply.tool_calls:
            results.append(await run_tool(call, by_name, emit, context, gate))
        added.extend(results)
        emit(TurnEnd(reply, tuple(results)))
        # The step boundary: every call of this step has finished and the next step has not
        # begun. What the person sent "now" meanwhile goes into that next step, and brings
        # one about even when the model had finished.
        steered = steering() if steering else []
        if not reply.tool_calls and not steered:
            break
    else:
        emit(Failed(f"The agent stopped after {max_steps} steps without finishing."))
    emit(AgentEnd(tuple(added)))
    return added


async def model_step(messages: list[Message], tools: list[Tool], stream: StreamFn, emit: Emit) -> Message | None:
    """One request to the model, streamed into events. None when the model failed."""
    parts = _Parts()
    started: set[str] = set()

    def grow(kind: str, piece: str) -> None:
        if kind not in started:
            started.add(kind)
            emit(MessageStart(kind))
        setattr(parts, kind, getattr(parts, kind) + piece)
        emit(MessageUpdate(kind, piece, getattr(parts, kind)))

    try:
        async for delta in stream(messages, tools):
            if delta.notice:
                emit(Notice(delta.notice))
            if delta.reasoning:
                grow("reasoning", delta.reasoning)
            if delta.text:
                grow("text", delta.text)
            if delta.call_index is not None:
                call = parts.calls.setdefault(delta.call_index, {"id": "", "name": "", "arguments": ""})
                call["id"] = call["id"] or delta.call_id
                call["name"] += delta.call_name
                call["arguments"] += delta.call_arguments
            if delta.usage:
                emit(Usage(delta.usage.get("prompt", 0), delta.usage.get("completion", 0), delta.usage.get("cached", 0)))
    except ModelError as e:
        if started:
            emit(MessageEnd(Message("assistant", parts.text), parts.reasoning, complete=False))
        emit(Failed(str(e)))
        return None
    calls = tuple(
        ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}")
        for i, c in sorted(parts.calls.items())
    )
    reply = Message("assistant", parts.text, tool_calls=calls)
    emit(MessageEnd(reply, parts.reasoning))
    return reply


async def run_tool(call: ToolCall, tools: dict[str, Tool], emit: Emit, context: Context | None,
                   gate: Gate | None = None) -> Message:
    """Run one call; every failure becomes a failed result the model reads."""
    if gate is not None:
        reason = await gate(call)
        if reason is not None:
            emit(ToolDeclined(call, reason))
            return Message("tool", reason, tool_call_id=call.id)
    emit(ToolStart(call))
    tool = tools.get(call.name)
    result: Result | None = None
    if tool is None:
        output, ok = f"Error: there is no tool named {call.name!r}.", False
    else:
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("the arguments must be a JSON object")
        except ValueError as e:
            output, ok = f"Error: the arguments are not valid JSON ({e}).", False
        else:
            problem = schema_problem(args, tool.parameters)
            if problem:
                output, ok = f"Error: the arguments do not fit the tool's parameters: {problem}", False
            else:
                ctx = context or Context(chat=0, agent=None)
                ctx.progress = lambda text: emit(ToolUpdate(call, text))
                sent = []

                def dispatched() -> None:
                    if not sent:
                        sent.append(True)
                        emit(ToolDispatched(call))

                ctx.dispatched = dispatched
                try:
                    if not tool.dispatches:
                        dispatched()
                    result = await tool.run(args, ctx)
                    output, ok = result.text, True
                except Exception as e:  # a tool's failure is data for the model
                    output, ok = f"Error: {e}" if str(e) else f"Error: {type(e).__name__}", False
    emit(ToolEnd(call, output, ok, result))
    return Message("tool", output, tool_call_id=call.id)


def schema_problem(args: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """Why `args` do not fit the JSON schema, in one line, or None."""
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        return f"{where + ': ' if where else ''}{e.message}"[:300]
    except jsonschema.SchemaError:
        return None  # a tool with a broken schema is the tool's problem, not the model's
    return None
