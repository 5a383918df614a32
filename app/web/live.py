"""Rows to the fragments a live page receives: only what changed, as small as it can be.

An item renders as a *shell* (its element with two slots), a *state* (a small span: growing,
done, running ...) and a *body* (its Markdown as keyed blocks, or a call's output). The
feed keeps, per followed conversation, what it last sent of each item (`Sent`); the next
message then carries the whole element only when the shell changed (a new item, a new
version, queued -> answered), the state span when only it changed, and for the body only
the changed blocks (out-of-band by id), the new blocks (upsert, harmless on replay) and,
where a block only grew at its end, just the added text (`beforeend` on its last element).
Children of `#items` and of a body are joined with no whitespace: htmx's upsert keeps
elements only, and a fresh render must be the same DOM as a live one.
"""
from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

from .. import markdown
from ..markdown import Block
from ..store import Store
from ..tables import Conversation, Item
from .render import View, chat_state, cut_key, fragment, item_dom_id, item_key, sort_items, view_of

SLOT_STATE = "\x00state\x00"
SLOT_BODY = "\x00body\x00"
MARKDOWN_KINDS = ("text", "reasoning", "plan")
CALL_LABELS = {"": "waiting", "running": "running", "done": "done", "failed": "failed",
               "approval": "waiting for approval", "approved": "approved", "declined": "declined"}


@dataclass(frozen=True)
class Parts:
    shell: str
    state: str
    blocks: tuple[Block, ...]

    @property
    def element(self) -> str:
        return (self.shell.replace(SLOT_STATE, self.state, 1)
                .replace(SLOT_BODY, "".join(b.html for b in self.blocks), 1))


@dataclass
class Sent:
    """What a follower has of an item: its shell, state span and body blocks by id."""

    shell: str
    state: str
    blocks: dict[str, str]


def state_html(it: Item) -> str:
    """The item's state span ('' for kinds whose state the page does not show)."""
    dom = item_dom_id(it)
    if it.kind not in (*MARKDOWN_KINDS, "call"):
        return ""
    if it.kind == "call":
        state = it.state or "waiting"
        label = CALL_LABELS.get(it.state, it.state)
        if it.interrupted and it.dispatched and it.state == "failed":  # a restart cut it once sent
            state, label = "unknown", "may have run: check before running it again"
    else:
        state, label = ("done", "") if it.done else ("growing", "")
    if it.kind == "plan":  # the plan card says how far it is: "3 of 5 done"
        done, total = markdown.task_counts(it.text or "")
        label = f"{done} of {total} done" if total else ""
    return f'<span id="{dom}-s" class="state {state}">{label}</span>'


def body_blocks(it: Item) -> tuple[Block, ...]:
    dom = item_dom_id(it)
    if it.kind in MARKDOWN_KINDS:
        # while it grows, a render whose blocks only grow at their ends (see markdown.keyed)
        return tuple(markdown.keyed(it.text or "", dom, growing=not it.done))
    if it.kind == "call":
        return (Block(f"{dom}-o", f'<pre class="output" id="{dom}-o">{escape(it.output)}</pre>'),)
    return ()


def item_parts(it: Item, view: View = View()) -> Parts:
    shell = fragment("_item.html", it=it, view=view, slot_state=Markup(SLOT_STATE), slot_body=Markup(SLOT_BODY))
    return Parts(shell, state_html(it), body_blocks(it))


def items_html(items: list[Item], view: View = View(), state: dict | None = None) -> Markup:
    """The items (in page order) as the page shows them, with the marker where the model's
    view starts when `state` (render.chat_state) says some turns are left out."""
    elements = [(item_key(it), item_parts(it, view).element) for it in items]
    if state and state.get("start"):
        elements.append((cut_key(state["start"]), fragment("_cut.html", state=state)))
        elements.sort(key=lambda pair: pair[0])  # fixed-width keys: text order is page order
    return Markup("".join(html for _, html in elements))


def placed(dom: str, html: str) -> str:
    """An element of #items whose place may have changed: removed, then upserted where its key
    sorts (an upsert replaces an element already on the page where it stands). htmx runs the
    out-of-band delete before the partial, and the pair is harmless to replay."""
    removed = f'<div id="{dom}" hx-swap-oob="delete"></div>'
    return removed + (f'<hx-partial hx-target="#items" hx-swap="upsert key:data-key">{html}</hx-partial>' if html else "")


def oob(html: str) -> str:
    """The element, swapped out-of-band by its id."""
    end = html.index(">")
    return f'{html[:end]} hx-swap-oob="true"{html[end:]}'


