"""Skills: the list with its create and import forms, each skill's page, export and delete."""
from __future__ import annotations

import sqlite3

from litestar import Request, Response, get, post
from litestar.datastructures import UploadFile
from litestar.exceptions import HTTPException
from litestar.params import FromPath, FromQuery
from markupsafe import Markup

from .. import markdown
from .. import skills as skillbook
from ..skills import DESCRIPTION_MAX, FILE_MAX, BadSkill
from ..store import Store
from ..tables import NAME_MAX, Skill
from . import render
from .toolkit import Refused, form_field, go, me, skill_or_404, worker

FIELD_MAX = FILE_MAX  # characters of one form field; the skill's own limits are checked after


# What the skill pages say after a save (`?saved=KEY`; only these keys, never the URL's text).
SAVED = {"1": "Saved.", "created": "Skill created.", "imported": "Skill imported.", "deleted": "Skill deleted."}


def unique(store: Store, new: Skill, own: int | None = None) -> None:
    """Names are unique, and two that differ only in case would confuse a model: refused too."""
    for s in store.skills():
        if s.id != own and skillbook.same_name(s.name, new.name):
            raise Refused(status=409, message=f"A skill named “{s.name}” already exists: choose another name, "
                                              "or edit that skill.")


def stored(store: Store, new: Skill, own: int | None = None) -> Skill:
    """Add (or, with `own`, update) a skill whose name is free."""
    unique(store, new, own)
    try:
        if own is None:
            return store.add_skill(new)
        store.update_skill(own, new)
        return store.skill(own)
    except sqlite3.IntegrityError:  # the same name, written by someone else just now
        raise Refused(status=409, message=f"A skill named “{new.name}” already exists.") from None


async def typed_skill(request: Request) -> dict[str, str]:
    """The skill form's fields as typed (shown again when the skill is refused)."""
    return {k: await form_field(request, k, FIELD_MAX) for k in ("name", "description", "body")}


def checked(typed: dict[str, str]) -> Skill:
    try:
        return skillbook.checked(typed["name"], typed["description"], typed["body"])
    except BadSkill as e:
        raise Refused(status=400, message=str(e)) from None


def editor(request: Request) -> None:
    """Skills are shared by everyone's agents: only the owner changes them."""
    if not me(request).owner:
        raise HTTPException(status_code=403, detail="Only the owner of this Tabletalk edits skills.")


def limits() -> dict[str, int]:
    return {"name_max": NAME_MAX, "description_max": DESCRIPTION_MAX, "file_kb": FILE_MAX // 1024}


@get("/skills")
async def skills_page(request: Request) -> Response:
    return skills_view(request, saved=SAVED.get(request.query_params.get("saved", ""), ""))


def skills_view(request: Request, status_code: int = 200, saved: str = "", problem: tuple[str, str] | None = None,
                typed: dict[str, str] | None = None) -> Response:
    """The list with its forms; after a refusal, the message beside the form it came from
    (`problem`: ("new" or "import", message)) and the new skill's fields as typed."""
    return render.page(request, "skills.html", status_code=status_code, skills=worker(request).store.skills(),
                       saved=saved, problem=problem, typed=typed or {"name": "", "description": "", "body": ""},
                       **limits())


@post("/skills")
async def create_skill(request: Request) -> Response:
    editor(request)
    s = worker(request)
    typed = await typed_skill(request)
    try:
        added = stored(s.store, checked(typed))
    except Refused as e:
        return skills_view(request, e.status, problem=("new", e.message), typed=typed)
    return go(request, f"/skills/{added.id}?saved=created")


@post("/skills/import")
async def import_skill(request: Request) -> Response:
    editor(request)
    s = worker(request)
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        return skills_view(request, 400, problem=("import", "Choose a SKILL.md file to import."))
    # The content type the browser claims says nothing: the bytes are checked instead.
    data = await upload.read(FILE_MAX + 1)
    try:
        try:
            new = skillbook.parsed(data)
        except BadSkill as e:
            raise Refused(status=413 if len(data) > FILE_MAX else 400, message=str(e)) from None
        added = stored(s.store, new)
    except Refused as e:
        return skills_view(request, e.status, problem=("import", f"{upload.filename[:100]}: {e.message}"))
    return go(request, f"/skills/{added.id}?saved=imported")


@get("/skills/{skill_id:str}")
async def skill_page(request: Request, skill_id: FromPath[str], saved: FromQuery[str] = "") -> Response:
    found = skill_or_404(request, skill_id)
    return skill_view(request, found, saved=SAVED.get(saved, ""))


def skill_view(request: Request, found: Skill, status_code: int = 200, saved: str = "", problem: str = "",
               typed: dict[str, str] | None = None) -> Response:
    return render.page(request, "skill.html", status_code=status_code, skill=found, confirm=False,
                       preview=Markup(markdown.render(found.body)), saved=saved, problem=problem,
                       typed=typed or {"name": found.name, "description": found.description, "body": found.body},
                       **limits())


@post("/skills/{skill_id:str}")
async def save_skill(request: Request, skill_id: FromPath[str]) -> Response:
    editor(request)
    s = worker(request)
    found = skill_or_404(request, skill_id)
    typed = await typed_skill(request)
    try:
        stored(s.store, checked(typed), own=found.id)
    except Refused as e:
        return skill_view(request, found, e.status, problem=e.message, typed=typed)
    return go(request, f"/skills/{found.id}?saved=1")


@get("/skills/{skill_id:str}/SKILL.md")
async def export_skill(request: Request, skill_id: FromPath[str]) -> Response:
    found = skill_or_404(request, skill_id)
    return Response(skillbook.exported(found).encode(), media_type="text/markdown",
                    headers={"Content-Disposition": 'attachment; filename="SKILL.md"'})


@get("/skills/{skill_id:str}/delete")
async def confirm_delete(request: Request, skill_id: FromPath[str]) -> Response:
    editor(request)
    found = skill_or_404(request, skill_id)
    return render.page(request, "skill.html", skill=found, confirm=True, preview="", saved="", problem="",
                       typed={}, **limits())


@post("/skills/{skill_id:str}/delete")
async def delete_skill(request: Request, skill_id: FromPath[str]) -> Response:
    editor(request)
    s = worker(request)
    found = skill_or_404(request, skill_id)
    s.store.delete_skill(found.id)
    return go(request, "/skills?saved=deleted")


routes = [skills_page, create_skill, import_skill, skill_page, save_skill, export_skill, confirm_delete,
          delete_skill]
