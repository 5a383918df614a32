"""Prompts, skills and resources for a conversation's composer.

`/c/N/prompts` is a plain page (linked from the composer, so it works without script):
the agent's plugins' prompts, each with a small form of its arguments that sends what the
plugin makes of them as the person's message; the skills, each a form that sends "Use the
skill “x”." and what the person adds; and the plugins' resources, ticked to attach them to a
message (each stored as a file, like an upload). With script, typing "/" at the start of the
composer shows the same list (`?part=1`, the list alone) in a popover over the composer.
"""
from __future__ import annotations

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath, FromQuery

from .. import space
from ..plugins import prompts as mcp_prompts, stdio as mcp_stdio, tools as mcp
from ..tables import Conversation
from . import render
from .request import conversation_or_404, form_field, go, state

TEXT_MAX = 100_000
CHOSEN_MAX = 20  # resources attached to one message


def _offers_args(request: Request, convo: Conversation) -> tuple[list, bool, bool]:
    s = state(request)
    agent = s.store.agent(convo.agent) if convo.agent else None
    if agent is None:
        return [], False, False
    owner = s.store.owner()
    return (s.store.plugins(agent.id, enabled_only=True),
            mcp.private_ok(s.config.private_plugins, owner, agent.person),
            mcp_stdio.allowed(s.config.stdio_plugins, owner, agent.person))


async def _offers(request: Request, convo: Conversation) -> list[mcp_prompts.Offers]:
    plugins, private_ok, stdio_ok = _offers_args(request, convo)
    return await mcp_prompts.offers(plugins, private_ok=private_ok, stdio_ok=stdio_ok)


def view(request: Request, convo: Conversation, offers: list[mcp_prompts.Offers], *, part: bool = False,
         status_code: int = 200, problem: tuple[str, str] | None = None, typed: dict[str, str] | None = None
         ) -> Response:
    context = {"convo": convo, "offers": offers, "skills": state(request).store.skills(), "problem": problem,
               "typed": typed or {}, "text_max": TEXT_MAX}
    if part:
        html = render.fragment("_prompts.html", csrf=render.csrf_token(request), **context)
        return Response(html, media_type="text/html; charset=utf-8", status_code=status_code)
    return render.page(request, "prompts.html", status_code=status_code, current=convo.id, **context)


@get("/c/{chat:str}/prompts")
async def prompts_page(request: Request, chat: FromPath[str], part: FromQuery[str] = "") -> Response:
    convo = conversation_or_404(request, chat)
    return view(request, convo, await _offers(request, convo), part=part == "1")


def _plugin(request: Request, convo: Conversation, raw: str):
    plugins, private_ok, stdio_ok = _offers_args(request, convo)
    found = next((p for p in plugins if str(p.id) == raw.strip()), None)
    if found is None or (found.kind == "stdio" and not stdio_ok):
        raise HTTPException(status_code=400, detail="That plugin is not one this conversation's agent uses now.")
    return found, private_ok


def _send(request: Request, convo: Conversation, text: str, files: list[tuple[str, bytes]]) -> Response:
    s = state(request)
    if files and not space.Reserve(s.config.data).held():
        raise HTTPException(status_code=507, detail=space.NO_UPLOADS)
    with s.store.write():  # the files and the message together, or neither
        ids = tuple(s.store.add_file(name, data, person=convo.person) for name, data in files)
        s.store.ask(convo.id, text, files=ids)
    return go(request, f"/c/{convo.id}#end")


