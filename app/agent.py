"""The agent loop: model step -> tool calls -> results -> model step, until the model stops.

Pure: it knows nothing of SQLite or HTTP. It takes the history (or a `prepare` that builds
each request), the tools, a stream function (the model boundary) and an `emit` sink, and
reports what happens as events in three nested lifecycles: agent start/end, step
start/end (one model call and the tool calls it made), and message / tool start, update,
end. A model's or a tool's failure is data (a `Failed` event, a failed tool result), never
an exception out of the loop; a run is stopped by cancelling it, or by its tools' abort.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .tools import Result, Tool, ToolContext
from .tools.arguments import ARGUMENTS_MAX, Unusable, check

# The same call failing with the same words this many times in one run ends the run: the
# model is not getting anywhere, and every try may cost (a plugin's, a model's).
SAME_FAILURE_LIMIT = 3

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


class Again(ModelError):
    """A failure the request can be made again after, built anew (`prepare` is asked again):
    the model boundary learned what the server cannot take. Each `cause` once per step; the
    message is a notice for the person, not a failure."""

    cause: str = ""
    failure: str = ""  # what the person reads when it cannot be made again ('' = the message)


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
class StepStart:
    pass


@dataclass(frozen=True)
class StepEnd:
    message: Message | None
    results: tuple[Message, ...] = ()


@dataclass(frozen=True)
class MessageStart:
    kind: str  # text | reasoning


class Pieces:
    """A text that grows by pieces. Adding one costs the piece, not the text so far: a
    string's `+=` copies the whole answer at every chunk, quadratic in its length (a
    20,000-token answer, ~80 KB in ~20,000 chunks, copied ~800 MB). The text is joined
    only when it is read, at most once a write interval, and kept joined."""

    __slots__ = ("_pieces", "_size")

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._size = 0

    def add(self, piece: str) -> SoFar:
        self._pieces.append(piece)
        self._size += len(piece)
        return SoFar(self, self._size)

    def text(self, size: int | None = None) -> str:
        """The first `size` characters (all of them by default)."""
        if len(self._pieces) > 1:
            self._pieces[:] = ["".join(self._pieces)]
        whole = self._pieces[0] if self._pieces else ""
        return whole if size is None or size >= len(whole) else whole[:size]


@dataclass(frozen=True)
class SoFar:
    """A growing text as it was at one update: joined when read (`str()`, or bound as an
    SQL parameter: sqlite3 asks `__conform__`), so the runner's write buffer can keep the
    latest one and join it once per write."""

    pieces: Pieces
    size: int

    def __str__(self) -> str:
        return self.pieces.text(self.size)

    def __conform__(self, protocol: object) -> str:
        return str(self)


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
    | ToolStart | ToolDispatched | ToolUpdate | ToolEnd | ToolDeclined | Usage | Failed | Notice
)
Emit = Callable[[Event], None]
# Asked before a call runs: None to run it, or the reason it must not (given to the model).
# May wait (for the person's approval); a stop cancels the wait.
Gate = Callable[[ToolCall], Awaitable[str | None]]
# The messages the next model step is sent, when the caller keeps the conversation (a
# runner builds each request from its rows, cut to the model's window: pi-agent-core's
# transformContext); without it the loop sends its own list, the history and what the run
# added. One or the other, never both. Raises ModelError when nothing fits; the run then
# fails in plain words.
Prepare = Callable[[], list[Message]]
# Messages the person sent while the run was going, to give the model at the next step
# boundary (pi-agent-core's steering messages); [] when there are none.
Steering = Callable[[], list[Message]]


# --- the loop ---------------------------------------------------------------------------


@dataclass
class _Parts:
    text: Pieces = field(default_factory=Pieces)
    reasoning: Pieces = field(default_factory=Pieces)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)


class _Repeats:
    """Failed calls of one run, by (tool, arguments, output): a model that makes the same
    failing call again and again is stopped rather than left to loop until MAX_STEPS."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}
        self.stuck = ""

    def noted(self, emit: Emit) -> Emit:
        def counting(event: Event) -> None:
            if isinstance(event, ToolEnd) and not event.ok:
                key = (event.call.name, event.call.arguments, event.output)
                self.counts[key] = self.counts.get(key, 0) + 1
                if self.counts[key] >= SAME_FAILURE_LIMIT:
                    self.stuck = event.call.name
            emit(event)
        return counting


