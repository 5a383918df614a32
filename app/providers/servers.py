"""Kinds of model server: what each says about itself beyond its model list (the window it
runs a model with, how many requests it serves at once, a tokenizer), and the gate that
keeps requests to a server that serves one at a time from cutting each other off.

Every kind is recognised from its own model list (`kind_of`), then asked where it says more:

    llama.cpp's server   /v1/models entries owned by "llamacpp" (with `meta`); GET /props:
                         default_generation_settings.n_ctx and total_slots, else GET /slots,
                         and chat_template_caps.supports_tools (false: the model's chat
                         template renders no tools, and the server leaves them out of the
                         prompt: SmolLM2's took as many tokens with 600 tokens of tools as
                         without); POST /tokenize counts tokens. It queues requests beyond
                         its slots, reports usage in its stream, and refuses a request past
                         the window with both numbers (limits.py)
    llama-cpp-python     entries owned by "me" with empty `permissions`; says no window (it is
                         learned from its errors, limits.py), serves one request at a time and
                         by default ends the running one when another arrives;
                         POST /extras/tokenize/count counts tokens
    vLLM                 entries owned by "vllm": max_model_len in the list itself
    LM Studio            entries owned by "organization_owner"; GET /api/v0/models:
                         loaded_context_length (else max_context_length) per model
    Ollama               read by catalog.ollama_catalog (/api/show num_ctx, /api/ps context_length)
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2

LLAMA_CPP, LLAMA_CPP_PYTHON, VLLM, LM_STUDIO = "llama.cpp", "llama-cpp-python", "vllm", "lmstudio"
PROBE_TIMEOUT = 3.0


@dataclass
class Server:
    """What one OpenAI-compatible server (by its base URL) said about itself."""

    kind: str = ""
    slots: int = 0  # requests it serves at once; 0: as many as it is sent (it queues them itself)
    windows: dict[str, int] = field(default_factory=dict)  # the window per model name, where it says
    tokenize: str = ""  # the URL that counts tokens of a text ('' = none)
    tools: bool = True  # False: it says tools never reach its model (a chat template without them)


def kind_of(entries: list[dict[str, Any]]) -> str:
    """The kind of server a /v1/models listing comes from, by the marks each leaves in it."""
    owners = {e.get("owned_by") for e in entries}
    if "llamacpp" in owners or any(isinstance(e.get("meta"), dict) and "n_ctx_train" in e["meta"] for e in entries):
        return LLAMA_CPP
    if "vllm" in owners or any("max_model_len" in e for e in entries):
        return VLLM
    if entries and owners == {"me"} and all(e.get("permissions") == [] for e in entries):
        return LLAMA_CPP_PYTHON
    if "organization_owner" in owners:
        return LM_STUDIO
    return ""


def root(url: str) -> str:
    """The server's own address: its OpenAI base URL without the /v1."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def _get(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    try:
        r = await http.get(url, headers=headers, timeout=PROBE_TIMEOUT)
        r.raise_for_status()
        return r.json()
    except (httpx2.HTTPError, ValueError):
        return None


async def probe(http: httpx2.AsyncClient, url: str, entries: list[dict[str, Any]], key: str = "") -> Server:
    """What the server at `url` (whose model list is `entries`) says about itself; a server
    that does not answer a probe is taken as saying nothing more."""
    kind = kind_of(entries)
    names = [e["id"] for e in entries if isinstance(e.get("id"), str)]
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    base = root(url)
    if kind == LLAMA_CPP:
        props = await _get(http, f"{base}/props", headers)
        window = slots = None
        tools = True
        if isinstance(props, dict):
            settings = props.get("default_generation_settings")
            window = _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None
            window = window or _positive(props.get("n_ctx"))
            slots = _positive(props.get("total_slots"))
            caps = props.get("chat_template_caps")
            tools = not (isinstance(caps, dict) and caps.get("supports_tools") is False)
        if window is None:
            found = await _get(http, f"{base}/slots", headers)
            if isinstance(found, list) and found and isinstance(found[0], dict):
                window = _positive(found[0].get("n_ctx"))
                slots = slots or len(found)
        return Server(LLAMA_CPP, slots=slots or 1, windows={n: window for n in names} if window else {},
                      tokenize=f"{base}/tokenize", tools=tools)
    if kind == LLAMA_CPP_PYTHON:
        return Server(LLAMA_CPP_PYTHON, slots=1, tokenize=f"{base}/extras/tokenize/count")
    if kind == LM_STUDIO:
        listed = await _get(http, f"{base}/api/v0/models", headers)
        data = listed.get("data") if isinstance(listed, dict) else None
        windows = {}
        for m in data if isinstance(data, list) else ():
            if isinstance(m, dict) and isinstance(m.get("id"), str):
                found = _positive(m.get("loaded_context_length")) or _positive(m.get("max_context_length"))
                if found:
                    windows[m["id"]] = found
        return Server(LM_STUDIO, windows=windows)
    return Server(kind)


async def count_tokens(http: httpx2.AsyncClient, server: Server, model: str, text: str) -> int | None:
    """How many tokens `text` is by the server's own tokenizer, where it offers one."""
    if not server.tokenize or not text:
        return None
    body = {"content": text} if server.kind == LLAMA_CPP else {"input": text, "model": model}
    try:
        r = await http.post(server.tokenize, json=body, timeout=PROBE_TIMEOUT)
        r.raise_for_status()
        found = r.json()
    except (httpx2.HTTPError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    if isinstance(found.get("tokens"), list):
        return len(found["tokens"])
    return _positive(found.get("count"))


class Gate:
    """The requests in flight to one server that serves `slots` at a time. An answer waits
    for a free slot; a side request (a title) waits until no answer runs or waits, so it
    never takes a slot an answer could use. Per worker: requests from another worker are
    not seen (an answer one of them cuts is made again, client.py)."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self.busy = 0
        self.waiting = 0  # answers waiting for a slot
        self._turn: asyncio.Condition | None = None

    @property
    def full(self) -> bool:
        return self.busy >= self.slots

    def _condition(self) -> asyncio.Condition:
        if self._turn is None:
            self._turn = asyncio.Condition()
        return self._turn

    @asynccontextmanager
    async def _held(self, turn: asyncio.Condition) -> AsyncIterator[None]:
        """A slot taken (`busy` counted): given back, and the waiting told, at the end."""
        try:
            yield
        finally:
            async with turn:
                self.busy -= 1
                turn.notify_all()

    @asynccontextmanager
    async def answer(self) -> AsyncIterator[None]:
        turn = self._condition()
        async with turn:
            self.waiting += 1
            try:
                await turn.wait_for(lambda: self.busy < self.slots)
            finally:
                self.waiting -= 1
            self.busy += 1
        async with self._held(turn):
            yield

    @asynccontextmanager
    async def side(self) -> AsyncIterator[None]:
        turn = self._condition()
        async with turn:
            await turn.wait_for(lambda: self.busy == 0 and self.waiting == 0)
            self.busy += 1
        async with self._held(turn):
            yield


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    key: str = field(repr=False)
    model: str  # the name the server knows
    style: str = "openai"  # "ollama": Ollama's /v1, whose thinking field differs
    key_setting: str = "AI_KEY"  # where a refused key is set, for the person's error
    tools: bool = True  # False: the model is sent no tools (the built-in model: see docs/local-model.md)
