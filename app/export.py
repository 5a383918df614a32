"""A conversation as a file to keep: Markdown to read, JSON to process.

Pure functions over rows (a Conversation and its Items): no SQL, no HTTP.

Markdown has the current path only (app/branches.py: the edits and answer versions chosen), as the page shows it; reasoning is
kept, folded into a blockquote under the answer it led to, since an export is a record;
tool calls show their input and output in fenced blocks; errors are noted; retry notices
(transient "trying again") are left out. JSON has every row, every branch and version (with the `parent`, `chosen` and `answer`
columns that make the tree), with a format
name and version so a reader can tell what it holds.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any
from urllib.parse import quote

from .branches import on_path
from .tables import Conversation, Item, order, pretty_json, sources_of

FORMAT = "tabletalk.conversation"
FORMAT_VERSION = 1
FILENAME_MAX = 60  # characters of the title kept in a file name
UNTITLED = "New conversation"


# --- Markdown ---------------------------------------------------------------------------


def fence(text: str, info: str = "") -> str:
    """`text` in a fenced block that nothing inside it can close (CommonMark: a longer fence)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}" if text else f"{ticks}{info}\n{ticks}"


def quoted(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.splitlines())


def pretty(arguments: str) -> tuple[str, str]:
    """A call's input as indented JSON (and the fence's info), or as it came."""
    text = pretty_json(arguments)
    return (arguments, "") if text is None else (text, "json")


def one_line(text: str) -> str:
    return " ".join(text.split())


def call_markdown(call: Item) -> str:
    state = " (may have run: interrupted by a restart)" if call.interrupted and call.dispatched else {"failed": " (failed)", "declined": " (declined)", "approval": " (waiting for approval)",
             "running": " (running)"}.get(call.state, "")
    text, info = pretty(call.input or "{}")
    parts = [f"**Tool `{call.name}`**{state}", "Input:", fence(text, info)]
    if call.output:
        parts += ["Output:", fence(call.output)]
    sources = sources_of(call.sources)
    if sources:
        parts.append("Sources:\n" + "\n".join(
            f"- <{s['url']}>" + (f" {one_line(s['title'])}" if s.get("title") else "") for s in sources))
    return "\n\n".join(parts)


def to_markdown(convo: Conversation, items: list[Item], agent: str = "Assistant") -> str:
    """The conversation to read: title, then each turn (the person, then the answer)."""
    out = [f"# {one_line(convo.title) or UNTITLED}"]
    ordered = sorted(items, key=order)  # a message sent "now" where the model read it
    plan = [it for it in ordered if it.kind == "plan"]
    answering = False
    for it in on_path([it for it in ordered if it.kind != "plan"]):
        if it.kind == "user":
            out += ["## You, during the answer" if it.read_after else "## You", it.text]
            answering = False
            continue
        if it.kind in ("retry",) or (it.kind == "error" and it.state != "failed"):
            continue
        if not answering:
            out.append(f"## {agent}")
            answering = True
        if it.kind == "text":
            out.append(it.text)
        elif it.kind == "reasoning" and it.text.strip():
            out.append(quoted("**Reasoning**\n\n" + it.text))
        elif it.kind == "call":
            out.append(call_markdown(it))
        elif it.kind == "error":
            out.append(quoted(f"**Error:** {it.text}"))
        elif it.kind == "stop":
            out.append("*Stopped.*")
    for p in plan:
        out += ["## Plan", p.text]
    return "\n\n".join(part for part in out if part.strip()) + "\n"


# --- JSON -------------------------------------------------------------------------------


def to_json(convo: Conversation, items: list[Item], exported: float | None = None) -> dict[str, Any]:
    """The conversation and every one of its items, as rows, in creation order."""
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "conversation": {"id": convo.id, "agent": convo.agent, "title": convo.title,
                         "created": convo.created, "updated": convo.updated},
        "items": [it.to_dict() for it in sorted(items, key=lambda it: it.id or 0)],
    }
    if exported is not None:
        data["exported"] = exported
    return data


# --- file names -------------------------------------------------------------------------


def slug(title: str, ascii_only: bool) -> str:
    if ascii_only:
        title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
        words = re.findall(r"[A-Za-z0-9]+", title)
    else:
        words = re.findall(r"[^\W_]+", unicodedata.normalize("NFC", title))
    return "-".join(words)[:FILENAME_MAX].strip("-")


def filename(convo: Conversation, ext: str, ascii_only: bool = True) -> str:
    """A file name made of the title's words only: no quotes, slashes, dots or line breaks."""
    return f"{slug(convo.title, ascii_only) or f'conversation-{convo.id}'}.{ext}"


def content_disposition(convo: Conversation, ext: str) -> str:
    """`attachment` with an ASCII name every browser takes, and the title's own letters
    (RFC 6266 `filename*`) for those that read it."""
    plain, full = filename(convo, ext), filename(convo, ext, ascii_only=False)
    value = f'attachment; filename="{plain}"'
    if full != plain:
        value += f"; filename*=UTF-8''{quote(full, safe='')}"
    return value
