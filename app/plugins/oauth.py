"""Plugins connected with OAuth: the MCP authorization flow, with the mcp package's client
(`mcp.client.auth.OAuthClientProvider`: protected resource and authorization server
discovery, dynamic client registration, PKCE, refresh).

A plugin whose server answers 401 with a Bearer challenge is offered "Connect with OAuth" on
its agent's Plugins tab. Connecting (`begin`) runs the provider's flow in a task of this
worker: it discovers the servers, registers Tabletalk as a client (its redirect URI is this
site's `/oauth/callback`) and hands back the authorization URL, which the person follows.
The authorization server sends the browser back to `/oauth/callback` with a code and the
flow's `state`; the callback writes the code into the plugin's row (`plugin_auth.pending`),
where the flow's task, polling the row, finds it, exchanges it (PKCE) and stores the tokens
in the same row. The callback may reach another worker than the one running the flow: the
row is what they share.

Every later connection to the plugin (listing, calls, sessions) goes through `auth_for`: a
provider on the stored tokens, which refreshes them when they expire (the new tokens are
written back) and never starts a flow by itself: a plugin whose refresh fails reads "401:
connect with OAuth again".

The store this needs is the worker's (`attach`, at start): connections are made where no
store is passed.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app.tables import Plugin

log = logging.getLogger(__name__)

CALLBACK_PATH = "/oauth/callback"
FLOW_SECONDS = 600.0   # how long a flow under way waits for the person to come back
START_SECONDS = 20.0   # discovery and registration, before the person is sent to sign in
CLIENT_NAME = "Tabletalk"

_store: Any = None  # the worker's Store (attach)
_flows: dict[int, asyncio.Task] = {}  # flows under way in this worker, by plugin id


def attach(store: Any) -> None:
    global _store
    _store = store


class OAuthProblem(Exception):
    """A flow that could not go on; the message is for the person."""


def _pending(row: dict | None) -> dict[str, Any]:
    try:
        return json.loads(row["pending"]) if row and row["pending"] else {}
    except ValueError:
        return {}


class RowStorage:
    """The mcp client's TokenStorage on the plugin's row. An access token's expiry is kept as
    a time, so a provider made later (another connection, another process) knows when to
    refresh it."""

    def __init__(self, store: Any, plugin: int):
        self.store, self.plugin = store, plugin

    async def get_tokens(self):
        from mcp.shared.auth import OAuthToken

        row = self.store.plugin_auth(self.plugin)
        if not row or not row["tokens"]:
            return None
        data = json.loads(row["tokens"])
        token = OAuthToken.model_validate(data["token"])
        if data.get("expires_at") is not None:
            token.expires_in = max(0, int(data["expires_at"] - time.time()))
        return token

    async def set_tokens(self, tokens) -> None:
        expires = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        self.store.set_plugin_auth(self.plugin, tokens=json.dumps(
            {"token": tokens.model_dump(mode="json", exclude_none=True), "expires_at": expires}))

    async def get_client_info(self):
        from mcp.shared.auth import OAuthClientInformationFull

        row = self.store.plugin_auth(self.plugin)
        return OAuthClientInformationFull.model_validate_json(row["client"]) if row and row["client"] else None

    async def set_client_info(self, client_info) -> None:
        self.store.set_plugin_auth(self.plugin, client=client_info.model_dump_json(exclude_none=True))


def _provider(p: Plugin, storage: RowStorage, redirect_uri: str, redirect_handler, callback_handler):
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    class Provider(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            tokens = self.context.current_tokens
            if tokens is not None and tokens.expires_in is not None:  # the stored expiry, not "never"
                self.context.update_token_expiry(tokens)

    metadata = OAuthClientMetadata(client_name=CLIENT_NAME, redirect_uris=[redirect_uri],
                                   grant_types=["authorization_code", "refresh_token"], response_types=["code"])
    return Provider(p.address, metadata, storage, redirect_handler=redirect_handler, callback_handler=callback_handler)


class NeedsSignIn(Exception):
    """The stored tokens no longer work and only the person can sign in again."""


def auth_for(p: Plugin) -> Any:
    """The httpx auth for a plugin connected with OAuth (None for the others): the stored
    tokens, refreshed as they expire; never a new flow."""
    if _store is None or p.id is None or p.kind == "stdio":
        return None
    try:
        row = _store.plugin_auth(p.id)
        same = _store.plugin_row(p.id)
    except Exception:  # the store of a worker that stopped (its database closed)
        log.info("plugin %s: no store to read its OAuth tokens from", p.name)
        return None
    if not row or not row["tokens"] or same is None or same.address != p.address:
        return None  # (a plugin of another database with the same id has no tokens here)
    client = json.loads(row["client"]) if row["client"] else {}
    redirect = (client.get("redirect_uris") or ["http://127.0.0.1" + CALLBACK_PATH])[0]

    async def refuse(*_: Any) -> Any:
        raise NeedsSignIn(f"{p.name}: connect with OAuth again (the server no longer takes its tokens)")

    return _provider(p, RowStorage(_store, p.id), redirect, refuse, refuse)


async def begin(store: Any, p: Plugin, *, private_ok: bool, site: str) -> str:
    """Start connecting `p` with OAuth; the authorization URL to send the person to. `site`
    is this site's origin as the browser reaches it (the redirect comes back there).
    Raises OAuthProblem in words."""
    from mcp.client.auth import OAuthFlowError
    from mcp.shared.auth import AuthorizationCodeResult

    old = _flows.pop(p.id, None)
    if old is not None:
        old.cancel()
    store.set_plugin_auth(p.id, tokens="", pending=json.dumps({"started": time.time()}), flow="")
    loop = asyncio.get_running_loop()
    sent: asyncio.Future = loop.create_future()

    async def redirect(url: str) -> None:
        state = (parse_qs(urlsplit(url).query).get("state") or [""])[0]
        store.set_plugin_auth(p.id, pending=json.dumps({"state": state, "url": url, "started": time.time()}), flow=state)
        if not sent.done():
            sent.set_result(url)

    async def come_back() -> Any:
        deadline = time.monotonic() + FLOW_SECONDS
        while time.monotonic() < deadline:
            pending = _pending(store.plugin_auth(p.id))
            if pending.get("error"):
                raise OAuthFlowError(pending["error"])
            if pending.get("code"):
                return AuthorizationCodeResult(code=pending["code"], state=pending.get("state"), iss=pending.get("iss"))
            await asyncio.sleep(0.2)
        raise OAuthFlowError("nobody came back from signing in")

    provider = _provider(p, RowStorage(store, p.id), site.rstrip("/") + CALLBACK_PATH, redirect, come_back)
    task = _flows[p.id] = loop.create_task(_flow(store, p, provider, private_ok), name=f"oauth-{p.id}")
    done, _ = await asyncio.wait({sent, task}, timeout=START_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    if sent.done():
        return sent.result()
    if task.done():
        problem = _pending(store.plugin_auth(p.id)).get("error") or "the server did not ask for a sign-in"
        raise OAuthProblem(f"{p.name} could not be connected with OAuth: {problem}.")
    task.cancel()
    raise OAuthProblem(f"{p.name} could not be connected with OAuth: its servers did not answer in time.")


async def _flow(store: Any, p: Plugin, provider: Any, private_ok: bool) -> None:
    """The flow proper: one connection with the provider as its auth, which on the server's
    401 discovers, registers, sends the person (see begin), exchanges the code and retries."""
    from app.plugins.link import SSE, STREAMABLE, Attempt, connect, leaves

    try:
        for transport in (STREAMABLE, SSE):
            attempt = Attempt()
            try:
                async with connect(p, transport, private_ok=private_ok, attempt=attempt, auth=provider) as link:
                    await link.list_tools()
                break
            except Exception as exc:
                if transport == STREAMABLE and attempt.sse_only:
                    continue
                raise exc
        pending = _pending(store.plugin_auth(p.id))
        store.set_plugin_auth(p.id, pending=json.dumps({**pending, "done": True}))
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        said = next((str(leaf) for leaf in leaves(exc) if str(leaf)), type(exc).__name__)
        log.info("OAuth for plugin %s failed: %s", p.name, said)
        pending = _pending(store.plugin_auth(p.id))
        store.set_plugin_auth(p.id, pending=json.dumps({**pending, "error": said[:300], "done": True}))
    finally:
        _flows.pop(p.id, None)


async def came_back(store: Any, plugin: int, *, code: str, iss: str | None, error: str) -> str:
    """The person is back from the authorization server: hand the code (or its refusal) to
    the flow and wait for it to end. '' when connected, else why not, in words."""
    pending = _pending(store.plugin_auth(plugin))
    if error:
        store.set_plugin_auth(plugin, pending=json.dumps({**pending, "error": f"the sign-in was refused ({error})"}))
    else:
        store.set_plugin_auth(plugin, pending=json.dumps({**pending, "code": code, "iss": iss}))
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        row = store.plugin_auth(plugin)
        now = _pending(row)
        if now.get("done"):
            if now.get("error"):
                return now["error"]
            store.set_plugin_auth(plugin, pending="", flow="")
            return ""
        await asyncio.sleep(0.1)
    return "the sign-in was not finished (Tabletalk may have restarted meanwhile): connect again"
