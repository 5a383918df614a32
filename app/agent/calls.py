"""One tool call: asked of the gate, its arguments checked, run; every failure becomes a
failed result the model reads. And the count of a run's repeated failures."""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from ..tools import Result, Tool, ToolContext
from ..tools.arguments import ARGUMENTS_MAX, Unusable, check
from .events import Emit, Event, ToolDeclined, ToolDispatched, ToolEnd, ToolStart, ToolUpdate
from .messages import Message, ToolCall

# The same call failing with the same words this many times in one run ends the run: the
# model is not getting anywhere, and every try may cost (a plugin's, a model's).
SAME_FAILURE_LIMIT = 3

# Asked before a call runs: None to run it, or the reason it must not (given to the model).
# May wait (for the person's approval); a stop cancels the wait.
Gate = Callable[[ToolCall], Awaitable[str | None]]


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
        output, ok = f"Error: there is no tool named {call.name[:80]!r}.{_meant(call.name, tools)}", False
    else:
        output, ok, result = await _checked_run(call, tool, emit, context)
    emit(ToolEnd(call, output, ok, result))
    return Message("tool", output, tool_call_id=call.id)


def _meant(name: str, tools: dict[str, Tool]) -> str:
    """A plugin tool's name the model meant when it called the bare MCP name (a description
    names `read_text_file`, the tool is `fs_read_text_file`): said when exactly one fits."""
    fits = [t.name for t in tools.values() if t.plugin and name and t.name.endswith("_" + name)]
    return f" Did you mean {fits[0]!r}?" if len(fits) == 1 else ""


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
