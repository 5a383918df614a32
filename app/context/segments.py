"""Items to model messages: the one place a conversation's log becomes a request.

The person's messages, answers as written (a stopped answer as far as it got), tool calls
with their results. Reasoning and errors are left out: they were for the person. Only one
path of a conversation with edits and versions is sent (app/branches.py: the runner sends
the lineage of the message it answers). A message sent "now" during
a run stands where the model read it (`tables.order`). For a long conversation window.py
chooses where the model's view starts and which long outputs go shortened; the messages
come in `segments` (a turn, or a later step or message within one) so it can.
"""
from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import files as filestore, skills as skillbook
from ..agent import Message, ToolCall
from ..tables import CLIENT_WAITING, NO_IMAGES, Assistant, Attached, Item, Skill, order
from ..tools import memory
from .window import shortened


def call_id(item: Item) -> str:
    # Our own id, stable across restarts, so a call and its result always pair up.
    return f"call_{item.id}"


PLAN_HEADING = "## The plan so far"
DECLINED = "The person declined this call."  # what the model is told of a call the person declined


def system_prompt(agent: Assistant | None, skills: Sequence[Skill] = (), memories: Sequence[str] = (),
                  client: str = "", plugins: Sequence[tuple[str, str]] = ()) -> str:
    """The agent's instructions, then an API client's system messages (`client`, docs/api.md),
    then what its plugins' servers say about using them (`plugins`: name, instructions), then
    the skills it can load, then what it remembers."""
    parts = [(agent.instructions if agent else "").strip(), client.strip(), plugin_section(plugins),
             skillbook.prompt_section(skills), memory.prompt_section(memories)]
    return "\n\n".join(p for p in parts if p)


def plugin_section(plugins: Sequence[tuple[str, str]]) -> str:
    """Each plugin's server's own instructions (MCP `initialize`), under the plugin's name: the
    names its tools begin with. Its words, not the person's."""
    said = [f"From the server of the plugin {name} (its tools begin with {name}_):\n{text.strip()}"
            for name, text in plugins if text.strip()]
    return "\n\n".join(said)


def with_plan(prompt: str, plan: str) -> str:
    """The system prompt with the plan at its end: sent when the call that set the plan is no
    longer in the model's view."""
    return "\n\n".join(p for p in (prompt, f"{PLAN_HEADING}\n\n{plan.strip()}" if plan.strip() else "") if p)


# A file by id: (its row: name, type, size...; its bytes), or None when it is gone.
Attachments = Callable[[int], "tuple[dict[str, Any], bytes] | None"]
# The document a message's file became (a PDF or Word file, read into passages), or None.
Documents = Callable[[int], Attached | None]
Picked = Callable[[Item], Sequence[tuple]]  # a message's picks, named (Store.picked_names)


def document_text(name: str, found: Attached) -> str:
    """A document attached to a message, as the model reads it: whole, its pages marked, when
    it fits; else named, with the way to search it (the conversation's search_knowledge)."""
    d = found.document
    pages = f"{d.pages} page{'s' if d.pages != 1 else ''}"
    if d.state == "failed":
        return f"\n\n[Attached file: {name} could not be read: {d.reason}]"
    if found.text is not None:
        cut = "" if d.state == "ready" else f" (read up to page {d.pages_read} of {d.pages}: the rest was not read)"
        return f"\n\n--- Attached file: {name} ({pages}){cut} ---\n{found.text}\n--- End of {name} ---"
    if not d.passages:
        return f"\n\n[Attached file: {name} ({pages}): no text was found in it.]"
    return (f"\n\n[Attached file: {name} ({pages}): too long to send whole. Search it with search_knowledge, "
            "which returns its passages with their page numbers.]")


def takes_images(tags: Sequence[str] = ()) -> bool:
    """Whether a model is sent images, by the tags its model list gave it (models.Choice):
    unless the list says it reads none (Ollama's capabilities, OpenRouter's input
    modalities), it is; a server that says nothing may well read them."""
    return NO_IMAGES not in tags


SEARCH_WEB = ("\n\n[For this message the person switched web search on: search the web with web_search "
              "before you answer, read the pages that answer it with fetch_page, and name the sites you used.]")


def picked_text(names: Sequence[tuple]) -> str:
    """What the person picked with "/" for a message ("collection"/"document", id, name, ...), as
    the model reads it under the message."""
    if not names:
        return ""
    said = [f"the {kind} “{name}”" for kind, _, name, *_ in names]
    listed = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return f"\n\n[For this message the person picked {listed}: search_knowledge searches them.]"


