"""The loop: model step -> tool calls -> results -> model step, until the model stops."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..tools import Tool, ToolContext
from .calls import SAME_FAILURE_LIMIT, Gate, _Repeats, run_tool
from .events import (AgentEnd, AgentStart, Emit, Failed, MessageEnd, MessageStart, MessageUpdate, Notice,
                     StepEnd, StepStart, ToolHandedOver, Usage)
from .messages import Again, Message, ModelError, StreamFn, ToolCall
from .pieces import Pieces

MAX_STEPS = 40

# The messages the next model step is sent, when the caller keeps the conversation (a
# runner builds each request from its rows, cut to the model's window: pi-agent-core's
# transformContext); without it the loop sends its own list, the history and what the run
# added. One or the other, never both. Raises ModelError when nothing fits; the run then
# fails in plain words.
Prepare = Callable[[], list[Message]]
# Messages the person sent while the run was going, to give the model at the next step
# boundary (pi-agent-core's steering messages); [] when there are none.
Steering = Callable[[], list[Message]]


@dataclass
class _Parts:
    text: Pieces = field(default_factory=Pieces)
    reasoning: Pieces = field(default_factory=Pieces)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)


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

    A call of a tool the caller runs itself (`Tool.client`) is handed over (ToolHandedOver),
    not run, and the run ends after that step: its result comes as the next run's row.

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
        handed = False
        for call in reply.tool_calls:
            if stopped():
                break
            if call.name in by_name and by_name[call.name].client:
                emit(ToolHandedOver(call))  # the caller runs it: the run ends after this step's other calls
                handed = True
                continue
            results.append(await run_tool(call, by_name, repeats.noted(emit), context, gate))
        added.extend(results)
        emit(StepEnd(reply, tuple(results)))
        if stopped() or handed:
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
