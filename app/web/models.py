"""Models: the list of what every model server offers now, read again on demand."""
from __future__ import annotations

from litestar import Request, Response, get, post

from ..providers.ids import groups
from .request import go, local_path, state


@post("/models/refresh")
async def refresh(request: Request) -> Response:
    """Ask every model server for its models again (a server started or a model pulled since)."""
    s = state(request)
    await s.runner.refresh_choices()
    # The pickers are not followed live: the page loads again to show the new list.
    return go(request, local_path((await request.form()).get("next")))


@get("/models")
async def listing(request: Request) -> dict:
    """The model list as data, by group, with each provider's state (for scripts and checks)."""
    return {"groups": [
        {"title": title, "models": [
            {"id": c.id, "name": c.name, "window": c.window, "tags": list(c.tags)} for c in members if c.up],
         "notes": [f"{c.name}: {c.note}" for c in members if not c.up]}
        for title, members in groups(state(request).store.choices())
    ]}


routes = [refresh, listing]
