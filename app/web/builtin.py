"""The built-in model's page part and its own page: the owner chooses it (POST /model/builtin),
and every open page follows its install and its server live (`builtin_changes`, from the
feed); on /model the owner sees the models on this computer (SmolLM2 and the GGUF files
brought into data/models/, each checked by its header), adds one by uploading its file
(POST /model/upload: model_upload.py), chooses the one served (POST /model/use) and removes a
brought one (POST /model/remove)."""
from __future__ import annotations

import asyncio

from litestar import Request, Response, get, post
from litestar.params import FromQuery

from ..builtin import brought, upload
from ..tables import Builtin
from ..store import Store
from . import render
from .templating import fragment
from .toolkit import came_from, done, form_field, go, owner_only, worker

SAVED = {"used": "Chosen: it is served in a few seconds.", "removed": "Removed.",
         "uploaded": "Uploaded: it is listed below. Serve it when you like."}


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


async def models_page(request: Request, problem: str = "", status: int = 200, saved: str = "",
                      uploading: str = "") -> Response:
    """/model; `problem`: why a choice was refused, `uploading`: why an upload was (said in its form)."""
    s = worker(request)
    found = await asyncio.to_thread(brought.found, s.config.data)  # headers read from disk (cached)
    return render.page(request, "model.html", status_code=status, b=s.store.builtin(), models=found,
                       folder=brought.folder(s.config.data), window_max=brought.WINDOW_MAX, problem=problem,
                       saved=SAVED.get(saved, ""), upload_max=upload.amount(s.config.model_upload_max),
                       uploading=uploading)


@get("/model")
async def model_page(request: Request, saved: FromQuery[str] = "") -> Response:
    """The built-in model's own page (the owner's alone): its state and the models it can serve."""
    owner_only(request)
    return await models_page(request, saved=saved)


@post("/model/use")
async def use(request: Request) -> Response:
    """Serve another model: SmolLM2 ('') or a brought file that checks; the supervisor switches."""
    owner_only(request)
    s = worker(request)
    file = await form_field(request, "model", 300)
    if file:
        found = await asyncio.to_thread(brought.one, s.config.data, file)
        if found is None or found.problem:
            why = found.problem if found else f"there is no {file} in {brought.folder(s.config.data)}"
            return await models_page(request, f"{file} cannot be served: {why}.", 400)
    if s.store.builtin().state != "ready":
        return await models_page(request, "Install the built-in model first: it is what serves a model.", 409)
    s.store.use_builtin_model(file)
    return go(request, "/model?saved=used")


@get("/model/remove")
async def confirm_remove(request: Request, model: FromQuery[str] = "") -> Response:
    owner_only(request)
    s = worker(request)
    found = await asyncio.to_thread(brought.one, s.config.data, model[:300])
    if found is None:
        return await models_page(request, f"There is no {model[:300]} in {brought.folder(s.config.data)} to remove.", 404)
    return render.page(request, "model_remove.html", m=found, folder=brought.folder(s.config.data),
                       served=s.store.builtin().model == found.file)


@post("/model/remove")
async def remove(request: Request) -> Response:
    """Take a brought model off this computer; the one served is switched from first."""
    owner_only(request)
    s = worker(request)
    file = await form_field(request, "model", 300)
    if s.store.builtin().model == file:
        s.store.use_builtin_model("")
    if not await asyncio.to_thread(brought.remove, s.config.data, file):
        return await models_page(request, f"There is no {file} in {brought.folder(s.config.data)} to remove.", 404)
    return go(request, "/model?saved=removed")


routes = [choose, model_page, use, confirm_remove, remove]
