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

Every later connection to the plugin goes through the stored tokens, refreshed as they
expire and never with a new flow: app/plugins/oauth_tokens.py.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from app.plugins.attempt import Attempt
from app.plugins.errors import leaves
from app.plugins.link import SSE, STREAMABLE, connect
from app.plugins.oauth_tokens import CALLBACK_PATH, RowStorage, client_provider
from app.tables import Plugin

log = logging.getLogger(__name__)

FLOW_SECONDS = 600.0   # how long a flow under way waits for the person to come back
START_SECONDS = 20.0   # discovery and registration, before the person is sent to sign in

_flows: dict[int, asyncio.Task] = {}  # flows under way in this worker, by plugin id


class OAuthProblem(Exception):
    """A flow that could not go on; the message is for the person."""


def _pending(row: dict | None) -> dict[str, Any]:
    try:
        return json.loads(row["pending"]) if row and row["pending"] else {}
    except ValueError:
        return {}


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

    provider = client_provider(p, RowStorage(store, p.id), site.rstrip("/") + CALLBACK_PATH, redirect, come_back)
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
