"""The Connections page (/settings/connections), the owner's and the admins': the model
servers Tabletalk asks, those added here (kept in rows, changed at once for every worker and server) beside those the
environment names (read-only) and the built-in model; a Test that says what the server
answered; each connection's models switched on or off; who may use each connection and each of its
models; the default model.

Every form works as a plain form (a redirect back to the page, or the page again with what
was wrong) and with script alike. A key is never put in a page: an empty field keeps it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, FromQuery

from .. import builtin
from ..accounts.rules import Accounts
from ..config import Config
from ..providers import connections as kinds
from ..providers.catalog import where
from ..providers.connections import ModelConnection, address_problem, clean_url, prefix_for
from ..providers.ids import GROUP_LOCAL, GROUP_SERVER, Choice, groups
from ..run.choices import refresh_choices
from ..serve.worker import Worker
from . import render
from .toolkit import form_field, go, managers_only, me, parse_id, worker

PAGE = "/settings/connections"
FIELD_MAX = 2_000
BLANK = {"name": "", "kind": "", "url": ""}  # the form to add one, as nothing was typed yet


@dataclass(frozen=True)
class FromEnvironment:
    """Model servers the environment names, shown read-only under the group their models take:
    where each is and by which setting, and the models the group listed last (a down one: its note)."""

    group: str
    places: list[tuple[str, str]]  # (where, the setting that names it)
    models: list[Choice] = field(default_factory=list)


def from_environment(config: Config, choices: list[Choice], ollama_answered: bool) -> list[FromEnvironment]:
    def of(group: str) -> list[Choice]:
        return [c for c in choices if c.group == group]

    local = []
    if builtin.installed(config.data):
        local.append(("the built-in model", "installed on its page"))
    if config.ollama_host and (config.ollama_set or ollama_answered):
        local.append((f"Ollama at {where(config.ollama_host)}", "OLLAMA_HOST"))
    if config.local_ai_url:
        local.append((f"a server at {where(config.local_ai_url)}", "LOCAL_AI_URL"))
    out = [FromEnvironment(GROUP_LOCAL, local, of(GROUP_LOCAL))] if local else []
    out += [FromEnvironment(a.name, [(where(a.url), "AI_ACCOUNTS")], of(a.name)) for a in config.accounts]
    if config.ai_url:
        out.append(FromEnvironment(GROUP_SERVER, [(where(config.ai_url), "AI_URL")], of(GROUP_SERVER)))
    return out


def page(request: Request, status_code: int = 200, **context: Any) -> Response:
    """The page; `context` says what a form left to show (a problem, the fields as typed)."""
    s, viewer = worker(request), me(request)
    choices = s.store.choices()
    shown: dict[str, Any] = {"problem": "", "default_problem": "", "typed": BLANK, "editing": None,
                             "model_rule": None, "saved_words": saved_words(s, request.query_params.get("saved", ""),
                                                                            request.query_params.get("model", ""))}
    return render.page(request, "connections.html", status_code=status_code, connections=s.store.connections(),
                       environment=from_environment(s.config, choices, s.providers.ollama_answered), kinds=kinds.KINDS,
                       default=s.store.default_model(), ai_model=s.config.ai_model,
                       offered=groups(c for c in choices if c.up), name_max=kinds.NAME_MAX,
                       people=[p for p in Accounts(s.store).all() if not p.owner],
                       kept=s.store.barred(viewer.id), owner_looking=viewer.owner, **(shown | context))


def saved_words(s: Worker, saved: str, model: str = "") -> str:
    """What the page says after a form's redirect (`?saved=`, and `?model=` after a model's rule)."""
    if saved == "deleted":
        return "Deleted: its models have left the picker."
    if saved == "default":
        return "Saved: the default model."
    what, _, raw = saved.rpartition("-")
    k = s.store.connection(int(raw)) if raw.isdigit() and int(raw) < 2**62 else None
    if k is None:
        return ""
    if what == "people":
        return f"Saved who may use “{k.name}”."
    if what == "model" and model in ruled(k):
        return f"Saved who may use “{model}” of “{k.name}”."
    return f"Saved the models of “{k.name}”." if what == "models" else f"Saved “{k.name}”. {k.tested}"


KEPT_FROM_YOU = ("The owner keeps this connection for chosen people, not you: only the owner "
                 "changes it.")
MODEL_KEPT_FROM_YOU = "The owner keeps this model for chosen people, not you: only the owner changes who may use it."


def connection_or_404(request: Request, raw: str) -> ModelConnection:
    """A connection to change: the owner's and the admins', but one kept from an admin (for
    chosen people, not them) is the owner's alone: an admin who could change it could give
    themselves its models, or send its key where they can read it."""
    person = managers_only(request)
    s = worker(request)
    found = s.store.connection(parse_id(raw, "connection"))
    if found is None:
        raise NotFoundException("No such connection.")
    if found.prefix in s.store.barred(person.id).prefixes:
        raise HTTPException(status_code=403, detail=KEPT_FROM_YOU)
    return found


@dataclass(frozen=True)
class ModelRule:
    """The form of who may use one model of a connection, open on the page: `everyone` and
    `people` as saved, or as a refused form sent them."""

    connection: int
    model: str
    everyone: bool
    people: frozenset[int]


def ruled(k: ModelConnection) -> tuple[str, ...]:
    """The models of `k` that may be given a rule: those it listed, and those kept for chosen
    people that it lists no more (so their rule can be lifted)."""
    return (*k.listed, *(m for m in k.chosen if m not in k.listed))


def model_of(request: Request, k: ModelConnection, name: str) -> str:
    """A model of `k` to give a rule, by name: 404 for one it does not list; 403 for one kept
    from the admin asking (who could otherwise tick themselves), as for a connection."""
    if name not in ruled(k):
        raise NotFoundException(f"“{k.name}” lists no model “{name[:200]}”: Test it to list its models again.")
    if f"{k.prefix}:{name}" in worker(request).store.barred(me(request).id).models:
        raise HTTPException(status_code=403, detail=MODEL_KEPT_FROM_YOU)
    return name


async def typed(request: Request) -> dict[str, str]:
    """The connection's form as typed (the key apart: it is never shown again)."""
    kind = (await form_field(request, "kind", 20)).strip()
    return {"name": " ".join((await form_field(request, "name", FIELD_MAX)).split()), "kind": kind,
            "url": clean_url(kind, await form_field(request, "url", FIELD_MAX))}


