"""Skills: the list with its create and import forms, each skill's page, export and delete."""
from __future__ import annotations

import sqlite3

from litestar import Request, Response, get, post
from litestar.datastructures import UploadFile
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath
from litestar.response import Redirect
from markupsafe import Markup

from .. import markdown
from .. import skills as skillbook
from ..skills import DESCRIPTION_MAX, FILE_MAX, BadSkill
from ..store import Store
from ..tables import NAME_MAX, Skill
from . import render
from .chats import form_field, me
from .state import state

FIELD_MAX = FILE_MAX  # characters of one form field; the skill's own limits are checked after


def skill_or_404(store: Store, raw: str) -> Skill:
    skill_id = render.an_id(raw)
    found = store.skill(skill_id) if skill_id is not None else None
    if found is None:
        raise NotFoundException("No such skill.")
    return found


def to(request: Request, url: str) -> Response:
    if render.is_htmx(request):
        return Response(b"", status_code=204, headers={"HX-Redirect": url})
    return Redirect(url, status_code=303)


def unique(store: Store, new: Skill, own: int | None = None) -> None:
    """Names are unique, and two that differ only in case would confuse a model: refused too."""
    for s in store.skills():
        if s.id != own and skillbook.same_name(s.name, new.name):
            raise HTTPException(status_code=409, detail=f"A skill named “{s.name}” already exists: "
                                                        "choose another name, or edit that skill.")


def stored(store: Store, new: Skill, own: int | None = None) -> Skill:
    """Add (or, with `own`, update) a skill whose name is free."""
    unique(store, new, own)
    try:
        if own is None:
            return store.add_skill(new)
        store.update_skill(own, new)
        return store.skill(own)
    except sqlite3.IntegrityError:  # the same name, written by someone else just now
        raise HTTPException(status_code=409, detail=f"A skill named “{new.name}” already exists.") from None


async def from_form(request: Request) -> Skill:
    name = await form_field(request, "name", FIELD_MAX)
    description = await form_field(request, "description", FIELD_MAX)
    body = await form_field(request, "body", FIELD_MAX)
    try:
        return skillbook.checked(name, description, body)
    except BadSkill as e:
        raise HTTPException(status_code=400, detail=str(e)) from None


def editor(request: Request) -> None:
    """Skills are shared by everyone's agents: only the owner changes them."""
    if not me(request).owner:
        raise HTTPException(status_code=403, detail="Only the owner of this Tabletalk edits skills.")


def limits() -> dict[str, int]:
    return {"name_max": NAME_MAX, "description_max": DESCRIPTION_MAX, "file_kb": FILE_MAX // 1024}


@get("/skills")
async def skills_page(request: Request) -> Response:
    return render.page(request, "skills.html", skills=state(request).store.skills(), **limits())


@post("/skills")
async def create_skill(request: Request) -> Response:
    editor(request)
    s = state(request)
    added = stored(s.store, await from_form(request))
    return to(request, f"/skills/{added.id}")


@post("/skills/import")
async def import_skill(request: Request) -> Response:
    editor(request)
    s = state(request)
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise HTTPException(status_code=400, detail="Choose a SKILL.md file to import.")
    # The content type the browser claims says nothing: the bytes are checked instead.
    data = await upload.read(FILE_MAX + 1)
    try:
        new = skillbook.parsed(data)
    except BadSkill as e:
        status = 413 if len(data) > FILE_MAX else 400
        raise HTTPException(status_code=status, detail=f"{upload.filename[:100]}: {e}") from None
    added = stored(s.store, new)
    return to(request, f"/skills/{added.id}")


@get("/skills/{skill_id:str}")
async def skill_page(request: Request, skill_id: FromPath[str]) -> Response:
    found = skill_or_404(state(request).store, skill_id)
    return render.page(request, "skill.html", skill=found, confirm=False,
                       preview=Markup(markdown.render(found.body)), **limits())


@post("/skills/{skill_id:str}")
async def save_skill(request: Request, skill_id: FromPath[str]) -> Response:
    editor(request)
    s = state(request)
    found = skill_or_404(s.store, skill_id)
    stored(s.store, await from_form(request), own=found.id)
    return to(request, f"/skills/{found.id}")


@get("/skills/{skill_id:str}/SKILL.md")
async def export_skill(request: Request, skill_id: FromPath[str]) -> Response:
    found = skill_or_404(state(request).store, skill_id)
    return Response(skillbook.exported(found).encode(), media_type="text/markdown",
                    headers={"Content-Disposition": 'attachment; filename="SKILL.md"'})


@get("/skills/{skill_id:str}/delete")
async def confirm_delete(request: Request, skill_id: FromPath[str]) -> Response:
    editor(request)
    found = skill_or_404(state(request).store, skill_id)
    return render.page(request, "skill.html", skill=found, confirm=True, preview="", **limits())


@post("/skills/{skill_id:str}/delete")
async def delete_skill(request: Request, skill_id: FromPath[str]) -> Response:
    editor(request)
    s = state(request)
    found = skill_or_404(s.store, skill_id)
    s.store.delete_skill(found.id)
    return to(request, "/skills")


routes = [skills_page, create_skill, import_skill, skill_page, save_skill, export_skill, confirm_delete,
          delete_skill]
