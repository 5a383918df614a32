"""Rows to the fragments a live page receives: only what changed, as small as it can be.

An item renders as a *shell* (its element with two slots), a *state* (a small span: growing,
done, running ...) and a *body* (its Markdown as keyed blocks, or a call's output). The
feed keeps, per followed conversation, what its pages have (app/feed/followed.py: of each
item, its `Sent`); the next message then carries the whole element only when the shell
changed (a new item, a new version, queued -> answered), the state span when only it
changed, and for the body only the changed blocks (out-of-band by id), the new blocks (upsert, harmless on replay) and,
where a block only grew at its end, just the added text (`beforeend` on its last element).
Children of `#items` and of a body are joined with no whitespace: htmx's upsert keeps
elements only, and a fresh render must be the same DOM as a live one.
"""
from __future__ import annotations

import functools
import secrets
import time
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from .. import markdown
from ..branches import Path, Step, finished
from ..feed.followed import Followed, Sent
from ..markdown import Block, Rendering
from ..store import Store
from ..tables import Conversation, Item
from . import answering
from .templating import View, answer_key, cut_key, fragment, item_dom_id, item_key, removal

# The shell's slots are filled by str.replace, so no text in the shell (a call's raw input, a
# title, a model's words) may ever read as one: each marker holds a random part of this
# process's own, which no model or tool can know (nor NULs alone, which they can send).
_SLOTS = secrets.token_hex(16)
SLOT_STATE = f"\x00state-{_SLOTS}\x00"
SLOT_BODY = f"\x00body-{_SLOTS}\x00"
MARKDOWN_KINDS = ("text", "reasoning", "plan")
CALL_LABELS = {"": "waiting", "running": "running", "done": "done", "failed": "failed",
               "approval": "waiting for approval", "approved": "approved", "declined": "declined",
               "waiting": "sent to the API client"}


@dataclass(frozen=True)
class Parts:
    shell: str
    state: str
    blocks: tuple[Block, ...]

    @property
    def element(self) -> str:
        return (self.shell.replace(SLOT_STATE, self.state, 1)
                .replace(SLOT_BODY, "".join(b.html for b in self.blocks), 1))


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
        elif it.state == "running" and (said := progress_line(it.output)):  # seen with the details closed
            label = f"{label}: {said}"
    else:
        state, label = ("done", "") if it.done else ("growing", "")
    if it.kind == "plan":  # the plan card says how far it is: "3 of 5 done"
        done, total = markdown.task_counts(it.text or "")
        label = f"{done} of {total} done" if total else ""
    return f'<span id="{dom}-s" class="state {state}">{label}</span>'


PROGRESS_SHOWN = 80  # characters of a running call's latest progress its summary line shows


