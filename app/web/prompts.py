"""Prompts, skills and resources for a conversation's composer.

`/c/N/prompts` is a plain page (linked from the composer, so it works without script):
the agent's plugins' prompts, each with a small form of its arguments that sends what the
plugin makes of them as the person's message; the skills, each a form that sends "Use the
skill “x”." and what the person adds; and the plugins' resources, ticked to attach them to a
message (each stored as a file, like an upload). With script, typing "/" at the start of the
composer shows the same list (`?part=1`, the list alone) in a popover over the composer.

A new conversation's empty composer offers the same at `/new/A/prompts` (A: the agent picked):
nothing is written until something is sent, and then each form makes the conversation with
its first message, as the composer's first message does (POST /c).
"""
from __future__ import annotations

from dataclasses import dataclass

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath, FromQuery

from ..run import space
from ..plugins import prompts as mcp_prompts, stdio as mcp_stdio, tools as mcp_tools
from ..tables import Assistant, Conversation
from . import knowledge, render, uploads
from .templating import fragment
from .toolkit import agent_or_404, conversation_or_404, form_field, go, me, room_to_wait, worker

TEXT_MAX = 100_000
CHOSEN_MAX = 20  # resources attached to one message


@dataclass(frozen=True)
class Where:
    """Where "/" was opened: a conversation, or a new one with `agent` (none written yet)."""

    agent: Assistant | None
    convo: Conversation | None = None

    @property
    def base(self) -> str:
        """The path its forms post under: /c/N, or /new/A for a new conversation."""
        return f"/c/{self.convo.id}" if self.convo else f"/new/{self.agent.id}"


def in_conversation(request: Request, raw: str) -> Where:
    return of(request, conversation_or_404(request, raw))


def of(request: Request, convo: Conversation) -> Where:
    """A conversation checked already, with its agent (None when it was deleted)."""
    return Where(worker(request).store.agent(convo.agent) if convo.agent else None, convo)


def _offers_args(request: Request, where: Where) -> tuple[list, bool, bool]:
    s = worker(request)
    agent = where.agent
    if agent is None:
        return [], False, False
    owner = s.store.owner()
    return (s.store.plugins(agent.id, enabled_only=True),
            mcp_tools.private_ok(s.config.private_plugins, owner, agent.person),
            mcp_stdio.allowed(s.config.stdio_plugins, owner, agent.person))


async def _offers(request: Request, where: Where) -> list[mcp_prompts.Offers]:
    plugins, private_ok, stdio_ok = _offers_args(request, where)
    return await mcp_prompts.offers(plugins, private_ok=private_ok, stdio_ok=stdio_ok, tokens=worker(request).store)


def view(request: Request, where: Where, offers: list[mcp_prompts.Offers], *, part: bool = False,
         status_code: int = 200, problem: tuple[str, str] | None = None, typed: dict[str, str] | None = None
         ) -> Response:
    convo = where.convo
    back = f"/c/{convo.id}" if convo else f"/?agent={where.agent.id}"
    store = worker(request).store
    context = {"base": where.base, "back": back, "title": (convo.title if convo else "") or "New conversation",
               "offers": offers, "skills": store.skills(), "problem": problem,
               "pickable": store.pickable(convo.person if convo else me(request).id),
               "typed": typed or {}, "text_max": TEXT_MAX}
    if part:
        html = fragment("_prompts.html", csrf=render.csrf_token(request), **context)
        return Response(html, media_type="text/html", status_code=status_code)
    return render.page(request, "prompts.html", status_code=status_code, current=convo.id if convo else None,
                       **context)


@get("/c/{chat:str}/prompts")
async def prompts_page(request: Request, chat: FromPath[str], part: FromQuery[str] = "") -> Response:
    where = in_conversation(request, chat)
    return view(request, where, await _offers(request, where), part=part == "1")


@get("/new/{agent_id:str}/prompts")
async def new_prompts_page(request: Request, agent_id: FromPath[str], part: FromQuery[str] = "") -> Response:
    """What "/" offers on a new conversation's empty composer, with the agent picked there."""
    where = Where(agent_or_404(request, agent_id))
    return view(request, where, await _offers(request, where), part=part == "1")


