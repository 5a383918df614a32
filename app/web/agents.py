"""Agents: the list, each agent's page and the forms of its settings, tools, knowledge and
memory tabs, deleting one (the plugins tab's forms are in plugins.py; what a tab shows is in
agent_view.py)."""
from __future__ import annotations

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, FromQuery

from ..tables import Assistant, NAME_MAX, check_name
from ..tools import memory, names
from ..serve.worker import Worker
from . import plugins as plugin_pages, render
from .agent_view import TABS, agent_view, back, offered_tools
from .plugin_listings import forget_listings
from .toolkit import SUGGESTIONS_MAX, agent_or_404, form_field, go, me, parse_id, worker, thinking_level

INSTRUCTIONS_MAX = 50_000
SUGGESTION_MAX = 200  # characters of one suggestion



# What the agent pages say after a save (`?saved=KEY`; only these keys, never the URL's text).
SAVED = {"settings": "Saved.", "tools": "Saved.", "created": "Agent created: give it instructions and a model.",
         "added": "Plugin added.", "edited": "Plugin saved.", "enabled": "Plugin enabled.", "disabled": "Plugin disabled.",
         "deleted": "Plugin deleted.", "refreshed": "Plugin read again.", "forgotten": "Memory deleted.", "memory": "Saved.",
         "remembered": "Memory added: the agent reads it from its next answer.", "memory-edited": "Memory saved.",
         "knowledge": "Saved: the agent searches these collections from its next answer.",
         "agent-deleted": "Agent deleted.", "connected": "Connected with OAuth.",
         "disconnected": "Disconnected: its OAuth tokens are forgotten."}


def name_problem(name: str) -> str:
    """Why a name (already stripped) is refused, or '' when it is fine."""
    try:
        check_name(name)
    except ValueError as e:
        return f"The name: {e}."
    return ""


@get("/agents")
async def agents(request: Request) -> Response:
    saved = SAVED.get(request.query_params.get("saved", ""), "")
    return agents_view(request, saved=saved)


def agents_view(request: Request, status_code: int = 200, saved: str = "", problem: tuple[str, str] | None = None,
                name: str = "") -> Response:
    store = worker(request).store
    listed = store.agents(me(request).id)
    return render.page(request, "agents.html", status_code=status_code, agents=listed,
                       counts={a.id: store.conversations_count(agent=a.id) for a in listed},
                       name_max=NAME_MAX, saved=saved, problem=problem, name=name)


@post("/agents")
async def create_agent(request: Request) -> Response:
    s = worker(request)
    name = (await form_field(request, "name", 10_000)).strip()
    if problem := name_problem(name):
        return agents_view(request, status_code=400, problem=("name", problem), name=name)
    agent = s.store.add_agent(Assistant(name=name, instructions="", person=me(request).id))
    return back(request, agent, "settings", "created")


@get("/agents/{agent_id:str}")
async def agent_page(request: Request, agent_id: FromPath[str], tab: FromQuery[str] = "settings",
                     saved: FromQuery[str] = "") -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    return await agent_view(request, s, agent, tab if tab in TABS else "settings", saved=SAVED.get(saved, ""),
                            created=saved == "created")


