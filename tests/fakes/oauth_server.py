"""An MCP server behind OAuth, with its own authorization server, on loopback: the mcp
package's server auth pieces (authorization, token, registration and metadata routes,
protected resource metadata, bearer checks) around an in-memory provider of ours.

    with OAuthMCPServer() as server:            # Streamable HTTP at /mcp, 401 without a token
        ...a plugin at server.url connects with the MCP authorization flow...

The person's part is a consent page (`/consent`, a plain form: Allow / Deny) that the
authorization endpoint sends the browser to. `token_seconds` is how long an access token
lasts (the client refreshes it); `server.issued`, `server.refreshed` and `server.registered`
count what the server did; `server.revoke_all()` makes every token unknown.
"""
from __future__ import annotations

import html
import secrets
import socket
import time
from urllib.parse import urlencode

from mcp.server.auth.provider import (AccessToken, AuthorizationCode, AuthorizationParams, RefreshToken,
                                      construct_redirect_uri)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from tests.fakes.mcp_server import FakeMCPServer, _Served, free_port


class _Provider:
    def __init__(self, server: "OAuthMCPServer"):
        self.server = server
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.asked: dict[str, tuple[str, AuthorizationParams]] = {}  # consent id -> (client, params)
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    async def get_client(self, client_id: str):
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.server.registered += 1
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        ask = secrets.token_urlsafe(16)
        self.asked[ask] = (client.client_id, params)
        return f"{self.server.base}/consent?{urlencode({'ask': ask})}"

    async def load_authorization_code(self, client, authorization_code: str):
        code = self.codes.get(authorization_code)
        return code if code and code.client_id == client.client_id else None

    def _tokens(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(16), "rt-" + secrets.token_urlsafe(16)
        expires = int(time.time() + self.server.token_seconds)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes, expires_at=expires,
                                          resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.server.token_seconds,
                          refresh_token=refresh, scope=" ".join(scopes) or None)

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.server.issued += 1
        return self._tokens(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client, refresh_token: str):
        token = self.refresh.get(refresh_token)
        return token if token and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        self.server.refreshed += 1
        return self._tokens(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str):
        found = self.access.get(token)
        if found is None or (found.expires_at and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token) -> None:
        self.access.pop(getattr(token, "token", ""), None)


class OAuthMCPServer(FakeMCPServer):
    def __init__(self, token_seconds: int = 3600, **kw):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.token_seconds = token_seconds
        self.issued = self.refreshed = self.registered = 0
        self.provider = _Provider(self)
        super().__init__(**kw)
        # the mcp server of the base class, rebuilt with auth (its tools stay the same)
        tools = self.mcp._tool_manager
        self.mcp = MCPServer("oauth-plugin", auth_server_provider=self.provider, auth=AuthSettings(
            issuer_url=self.base, resource_server_url=f"{self.base}/mcp", validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(enabled=True)), log_level="WARNING")
        self.mcp._tool_manager = tools
        self.mcp.custom_route("/consent", methods=["GET", "POST"])(self._consent)
        self.app = self.mcp.streamable_http_app()

    def start(self):
        # the issuer's URL names the port, so it is chosen first (free_port) and bound here
        chosen = self.port
        real_socket = socket.socket

        class Bound(real_socket):
            def bind(self, address):
                return super().bind((address[0], chosen))

        socket.socket = Bound
        try:
            return super().start()
        finally:
            socket.socket = real_socket

    def revoke_all(self) -> None:
        self.provider.access.clear()

    async def _consent(self, request: Request) -> Response:
        if request.method == "GET":
            ask = request.query_params.get("ask", "")
            if ask not in self.provider.asked:
                return HTMLResponse("<p>Unknown request.</p>", status_code=400)
            client = self.provider.clients[self.provider.asked[ask][0]]
            return HTMLResponse(
                f"<!doctype html><title>Sign in</title><h1>Allow {html.escape(client.client_name or 'this app')}?</h1>"
                f"<form method=post><input type=hidden name=ask value={html.escape(ask)}>"
                f"<button name=answer value=allow>Allow</button> <button name=answer value=deny>Deny</button></form>")
        form = await request.form()
        client_id, params = self.provider.asked.pop(str(form.get("ask", "")), (None, None))
        if params is None:
            return HTMLResponse("<p>Unknown request.</p>", status_code=400)
        if form.get("answer") != "allow":
            return RedirectResponse(construct_redirect_uri(str(params.redirect_uri), error="access_denied",
                                                           error_description="The person said no.",
                                                           state=params.state), status_code=302)
        code = "code-" + secrets.token_urlsafe(16)
        self.provider.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client_id,
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource)
        return RedirectResponse(construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state),
                                status_code=302)
