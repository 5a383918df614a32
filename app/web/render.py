"""Pages: the template environment, whole-page responses, and the state a page shows.

Items and the feed's fragments are rendered in live.py, with the same templates, so a
live page and a fresh render of the same rows are the same DOM.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from litestar import Request, Response

from ..store import Store
from ..branches import Step
from ..tables import Item, chips, order
from . import csrf

ROOT = Path(__file__).resolve().parent.parent.parent
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"

env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def item_key(it: Item) -> str:
    """The order of an item on the page (`tables.order`): its turn, then its id, fixed width so
    any compare agrees. A steering message the model read sorts right after the item that was
    last when it read it: that item's key with its own id appended."""
    if it.read_after:
        return f"{it.turn:010d}-{it.read_after:010d}-{it.id:010d}"
    return f"{it.turn or it.id:010d}-{it.id:010d}"


def cut_key(start: int) -> str:
    """The place of the marker where the model's view starts: just before turn `start`."""
    return f"{start:010d}-{0:010d}"


def answer_key(turn: int) -> str:
    """The place of a turn's answer actions: after every item of the turn."""
    return f"{turn:010d}-{10**10 - 1}"


def isotime(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def shorttime(t: float) -> str:
    """When, as a person reads it; in UTC (the server does not know the reader's zone)."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%-d %b %Y, %H:%M UTC")


def item_dom_id(it: Item) -> str:
    return f"i{it.id}"


def pretty_json(text: str) -> str:
    """A call's input as people read JSON; what is not JSON shows as it came."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return text


def human_size(n: float) -> str:
    """A file's size as people read it: 980 B, 1.5 KB, 12 KB, 3.4 MB."""
    if n < 1000:
        return f"{int(n)} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1000
        if n < 999.5 or unit == "GB":
            return f"{n:.1f} {unit}" if n < 9.95 else f"{n:.0f} {unit}"
    return ""


def seconds(t: float) -> str:
    """How long the model reasoned: "4 s", "1 min 5 s" (at least 1 s)."""
    s = max(1, round(t))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"


env.filters.update(isotime=isotime, shorttime=shorttime)
env.globals.update(item_key=item_key, cut_key=cut_key, answer_key=answer_key, item_dom_id=item_dom_id,
                   pretty_json=pretty_json,
                   chips=chips, human_size=human_size, seconds=seconds)


# Scripts only from this server (no inline script anywhere in the templates); nothing from
# another host; no framing. Inline style attributes stay allowed: Markdown tables align
# their cells with them.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def secured(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def an_id(raw: str | None) -> int | None:
    """An id a person sent (URL, form, header): digits only and within SQLite's integers, else None."""
    if raw and raw.isascii() and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    return None


def csrf_token(request: Request) -> str:
    return csrf.token(request)


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def page(request: Request, template: str, /, status_code: int = 200, **context: Any) -> Response:
    me = getattr(request.state, "person", None)  # set by guard.authenticate; None signed out
    if me is not None and "side" not in context:  # every signed-in page has the sidebar
        from .sidebar import listing  # (sidebar renders through this module)

        context["side"] = listing(request.app.state.tabletalk.store, me.id, context.get("current"))
    context.setdefault("current", None)
    html = env.get_template(template).render(csrf=csrf_token(request), request=request, me=me, **context)
    return Response(html, media_type="text/html; charset=utf-8", status_code=status_code)


def fragment(name: str, **context: Any) -> str:
    return env.get_template(name).render(**context)


# --- conversation state shown around the items -------------------------------------------


@dataclass(frozen=True)
class View:
    """What an item's rendering depends on beyond its own row."""

    running: int | None = None                  # the user item being answered now
    steps: dict[int, Step] = field(default_factory=dict)  # the current path's turns, by user item id
    files: dict[int, dict[str, Any]] = field(default_factory=dict)  # file rows the items name
    editing: int | None = None                  # the message opened for editing (?edit=, without script)


def chat_state(store: Store, chat: int) -> dict[str, Any]:
    """Whether a run is going and what the page should show for it (derived from rows)."""
    pending = store.one(
        "SELECT id, kind, turn FROM items WHERE chat = ? AND done = 0 AND kind IN ('user','retry') "
        "ORDER BY id LIMIT 1", [chat])
    turn = (pending["id"] if pending["kind"] == "user" else pending["turn"]) if pending else None
    waiting = False  # the model has not sent its first token yet, or is still reasoning
    if pending:
        last = store.one("SELECT kind, done FROM items WHERE chat = ? AND turn = ? AND id > ? "
                         "AND kind NOT IN ('user','retry','stop') ORDER BY id DESC LIMIT 1", [chat, turn, pending["id"]])
        waiting = last is None or (last["kind"] == "reasoning" and not last["done"])
    context = store.context(chat)
    asked = store.one("SELECT 1 FROM items WHERE chat = ? AND kind = 'user' LIMIT 1", [chat]) is not None
    deciding = pending is not None and store.one(
        "SELECT 1 FROM items WHERE chat = ? AND kind = 'call' AND state = 'approval' LIMIT 1", [chat]) is not None
    return {"running": pending is not None, "waiting": waiting, "turn": turn, "asked": asked, "deciding": deciding,
            **{k: context[k] for k in ("used", "window", "cached", "start", "turns_out", "left_out")}}


def sort_items(items: list[Item]) -> list[Item]:
    return sorted(items, key=order)
