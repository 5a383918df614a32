"""An agent's page: each tab with what it shows, and the way back to it after a save (its
forms are in agents.py and plugins.py, which show it again beside a refusal)."""
from __future__ import annotations

from litestar import Request, Response

from ..plugins import tools as mcp_tools
from ..tables import Assistant, NAME_MAX
from ..context.window import tools_tokens
from ..tools import Tool, allowed, chosen, memory, names, unique
from ..tools.standard import builtin_tools
from ..providers.thinking import THINKING
from ..serve.worker import Worker
from . import plugin_listings, render
from .toolkit import SUGGESTIONS_MAX, go, me

TABS = ("settings", "tools", "plugins", "knowledge", "memory")
PLUGIN_NAME_MAX = 40  # a plugin's name begins each of its tools' names (64 characters at most)


def back(request: Request, agent: Assistant, tab: str, saved: str) -> Response:
    return go(request, f"/agents/{agent.id}?tab={tab}&saved={saved}")


async def offered_tools(s: Worker, agent: Assistant) -> list[tuple[str, list[Tool], str]]:
    """(group title, tools, note) for the Tools tab: built-in, then each enabled plugin."""
    groups: list[tuple[str, list[Tool], str]] = [("Built in", builtin_tools(), "")]
    taken = {t.name for t in groups[0][1]}
    for p in s.store.plugins(agent.id, enabled_only=True):
        listing = await plugin_listings.listing_of(s, agent, p)
        # the names the model is given (run/setup.py: Setup.tools_for): a clash renames the later tool
        note = "" if mcp_tools.status_ok(listing.status) else (
            f"{listing.status}: these are its tools as listed before" if listing.tools and "as listed before"
            not in listing.status else listing.status)
        groups.append((f"Plugin {p.name}", unique(listing.tools, taken), note))
    return groups


async def tools_weight(s: Worker, agent: Assistant) -> tuple[int, int, str] | None:
    """(tokens, window, model) when the tools the agent may use take more than half its model's
    window: each request carries them all, so the conversation has little room left. None
    when they fit, or its model's window is not known."""
    model = agent.model or s.config.ai_model
    window = (s.store.limits(model).window or s.store.model_window(model) if model else 0) or s.config.context_window
    if not window:
        return None
    tools = allowed([t for _, group, _ in await offered_tools(s, agent) for t in group], agent.tools)
    tokens = tools_tokens(tools)
    return (tokens, window, model) if tokens * 2 > window else None


async def agent_view(request: Request, s: Worker, agent: Assistant, tab: str, status_code: int = 200, saved: str = "",
                     problem: tuple[str, str] | None = None, typed: dict[str, str] | None = None,
                     plugin_typed: dict[str, str] | None = None, editing: int | None = None,
                     created: bool = False) -> Response:
    """An agent's tab; after a refusal, with the message beside its field (`problem`) and the
    form as the person typed it (`typed`: the settings, `plugin_typed`: the plugin form);
    `created`: just made, which the page says at its top (not beside Save, below the fold)."""
    fields = ("name", "instructions", "model", "thinking", "suggestions")
    context = {"agent": agent, "tab": tab, "tabs": TABS, "name_max": NAME_MAX, "thinking_levels": THINKING,
               "suggestions_max": SUGGESTIONS_MAX, "saved": saved, "problem": problem,
               "typed": typed or {k: getattr(agent, k) for k in fields},
               "plugin_typed": plugin_typed or {}, "editing": editing, "created": created}
    if tab == "settings":
        context["choices"] = s.store.choices_for(agent.person)
    elif tab == "tools":
        context["groups"] = await offered_tools(s, agent)
        context["use"] = names(agent.tools)
        context["chosen"] = chosen
        context["approve"] = names(agent.approve)
    elif tab == "plugins":
        context["plugins"] = await plugin_listings.rows(s, agent)
        context["oauth"] = s.store.plugins_with_auth([row[0].id for row in context["plugins"]])  # web/oauth.py
        context["masked"] = mcp_tools.masked
        context["stdio_ok"] = plugin_listings.stdio_ok(s, agent)
        context["name_max"] = PLUGIN_NAME_MAX
        context["heavy"] = await tools_weight(s, agent)
    elif tab == "knowledge":
        context["collections"] = s.store.collections(me(request).id)
        context["given"] = set(s.store.agent_collections(agent.id))
    elif tab == "memory":
        context["memories"] = s.store.memories(agent.id)
        context["memory_max"] = memory.TEXT_MAX
    return render.page(request, "agent.html", status_code=status_code, **context)
