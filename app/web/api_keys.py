"""One's API keys on the account page (make one, shown once; revoke one), and the owner's
decision on who may use the API, on the people page (docs/api.md)."""
from __future__ import annotations

from litestar import Request, Response, post
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from ..accounts.api_keys import ApiKeys
from ..accounts.passwords import AccountError
from .account_view import account_view, people_view
from .toolkit import an_id, form_field, go, me, owner_only, parse_id, worker

KEYS_SAVED = {"revoked": "Revoked: that key opens nothing any more."}
API_SAVED = {"api": "Saved: the API follows this now."}


@post("/account/keys")
async def make_key(request: Request) -> Response:
    """A new key, shown on the page this once (only its hash is kept: nobody can show it again)."""
    name = await form_field(request, "name", 200)
    expiry = (await form_field(request, "expiry", 10)).strip()
    raw_agent = (await form_field(request, "agent", 20)).strip()
    agent = an_id(raw_agent) if raw_agent else None
    typed = {"key_name": name[:200], "key_expiry": expiry, "key_agent": raw_agent}
    try:
        if raw_agent and agent is None:
            raise AccountError("There is no such agent to limit the key to.")
        token, _ = ApiKeys(worker(request).store).make(me(request), name, expiry, agent)
    except AccountError as e:
        return account_view(request, 400, key_error=str(e), **typed)
    return account_view(request, new_key=token, key_saved=f"Made “{name.strip()}”. Copy the key now: it is shown "
                                                           "only this once.")


@post("/account/keys/{key:str}/delete")
async def revoke_key(request: Request, key: FromPath[str]) -> Response:
    """A key of someone else's answers as one that does not exist."""
    if not ApiKeys(worker(request).store).revoke(me(request), parse_id(key, "key")):
        raise NotFoundException("No such key.")
    return go(request, "/account?saved=revoked#api")


@post("/people/api")
async def decide_api(request: Request) -> Response:
    """The owner: the API on for everyone, for the people chosen, or off; its limits."""
    owner_only(request)
    form = await request.form()
    chosen = {p for raw in form.getall("person") if isinstance(raw, str) and (p := an_id(raw)) is not None} \
        if "person" in form else set()
    mode = (await form_field(request, "mode", 20)).strip()
    per_minute = await form_field(request, "per_minute", 20)
    approval = await form_field(request, "approval_seconds", 20)
    try:
        ApiKeys(worker(request).store).decide(mode, chosen, per_minute, approval)
    except AccountError as e:
        return people_view(request, 400, api_error=str(e))
    return go(request, "/people?saved=api#api")


routes = [make_key, revoke_key, decide_api]
