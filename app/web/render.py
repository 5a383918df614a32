"""Rows to HTML: the one place that renders pages and the fragments the feed sends.

A fragment that changes is rendered by exactly one partial, whether it arrives with the
first page load, a form response or the live feed; so a live page and a fresh render of
the same rows are the same DOM. Children of `#items` are joined with no whitespace
between them: htmx's upsert keeps elements only, and a fresh render must match it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from litestar import Request, Response
from litestar.utils.scope.state import ScopeState
from markupsafe import Markup

from .. import markdown
from ..store import Store
from ..tables import Conversation, Item

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
    """The order of an item on the page: its turn, then its id (fixed width, so any compare agrees)."""
    return f"{it.turn or it.id:010d}-{it.id:010d}"


def item_dom_id(it: Item) -> str:
    return f"i{it.id}"


env.globals.update(item_key=item_key, item_dom_id=item_dom_id)
def blocks_html(it: Item) -> Markup:
    """An item's Markdown as keyed blocks (`i{id}-{n}`), the unit the live feed updates."""
    return Markup("".join(b.html for b in markdown.keyed(it.text or "", item_dom_id(it))))


env.globals.update(blocks=blocks_html)


def csrf_token(request: Request) -> str:
    return ScopeState.from_scope(request.scope).csrf_token or ""


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def page(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    html = env.get_template(name).render(csrf=csrf_token(request), request=request, **context)
    return Response(html, media_type="text/html; charset=utf-8", status_code=status_code)


def fragment(name: str, **context: Any) -> str:
    return env.get_template(name).render(**context)


# --- conversation state shown around the items -------------------------------------------


def chat_state(store: Store, chat: int) -> dict[str, Any]:
    """Whether a run is going and what the page should show for it (derived from rows)."""
    pending = store.one(
        "SELECT id FROM items WHERE chat = ? AND kind = 'user' AND done = 0 ORDER BY id LIMIT 1", [chat])
    running = pending is not None
    waiting = False  # the model has not sent its first token yet
    if running:
        answered = store.one("SELECT 1 FROM items WHERE chat = ? AND turn = ? AND kind != 'user' LIMIT 1",
                             [chat, pending[0]])
        waiting = answered is None
    return {"running": running, "waiting": waiting, "turn": pending[0] if pending else None}


def item_html(it: Item) -> str:
    return fragment("_item.html", it=it)


def items_html(items: list[Item]) -> Markup:
    return Markup("".join(item_html(it) for it in items))


def sort_items(items: list[Item]) -> list[Item]:
    return sorted(items, key=lambda it: (it.turn or it.id, it.id))


def chat_changes(store: Store, chat: int, items: list[Item], convo: Conversation | None,
                 gone: list[str] = ()) -> str:
    """One feed message for a conversation: changed items (upsert), deleted ones, its state (by id)."""
    parts = [f'<div id="{dom}" hx-swap-oob="delete"></div>' for dom in gone]
    if items:
        parts.append(
            '<hx-partial hx-target="#items" hx-swap="upsert key:data-key">'
            + str(items_html(sort_items(items))) + "</hx-partial>"
        )
    parts.append(fragment("_status.html", chat=chat, state=chat_state(store, chat), oob=True))
    if convo is not None:
        parts.append(fragment("_title.html", convo=convo, oob=True))
    return "".join(parts)


def list_changes(store: Store, convos: list[Conversation]) -> str:
    """One feed message for the conversation list: new and renamed conversations."""
    rows = "".join(fragment("_convo.html", convo=c) for c in sorted(convos, key=lambda c: c.id or 0))
    return f'<hx-partial hx-target="#conversations" hx-swap="upsert key:data-key sort:desc">{rows}</hx-partial>'
