"""Items to model messages: the one place a conversation's log becomes a request.

The person's messages, answers as written (a stopped answer as far as it got), tool calls
with their results. Reasoning and errors are left out: they were for the person. Of the
versions of an answer (after "again") only the newest is sent.
"""
from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any

from . import files as filestore
from . import skills as skillbook
from .agent import Message, ToolCall
from .tables import Assistant, Item, Skill
from .tools import memory


def call_id(item: Item) -> str:
    # Our own id, stable across restarts, so a call and its result always pair up.
    return f"call_{item.id}"


def system_prompt(agent: Assistant | None, skills: Sequence[Skill] = (), memories: Sequence[str] = ()) -> str:
    """The agent's instructions, then the skills it can load, then what it remembers."""
    parts = [(agent.instructions if agent else "").strip(),
             skillbook.prompt_section(skills), memory.prompt_section(memories)]
    return "\n\n".join(p for p in parts if p)


def newest_versions(items: list[Item]) -> list[Item]:
    """Drop answers that a later `retry` of the same turn replaced."""
    last_retry: dict[int, int] = {}
    for it in items:
        if it.kind == "retry":
            last_retry[it.turn] = it.id or 0
    return [
        it for it in items
        if it.kind == "user" or it.turn not in last_retry or (it.id or 0) > last_retry[it.turn]
    ]


# A file by id: (its row: name, type, size...; its bytes), or None when it is gone.
Attachments = Callable[[int], "tuple[dict[str, Any], bytes] | None"]


def takes_images(model: str = "") -> bool:
    """Whether a model is sent images. Nothing tells us yet, so every model is: the one
    place to restrict it once the model list says which take images."""
    return True


def user_message(it: Item, attachments: Attachments | None, images: bool) -> Message:
    """The person's message: its text, each text file appended under its name, each image
    as an image part (a data: URL) when the model takes images; other files are named only."""
    if not it.file_ids or attachments is None:
        return Message("user", it.text)
    text, parts = it.text, []
    for fid in it.file_ids:
        found = attachments(fid)
        if found is None:
            text += f"\n\n[Attached file {fid} is no longer available.]"
            continue
        row, data = found
        name, kind = row["name"], row["type"]
        if filestore.is_text(kind):
            body = data.decode("utf-8", errors="replace")
            if len(body) > filestore.TEXT_TO_MODEL_MAX:
                body = body[: filestore.TEXT_TO_MODEL_MAX] + "\n[… cut: the file is longer]"
            text += f"\n\n--- Attached file: {name} ---\n{body}\n--- End of {name} ---"
        elif filestore.is_image(kind) and images:
            url = f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
            text += f"\n\n[Attached image: {name}]"
        else:
            text += f"\n\n[Attached file: {name} ({kind}, {row['size']:,} bytes), not readable here.]"
    if not parts:
        return Message("user", text)
    return Message("user", [{"type": "text", "text": text}, *parts])


def to_messages(agent: Assistant | None, items: list[Item], *, skills: Sequence[Skill] = (),
                memories: Sequence[str] = (), attachments: Attachments | None = None,
                model: str = "") -> list[Message]:
    """The request's messages for a conversation whose log is `items` (in key order), the
    system prompt listing `skills` and the agent's `memories` (texts, oldest first).
    `attachments` reads a user item's files (store.file_bytes); `model` decides images."""
    images = takes_images(model)
    messages: list[Message] = []
    prompt = system_prompt(agent, skills, memories)
    if prompt:
        messages.append(Message("system", prompt))
    text = ""
    calls: list[Item] = []

    def flush() -> None:
        nonlocal text, calls
        if text or calls:
            messages.append(Message(
                "assistant", text,
                tool_calls=tuple(ToolCall(call_id(c), c.name, c.input or "{}") for c in calls),
            ))
            for c in calls:
                messages.append(Message("tool", c.output or _unfinished(c), tool_call_id=call_id(c)))
        text, calls = "", []

    for it in newest_versions(items):
        if it.kind == "user":
            flush()
            messages.append(user_message(it, attachments, images))
        elif it.kind == "text":
            if calls:  # a text after calls is the model's next step
                flush()
            text += it.text
        elif it.kind == "call":
            calls.append(it)
    flush()
    return messages


def _unfinished(call: Item) -> str:
    if call.state == "declined":
        return "The person declined this call."
    if call.state in ("approval", "approved"):
        return "This call is waiting for the person's approval."
    return "This call did not finish."
