"""The agent loop: model step -> tool calls -> results -> model step, until the model stops.

Pure: it knows nothing of SQLite or HTTP. It takes the history (or a `prepare` that builds
each request), the tools, a stream function (the model boundary) and an `emit` sink, and
reports what happens as events in three nested lifecycles: agent start/end, step
start/end (one model call and the tool calls it made), and message / tool start, update,
end. A model's or a tool's failure is data (a `Failed` event, a failed tool result), never
an exception out of the loop; a run is stopped by cancelling it, or by its tools' abort.

The package: messages.py (messages, deltas, the model's failures), pieces.py (the growing
text), events.py (what the loop reports), loop.py (run, model_step), calls.py (run_tool,
the gate, repeated failures). Everything is imported from here: `from app.agent import X`.
"""
from __future__ import annotations

from .calls import SAME_FAILURE_LIMIT, Gate, run_tool
from .events import (
    AgentEnd, AgentStart, Emit, Event, Failed, MessageEnd, MessageStart, MessageUpdate, Notice, StepEnd,
    StepStart, ToolDeclined, ToolDispatched, ToolEnd, ToolHandedOver, ToolStart, ToolUpdate, Usage,
)
from .loop import AGAIN, MAX_STEPS, Prepare, Steering, model_step, run
from .messages import Again, Delta, Message, ModelError, StreamFn, ToolCall
from .pieces import Pieces, SoFar

__all__ = [
    "AGAIN", "MAX_STEPS", "SAME_FAILURE_LIMIT", "AgentEnd", "AgentStart", "Again", "Delta", "Emit", "Event",
    "Failed", "Gate", "Message", "MessageEnd", "MessageStart", "MessageUpdate", "ModelError", "Notice",
    "Pieces", "Prepare", "SoFar", "Steering", "StepEnd", "StepStart", "StreamFn", "ToolCall", "ToolDeclined",
    "ToolDispatched", "ToolEnd", "ToolHandedOver", "ToolStart", "ToolUpdate", "Usage", "model_step", "run", "run_tool",
]