def _plugin(request: Request, where: Where, raw: str):
    plugins, private_ok, stdio_ok = _offers_args(request, where)
    found = next((p for p in plugins if str(p.id) == raw.strip()), None)
    if found is None or (found.kind == "stdio" and not stdio_ok):
        raise HTTPException(status_code=400, detail="That plugin is not one this conversation's agent uses now.")
    return found, private_ok


def _send(request: Request, where: Where, text: str, files: list[tuple[str, bytes]], picks: str = "",
          outside: bool = False) -> Response:
    """The message, with its files (and its picks), in its conversation; for a new one, the
    conversation and its first message together (as POST /c writes them). `outside`: the
    text is a plugin's (a prompt), outside text for memories (docs/security.md)."""
    s = worker(request)
    if files and not space.Reserve(s.config.data).held():
        raise HTTPException(status_code=507, detail=space.NO_UPLOADS)
    person = where.convo.person if where.convo else me(request).id
    with s.store.write():  # the files and the message (and a new conversation) together, or none
        room_to_wait(s.store, person, where.convo.id if where.convo else None)
        uploads.room_for(s.store, s.config, person, uploads.sizes(files))
        ids = tuple(s.store.add_file(name, data, person=person) for name, data in files)
        if where.convo:
            s.store.ask(where.convo.id, text, files=ids, knowledge=picks, outside=outside)
            return go(request, f"/c/{where.convo.id}#end")
        convo, _ = s.store.start_conversation(where.agent.id, person, text, files=ids, knowledge=picks,
                                              outside=outside)
    return go(request, f"/c/{convo.id}")


def _where(request: Request, chat: str | None, agent_id: str | None) -> Where:
    return in_conversation(request, chat) if chat is not None else Where(agent_or_404(request, agent_id or ""))


@post("/c/{chat:str}/prompts")
async def send_prompt(request: Request, chat: FromPath[str]) -> Response:
    return await _send_prompt(request, _where(request, chat, None))


@post("/new/{agent_id:str}/prompts")
async def new_with_prompt(request: Request, agent_id: FromPath[str]) -> Response:
    return await _send_prompt(request, _where(request, None, agent_id))


async def _send_prompt(request: Request, where: Where) -> Response:
    """The prompt made with the arguments given, sent as the person's message."""
    p, private_ok = _plugin(request, where, await form_field(request, "plugin", 20))
    name = (await form_field(request, "prompt", 1_000)).strip()
    form = await request.form()
    given = {k[4:]: v for k, v in form.items() if k.startswith("arg.") and isinstance(v, str)}
    if any(len(v) > mcp_prompts.ARGUMENT_MAX for v in given.values()) or len(given) > 100:
        raise HTTPException(status_code=413, detail="Those arguments are too long.")
    tokens = worker(request).store  # where plugins connected with OAuth keep their tokens
    offers = await mcp_prompts.offers([p], private_ok=private_ok, stdio_ok=True, tokens=tokens)
    prompt = next((x for o in offers for x in o.prompts if x.name == name), None)
    key = f"{p.id}/{name}"
    if prompt is None:
        problem = offers[0].problem if offers and offers[0].problem else f"{p.name} has no prompt “{name}” now."
        return view(request, where, await _offers(request, where), status_code=400, problem=("prompts", problem))
    if bad := mcp_prompts.check_arguments(prompt, given):
        return view(request, where, await _offers(request, where), status_code=400,
                    problem=(key, bad), typed={f"{key}/{k}": v for k, v in given.items()})
    arguments = {a.name: given.get(a.name, "") for a in prompt.arguments if given.get(a.name, "").strip()}
    try:
        text, files = await mcp_prompts.prompt_message(p, name, arguments, private_ok=private_ok, tokens=tokens)
    except mcp_prompts.PluginError as e:
        return view(request, where, await _offers(request, where), status_code=502, problem=(key, str(e)),
                    typed={f"{key}/{k}": v for k, v in given.items()})
    return _send(request, where, text, files, outside=True)


@post("/c/{chat:str}/skills")
async def send_skill(request: Request, chat: FromPath[str]) -> Response:
    return await _send_skill(request, _where(request, chat, None))


@post("/new/{agent_id:str}/skills")
async def new_with_skill(request: Request, agent_id: FromPath[str]) -> Response:
    return await _send_skill(request, _where(request, None, agent_id))


