"""`remember`: what an agent keeps for its later conversations, and how it reads it back.

Memories belong to the agent, not the conversation: every run of that agent finds them in
its system prompt. The person sees and deletes them on the agent's Memory tab.

Text from outside (a plugin's result, prompt, resource or sampling request, a fetched page,
an attached file) can tell the model to remember something, and a memory lands in every
later system prompt of the agent. So a `remember` call made after such text reached the
conversation (`Store.outside_text`) waits for the person's approval (`Turn.end_step`, while
the agent's `vet_memories` is on, the default), and the memory it writes is marked `outside`
either way (the Memory tab says so).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import Result, Tool, ToolContext

TEXT_MAX = 2_000
# The built-in tools that bring nothing from outside: they read and write this app's rows.
INSIDE = ("update_plan", "load_skill", "remember")
PROMPT_COUNT = 100     # the newest memories read back into a system prompt ...
PROMPT_CHARS = 8_000   # ... and at most this many characters of them

DESCRIPTION = (
    "Remember something for your later conversations: a fact about the person, a preference, a "
    "decision or anything they ask you to remember. Write one self-contained statement; it is "
    "shown to you at the start of every later conversation, under \"What you remember\". "
    "Do not store what you already remember."
)


def same(a: str, b: str) -> bool:
    """Texts that say the same thing but for case and spacing."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


async def _run(args: dict[str, Any], ctx: ToolContext) -> Result:
    text = str(args.get("text", "")).strip()
    if not text:
        raise ValueError("there is nothing to remember: the text is empty")
    if len(text) > TEXT_MAX:
        raise ValueError(f"the text is too long ({len(text):,} characters, at most {TEXT_MAX:,}); "
                         "remember something shorter")
    if ctx.agent is None:
        raise RuntimeError("there is no agent to remember this for: this conversation has no agent")
    if ctx.store is None:
        raise RuntimeError("this tool needs the app's storage to keep memories in")
    with ctx.store.write():  # the check and the insert in one transaction: no twin from a parallel call
        if any(same(m["text"], text) for m in ctx.store.memories(ctx.agent)):
            return Result("Already remembered; nothing new was stored.")
        outside = bool(ctx.chat) and ctx.store.outside_text(ctx.chat, INSIDE)
        ctx.store.add_memory(ctx.agent, text, outside=outside, chat=ctx.chat or None)
    return Result("Remembered. It will be in your system prompt in later conversations.")


remember = Tool(
    name="remember",
    description=DESCRIPTION,
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "What to remember, in one or a few sentences."}},
        "required": ["text"],
        "additionalProperties": False,
    },
    run=_run,
    idempotent=True,  # a text already remembered is not stored again
    summary="Keeps a note for the agent's later conversations (its Memory tab lists them).",
)


def recalled(texts: Sequence[str]) -> list[str]:
    """The memories a prompt holds: the newest that fit the caps, oldest first (newest last)."""
    kept: list[str] = []
    size = 0
    for text in reversed(texts):
        if len(kept) == PROMPT_COUNT or size + len(text) > PROMPT_CHARS:
            break
        kept.append(text)
        size += len(text)
    return kept[::-1]


def prompt_section(texts: Sequence[str]) -> str:
    """The "What you remember" part of an agent's system prompt."""
    kept = recalled(texts)
    if not kept:
        return ""
    lines = ["- " + t.replace("\n", "\n  ") for t in kept]
    older = len(texts) - len(kept)
    note = f" ({older} older ones are not shown)" if older else ""
    return ("## What you remember\n\n"
            f"From your earlier conversations, oldest first{note}:\n\n" + "\n".join(lines))
