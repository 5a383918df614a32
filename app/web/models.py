"""Models: the list of what every model server offers now, read again on demand."""
from __future__ import annotations

from urllib.parse import quote

from litestar import Request, Response, get, post
from litestar.response import Redirect

from ..providers.ids import groups
from . import render
from .state import state


def local_path(raw: object) -> str:
    """Where to go back to: a path on this site only (never //host or a scheme)."""
    if isinstance(raw, str) and raw.startswith("/") and not raw.startswith("//") and "\\" not in raw and len(raw) < 2000:
        return raw
    return "/"


@post("/models/refresh")
async def refresh(request: Request) -> Response:
    """Ask every model server for its models again (a server started or a model pulled since)."""
    s = state(request)
    await s.runner.refresh_choices()
    to = local_path((await request.form()).get("next"))
    if render.is_htmx(request):
        # The pickers are not followed live: the page loads again to show the new list.
        return Response(b"", status_code=204, headers={"HX-Redirect": quote(to, safe="/?&=%:@+,;~-._!*'()")})
    return Redirect(to, status_code=303)


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