@post("/agents/{agent_id:str}")
async def save_settings(request: Request, agent_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    name = (await form_field(request, "name", 10_000)).strip()
    instructions = (await form_field(request, "instructions", INSTRUCTIONS_MAX)).strip()
    model = (await form_field(request, "model", 200)).strip()
    thinking = thinking_level(await form_field(request, "thinking", 20))
    form = await request.form()
    offered = (await form_field(request, "suggestions", SUGGESTION_MAX * SUGGESTIONS_MAX * 2)
               if "suggestions" in form else None)
    typed = {"name": name, "instructions": instructions, "model": model, "thinking": thinking,
             "suggestions": agent.suggestions if offered is None else offered}
    if problem := name_problem(name):
        return await agent_view(request, s, agent, "settings", 400, problem=("name", problem), typed=typed)
    if model and model != agent.model and (s.store.choice(model) is None or not s.store.may_use(agent.person, model)):
        return await agent_view(request, s, agent, "settings", 400, typed=typed,
                                problem=("model", f"There is no model “{model}” to choose now: pick another."))
    changes = {"name": name, "instructions": instructions, "model": model, "thinking": thinking}
    if offered is not None:  # a form from before the field leaves them be
        try:
            changes["suggestions"] = suggestions(offered)
        except ValueError as e:
            return await agent_view(request, s, agent, "settings", 400, typed=typed, problem=("suggestions", str(e)))
    s.store.update_agent(agent.id, **changes)
    return back(request, agent, "settings", "settings")


def suggestions(raw: str) -> str:
    """An agent's suggestions, one a line, checked: at most SUGGESTIONS_MAX lines of SUGGESTION_MAX
    characters (ValueError says which limit, shown beside the field)."""
    lines = [" ".join(line.split()) for line in raw.splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > SUGGESTIONS_MAX:
        raise ValueError(f"At most {SUGGESTIONS_MAX} suggestions, one a line.")
    long = next((line for line in lines if len(line) > SUGGESTION_MAX), None)
    if long is not None:
        raise ValueError(f"A suggestion is at most {SUGGESTION_MAX} characters: “{long[:40]}…”.")
    return "\n".join(lines)


@post("/agents/{agent_id:str}/tools")
async def save_tools(request: Request, agent_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    form = await request.form()
    shown = {v for v in form.getall("shown") if isinstance(v, str)} if "shown" in form else set()
    use = {v for v in form.getall("use") if isinstance(v, str)} if "use" in form else set()
    approve = {v for v in form.getall("approve") if isinstance(v, str)} if "approve" in form else set()
    if any(len(v) > 200 for v in shown | use | approve) or len(shown) > 2_000:
        raise HTTPException(status_code=400, detail="Those tool names are not ones this page offered.")
    # Every offered tool checked means "every tool", plugins' later tools included. Tools not
    # on the page now (a plugin that is down) keep the choice made before. Choices are kept by
    # identity; one saved under a shown tool's name (before identities) is replaced by it.
    # A plugin whose every tool is ticked is kept as "every tool of it" (plugin7.*): the tools
    # it lists later are ticked too.
    use &= shown
    groups = await offered_tools(s, agent)
    old_names = {t.name for _, tools, _ in groups for t in tools if t.identity in shown}
    kept, every, on_page = set(use), set(), set()
    for _, tools, _ in groups:
        plugin = {t.identity.split(".", 1)[0] for t in tools if t.identity.startswith("plugin") and "." in t.identity}
        if len(plugin) != 1:
            continue
        on_page |= {f"{plugin.pop()}.*"}
        mine = {t.identity for t in tools if t.identity in shown}
        if mine and mine <= use:
            kept -= mine
            every.add(f"{next(iter(mine)).split('.', 1)[0]}.*")
    before = names(agent.tools) - shown - old_names - on_page
    tools = "" if use == shown else ",".join(sorted(kept | every | before))
    approved = (approve & shown) | (names(agent.approve) - shown - old_names)
    s.store.update_agent(agent.id, tools=tools, approve=",".join(sorted(approved)))
    return back(request, agent, "tools", "tools")


@post("/agents/{agent_id:str}/knowledge")
async def save_knowledge(request: Request, agent_id: FromPath[str]) -> Response:
    """The collections the agent searches: of those the person may use (their own or shared)."""
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    form = await request.form()
    may = {c.id for c in s.store.collections(me(request).id)}
    picked = {parse_id(v, "collection") for v in form.getall("collection") if isinstance(v, str)} \
        if "collection" in form else set()
    if picked - may:
        raise HTTPException(status_code=400, detail="One of those collections is not yours to give, or is gone.")
    s.store.set_agent_collections(agent.id, picked)
    return back(request, agent, "knowledge", "knowledge")


@post("/agents/{agent_id:str}/memories")
async def save_memory_settings(request: Request, agent_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    vet = await form_field(request, "vet", 10)
    s.store.update_agent(agent.id, vet_memories=int(vet == "1"))
    return back(request, agent, "memory", "memory")


async def memory_text(request: Request) -> str:
    """A memory as the person wrote it: one statement, as the remember tool keeps them."""
    text = (await form_field(request, "text", memory.TEXT_MAX * 4)).strip()
    if not text:
        raise HTTPException(status_code=400, detail="A memory cannot be empty.")
    if len(text) > memory.TEXT_MAX:
        raise HTTPException(status_code=400, detail=f"A memory is at most {memory.TEXT_MAX:,} characters.")
    return text


@post("/agents/{agent_id:str}/memories/add")
async def add_memory(request: Request, agent_id: FromPath[str]) -> Response:
    """A memory the person gives the agent by hand (as remember would keep it, but not from
    outside text: never marked so)."""
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    text = await memory_text(request)
    with s.store.write():  # the check and the insert at once, as remember does
        if not any(memory.same(m["text"], text) for m in s.store.memories(agent.id)):
            s.store.add_memory(agent.id, text)
    return back(request, agent, "memory", "remembered")


@post("/agents/{agent_id:str}/memories/{memory_id:str}")
async def edit_memory(request: Request, agent_id: FromPath[str], memory_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    if not s.store.set_memory(agent.id, parse_id(memory_id, "memory"), await memory_text(request)):
        raise NotFoundException("No such memory.")
    return back(request, agent, "memory", "memory-edited")


@post("/agents/{agent_id:str}/memories/{memory_id:str}/delete")
async def delete_memory(request: Request, agent_id: FromPath[str], memory_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    if not s.store.delete_memory(agent.id, parse_id(memory_id, "memory")):
        raise NotFoundException("No such memory.")
    return back(request, agent, "memory", "forgotten")


@get("/agents/{agent_id:str}/delete")
async def confirm_delete(request: Request, agent_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    return delete_view(request, s, agent)


def delete_view(request: Request, s: Worker, agent: Assistant, status_code: int = 200, problem: str = "") -> Response:
    count = s.store.conversations_count(agent=agent.id)
    return render.page(request, "agent_delete.html", status_code=status_code, agent=agent, conversations=count,
                       problem=problem)


@post("/agents/{agent_id:str}/delete")
async def delete_agent(request: Request, agent_id: FromPath[str]) -> Response:
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    if len(s.store.agents(me(request).id)) == 1:
        return delete_view(request, s, agent, 409, "This is your only agent: make another before deleting it.")
    s.store.delete_agent(agent.id)
    forget_listings(s)
    return go(request, "/agents?saved=agent-deleted")


routes = [agents, create_agent, agent_page, save_settings, save_tools, *plugin_pages.routes,
          save_knowledge, save_memory_settings, add_memory, edit_memory, delete_memory, confirm_delete, delete_agent]