async def _send_skill(request: Request, where: Where) -> Response:
    name = (await form_field(request, "skill", 200)).strip()
    more = (await form_field(request, "text", TEXT_MAX)).strip()
    if not any(sk.name == name for sk in worker(request).store.skills()):
        raise HTTPException(status_code=400, detail=f"There is no skill “{name[:80]}”.")
    return _send(request, where, f"Use the skill “{name}”." + (f"\n\n{more}" if more else ""), [])


async def _chosen(request: Request) -> list[str]:
    form = await request.form()
    chosen = [v for v in form.getall("resource") if isinstance(v, str)] if "resource" in form else []
    if len(chosen) > CHOSEN_MAX or any(len(v) > 4_000 for v in chosen):
        raise HTTPException(status_code=400, detail=f"At most {CHOSEN_MAX} resources a message.")
    return chosen


async def _read(request: Request, where: Where, chosen: list[str]) -> list[tuple[str, bytes]]:
    """The chosen resources ("PLUGIN_ID URI") read as files; ValueError says why not."""
    files: list[tuple[str, bytes]] = []
    for value in chosen:
        plugin_id, _, uri = value.partition(" ")
        p, private_ok = _plugin(request, where, plugin_id)
        try:
            files += await mcp_prompts.resource_files(p, uri, private_ok=private_ok, tokens=worker(request).store)
        except mcp_prompts.PluginError as e:
            raise ValueError(str(e)) from None
    limit = worker(request).config.upload_max
    if big := next((n for n, data in files if len(data) > limit), None):
        raise ValueError(f"{big} is larger than a file may be ({limit:,} bytes).")
    return files


async def attached_resources(request: Request, where: Where) -> list[tuple[str, bytes]]:
    """The resources the composer attached (`resource` fields, put there by the "/" list with
    script), read as files to store with the message; a clear 4xx/502 when one cannot be."""
    chosen = await _chosen(request)
    if not chosen:
        return []
    try:
        return await _read(request, where, chosen)
    except ValueError as e:
        raise HTTPException(status_code=502, detail=f"Not sent: {e}") from None


@post("/c/{chat:str}/resources")
async def send_resources(request: Request, chat: FromPath[str]) -> Response:
    return await _send_resources(request, _where(request, chat, None))


@post("/new/{agent_id:str}/resources")
async def new_with_resources(request: Request, agent_id: FromPath[str]) -> Response:
    return await _send_resources(request, _where(request, None, agent_id))


async def _send_resources(request: Request, where: Where) -> Response:
    """The ticked resources, each read and stored as a file, attached to the message."""
    chosen = await _chosen(request)
    text = (await form_field(request, "text", TEXT_MAX)).strip()
    if not chosen:
        return view(request, where, await _offers(request, where), status_code=400,
                    problem=("resources", "Tick at least one resource to attach."), typed={"text": text})
    try:
        files = await _read(request, where, chosen)
    except ValueError as e:
        return view(request, where, await _offers(request, where), status_code=502, problem=("resources", str(e)),
                    typed={"text": text})
    return _send(request, where, text or "Attached: " + ", ".join(n for n, _ in files), files)


@post("/c/{chat:str}/knowledge")
async def send_picks(request: Request, chat: FromPath[str]) -> Response:
    return await _send_picks(request, _where(request, chat, None))


@post("/new/{agent_id:str}/knowledge")
async def new_with_picks(request: Request, agent_id: FromPath[str]) -> Response:
    return await _send_picks(request, _where(request, None, agent_id))


async def _send_picks(request: Request, where: Where) -> Response:
    """A message with the collections and documents ticked to search for it (the page's form,
    without script; with script they are picked into the composer instead)."""
    person = where.convo.person if where.convo else me(request).id
    picks = await knowledge.picks_field(request, worker(request).store, person)
    text = (await form_field(request, "text", TEXT_MAX)).strip()
    problem = ("Tick a collection or document to search." if not picks else
               "Write what to ask of them." if not text else "")
    if problem:
        return view(request, where, await _offers(request, where), status_code=400, problem=("knowledge", problem),
                    typed={"text": text})
    return _send(request, where, text, [], picks)


routes = [prompts_page, new_prompts_page, send_prompt, new_with_prompt, send_skill, new_with_skill, send_resources,
          new_with_resources, send_picks, new_with_picks]
