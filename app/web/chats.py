"""Conversations: a new one (the home page) and its first message, a conversation's page,
and what a person does in one."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from litestar import Request, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.exceptions import HTTPException, NotFoundException

from .. import files as filestore
from ..run import space
from ..accounts import usage as usage_rules
from ..accounts.rules import COOKIE, Accounts
from ..providers.thinking import THINKING
from ..store import Store
from ..store.outage import public, unavailable
from ..tables import Assistant, Conversation, Item, Person, again, decided, stopped
from ..serve.worker import Worker
from . import answering, knowledge, live, prompts, render, uploads
from .toolkit import (
    MODEL_MAX,
    SUGGESTIONS_MAX,
    TEXT_MAX,
    an_id,
    attachments,
    conversation_or_404,
    done,
    form_field,
    go,
    is_htmx,
    me,
    model_field,
    model_problem,
    parse_id,
    room_to_wait,
    worker,
    thinking_level,
    within_limit,
)

# The composer's two buttons while a run is going: wait for the run to end (the default, and
# what Enter sends), or be read by the model at the run's next step.
WHEN = {"": False, "queue": False, "now": True}


# What a new conversation suggests asking when its agent names nothing of its own.
SUGGESTIONS = (
    "Explain a hard idea simply, with an example",
    "Help me plan my week",
    "Summarise a web page for me",
    "Give me feedback on something I wrote",
)


def suggestions_of(agent: Assistant | None) -> list[str]:
    lines = [line.strip() for line in (agent.suggestions if agent else "").splitlines()]
    return [line for line in lines if line][:SUGGESTIONS_MAX] or list(SUGGESTIONS)


def chosen_agent(s: Worker, who: Person, raw: str | None) -> Assistant | None:
    """The agent a new conversation is with: `raw` (an id the person picked), else their default."""
    if not (raw or "").strip():
        return s.store.default_agent(who.id)
    agent_id = an_id(raw.strip())
    chosen = s.store.agent(agent_id) if agent_id is not None else None
    if chosen is None or chosen.person != who.id:
        raise HTTPException(status_code=400, detail="There is no such agent to talk to.")
    return chosen


@get("/")
async def index(request: Request, agent: FromQuery[str | None] = None) -> Response:
    """A new conversation: the empty composer, nothing written until the first message."""
    s = worker(request)
    who = me(request)
    return new_page(request, s, who, chosen_agent(s, who, agent))


def new_page(request: Request, s: Worker, who: Person, chosen: Assistant | None, draft: str = "",
             status_code: int = 200, refused: str = "") -> Response:
    """The new conversation's page; `draft`: the composer's text (a message refused, kept);
    `refused`: why it was."""
    return render.page(
        request, "index.html", status_code=status_code, draft=draft, refused=refused,
        agents=s.store.agents(who.id),
        agent=chosen,
        suggestions=suggestions_of(chosen),
        configured=s.providers.configured,
        builtin=s.store.builtin(),
        **answering.composer(s, who.id, chosen),
        model="",
        state={"running": False},
        text_max=TEXT_MAX,
        thinking_levels=THINKING,
    )


@dataclass(frozen=True)
class Composed:
    """A message as the composer sends it, checked, its files read (nothing written yet)."""

    text: str
    model: str
    thinking: str
    now: bool
    uploads: list[filestore.Spooled]
    search_web: bool = False  # the search switch: for this message the agent is told to search the web


async def message_of(request: Request, s: Worker) -> Composed:
    text = (await form_field(request, "text", TEXT_MAX)).strip()
    thinking = thinking_level(await form_field(request, "thinking", 20))
    when = (await form_field(request, "when", 20)).strip()
    if when not in WHEN:
        raise HTTPException(status_code=400, detail="“when” is queue or now.")
    if not text:
        raise HTTPException(status_code=400, detail="Write a message first: it was empty.")
    model = await model_field(request)
    uploads = await attachments(request, s.config.upload_max, s.config.upload_count)
    if uploads and not space.Reserve(s.config.data).held():  # the disk is full: keep its last room for answers
        raise HTTPException(status_code=507, detail=space.NO_UPLOADS)
    # the switch shows once the owner chose a provider; a message asking for search without one is a plain message
    search_web = (await form_field(request, "search_web", 5)) == "1" and s.store.search_provider() is not None
    return Composed(text, model, thinking, WHEN[when], uploads, search_web)


@post("/c")
async def new_conversation(request: Request) -> Response:
    """The first message of a new conversation: the conversation and the message are written
    together, and the page goes to the conversation. Without a message (the old "New
    conversation" button) nothing is written: back to the empty composer."""
    s = worker(request)
    who = me(request)
    agent = chosen_agent(s, who, await form_field(request, "agent", 20))
    typed = await form_field(request, "text", TEXT_MAX)
    if not typed.strip():
        return go(request, f"/?agent={agent.id}" if agent else "/")
    if not is_htmx(request) and usage_rules.refusal(s.store, who.id):  # the page again, what was typed kept
        return new_page(request, s, who, agent, draft=typed, status_code=429)
    if refused := await model_refused(request, who.id):
        return new_page(request, s, who, agent, draft=typed, status_code=400, refused=refused)
    room_to_wait(s.store, who.id)  # before any file is stored or resource read
    message = await message_of(request, s)
    resources = await prompts.attached_resources(request, prompts.Where(agent)) if agent else []  # picked with "/"
    picks = await knowledge.picks_field(request, s.store, who.id)  # picked with "/" too
    files = [(u.name, u) for u in message.uploads] + resources
    uploads.room_for(s.store, s.config, who.id, uploads.sizes(files))
    await uploads.kept(s.store, files)
    with s.store.write():  # the files, the conversation and its first message, or none of them
        room_to_wait(s.store, who.id)
        uploads.room_for(s.store, s.config, who.id, uploads.sizes(files))
        ids = tuple(s.store.add_file(name, data, person=who.id) for name, data in files)
        convo, _ = s.store.start_conversation(agent.id if agent else None, who.id, message.text,
                                              model=message.model, files=ids, thinking=message.thinking,
                                              knowledge=picks, search_web=message.search_web)
        knowledge.attach_documents(s.store, who.id, convo.id, ids, message.uploads)
        if message.model or message.thinking:  # what was picked stays picked
            s.store.set_choice(convo.id, message.model, message.thinking)
    return go(request, f"/c/{convo.id}")


@get("/c/{chat:str}")
async def conversation(request: Request, chat: FromPath[str], edit: FromQuery[str | None] = None) -> Response:
    """A conversation's page: its current path (app/branches.py); with `?edit=ID`, that
    message opened for editing in place (the way to edit without script)."""
    s = worker(request)
    return conversation_page(request, s, chat, editing=an_id(edit))


def conversation_page(request: Request, s: Worker, chat: str, editing: int | None = None, draft: str = "",
                      status_code: int = 200, refused: str = "") -> Response:
    """The conversation's page (`chat`: its id as the path has it) as of one read; `draft`:
    the composer's text (what a stop kept, or a message refused); `refused`: why it was."""
    with s.store.snapshot():
        convo = conversation_or_404(request, chat)
        rev = s.store.rev()
        chat_state = s.store.chat_state(convo.id)
        items, _, _ = live.page_items(s.store, convo.id, chat_state, editing=editing)
        plan = s.store.plan(convo.id)
        agent = answering.agent_of(s.store, convo)
        pickers = answering.composer(s, convo.person, agent, convo.model, convo.thinking)
    return render.page(
        request, "chat.html",
        status_code=status_code,
        convo=convo,
        agent=agent,
        current=convo.id,
        side_live=False,  # its own stream brings the sidebar's changes
        items=items,
        plan=live.items_html([plan] if plan else []),
        state=chat_state,
        rev=rev,
        **pickers,
        configured=s.providers.configured,
        builtin=s.store.builtin(),
        text_max=TEXT_MAX,
        thinking_levels=THINKING,
        draft=draft,
        refused=refused,
    )


@get("/c/{chat:str}/watch")
async def watch(request: Request, chat: FromPath[str]) -> Response:
    """The conversation's items and status alone, refreshing every 2 s while a run goes: what a
    page without JavaScript frames, so the page itself (and its composer) is not reloaded."""
    s = worker(request)
    with s.store.snapshot():
        convo = conversation_or_404(request, chat)
        chat_state = s.store.chat_state(convo.id)
        items, _, _ = live.page_items(s.store, convo.id, chat_state)
        plan = s.store.plan(convo.id)
    return render.page(  # framed by its own conversation's page
        request, "watch.html", framed=True, convo=convo, state=chat_state, items=items,
        plan=live.items_html([plan] if plan else []))


@post("/c/{chat:str}/ask")
async def ask(request: Request, chat: FromPath[str]) -> Response:
    s = worker(request)
    convo = conversation_or_404(request, chat)
    if not is_htmx(request) and usage_rules.refusal(s.store, convo.person):  # the page again, what was typed kept
        return conversation_page(request, s, chat, draft=await form_field(request, "text", TEXT_MAX), status_code=429)
    if refused := await model_refused(request, convo.person):
        return conversation_page(request, s, chat, draft=await form_field(request, "text", TEXT_MAX), status_code=400,
                                 refused=refused)
    room_to_wait(s.store, convo.person, convo.id)  # before any file is stored or resource read
    message = await message_of(request, s)
    picked = await new_choice(request, convo, message.model, message.thinking)
    resources = await prompts.attached_resources(request, prompts.of(request, convo))  # picked with "/"
    picks = await knowledge.picks_field(request, s.store, convo.person)  # picked with "/" too
    files = [(u.name, u) for u in message.uploads] + resources
    uploads.room_for(s.store, s.config, convo.person, uploads.sizes(files))
    await uploads.kept(s.store, files)
    with s.store.write():  # the file rows and the message together, or neither
        room_to_wait(s.store, convo.person, convo.id)
        uploads.room_for(s.store, s.config, convo.person, uploads.sizes(files))
        ids = tuple(s.store.add_file(name, data, person=convo.person) for name, data in files)
        # "Now" with nothing running is just a message (the run it was meant for may have ended).
        steer = message.now and s.store.chat_state(convo.id)["running"]
        knowledge.attach_documents(s.store, convo.person, convo.id, ids, message.uploads)
        s.store.ask(convo.id, message.text, model=message.model, files=ids, thinking=message.thinking, steer=steer,
                    knowledge=picks, search_web=message.search_web)
        if picked is not None:  # what was picked stays picked
            s.store.set_choice(convo.id, *picked)
    return done(request, f"/c/{convo.id}#end")


async def model_refused(request: Request, person: int) -> str:
    """Why a plain form's model may not be used by `person` ('' when it may): a crafted one, or
    one the owner kept for other people since the page was loaded. Without script the page
    comes again with the message as typed and these words; with script the composer keeps its
    text and shows the 400's words (model_field)."""
    if is_htmx(request):
        return ""
    return model_problem(worker(request).store, person, (await form_field(request, "model", MODEL_MAX)).strip())


async def new_choice(request: Request, convo: Conversation, model: str, thinking: str) -> tuple[str, str] | None:
    """The pickers' values when they change the conversation's pick, else None; a picker the
    form did not carry (a client without it) leaves that half of the pick as it was."""
    form = await request.form()
    model = model if "model" in form else convo.model
    thinking = thinking if "thinking" in form else convo.thinking
    return None if (model, thinking) == (convo.model, convo.thinking) else (model, thinking)


@post("/c/{chat:str}/choice")
async def choose(request: Request, chat: FromPath[str]) -> Response:
    """The composer's pickers changed (app.js posts them): the pick sticks without a message."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    thinking = thinking_level(await form_field(request, "thinking", 20))
    model = await model_field(request)
    picked = await new_choice(request, convo, model, thinking)
    if picked is not None:
        s.store.set_choice(convo.id, *picked)
    return done(request, f"/c/{convo.id}#end")


@post("/c/{chat:str}/retry")
async def retry(request: Request, chat: FromPath[str]) -> Response:
    """"Again" for the last answer of the current path (each answer has its own: web/branches.py)."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    model = await model_field(request)
    with s.store.write():
        within_limit(s.store, convo.person)
        path = s.store.path(convo.id)
        if not path.steps:
            raise HTTPException(status_code=400, detail="There is no answer to make again yet.")
        if s.store.chat_state(convo.id)["running"]:
            raise HTTPException(status_code=409, detail="An answer is being written: wait for it to end (or stop it) first.")
        s.store.again(path.steps[-1].user, model)
    return done(request, f"/c/{convo.id}#end")


def call_of(s: Worker, convo: Conversation, call: str) -> Item:
    """The call `call` names in this conversation, else 404."""
    it = s.store.item(parse_id(call, "call"))
    if it is None or it.chat != convo.id or it.kind != "call":
        raise NotFoundException("No such call.")
    return it


@post("/c/{chat:str}/calls/{call:str}")
async def decide(request: Request, chat: FromPath[str], call: FromPath[str]) -> Response:
    """The person's decision on a call waiting for approval."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    it = call_of(s, convo, call)
    decision = (await form_field(request, "decision", 20)).strip()
    if decision == "again":
        return run_again(request, s, convo, it)
    if decision not in ("approve", "decline"):
        raise HTTPException(status_code=400, detail="The decision is approve or decline.")
    if it.state != "approval":
        raise HTTPException(status_code=409, detail="This call is no longer waiting for a decision.")
    s.store.update(it.id, state=decided(it, decision).state)
    return done(request, f"/c/{convo.id}#end")


@get("/c/{chat:str}/calls/{call:str}/output")
async def call_output(request: Request, chat: FromPath[str], call: FromPath[str]) -> Response:
    """A call's whole output (what its page shows the head of: live.OUTPUT_SHOWN), as a download."""
    s = worker(request)
    it = call_of(s, conversation_or_404(request, chat), call)
    return Response(it.shown or it.output, media_type="text/plain", headers={
        "Content-Disposition": filestore.disposition(f"{it.name or 'tool'}-output-{it.id}.txt", inline=False),
        "X-Content-Type-Options": "nosniff"})


def run_again(request: Request, s: Worker, convo: Conversation, it: Item) -> Response:
    """"Run again" on a call a restart cut once it was sent (it may have run): the person
    checked. A new call with the same input runs at the end of its turn, and the model goes on."""
    if not (it.interrupted and it.dispatched):
        raise HTTPException(status_code=409, detail="Only a call a restart cut can be run again.")
    with s.store.write():
        if s.store.chat_state(convo.id)["running"]:
            raise HTTPException(status_code=409, detail="Wait until the answer is finished, then run it again.")
        within_limit(s.store, convo.person)
        s.store.add(again(it))
        s.store.update(it.turn, done=False)  # the turn goes on: the runner picks it up
    return done(request, f"/c/{convo.id}")


# How long a stop without script waits for the runner to end the run, so the page it shows
# next is the stopped one (the runner hears a stop within a beat; a tool call being cut may
# take longer, and the page then says the answer is still being written).
STOP_WAIT = 5.0


def halt_answers(store: Store, chat: int) -> None:
    """The answer being written in the conversation stops where it is, and the messages
    queued behind it are not answered (Store.stop_waiting: each shows "Stopped." and Again)."""
    with store.write():  # what runs and what waits, as of one moment
        running = store.answering(chat)
        if running is not None:
            store.add(replace(stopped(chat), turn=running.turn))
            store.stop_waiting(chat, running.turn)


@post("/c/{chat:str}/stop")
async def stop(request: Request, chat: FromPath[str]) -> Response:
    """Stop: the answer being written ends where it is, and the messages queued behind it are
    not answered either (Store.stop_waiting: each shows "Stopped." and Again). With script
    (htmx) that is all: the feed brings the change. Without, the page comes back once the run
    has ended (Stop and "Send now" gone, the frame too), with what was typed in the composer
    still in it (its Stop posts the composer's fields here)."""
    s = worker(request)
    convo = conversation_or_404(request, chat)
    halt_answers(s.store, convo.id)
    if is_htmx(request):
        return done(request, f"/c/{convo.id}#end")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STOP_WAIT
    while s.store.chat_state(convo.id)["running"] and loop.time() < deadline:
        await s.feed.changed(deadline - loop.time())
    draft = (await form_field(request, "text", TEXT_MAX)) if "text" in await request.form() else ""
    if not draft.strip():
        return done(request, f"/c/{convo.id}#end")
    return conversation_page(request, s, chat, draft=draft)


@get("/healthz")
async def healthz(request: Request) -> Response:
    """Public (for a load balancer or a supervisor); the rev, which says how busy the app
    is, only to someone signed in. 503 while the database cannot be reached, so a proxy sends
    people elsewhere: one read, which fails at once (a connection attempt at most, bounded
    by postgres.CONNECT_SECONDS, and none within RETRY_SECONDS of the last one), and 200
    again at the first read that the database answers. The reason said is the kind of
    failure; its address and libpq's words are in the log."""
    s = worker(request)
    try:
        rev = s.store.rev()  # read whoever asks: a proxy's check carries no session
        signed = Accounts(s.store).session(request.cookies.get(COOKIE)) is not None
        body: dict[str, object] = {"ok": True, "rev": rev} if signed else {"ok": True}
    except Exception as e:
        if not (why := unavailable(e)):
            raise
        return Response({"ok": False, "reason": public(why)}, status_code=503)
    return Response(body)


routes = [index, new_conversation, conversation, watch, ask, choose, retry, decide, call_output, stop, healthz]
