"""`update_plan`: the conversation's one plan, a Markdown checklist the model keeps current."""
from __future__ import annotations

from typing import Any

from ..markdown import task_counts
from . import Result, Tool, ToolContext

PLAN_MAX = 20_000

DESCRIPTION = (
    "Keep a plan for the task as a Markdown checklist, one step per line: '- [ ] step' for a step "
    "to do and '- [x] step' for a step done. Call it at the start of a task that takes several "
    "steps and again whenever a step is done or the plan changes; send the whole plan each time. "
    "The person sees it pinned above their message box."
)


async def _run(args: dict[str, Any], ctx: ToolContext) -> Result:
    plan = str(args.get("plan", "")).strip()
    if not plan:
        raise ValueError("the plan is empty; send the whole checklist")
    if len(plan) > PLAN_MAX:
        raise ValueError(f"the plan is too long ({len(plan):,} characters, at most {PLAN_MAX:,})")
    if ctx.store is None:
        raise RuntimeError("this tool needs a conversation to keep the plan in")
    ctx.store.set_plan(ctx.chat, plan)
    done, total = task_counts(plan)  # the steps the plan card shows as check boxes
    return Result(f"Plan saved: {done} done, {total - done} to do.")


update_plan = Tool(
    name="update_plan",
    description=DESCRIPTION,
    parameters={
        "type": "object",
        "properties": {"plan": {"type": "string", "description": "The whole plan as a Markdown checklist."}},
        "required": ["plan"],
        "additionalProperties": False,
    },
    run=_run,
    idempotent=True,  # it sets the plan to a value: doing it twice leaves the same plan
    summary="Keeps a checklist of the agent's plan, pinned above your message box.",
)