def item_changes(it: Item, parts: Parts, sent: Sent | None) -> tuple[str | None, list[str]]:
    """(the whole element, or None) and the smaller pieces that bring `sent` up to `parts`."""
    if sent is None or sent.shell != parts.shell:
        return parts.element, []
    pieces = []
    if sent.state != parts.state and parts.state:
        pieces.append(oob(parts.state))
    changed, new, gone = markdown.block_changes(sent.blocks, list(parts.blocks))
    for block in changed:
        at = markdown.append_at(sent.blocks[block.id], block.html)
        if at is None:
            pieces.append(oob(block.html))
        else:
            depth, added = at  # appended to the block's last element, `depth` levels down (static/app.js)
            # most appends go one level down (a paragraph's text): that depth is the default
            # block ids are letters, digits and "-": no quotes needed around them
            pieces.append(f'<hx-a t={block.id}>{added}</hx-a>' if depth == 1
                          else f'<hx-a t={block.id} d={depth}>{added}</hx-a>')
    if new:
        pieces.append(f'<hx-partial hx-target="#{item_dom_id(it)}-b" hx-swap="upsert">'
                      + "".join(b.html for b in new) + "</hx-partial>")
    pieces.extend(f'<div id="{dom}" hx-swap-oob="delete"></div>' for dom in gone)
    return None, pieces


def with_whole_turns(store: Store, chat: int, items: list[Item]) -> tuple[list[Item], list[Item]]:
    """Items to send and the retry items their view needs: a new version changes how the
    earlier ones show, so a turn with a new `retry` is sent whole."""
    retried = {it.turn for it in items if it.kind == "retry"}
    if retried:
        marks = ",".join("?" * len(retried))
        rows = store.all(f"SELECT * FROM items WHERE chat = ? AND turn IN ({marks})", [chat, *retried])
        items = list({it.id: it for it in [*items, *(Item.from_row(r) for r in rows)]}.values())
    turns = {it.turn for it in items}
    marks = ",".join("?" * len(turns))
    retries = [Item.from_row(r) for r in store.all(
        f"SELECT * FROM items WHERE chat = ? AND turn IN ({marks}) AND kind = 'retry'", [chat, *turns])]
    return sort_items(items), retries


DELETED = ('<div id="status" class="status deleted" data-running="0" data-asked="0" hx-swap-oob="true">'
           '<p role="alert">This conversation was deleted. <a href="/">Back to your conversations</a></p></div>'
           '<div id="composer" hx-swap-oob="delete"></div>')


def chat_changes(store: Store, chat: int, items: list[Item], convo: Conversation | None,
                 gone: list[str] = (), sent: dict[int | str, Sent | str] | None = None) -> str:
    """One feed message for a conversation.

    With `sent` (what followers in step have), only the differences, and `sent` is brought
    up to date; without it, whole elements (for a follower that has just caught up).
    """
    if f"c{chat}" in gone:  # the conversation itself was deleted: say so, take the composer away
        return DELETED
    parts_out = [f'<div id="{dom}" hx-swap-oob="delete"></div>' for dom in gone]
    state = chat_state(store, chat)
    if items:
        items, retries = with_whole_turns(store, chat, items)
        known = {it.id for it in items}
        view = view_of([*items, *(r for r in retries if r.id not in known)], state["turn"],
                       files=store.files_of(items))
        elements, pinned, pieces = [], [], []
        for it in items:
            parts = item_parts(it, view)
            element, small = item_changes(it, parts, sent.get(it.id) if sent is not None else None)
            if element is not None and it.read_after:  # a message the model read moves to where it read it
                parts_out.append(placed(item_dom_id(it), element))
            elif element is not None:
                (pinned if it.kind == "plan" else elements).append(element)
            pieces.extend(small)
            if sent is not None:
                if it.done and it.kind != "call":
                    sent.pop(it.id, None)  # finished: it changes again only as a whole (a new version)
                else:
                    sent[it.id] = Sent(parts.shell, parts.state, {b.id: b.html for b in parts.blocks})
        if elements:
            parts_out.append('<hx-partial hx-target="#items" hx-swap="upsert key:data-key">'
                             + "".join(elements) + "</hx-partial>")
        if pinned:  # the plan is pinned above the composer, not in the log
            parts_out.append('<hx-partial hx-target="#plan" hx-swap="upsert">' + "".join(pinned) + "</hx-partial>")
        parts_out.extend(pieces)
    cut = fragment("_cut.html", state=state)
    if sent is None or sent.get("cut", "") != cut:  # where the model's view starts moved (rarely)
        parts_out.append(placed("cut", cut))
    if sent is not None:
        sent["cut"] = cut
    status = fragment("_status.html", chat=chat, state=state, oob=True)
    if sent is None or sent.get("status") != status:  # most messages leave it as it was
        parts_out.append(status)
    if sent is not None:
        sent["status"] = status
    if convo is not None:
        parts_out.append(fragment("_title.html", convo=convo, oob=True))
    return "".join(parts_out)


__all__ = ["Parts", "Sent", "chat_changes", "item_parts", "items_html"]
