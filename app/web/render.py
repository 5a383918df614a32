"""Rows to HTML: the one place that renders pages and the fragments the feed sends.

A fragment that changes is rendered by exactly one partial, whether it arrives with the
first page load, a form response or the live feed; so a live page and a fresh render of
the same rows are the same DOM. Children of `#items` are joined with no whitespace
between them: htmx's upsert keeps elements only, and a fresh render must match it.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class View:
    """What an item's rendering depends on beyond its own row."""

    running: int | None = None                  # the user item being answered now
    superseded: frozenset[int] = frozenset()    # answers replaced by a newer version ("again")
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)  # retry id -> (n, of)
    shown: frozenset[int] = frozenset()         # turns whose earlier versions are shown


def chat_state(store: Store, chat: int) -> dict[str, Any]:
    """Whether a run is going and what the page should show for it (derived from rows)."""
    pending = store.one(
        "SELECT id, kind, turn FROM items WHERE chat = ? AND done = 0 AND kind IN ('user','retry') "
        "ORDER BY id LIMIT 1", [chat])
    turn = (pending["id"] if pending["kind"] == "user" else pending["turn"]) if pending else None
    waiting = False  # the model has not sent its first token yet
    if pending:
        answered = store.one("SELECT 1 FROM items WHERE chat = ? AND turn = ? AND id > ? "
                             "AND kind NOT IN ('user','retry','stop') LIMIT 1", [chat, turn, pending["id"]])
        waiting = answered is None
    context = store.one("SELECT used, window FROM contexts WHERE id = ?", [chat])
    asked = store.one("SELECT 1 FROM items WHERE chat = ? AND kind = 'user' LIMIT 1", [chat]) is not None
    return {"running": pending is not None, "waiting": waiting, "turn": turn, "asked": asked,
            "used": context["used"] if context else 0, "window": context["window"] if context else 0}


def view_of(items: list[Item], running: int | None, shown: frozenset[int] = frozenset()) -> View:
    """The view of a set of items that holds whole turns (versions need all of a turn)."""
    by_turn: dict[int, list[Item]] = defaultdict(list)
    for it in sort_items(items):
        by_turn[it.turn or it.id].append(it)
    superseded: set[int] = set()
    versions: dict[int, tuple[int, int]] = {}
    for turn_items in by_turn.values():
        retries = [it for it in turn_items if it.kind == "retry"]
        if not retries:
            continue
        last = retries[-1].id
        superseded |= {it.id for it in turn_items if it.kind not in ("user", "retry") and it.id < last}
        for n, r in enumerate(retries, start=2):
            versions[r.id] = (n, len(retries) + 1)
        superseded |= {r.id for r in retries[:-1]}
    return View(running, frozenset(superseded), versions, shown)


def item_html(it: Item, view: View = View()) -> str:
    return fragment("_item.html", it=it, view=view)


def items_html(items: list[Item], view: View = View()) -> Markup:
    return Markup("".join(item_html(it, view) for it in items))


def sort_items(items: list[Item]) -> list[Item]:
    return sorted(items, key=lambda it: (it.turn or it.id, it.id))


def chat_changes(store: Store, chat: int, items: list[Item], convo: Conversation | None,
                 gone: list[str] = ()) -> str:
    """One feed message for a conversation: changed items (upsert), deleted ones, its state (by id)."""
    parts = [f'<div id="{dom}" hx-swap-oob="delete"></div>' for dom in gone]
    state = chat_state(store, chat)
    if items:
        # A new version ("again") changes how the earlier ones show: send those turns whole.
        retried = {it.turn for it in items if it.kind == "retry"}
        if retried:
            marks = ",".join("?" * len(retried))
            rows = store.all(f"SELECT * FROM items WHERE chat = ? AND turn IN ({marks})", [chat, *retried])
            items = list({it.id: it for it in [*items, *(Item.from_row(r) for r in rows)]}.values())
        turns = {it.turn for it in items}
        marks = ",".join("?" * len(turns))
        context = [Item.from_row(r) for r in store.all(
            f"SELECT * FROM items WHERE chat = ? AND turn IN ({marks}) AND kind = 'retry'", [chat, *turns])]
        view = view_of([*items, *(c for c in context if c.id not in {it.id for it in items})], state["turn"])
        parts.append(
            '<hx-partial hx-target="#items" hx-swap="upsert key:data-key">'
            + str(items_html(sort_items(items), view)) + "</hx-partial>"
        )
    parts.append(fragment("_status.html", chat=chat, state=state, oob=True))
    if convo is not None:
        parts.append(fragment("_title.html", convo=convo, oob=True))
    return "".join(parts)


def list_changes(store: Store, convos: list[Conversation]) -> str:
    """One feed message for the conversation list: new and renamed conversations."""
    rows = "".join(fragment("_convo.html", convo=c) for c in sorted(convos, key=lambda c: c.id or 0))
    return f'<hx-partial hx-target="#conversations" hx-swap="upsert key:data-key sort:desc">{rows}</hx-partial>'