@post("/c/{chat:str}/prompts")
async def send_prompt(request: Request, chat: FromPath[str]) -> Response:
    """The prompt made with the arguments given, sent as the person's message."""
    convo = conversation_or_404(request, chat)
    p, private_ok = _plugin(request, convo, await form_field(request, "plugin", 20))
    name = (await form_field(request, "prompt", 1_000)).strip()
    form = await request.form()
    given = {k[4:]: v for k, v in form.items() if k.startswith("arg.") and isinstance(v, str)}
    if any(len(v) > mcp_prompts.ARGUMENT_MAX for v in given.values()) or len(given) > 100:
        raise HTTPException(status_code=413, detail="Those arguments are too long.")
    offers = await mcp_prompts.offers([p], private_ok=private_ok, stdio_ok=True)
    prompt = next((x for o in offers for x in o.prompts if x.name == name), None)
    key = f"{p.id}/{name}"
    if prompt is None:
        problem = offers[0].problem if offers and offers[0].problem else f"{p.name} has no prompt “{name}” now."
        return view(request, convo, await _offers(request, convo), status_code=400, problem=("prompts", problem))
    if bad := mcp_prompts.check_arguments(prompt, given):
        return view(request, convo, await _offers(request, convo), status_code=400,
                    problem=(key, bad), typed={f"{key}/{k}": v for k, v in given.items()})
    arguments = {a.name: given.get(a.name, "") for a in prompt.arguments if given.get(a.name, "").strip()}
    try:
        text, files = await mcp_prompts.prompt_message(p, name, arguments, private_ok=private_ok)
    except mcp_prompts.PluginError as e:
        return view(request, convo, await _offers(request, convo), status_code=502, problem=(key, str(e)),
                    typed={f"{key}/{k}": v for k, v in given.items()})
    return _send(request, convo, text, files)


@post("/c/{chat:str}/skills")
async def send_skill(request: Request, chat: FromPath[str]) -> Response:
    convo = conversation_or_404(request, chat)
    name = (await form_field(request, "skill", 200)).strip()
    more = (await form_field(request, "text", TEXT_MAX)).strip()
    if not any(sk.name == name for sk in state(request).store.skills()):
        raise HTTPException(status_code=400, detail=f"There is no skill “{name[:80]}”.")
    return _send(request, convo, f"Use the skill “{name}”." + (f"\n\n{more}" if more else ""), [])


async def _chosen(request: Request) -> list[str]:
    form = await request.form()
    chosen = [v for v in form.getall("resource") if isinstance(v, str)] if "resource" in form else []
    if len(chosen) > CHOSEN_MAX or any(len(v) > 4_000 for v in chosen):
        raise HTTPException(status_code=400, detail=f"At most {CHOSEN_MAX} resources a message.")
    return chosen


async def _read(request: Request, convo: Conversation, chosen: list[str]) -> list[tuple[str, bytes]]:
    """The chosen resources ("PLUGIN_ID URI") read as files; ValueError says why not."""
    files: list[tuple[str, bytes]] = []
    for value in chosen:
        plugin_id, _, uri = value.partition(" ")
        p, private_ok = _plugin(request, convo, plugin_id)
        try:
            files += await mcp_prompts.resource_files(p, uri, private_ok=private_ok)
        except mcp_prompts.PluginError as e:
            raise ValueError(str(e)) from None
    limit = state(request).config.upload_max
    if big := next((n for n, data in files if len(data) > limit), None):
        raise ValueError(f"{big} is larger than a file may be ({limit:,} bytes).")
    return files


async def attached_resources(request: Request, convo: Conversation) -> list[tuple[str, bytes]]:
    """The resources the composer attached (`resource` fields, put there by the "/" list with
    script), read as files to store with the message; a clear 4xx/502 when one cannot be."""
    chosen = await _chosen(request)
    if not chosen:
        return []
    try:
        return await _read(request, convo, chosen)
    except ValueError as e:
        raise HTTPException(status_code=502, detail=f"Not sent: {e}") from None


@post("/c/{chat:str}/resources")
async def send_resources(request: Request, chat: FromPath[str]) -> Response:
    """The ticked resources, each read and stored as a file, attached to the message."""
    convo = conversation_or_404(request, chat)
    chosen = await _chosen(request)
    text = (await form_field(request, "text", TEXT_MAX)).strip()
    if not chosen:
        return view(request, convo, await _offers(request, convo), status_code=400,
                    problem=("resources", "Tick at least one resource to attach."), typed={"text": text})
    try:
        files = await _read(request, convo, chosen)
    except ValueError as e:
        return view(request, convo, await _offers(request, convo), status_code=502, problem=("resources", str(e)),
                    typed={"text": text})
    return _send(request, convo, text or "Attached: " + ", ".join(n for n, _ in files), files)


routes = [prompts_page, send_prompt, send_skill, send_resources]
