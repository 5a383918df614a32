"""`load_skill`: a skill's instructions, read when its description fits the task."""
from __future__ import annotations

from typing import Any

from .. import skills as skillbook
from . import Result, Tool, ToolContext

DESCRIPTION = (
    "Read a skill: instructions for a particular kind of task. The system prompt lists the skills "
    "with a description of when each one fits; call this with a skill's name before doing such a "
    "task, then follow what it says."
)


async def _run(args: dict[str, Any], ctx: ToolContext) -> Result:
    if ctx.store is None:
        raise RuntimeError("this tool needs the app's storage to read skills from")
    name = str(args.get("name", ""))
    everything = ctx.store.skills()
    found = skillbook.find(everything, name)
    if found is None:
        raise LookupError(skillbook.unknown(everything, name))
    return Result(found.body or f"The skill {found.name!r} has no instructions beyond its description.")


load_skill = Tool(
    name="load_skill",
    description=DESCRIPTION,
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name, as the list shows it."}},
        "required": ["name"],
        "additionalProperties": False,
    },
    run=_run,
    idempotent=True,  # it only reads
    summary="Reads one of the shared skills' instructions when the agent needs it.",
)
