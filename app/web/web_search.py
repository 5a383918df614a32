"""The owner's choice of web search provider, on the People page: which one, its address
(SearXNG's; a hosted one's own unless given), and the key (saved sealed, never shown again:
an empty field keeps it, a box forgets it)."""
from __future__ import annotations

from litestar import Request, Response, post

from ..tools.search_providers import KEYED, choice_problem
from .account_view import people_view
from .toolkit import form_field, go, owner_only, worker

SAVED = {"web_search": "Saved: agents given web_search search with this now."}


@post("/people/web-search")
async def choose_provider(request: Request) -> Response:
    owner_only(request)
    store = worker(request).store
    kind = (await form_field(request, "kind", 20)).strip()
    address = (await form_field(request, "address", 2000)).strip()
    key = (await form_field(request, "key", 2000)).strip()
    forget = (await form_field(request, "forget", 5)) == "1"
    saved = store.search_key_saved() and not forget
    if problem := choice_problem(kind, address, key, saved):
        return people_view(request, 400, search_error=problem, search_typed={"kind": kind, "address": address})
    store.choose_search_provider(kind, address, key if key and kind in KEYED else ("" if forget else None))
    return go(request, "/people?saved=web_search#web-search")


routes = [choose_provider]
