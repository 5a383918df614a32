"""An MCP server of ours (tests/fakes/mcp_server.py) whose tools ask the client things, for
what server-everything never sends: any requested schema, any sampling request.

On a 2026-07-28 connection a server's request to the client rides in the call's result
(`InputRequiredResult`) and the client calls again with the answers; on a 2025-era one (what
Tabletalk's `initialize` makes) it is sent mid-call, on the call's connection, as
server-everything does. The tools do either, as the connection asks.

    with AskingMCPServer() as server:
        question(schema, message)   asks for a form of `schema` (JSON text); answers with the
                                    client's result as JSON text
        words(request)              asks the client's model: `request` is the sampling
                                    request's params as JSON text; answers with the result

`server.results` holds every answer the client gave (an ElicitResult or CreateMessageResult
as a dict), in order; `server.declined` the errors it answered with instead.
"""
from __future__ import annotations

import json

import mcp_types as types
from mcp.server.mcpserver import Context
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.fakes.mcp_server import FakeMCPServer


class AskingMCPServer(FakeMCPServer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.results: list[dict] = []
        self.declined: list[str] = []  # what the client answered with an error (2025-era connections)

        async def answered(ctx: Context, request: types.InputRequest) -> str | types.InputRequiredResult:
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                got = (ctx.input_responses or {}).get("q")
                if got is None:
                    return types.InputRequiredResult(input_requests={"q": request})
            else:  # a 2025-era connection: the request goes mid-call, on the call's connection
                result_type = types.ElicitResult if isinstance(request, types.ElicitRequest) else types.CreateMessageResult
                try:
                    got = await ctx.request_context.session.send_request(
                        request, result_type, metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
                except Exception as e:  # the client refused: the tool says so
                    self.declined.append(str(e))
                    return f"refused: {e}"
            answer = got.model_dump(mode="json", by_alias=True, exclude_none=True)
            self.results.append(answer)
            return json.dumps(answer)

        @self.mcp.tool(description="Ask the person to fill in a form.")
        async def question(schema: str, ctx: Context, message: str = "Tell me") -> str | types.InputRequiredResult:
            self.calls += 1
            return await answered(ctx, types.ElicitRequest(params=types.ElicitRequestFormParams(
                message=message, requested_schema=json.loads(schema))))

        @self.mcp.tool(description="Ask the client's model for words.")
        async def words(request: str, ctx: Context) -> str | types.InputRequiredResult:
            self.calls += 1
            return await answered(ctx, types.CreateMessageRequest(
                params=types.CreateMessageRequestParams.model_validate(json.loads(request))))
