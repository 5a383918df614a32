"""An MCP server over stdio written without the mcp package (JSON-RPC lines by hand), for
what the package's own servers refuse to send: a listing with malformed tools (an empty
`inputSchema`, one of another type than object, one with no schema at all) beside good ones,
a tool whose `required` names a property it does not describe, and a result with a content
block of a type MCP does not define beside a text. `instructions` in its `initialize`."""
from __future__ import annotations

import json
import sys

TOOLS = [
    {"name": "good", "description": "A tool that works.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "empty", "description": "An empty schema.", "inputSchema": {}},
    {"name": "stringy", "description": "A schema of a string.", "inputSchema": {"type": "string"}},
    {"name": "noschema", "description": "No schema at all."},
    {"name": "loose", "description": "Requires a property it does not describe.",
     "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}},
    {"name": "odd", "description": "Answers with a block of an unknown type.",
     "inputSchema": {"type": "object", "properties": {}}},
]


def answer(request: dict) -> dict | None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        return None
    if method == "initialize":
        result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "raw", "version": "1"},
                  "instructions": "Call good before anything else."}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name = request["params"]["name"]
        if name == "odd":
            content = [{"type": "text", "text": "before"}, {"type": "hologram", "data": "…"},
                       {"type": "text", "text": "after"}]
        else:
            content = [{"type": "text", "text": f"{name} ran with {json.dumps(request['params'].get('arguments'))}"}]
        result = {"content": content}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