def user_message(it: Item, attachments: Attachments | None, images: bool,
                 documents: Documents | None = None, picked: Picked | None = None) -> Message:
    """The person's message: its text, each text file appended under its name, each image
    as an image part (a data: URL) when the model takes images, each document read (a PDF,
    a Word file) whole or named for search; other files are named only; then what was
    picked for it with "/" (`picked`: the names of its picks)."""
    note = picked_text(picked(it)) if picked is not None and it.knowledge else ""
    if it.search_web:
        note += SEARCH_WEB
    if not it.file_ids or attachments is None:
        return Message("user", it.text + note)
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
        elif filestore.is_image(kind):
            text += f"\n\n[Attached image: {name}; this model does not read images, so it was not sent.]"
        elif documents is not None and (found := documents(fid)) is not None:
            text += document_text(name, found)
        else:
            text += f"\n\n[Attached file: {name} ({kind}, {row['size']:,} bytes), not readable here.]"
    text += note
    if not parts:
        return Message("user", text)
    return Message("user", [{"type": "text", "text": text}, *parts])


def tool_image(call: Item, attachments: Attachments | None, images: bool) -> Message | None:
    """The image a call returned (its `file`), for a model that takes images, unless it was
    for the person only (`unsent`)."""
    if not call.file or call.unsent or not images or attachments is None:
        return None
    found = attachments(call.file)
    if found is None or not filestore.is_image(found[0]["type"]):
        return None
    row, data = found
    url = f"data:{row['type']};base64,{base64.b64encode(data).decode('ascii')}"
    return Message("user", [{"type": "text", "text": f"[The image {row['name']} that the call {call_id(call)} "
                                                     f"({call.name}) returned.]"},
                            {"type": "image_url", "image_url": {"url": url}}])


@dataclass(frozen=True)
class Segment:
    """Messages of turn `turn` (its user item's id): the turn's start (`starts`: the model's
    view may begin here), or a later model step or message within it. A call and its result
    are never apart. `short` is the same with long call outputs shortened (window.shortened):
    the very same tuple when none is long."""

    turn: int
    starts: bool
    messages: tuple[Message, ...]
    short: tuple[Message, ...]


def segments(items: list[Item], *, attachments: Attachments | None = None, images: bool = True,
             documents: Documents | None = None, picked: Picked | None = None) -> list[Segment]:
    """The history of `items` (any order; one path: branches.on_path) as segments, oldest
    first; `images`: whether the model is sent attached images (takes_images), else they are named."""
    out: list[Segment] = []
    turn, starts_turn, messages, short = 0, False, [], []
    text = ""
    calls: list[Item] = []

    def flush() -> None:
        nonlocal text, calls
        if text or calls:
            said = Message("assistant", text,
                           tool_calls=tuple(ToolCall(call_id(c), c.name, c.input or "{}") for c in calls))
            messages.append(said)
            short.append(said)
            for c in calls:
                output = c.output or (EMPTY if c.state == "done" else _unfinished(c))
                messages.append(Message("tool", output, tool_call_id=call_id(c)))
                brief = shortened(output)
                short.append(messages[-1] if brief is output else Message("tool", brief, tool_call_id=call_id(c)))
            # An image a call returned reaches the model as an image part, in a user message
            # after the results (tool messages carry text only in the Chat Completions API).
            for c in calls:
                if (shown := tool_image(c, attachments, images)) is not None:
                    messages.append(shown)
                    short.append(shown)
        text, calls = "", []

    def close() -> None:
        if messages:
            whole = tuple(messages)
            same = all(a is b for a, b in zip(messages, short))
            out.append(Segment(turn, starts_turn, whole, whole if same else tuple(short)))

    def begin(it: Item, starts: bool) -> None:
        nonlocal turn, starts_turn, messages, short
        close()
        turn, starts_turn, messages, short = it.turn or it.id or 0, starts, [], []

    for it in sorted(items, key=order):
        if it.kind == "user":
            flush()
            begin(it, it.starts_turn)
            said = user_message(it, attachments, images, documents, picked)
            messages.append(said)
            short.append(said)
        elif it.kind == "text":
            if calls:  # a text after calls is the model's next step
                flush()
                begin(it, False)
            text += it.text
        elif it.kind == "call":
            calls.append(it)
    flush()
    close()
    return out


EMPTY = "The tool finished and returned nothing."  # a done call with no output (an MCP result with no content)


def _unfinished(call: Item) -> str:
    if call.state == "declined":
        return DECLINED
    if call.state in ("approval", "approved"):
        return "This call is waiting for the person's approval."
    if call.state == CLIENT_WAITING:
        return "This call went to the API client that offered the function, which has not sent its result."
    return "This call did not finish."
