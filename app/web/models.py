"""Models: the list of what every model server offers now, read again on demand."""
from __future__ import annotations

from litestar import Request, Response, get, post

from ..providers.ids import groups
from ..run.choices import refresh_choices
from . import answering
from .templating import fragment
from .toolkit import agent_or_404, go, is_htmx, local_path, me, worker


@post("/models/refresh")
async def refresh(request: Request) -> Response:
    """Ask every model server for its models again (a server started or a model pulled since).
    From the composer's Refresh with script: its picker anew; else the page loads again."""
    s = worker(request)
    await refresh_choices(s.store, s.providers)
    form = await request.form()
    if is_htmx(request) and request.query_params.get("picker"):  # the composer's Refresh, with script
        return picked(request, form.get("model"), form.get("next"))
    return go(request, local_path(form.get("next")))


def picked(request: Request, model: object, here: object) -> Response:
    """The composer's model picker; `?agent=ID`: the agent that answers, whose model it names
    while nothing is picked (web/answering.py)."""
    raw = request.query_params.get("agent")
    agent = agent_or_404(request, raw) if raw else None
    model = model if isinstance(model, str) else ""
    html = fragment("_picker.html", **answering.composer(worker(request), me(request).id, agent, model), model=model,
                    agent=agent,
                    here=local_path(here))
    return Response(html, media_type="text/html", status_code=200)


@get("/models/picker")
async def picker(request: Request) -> Response:
    """The composer's model picker as the list stands now (it asks for itself while a server is down)."""
    return picked(request, request.query_params.get("model"), request.query_params.get("next"))


@get("/models")
async def listing(request: Request) -> dict:
    """The model list as data, by group, with each provider's state (for scripts and checks)."""
    return {"groups": [
        {"title": title, "models": [
            {"id": c.id, "name": c.name, "window": c.window, "tags": list(c.tags)} for c in members if c.up],
         "notes": [f"{c.name}: {c.note}" for c in members if not c.up]}
        for title, members in groups(worker(request).store.choices_for(me(request).id))
    ]}


routes = [refresh, picker, listing]
