"""Connecting a plugin with OAuth (app/plugins/oauth.py): Connect and Disconnect on the agent's
Plugins tab, the page that sends the person to the plugin's sign-in, and the callback the
authorization server sends them back to. Plain forms and links: no script needed.

The sign-in is on another site, so the Connect form does not redirect there itself (the
Content-Security-Policy's `form-action 'self'` stops a form's redirect to another origin):
it leads to a page of ours with a link to the sign-in, saying where it goes."""
from __future__ import annotations

from urllib.parse import urlsplit

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath

from ..plugins import oauth as mcp_oauth, tools as mcp_tools
from ..tables import Plugin
from . import plugin_listings, render
from .toolkit import agent_or_404, form_field, go, parse_id, worker



def _plugin_or_404(request: Request, agent_id: str, plugin_id: str):
    s = worker(request)
    agent = agent_or_404(request, agent_id)
    p = s.store.plugin_row(parse_id(plugin_id, "plugin"))
    if p is None or p.agent != agent.id or p.kind == "stdio":
        raise NotFoundException("No such plugin.")
    return s, agent, p


def _private_ok(s, agent) -> bool:
    return mcp_tools.private_ok(s.config.private_plugins, s.store.owner(), agent.person)


async def _relisted(s, agent, p: Plugin) -> None:
    """The plugin read again now that its tokens changed, as Refresh reads it (web/plugins.py)."""
    await plugin_listings.read(s, agent, p)


@post("/agents/{agent_id:str}/plugins/{plugin_id:str}/oauth")
async def connect(request: Request, agent_id: FromPath[str], plugin_id: FromPath[str]) -> Response:
    s, agent, p = _plugin_or_404(request, agent_id, plugin_id)
    action = (await form_field(request, "action", 20)).strip()
    if action == "disconnect":
        s.store.forget_plugin_auth(p.id)
        await _relisted(s, agent, p)
        return go(request, f"/agents/{agent.id}?tab=plugins&saved=disconnected")
    if action != "connect":
        raise HTTPException(status_code=400, detail="The action is connect or disconnect.")
    site = str(request.base_url).rstrip("/")
    try:
        await mcp_oauth.begin(s.store, p, private_ok=_private_ok(s, agent), site=site)
    except mcp_oauth.OAuthProblem as e:
        s.store.update_plugin(p.id, status=str(e))
        return go(request, f"/agents/{agent.id}?tab=plugins")
    return go(request, f"/agents/{agent.id}/plugins/{p.id}/oauth")


@get("/agents/{agent_id:str}/plugins/{plugin_id:str}/oauth")
async def sign_in(request: Request, agent_id: FromPath[str], plugin_id: FromPath[str]) -> Response:
    """Where Connect leads: a link to the plugin's sign-in page, naming its site."""
    s, agent, p = _plugin_or_404(request, agent_id, plugin_id)
    pending = mcp_oauth._pending(s.store.plugin_auth(p.id))
    url = pending.get("url", "")
    if not url or pending.get("done"):
        return go(request, f"/agents/{agent.id}?tab=plugins")
    return render.page(request, "oauth.html", agent=agent, p=p, url=url, site=urlsplit(url).netloc)


@get(mcp_oauth.CALLBACK_PATH)
async def callback(request: Request) -> Response:
    """The authorization server sends the person back here with a code (or an error) and
    the flow's state."""
    s = worker(request)
    query = request.query_params
    flow_state = query.get("state", "")
    found = s.store.auth_flow(flow_state) if flow_state and len(flow_state) <= 200 else None
    if found is None:
        raise HTTPException(status_code=400, detail="This sign-in is not one Tabletalk is waiting for "
                                                    "(it was finished, or started again since). Connect again.")
    plugin_id, _ = found
    p = s.store.plugin_row(plugin_id)
    agent = agent_or_404(request, str(p.agent)) if p is not None else None  # another person's: 404
    if agent is None:
        raise NotFoundException("No such plugin.")
    code, error = query.get("code", ""), query.get("error", "")
    if not code and not error:
        raise HTTPException(status_code=400, detail="The sign-in came back with neither a code nor an error.")
    why = await mcp_oauth.came_back(s.store, p.id, code=code[:2000], iss=query.get("iss"), error=error[:100])
    if why:
        s.store.update_plugin(p.id, status=f"OAuth: {why}")
        return go(request, f"/agents/{agent.id}?tab=plugins")
    await _relisted(s, agent, p)
    return go(request, f"/agents/{agent.id}?tab=plugins&saved=connected")


routes = [connect, sign_in, callback]