def problem_of(s: Worker, fields: dict[str, str], editing: ModelConnection | None = None) -> str:
    if not fields["name"]:
        return "Give the connection a name: it is the heading of its models in the picker."
    if len(fields["name"]) > kinds.NAME_MAX:
        return f"The name is too long: at most {kinds.NAME_MAX} characters."
    if fields["name"].casefold() in {g.casefold() for g in (GROUP_LOCAL, GROUP_SERVER, *(a.name for a in s.config.accounts))}:
        return f"“{fields['name']}” is the name of the models the environment sets up; choose another."
    same = s.store.connection_named(fields["name"])
    if same is not None and (editing is None or same.id != editing.id):
        return f"There is a connection named “{fields['name']}” already."
    return address_problem(fields["kind"], fields["url"])


async def tested(s: Worker, connection_id: int) -> None:
    """Test the connection as saved, keep what it said, and list every server again: each
    worker's pickers read that list, and each reads the connection's row at its next request."""
    k = s.store.connection(connection_id)
    assert k is not None
    s.store.set_connection_tested(k.id, await kinds.check(s.providers.http, k.kind, k.url, k.key))
    await refresh_choices(s.store, s.providers)


@get(PAGE)
async def connections_page(request: Request) -> Response:
    managers_only(request)
    return page(request)


@post(PAGE)
async def add(request: Request) -> Response:
    managers_only(request)
    s = worker(request)
    fields = await typed(request)
    if problem := problem_of(s, fields):
        return page(request, 400, problem=problem, typed=fields)
    taken = {k.prefix for k in s.store.connections()} | {a.name for a in s.config.accounts}
    key = (await form_field(request, "key", FIELD_MAX)).strip()
    added = s.store.add_connection(fields["name"], prefix_for(fields["name"], taken), fields["kind"], fields["url"], key)
    await tested(s, added)
    return go(request, f"{PAGE}?saved={added}#connection-{added}")


@get(PAGE + "/{connection_id:str}/edit")
async def edit_page(request: Request, connection_id: FromPath[str]) -> Response:
    return page(request, editing=connection_or_404(request, connection_id))


