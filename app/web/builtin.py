"""The built-in model's page part: the owner chooses it (POST /model/builtin), and every
open page follows its install and its server live (`builtin_changes`, from the feed)."""
from __future__ import annotations

from litestar import Request, Response, post

from ..tables import Builtin
from ..store import Store
from .templating import fragment
from .toolkit import came_from, done, owner_only, worker


def builtin_html(b: Builtin, owner: bool, oob: bool = False) -> str:
    return fragment("_builtin.html", b=b, owner=owner, oob=oob)


def builtin_changes(store: Store, b: Builtin, person: int | None) -> str:
    """The fragment for one person's open pages, when the row changed (the feed asks)."""
    return builtin_html(b, owner=person is not None and person == store.owner(), oob=True)


def builtin_catch_up(store: Store, person: int | None, cursor: int) -> str:
    """The fragment when the row changed after a page's cursor (a stream's first message)."""
    b = store.builtin()
    return builtin_changes(store, b, person) if cursor and b.rev > cursor else ""


@post("/model/builtin")
async def choose(request: Request) -> Response:
    """The owner chose the built-in model: `tabletalk serve` installs it, and the pages show how
    far it got. Anyone else: not found, as every owner's page."""
    owner_only(request)
    worker(request).store.want_builtin()
    return done(request, came_from(request, "/"))  # the live feed brings the progress


routes = [choose]