async def run(
    history: list[Message],
    tools: list[Tool],
    stream: StreamFn,
    emit: Emit,
    context: ToolContext | None = None,
    max_steps: int = MAX_STEPS,
    gate: Gate | None = None,
    prepare: Prepare | None = None,
    steering: Steering | None = None,
) -> None:
    """Run the agent from `history` (or `prepare`'s requests) until the model answers without
    calling a tool and nobody sent it anything meanwhile. What the run added (steering
    messages, assistant replies, tool results) comes with `AgentEnd`.

    A run is stopped by cancelling it; or, to let a running tool end itself first (a plugin's
    server is told, a fetch closes its connection), by setting `context.abort`, which the
    tools watch: the loop then ends after that tool, making no other call or step."""
    emit(AgentStart())
    added: list[Message] = []
    by_name = {t.name: t for t in tools}
    repeats = _Repeats()
    stopped = context.abort.is_set if context is not None else lambda: False
    steered = steering() if steering else []  # sent while the run waited to begin
    for _ in range(max_steps):
        if stopped():
            break
        added.extend(steered)
        emit(StepStart())
        tried: set[str] = set()  # what this step was made again for (Again)
        while True:
            try:
                request = prepare() if prepare else [*history, *added]
            except ModelError as e:
                emit(Failed(str(e)))
                reply = None
                break
            reply = await model_step(request, tools, stream, emit, tried)
            if reply is not AGAIN:
                break
        if reply is None:
            emit(StepEnd(None))
            break
        added.append(reply)
        results = []
        for call in reply.tool_calls:
            if stopped():
                break
            results.append(await run_tool(call, by_name, repeats.noted(emit), context, gate))
        added.extend(results)
        emit(StepEnd(reply, tuple(results)))
        if stopped():
            break
        if repeats.stuck:
            emit(Failed(f"The agent stopped: its call to {repeats.stuck[:80]} failed the same way "
                        f"{SAME_FAILURE_LIMIT} times."))
            break
        # The step boundary: every call of this step has finished and the next step has not
        # begun. What the person sent "now" meanwhile goes into that next step, and brings
        # one about even when the model had finished.
        steered = steering() if steering else []
        if not reply.tool_calls and not steered:
            break
    else:
        emit(Failed(f"The agent stopped after {max_steps} steps without finishing."))
    emit(AgentEnd(tuple(added)))


AGAIN = Message("assistant")  # model_step's answer when the request is to be made again


async def model_step(messages: list[Message], tools: list[Tool], stream: StreamFn, emit: Emit,
                     tried: set[str] | None = None) -> Message | None:
    """One request to the model, streamed into events. None when the model failed; AGAIN
    when it failed on something learned before anything arrived (`Again`, each cause once)."""
    parts = _Parts()
    started: set[str] = set()

    def grow(kind: str, piece: str) -> None:
        if kind not in started:
            started.add(kind)
            emit(MessageStart(kind))
        emit(MessageUpdate(kind, piece, getattr(parts, kind).add(piece)))

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
                emit(Usage(delta.usage.get("prompt", 0), delta.usage.get("completion", 0), delta.usage.get("cached", 0),
                           bool(delta.usage.get("counted"))))
    except ModelError as e:
        if (isinstance(e, Again) and tried is not None and e.cause not in tried
                and not started and not parts.calls):
            tried.add(e.cause)
            emit(Notice(str(e)))
            return AGAIN
        if started:
            emit(MessageEnd(Message("assistant", parts.text.text()), parts.reasoning.text(), complete=False))
        emit(Failed((e.failure if isinstance(e, Again) else "") or str(e)))
        return None
    calls = tuple(
        ToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments=c["arguments"] or "{}")
        for i, c in sorted(parts.calls.items())
    )
    reply = Message("assistant", parts.text.text(), tool_calls=calls)
    emit(MessageEnd(reply, parts.reasoning.text()))
    return reply


async def run_tool(call: ToolCall, tools: dict[str, Tool], emit: Emit, context: ToolContext | None,
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
        output, ok = f"Error: there is no tool named {call.name[:80]!r}.", False
    else:
        output, ok, result = await _checked_run(call, tool, emit, context)
    emit(ToolEnd(call, output, ok, result))
    return Message("tool", output, tool_call_id=call.id)


async def _checked_run(call: ToolCall, tool: Tool, emit: Emit, context: ToolContext | None) -> tuple[str, bool, Result | None]:
    """Parse and check the arguments, then run the tool; (output, ok, result). Nothing the
    model or the tool's schema sends raises out of here."""
    if len(call.arguments or "") > ARGUMENTS_MAX:
        return f"Error: the arguments are too long ({len(call.arguments):,} characters; at most {ARGUMENTS_MAX:,}).", False, None
    try:
        args = json.loads(call.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("the arguments must be a JSON object")
    except (ValueError, RecursionError) as e:
        why = e if isinstance(e, ValueError) else "nested too deeply"
        return f"Error: the arguments are not valid JSON ({why}).", False, None
    try:
        problem = await check(args, tool.parameters)
    except Unusable as e:
        return f"Error: the tool's parameters cannot be used, so the call was not made: {e}.", False, None
    if problem:
        return f"Error: the arguments do not fit the tool's parameters: {problem}", False, None
    ctx = context or ToolContext(chat=0, agent=None)
    ctx.progress = lambda text: emit(ToolUpdate(call, text))
    sent: list[bool] = []

    def dispatched() -> None:  # the call leaves for its tool: from here on it may have run
        if not sent:
            sent.append(True)
            emit(ToolDispatched(call))

    ctx.dispatched = dispatched
    try:
        if not tool.dispatches:
            dispatched()
        result = await tool.run(args, ctx)
    except Exception as e:  # a tool's failure is data for the model
        return (f"Error: {e}" if str(e) else f"Error: {type(e).__name__}"), False, None
    return result.text, True, result
