"""A plugin's stored OAuth tokens as the auth of its connections: the mcp package's client
(`mcp.client.auth.OAuthClientProvider`) on the plugin's row (`plugin_auth`), which refreshes
the tokens when they expire (the new tokens are written back).

Every connection to a plugin connected with OAuth (listing, calls, sessions) goes through
`auth_for` (app/plugins/link.py asks it): a provider on the stored tokens that never starts
a flow by itself, so a plugin whose refresh fails reads "401: connect with OAuth again".
The flow that gets the tokens in the first place is app/plugins/oauth.py's.

Where the tokens are kept (`TokenRows`: the worker's store) is given to each connection by
whoever makes it (a listing, the conversation's session, the composer's prompts).
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Protocol

from app.tables import Plugin

log = logging.getLogger(__name__)

CALLBACK_PATH = "/oauth/callback"
CLIENT_NAME = "Tabletalk"


class TokenRows(Protocol):
    """Where plugins' OAuth tokens are kept: their `plugin_auth` rows (app.store.Store)."""

    def plugin_auth(self, plugin: int) -> dict[str, Any] | None: ...

    def set_plugin_auth(self, plugin: int, **values: str) -> None: ...

    def plugin_row(self, plugin_id: int) -> Plugin | None: ...


class RowStorage:
    """The mcp client's TokenStorage on the plugin's row. An access token's expiry is kept as
    a time, so a provider made later (another connection, another process) knows when to
    refresh it."""

    def __init__(self, store: TokenRows, plugin: int):
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


def client_provider(p: Plugin, storage: RowStorage, redirect_uri: str, redirect_handler, callback_handler):
    """The mcp package's OAuth client for the plugin, its tokens in `storage` (a token read
    back keeps its stored expiry)."""
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


def auth_for(p: Plugin, tokens: TokenRows) -> Any:
    """The httpx auth for a plugin connected with OAuth (None for the others): the tokens kept
    in `tokens`, refreshed as they expire; never a new flow."""
    if p.id is None or p.kind == "stdio":
        return None
    try:
        row = tokens.plugin_auth(p.id)
        same = tokens.plugin_row(p.id)
    except Exception:  # the store of a worker that stopped (its database closed)
        log.info("plugin %s: no store to read its OAuth tokens from", p.name)
        return None
    if not row or not row["tokens"] or same is None or same.address != p.address:
        return None  # (a plugin of another database with the same id has no tokens here)
    client = json.loads(row["client"]) if row["client"] else {}
    redirect = (client.get("redirect_uris") or ["http://127.0.0.1" + CALLBACK_PATH])[0]

    async def refuse(*_: Any) -> Any:
        raise NeedsSignIn(f"{p.name}: connect with OAuth again (the server no longer takes its tokens)")

    return client_provider(p, RowStorage(tokens, p.id), redirect, refuse, refuse)