def progress_line(output: str) -> str:
    """The latest progress a running call reported (its output meanwhile), in a line."""
    lines = [line.strip() for line in (output or "")[-2000:].splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    return last if len(last) <= PROGRESS_SHOWN else last[:PROGRESS_SHOWN - 1] + "…"


def body_blocks(it: Item, rendering: Rendering | None = None) -> tuple[Block, ...]:
    """The item's body as blocks; a Markdown item's through `rendering` when one follows it."""
    dom = item_dom_id(it)
    if it.kind in MARKDOWN_KINDS:
        # while it grows, a render whose blocks only grow at their ends (see markdown.keyed)
        if rendering is None:
            return tuple(markdown.keyed(it.text or "", dom, growing=not it.done))
        return tuple(rendering.blocks(it.text or "", growing=not it.done, now=time.monotonic()))
    if it.kind == "call":
        return (Block(f"{dom}-o", f'<pre class="output" id="{dom}-o">{output_html(it)}</pre>'),)
    return ()


# Characters of a call's output a page shows and the feed sends: its head. A plugin's result may
# be up to 16 MB (a 7 MB one made a 7.36 MB page on every load); the whole is a download.
OUTPUT_SHOWN = 20_000


def output_html(it: Item) -> Markup:
    """A call's output as its page shows it: whole, or its head and a link to the whole."""
    whole = it.shown or it.output
    if len(whole) <= OUTPUT_SHOWN:
        return escape(whole)
    more = len(whole) - OUTPUT_SHOWN
    return escape(whole[:OUTPUT_SHOWN]) + Markup(
        f'\n<a class="whole" href="/c/{it.chat}/calls/{it.id}/output" download>… {more:,} more characters: '
        "the whole output</a>")


def item_parts(it: Item, view: View = View(), rendering: Rendering | None = None) -> Parts:
    if it.kind in MARKDOWN_KINDS:  # their shell reads only these fields, never the view
        shell = _markdown_shell(it.kind, it.id, it.turn, it.read_after, it.steer, it.state, it.done, it.thought)
    else:
        shell = fragment("_item.html", it=it, view=view, slot_state=Markup(SLOT_STATE), slot_body=Markup(SLOT_BODY))
    return Parts(shell, state_html(it), body_blocks(it, rendering))


FINISHED_KEPT = 4  # finished answers whose render a followed conversation keeps


def rendering_of(followed: Followed, it: Item) -> Rendering | None:
    """The renders of a Markdown item the feed follows (made at its first): a growing
    answer's next render goes on from the last one, and a finished one is rendered once
    for the message, a page that caught up and the announcement of the run's end. A new
    one drops the finished ones but the last FINISHED_KEPT."""
    if it.kind not in MARKDOWN_KINDS:
        return None
    renders = followed.renders
    rendering = renders.get(it.id)
    if rendering is None:
        rendering = renders[it.id] = Rendering(item_dom_id(it))
        ended = [key for key, kept in renders.items() if kept.finished]
        for key in ended[:-FINISHED_KEPT]:
            del renders[key]
    return rendering


@functools.lru_cache(maxsize=512)
def _markdown_shell(kind: str, id_: int | None, turn: int, read_after: int, steer: bool, state: str, done: bool,
                    thought: float) -> str:
    """The shell of a text, reasoning or plan item (templates/_item.html): rendered once per
    distinct state, not at every message of a growing answer."""
    it = Item(kind, id=id_, turn=turn, read_after=read_after, steer=steer, state=state, done=done, thought=thought)
    return fragment("_item.html", it=it, view=View(), slot_state=Markup(SLOT_STATE), slot_body=Markup(SLOT_BODY))


def answer_html(chat: int, step: Step, version: list[Item]) -> str:
    """The actions under a turn's answer (`version`: its items on the path, in page order);
    '' while it is not finished: nothing to copy or make again yet."""
    if not finished(version):
        return ""
    texts = [it for it in version if it.kind == "text" and it.text.strip()]
    last = texts[-1] if texts else version[-1]
    answer = {"text": bool(texts), "model": last.model, "when": last.updated}
    return fragment("_answer.html", chat=chat, step=step, answer=answer)


def items_html(items: list[Item], view: View = View(), state: dict | None = None,
               renders: dict[int, Rendering] | None = None) -> Markup:
    """The items (in page order, one path: branches.on_path) as the page shows them, the
    actions under each finished answer of `view.steps`, and the marker where the model's view
    starts when `state` (Store.chat_state) says some turns are left out. `renders`: the
    feed's renders of the items it follows (Followed.renders), which these go on from."""
    renders = renders or {}
    elements = [(item_key(it), item_parts(it, view, renders.get(it.id)).element) for it in items]
    by_turn: dict[int, list[Item]] = {}
    for it in items:
        by_turn.setdefault(it.turn or it.id or 0, []).append(it)
    for step in view.steps.values():
        version = [it for it in by_turn.get(step.turn, []) if it.id != step.turn]
        if html := answer_html(step.user.chat or 0, step, version):
            elements.append((answer_key(step.turn), html))
    if state and state.get("start"):
        elements.append((cut_key(state["start"]), fragment("_cut.html", state=state)))
    elements.sort(key=lambda pair: pair[0])  # fixed-width keys: text order is page order
    return Markup("".join(html for _, html in elements))


def page_items(store: Store, chat: int, state: dict, path: Path | None = None,
               editing: int | None = None, renders: dict[int, Rendering] | None = None
               ) -> tuple[Markup, list[Item], View]:
    """#items of a conversation's page: its current path (or `path`), whole; those items and
    their view. `renders`: see items_html."""
    path = path if path is not None else store.path(chat)
    items = store.path_items(chat, path)
    view = View(state["turn"], path.heads, store.files_of(items), editing, store.passages_gone(items),
                store.documents_attached(items), store.items_picks(items))
    return items_html(items, view, state, renders), items, view


def placed(dom: str, html: str) -> str:
    """An element of #items whose place may have changed: removed, then upserted where its key
    sorts (an upsert replaces an element already on the page where it stands). htmx runs the
    out-of-band delete before the partial, and the pair is harmless to replay."""
    return removal(dom) + (f'<hx-partial hx-target="#items" hx-swap="upsert key:data-key">{html}</hx-partial>' if html else "")


def oob(html: str) -> str:
    """The element, swapped out-of-band by its id."""
    end = html.index(">")
    return f'{html[:end]} hx-swap-oob="true"{html[end:]}'


def item_changes(dom: str, parts: Parts, sent: Sent | None) -> tuple[str | None, list[str]]:
    """(the whole element, or None) and the smaller pieces that bring `sent` up to `parts`
    (of the item whose dom id is `dom`)."""
    if sent is None or sent.shell != parts.shell:
        return parts.element, []
    pieces = []
    if sent.state != parts.state and parts.state:
        pieces.append(oob(parts.state))
    pieces.extend(body_changes(dom, parts.blocks, sent.blocks))
    return None, pieces


def body_changes(dom: str, blocks: tuple[Block, ...], had_blocks: tuple[Block, ...]) -> list[str]:
    """The pieces that bring a body of `had_blocks` up to `blocks`: changed blocks whole, a
    block that grew at its end by what it grew, new blocks, blocks gone."""
    pieces = []
    (changed, new, gone), had = markdown.changes_since(had_blocks, blocks)
    for block in changed:
        at = markdown.append_at(had[block.id], block.html)
        if at is None:
            pieces.append(oob(block.html))
        else:
            depth, added = at  # appended to the block's last element, `depth` levels down (static/app.js)
            # most appends go one level down (a paragraph's text): that depth is the default
            # block ids are letters, digits and "-": no quotes needed around them
            pieces.append(f'<hx-a t={block.id}>{added}</hx-a>' if depth == 1
                          else f'<hx-a t={block.id} d={depth}>{added}</hx-a>')
    if new:
        pieces.append(f'<hx-partial hx-target="#{dom}-b" hx-swap="upsert">'
                      + "".join(b.html for b in new) + "</hx-partial>")
    pieces.extend(removal(block) for block in gone)
    return pieces


def texts_grown(texts: list[tuple[int, str]], followed: Followed) -> str:
    """A frame's message (the feed's RenderGrown): growing texts read in this process
    (Feed.grew), (item id, the text so far), of items the pages in step have, as the pieces
    that bring their bodies up to them. A growing item's shell and state stay as sent (they
    change only with its row: a dispatch), so only its body is rendered."""
    out: list[str] = []
    now: dict[int, Sent] = {}
    for item, text in texts:
        sent, rendering = followed.items[item], followed.renders[item]
        blocks = tuple(rendering.blocks(text, growing=True, now=time.monotonic()))
        out.extend(body_changes(rendering.key, blocks, sent.blocks))
        now[item] = Sent(sent.shell, sent.state, blocks, len(text))
    followed.items.update(now)  # (all of them once the message is made: none if it failed)
    return "".join(out)


def forked(path: Path, items: list[Item]) -> bool:
    """Whether changed rows may have moved `path` at a fork: a new version, a choice or an
    edit (a turn with more than one message or answer version), or a message off the path.
    A message added at the end, or one read during an answer (it moves by its key), did not."""
    steps = path.heads
    for it in items:
        if it.kind == "retry":
            return True
        if it.kind == "user" and it.starts_turn:
            step = steps.get(it.id)
            if step is None or len(step.siblings) > 1 or len(step.heads) > 1:
                return True
    return False


ANSWER_CHANGES = ("user", "retry", "stop", "error")  # a growing text or call cannot end an answer


def answers_changed(store: Store, chat: int, path: Path, items: list[Item], followed: Followed,
                    out: list[str]) -> list[str]:
    """The actions of the answers `items` may have ended or changed, where they differ from
    what the pages have (`followed.answers`); a row that went away is deleted (into `out`)."""
    steps = path.heads
    turns = sorted({it.turn for it in items if it.turn in steps and (it.done or it.kind in ANSWER_CHANGES)})
    rows = []
    for turn in turns:
        step = steps[turn]
        version = [it for it in store.turn_items(chat, turn, turn) if it.id != turn and path.holds(it)
                   and it.kind != "retry"]
        html = answer_html(chat, step, version)
        before = followed.answers.get(turn)
        if html != before:
            if html:
                rows.append(html)
            elif before:  # (a row goes only when its answer goes on: a message read after it)
                out.append(removal(f"a{turn}"))
        followed.answers[turn] = html
    return rows


DELETED = ('<div id="status" class="status deleted" data-running="0" data-asked="0" hx-swap-oob="true">'
           '<p role="alert">This conversation was deleted. <a href="/">Back to your conversations</a></p></div>'
           + removal("composer"))


def state_fragment(name: str, state: dict[str, Any], **context: Any) -> str:
    """A fragment that is a function of the conversation's state alone (_status.html,
    _cut.html): rendered once per distinct state, not at every message of an answer (each
    message compares them with what followers have)."""
    try:
        return _state_fragment(name, tuple(sorted(state.items())), tuple(sorted(context.items())))
    except TypeError:  # a value that cannot be a key
        return fragment(name, state=state, **context)


@functools.lru_cache(maxsize=512)
def _state_fragment(name: str, state: tuple, context: tuple) -> str:
    return fragment(name, state=dict(state), **dict(context))


def chat_changes(store: Store, chat: int, items: list[Item], convo: Conversation | None,
                 gone: list[str] = (), followed: Followed | None = None) -> str:
    """One feed message for a conversation: what changed (`items`, `convo`, the deleted dom
    ids `gone`) as the difference from what `followed` says its pages have, which is brought
    up to date. Without `followed`, whole elements (a page that has just caught up from the
    database: the difference from nothing)."""
    if f"c{chat}" in gone:  # the conversation itself was deleted: say so, take the composer away
        return DELETED
    followed = followed if followed is not None else Followed().nothing()
    if only_grown(followed, items, convo, gone):
        return grown(store, chat, items, followed)
    return in_step(store, chat, items, convo, gone, followed)


def only_grown(followed: Followed, items: list[Item], convo: Conversation | None, gone: list[str]) -> bool:
    """Whether the only rows that changed are growing text of items the pages have."""
    return (followed.state is not None and bool(items) and convo is None and not gone
            and all(it.kind in MARKDOWN_KINDS and not it.done and it.id in followed.items for it in items))


def grown(store: Store, chat: int, items: list[Item], followed: Followed) -> str:
    """The message when `only_grown`: the conversation's state is the one the pages have (a
    run starts, ends, waits or is decided only with other rows; the context meter by its own
    row, and the feed then forgets the kept state), so neither it nor what is made of it alone
    (the status, the marker, the run's end) is read, made or compared again: only the items."""
    out: list[str] = []
    items_changed(store, chat, items, followed.path, followed.state, followed, out)
    return "".join(out)


def in_step(store: Store, chat: int, items: list[Item], convo: Conversation | None, gone: list[str],
            followed: Followed) -> str:
    """The message for any change: the state read again, the path where it may have moved,
    the items, and the fragments made of the state where they differ from what the pages have."""
    out = [removal(dom) for dom in gone]
    state = followed.state = store.chat_state(chat)
    # The path changes only with a user or retry row (an edit, Again, a pager's choice, a
    # message): then it is read again, and when it is not the one the pages have with turns
    # added at its end, #items is sent whole (branches are few, and rarely switched).
    heads_changed = any(it.kind in ("user", "retry") for it in items)
    known = followed.path
    path = followed.path = store.path(chat) if known is None or heads_changed else known
    if known is not None:
        whole = heads_changed and not path.extends(known)
    else:  # a page that caught up from the database: its path is not known here
        whole = heads_changed and forked(path, items)
    if whole:
        out.append(whole_items(store, chat, state, path, followed))
        items = [it for it in items if it.kind == "plan"]  # the plan is pinned apart from #items
    items_changed(store, chat, items, path, state, followed, out)
    cut = state_fragment("_cut.html", state)
    if followed.cut != cut:  # where the model's view starts moved (rarely)
        out.append(placed("cut", cut))
        followed.cut = cut
    ended = followed.turn  # a run the pages watched ended: say so to a screen reader
    if ended and ended != state["turn"]:
        last = store.last_of_turn(chat, ended)
        rendering = followed.renders.get(last.id) if last is not None else None
        out.append(fragment("_announce.html", text=announcement(last, rendering), oob=True))
    followed.turn = state["turn"]
    status = state_fragment("_status.html", state, chat=chat, oob=True)
    if followed.status != status:  # most messages leave it as it was
        out.append(status)
        followed.status = status
    if convo is not None:
        out.append(fragment("_title.html", convo=convo, agent=answering.agent_of(store, convo), oob=True))
    return "".join(out)


def whole_items(store: Store, chat: int, state: dict[str, Any], path: Path, followed: Followed) -> str:
    """#items whole, for a path that moved at a fork; what the pages have is then that."""
    html, shown, view = page_items(store, chat, state, path, renders=followed.renders)
    # (the state is read again at the next message, and an answer's actions are unknown: sent again)
    followed.state, followed.turn = None, None
    followed.items.clear()
    followed.answers.clear()
    for it in shown:
        if not it.done or it.kind == "call":  # (the renders made above: the same blocks again)
            parts = item_parts(it, view, followed.renders.get(it.id))
            followed.items[it.id] = Sent(parts.shell, parts.state, parts.blocks, len(it.text or ''))
    followed.cut = state_fragment("_cut.html", state)
    return f'<hx-partial hx-target="#items" hx-swap="innerHTML">{html}</hx-partial>'


def items_changed(store: Store, chat: int, items: list[Item], path: Path, state: dict[str, Any],
                  followed: Followed, out: list[str]) -> None:
    """The changed items of the path (and the plan, pinned above the composer) into `out`:
    each whole, or the pieces that bring what the pages have up to it; and the actions of the
    answers they may have ended."""
    pinned = [it for it in items if it.kind == "plan"]
    items = [it for it in items if it.kind != "plan" and path.holds(it)]  # other branches' rows wait
    if not (items or pinned):
        return
    shown = [*items, *pinned]
    view = View(state["turn"], path.heads, store.files_of(shown), gone=store.passages_gone(shown),
                documents=store.documents_attached(shown), picks=store.items_picks(shown))
    elements, plans, pieces = [], [], []
    for it in shown:
        parts = item_parts(it, view, rendering_of(followed, it))
        element, small = item_changes(item_dom_id(it), parts, followed.items.get(it.id))
        if element is not None and it.read_after:  # a message the model read moves to where it read it
            out.append(placed(item_dom_id(it), element))
        elif element is not None:
            (plans if it.kind == "plan" else elements).append(element)
        pieces.extend(small)
        if it.done and it.kind != "call":
            followed.items.pop(it.id, None)  # finished: it changes again only as a whole (a new version)
        else:
            followed.items[it.id] = Sent(parts.shell, parts.state, parts.blocks, len(it.text or ''))
    elements.extend(answers_changed(store, chat, path, items, followed, out))
    if elements:
        out.append('<hx-partial hx-target="#items" hx-swap="upsert key:data-key">' + "".join(elements) + "</hx-partial>")
    if plans:  # the plan is pinned above the composer, not in the log
        out.append('<hx-partial hx-target="#plan" hx-swap="upsert">' + "".join(plans) + "</hx-partial>")
    out.extend(pieces)


def outage_banner(words: str) -> str:
    """Every open page's banner (templates/_outage.html): the database cannot be reached
    (`words`), or "" once it answers again (the feed's RenderOutage)."""
    return fragment("_outage.html", words=words, oob=True)


ANNOUNCED = 200  # characters of an answer a screen reader hears when it ends


def announcement(last: Item | None, rendering: Rendering | None = None) -> str:
    """What the live region says when a run ends: the start of its answer as plain text.
    `rendering`: the answer's, whose final render the feed's message made just now (then
    not a second whole render: the same words)."""
    if last is None or last.kind == "text" and not (last.text or "").strip():
        return "Answer finished."
    if last.kind == "stop":
        return "Stopped."
    text = last.text or ""
    blocks = rendering.blocks(text) if rendering is not None else markdown.keyed(text, item_dom_id(last))
    html = " ".join(b.html for b in blocks)
    words = " ".join(Markup(html).striptags().split())
    if len(words) > ANNOUNCED:
        words = words[:ANNOUNCED].rsplit(" ", 1)[0] + "…"
    return f"{'Answer finished' if last.kind == 'text' else 'The answer ended with an error'}: {words}"


__all__ = ["Parts", "chat_changes", "item_parts", "items_html", "outage_banner"]
