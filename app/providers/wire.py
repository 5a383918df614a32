"""The Chat Completions stream as it comes over the wire: lines, chunks, our deltas; and the
cache marks some servers read in a request."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from ..agent import Delta, ModelError
from .servers import Endpoint



def takes_cache_marks(endpoint: Endpoint) -> bool:
    """Whether the server at `endpoint` reads Anthropic-style `cache_control` marks on content
    parts: Claude models behind an OpenAI-compatible proxy (OpenRouter, LiteLLM) do, and
    cache only what is marked. Other servers cache prefixes by themselves (OpenAI, DeepSeek,
    vLLM, llama.cpp) or not at all, and some refuse fields they do not know; Ollama is never
    asked. See docs/context.md."""
    name = endpoint.model.lower()
    return endpoint.style != "ollama" and ("claude" in name or name.startswith("anthropic/"))


CACHE_MARK = {"type": "ephemeral"}


def cache_marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two cache breakpoints: the end of the system prompt (the same for every request of an
    agent) and the end of the request (the next request starts with all of it, and the
    server finds the longest cached prefix up to its breakpoints)."""
    marked = [dict(m) for m in messages]
    places = {0} if marked and marked[0]["role"] == "system" else set()
    last = next((i for i in range(len(marked) - 1, -1, -1) if marked[i].get("content")), None)
    if last is not None:
        places.add(last)
    for i in places:
        content = marked[i]["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else [dict(p) for p in content]
        text_parts = [j for j, p in enumerate(parts) if p.get("type") == "text"]
        if text_parts:
            parts[text_parts[-1]] = parts[text_parts[-1]] | {"cache_control": CACHE_MARK}
            marked[i]["content"] = parts
    return marked


FINISHED = Delta()  # marks a chunk that carried a finish_reason


async def sse_lines(http: httpx2.Response) -> AsyncIterator[bytes]:
    """A streamed response's lines, as bytes. Unencoded (as event streams are sent), straight
    from the socket's chunks: httpx's text and line decoders cost ~10% of a busy worker,
    one pass per token; json.loads reads the bytes as they are."""
    if http.headers.get("content-encoding", "identity").lower() not in ("", "identity"):
        async for text in http.aiter_lines():
            yield text.encode()
        return
    rest = b""
    async for chunk in http.aiter_raw():
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line.rstrip(b"\r")
    if rest:
        yield rest.rstrip(b"\r")


_scan = json.JSONDecoder().scan_once  # the C scanner under json.loads


def _json(data: str | bytes) -> Any:
    """json.loads of one chunk, without its wrappers (on bytes: guessing the encoding, in
    Python, for every chunk; an event stream is UTF-8): a third of the parse, which is most
    of a chunk's own work. ValueError for what json.loads refuses."""
    text = (data.decode() if isinstance(data, bytes) else data).strip()
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data")
    return value


def deltas(data: str | bytes) -> list[Delta]:
    """One Chat Completions stream chunk (its JSON text) as our deltas."""
    try:
        chunk = _json(data)
    except ValueError:
        raise ModelError("The model server sent a reply that could not be read.") from None
    if not isinstance(chunk, dict):
        raise ModelError("The model server sent a reply that could not be read.")
    if "error" in chunk:
        err = chunk["error"]
        says = err.get("message") if isinstance(err, dict) else str(err)
        raise ModelError(f"The model server failed part way: “{str(says)[:300]}”")
    out: list[Delta] = []
    u = chunk.get("usage")
    if isinstance(u, dict):
        details = u.get("prompt_tokens_details") or {}
        out.append(Delta(usage={
            "prompt": int(u.get("prompt_tokens") or 0),
            "completion": int(u.get("completion_tokens") or 0),
            "cached": int((details.get("cached_tokens") if isinstance(details, dict) else 0) or 0),
        }))
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(Delta(reasoning=reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            out.append(Delta(text=content))
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            fn = call.get("function") or {}
            out.append(Delta(
                call_index=int(call.get("index") or 0),
                call_id=call.get("id") or "",
                call_name=fn.get("name") or "",
                call_arguments=fn.get("arguments") or "",
            ))
        if choice.get("finish_reason"):
            out.append(FINISHED)
    return out
