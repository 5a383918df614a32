"""Whole pages: a page's template rendered with the person, their sidebar and the form token."""
from __future__ import annotations

from typing import Any

from litestar import Request, Response

from . import csrf, headers
from .sidebar import listing
from .templating import env


def csrf_token(request: Request) -> str:
    return csrf.token(request)


def page(request: Request, template: str, /, status_code: int = 200, framed: bool = False,
         **context: Any) -> Response:
    """A whole page (with the sidebar, when someone is signed in); `framed`: this site's own
    pages may frame it (headers.framed_by_this_site)."""
    me = getattr(request.state, "person", None)  # set by guard.authenticate; None signed out
    if me is not None and "side" not in context:  # every signed-in page has the sidebar
        context["side"] = listing(request.app.state.tabletalk.store, me.id, context.get("current"))
    context.setdefault("current", None)
    html = env.get_template(template).render(csrf=csrf_token(request), request=request, me=me, **context)
    response = Response(html, media_type="text/html", status_code=status_code)
    return headers.framed_by_this_site(response) if framed else response