@post(PAGE + "/{connection_id:str}")
async def change(request: Request, connection_id: FromPath[str]) -> Response:
    k = connection_or_404(request, connection_id)
    s = worker(request)
    fields = await typed(request)
    if problem := problem_of(s, fields, k):
        return page(request, 400, problem=problem, typed=fields, editing=k)
    key = (await form_field(request, "key", FIELD_MAX)).strip()
    # the saved key goes only where it was saved for: a new address (or kind) forgets it unless
    # the key is typed again, so no one (an admin, a slip) sends it to a server they can read
    moved = (fields["kind"], fields["url"]) != (k.kind, k.url)
    forget = (await form_field(request, "forget", 5)) == "1" or moved
    s.store.change_connection(k.id, fields["name"], fields["kind"], fields["url"], key or ("" if forget else None))
    await tested(s, k.id)
    return go(request, f"{PAGE}?saved={k.id}#connection-{k.id}")


@post(PAGE + "/{connection_id:str}/test")
async def test_connection(request: Request, connection_id: FromPath[str]) -> Response:
    k = connection_or_404(request, connection_id)
    await tested(worker(request), k.id)
    return go(request, f"{PAGE}#connection-{k.id}")


@post(PAGE + "/{connection_id:str}/models")
async def switch_models(request: Request, connection_id: FromPath[str]) -> Response:
    """The models switched on are the boxes ticked; every other one it listed is off."""
    k = connection_or_404(request, connection_id)
    s = worker(request)
    on = set((await request.form()).getall("on", []))
    s.store.set_models_off(k.id, tuple(n for n in (*k.listed, *k.off) if n not in on))
    await refresh_choices(s.store, s.providers)
    return go(request, f"{PAGE}?saved=models-{k.id}#connection-{k.id}")


@post(PAGE + "/{connection_id:str}/people")
async def choose_people(request: Request, connection_id: FromPath[str]) -> Response:
    """Who may use its models: everyone, or the owner and the people ticked. Their pickers
    follow at their next page; a turn with one of its models is refused to anyone else."""
    k = connection_or_404(request, connection_id)
    everyone = (await form_field(request, "everyone", 1)) != "0"
    worker(request).store.set_connection_people(k.id, everyone, chosen_people(await request.form()))
    return go(request, f"{PAGE}?saved=people-{k.id}#connection-{k.id}")


@get(PAGE + "/{connection_id:str}/model")
async def model_page(request: Request, connection_id: FromPath[str], name: FromQuery[str] = "") -> Response:
    """The page with the form of who may use one model open (a link from its switch: with or
    without script, the same page)."""
    k = connection_or_404(request, connection_id)
    model = model_of(request, k, name)
    return page(request, model_rule=ModelRule(k.id, model, model not in k.chosen, k.chosen.get(model, frozenset())))


@post(PAGE + "/{connection_id:str}/model")
async def choose_model_people(request: Request, connection_id: FromPath[str]) -> Response:
    """Who may use one model: everyone its connection allows, or the owner and the people
    ticked. It narrows the connection's rule: a person needs both (Store.barred)."""
    k = connection_or_404(request, connection_id)
    model = model_of(request, k, (await form_field(request, "model", FIELD_MAX)).strip())
    everyone = (await form_field(request, "everyone", 1)) != "0"
    worker(request).store.set_model_people(k.id, model, everyone, chosen_people(await request.form()))
    return go(request, f"{PAGE}?{urlencode({'saved': f'model-{k.id}', 'model': model})}#connection-{k.id}")


def chosen_people(form: Any) -> frozenset[int]:
    """The people ticked in a form of who may use something (ids that are no number ignored)."""
    return frozenset(int(p) for p in form.getall("person", []) if isinstance(p, str) and p.isdigit() and len(p) < 18)


@post(PAGE + "/{connection_id:str}/delete")
async def delete(request: Request, connection_id: FromPath[str]) -> Response:
    k = connection_or_404(request, connection_id)
    s = worker(request)
    s.store.delete_connection(k.id)
    await refresh_choices(s.store, s.providers)
    return go(request, f"{PAGE}?saved=deleted")


@post(PAGE + "/default")
async def choose_default(request: Request) -> Response:
    managers_only(request)
    s = worker(request)
    model = (await form_field(request, "model", FIELD_MAX)).strip()
    if model and s.store.choice(model) is None:
        return page(request, 400, default_problem=f"“{model}” is not among the models listed now.")
    s.store.set_default_model(model)
    return go(request, f"{PAGE}?saved=default#default")


routes = [connections_page, add, edit_page, change, test_connection, switch_models, choose_people, model_page,
          choose_model_people, delete, choose_default]
