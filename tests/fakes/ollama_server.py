"""A real HTTP server that speaks as much of Ollama as Tabletalk uses.

    GET  /api/tags             the catalog: {"models": [{"name", "model", "details", ...}]}
    GET  /api/ps               the loaded models: {"models": [{"name", "model", "context_length", ...}]}
                               (those whose `loaded` is set: the window Ollama runs them with)
    POST /api/show             one model: model_info (with `{arch}.context_length`),
                               parameters (a text with `num_ctx N` when the Modelfile sets it),
                               capabilities (completion, tools, thinking, vision, embedding)
    *    /v1/...               Ollama's OpenAI-compatible endpoint: FakeModelServer's own
                               scripted Chat Completions (same `script`, `requests`, `default`)

    with FakeOllama({"llama3:8b": ollama_model(context_length=8192),
                     "qwen3:4b": ollama_model(40960, num_ctx=16384, thinking=True)}) as ollama:
        ...OLLAMA_HOST=ollama.host...
        ollama.wait_requests(1)[0]["reasoning_effort"]

Like the OpenAI fake it runs on its own loop in a daemon thread on 127.0.0.1.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from tests.fakes.openai_server import FakeModelServer, error


@dataclass(frozen=True)
class OllamaModel:
    context_length: int | None = 8192  # model_info's `{arch}.context_length`
    num_ctx: int | None = None          # a Modelfile's PARAMETER num_ctx
    capabilities: tuple[str, ...] = ("completion", "tools")
    architecture: str = "llama"
    show_fails: bool = False            # /api/show answers 500 for it
    extra_info: dict = field(default_factory=dict)
    loaded: int | None = None           # loaded now (/api/ps), with this context_length


def ollama_model(context_length: int | None = 8192, num_ctx: int | None = None, thinking: bool = False,
                 embedding: bool = False, **kw) -> OllamaModel:
    abilities = ("embedding",) if embedding else ("completion", "tools", *(("thinking",) if thinking else ()))
    return OllamaModel(context_length=context_length, num_ctx=num_ctx, capabilities=abilities, **kw)


class FakeOllama(FakeModelServer):
    """Ollama's catalog API on top of the scripted OpenAI-compatible server at /v1."""

    def __init__(self, catalog: dict[str, OllamaModel], port: int = 0) -> None:
        super().__init__(models={n: m.num_ctx or m.context_length or 2048 for n, m in catalog.items()}, port=port)
        self.catalog = dict(catalog)
        self.api_requests: list[tuple[str, str, dict]] = []  # (method, path, body) of /api/ calls

    @property
    def address(self) -> str:
        """What OLLAMA_HOST is set to."""
        return f"http://{self.host}:{self.port}"

    def show(self, name: str) -> dict:
        m = self.catalog[name]
        info = {"general.architecture": m.architecture, "general.parameter_count": 8030261248, **m.extra_info}
        if m.context_length is not None:
            info[f"{m.architecture}.context_length"] = m.context_length
        params = ['stop                           "<|eot_id|>"']
        if m.num_ctx is not None:
            params.insert(0, f"num_ctx                        {m.num_ctx}")
        return {
            "license": "", "modelfile": f"FROM {name}\n", "parameters": "\n".join(params),
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": m.architecture, "parameter_size": "8.0B", "quantization_level": "Q4_K_M"},
            "model_info": info,
            "capabilities": list(m.capabilities),
        }

    async def _dispatch(self, req, reader, writer) -> bool:
        path = req.path.rstrip("/")
        if path.startswith("/api/"):
            try:
                body = json.loads(req.body) if req.body else {}
            except ValueError:
                body = {}
            self.api_requests.append((req.method, path, body))
            if req.method == "GET" and path == "/api/tags":
                models = [{"name": n, "model": n, "modified_at": "2025-01-01T00:00:00Z", "size": 4_700_000_000,
                           "digest": "0" * 64, "details": {"format": "gguf", "family": m.architecture}}
                          for n, m in self.catalog.items()]
                return self._send_json(writer, 200, {"models": models}, req.keep_alive)
            if req.method == "GET" and path == "/api/ps":
                models = [{"name": n, "model": n, "size": 4_700_000_000, "digest": "0" * 64,
                           "details": {"format": "gguf", "family": m.architecture},
                           "expires_at": "2026-12-01T00:05:00Z", "size_vram": 0, "context_length": m.loaded}
                          for n, m in self.catalog.items() if m.loaded]
                return self._send_json(writer, 200, {"models": models}, req.keep_alive)
            if req.method == "POST" and path == "/api/show":
                name = body.get("model") or body.get("name")
                if name not in self.catalog:
                    return self._send_json(writer, 404, {"error": f"model '{name}' not found"}, req.keep_alive)
                if self.catalog[name].show_fails:
                    return self._send_json(writer, 500, {"error": "failed to load model"}, req.keep_alive)
                return self._send_json(writer, 200, self.show(name), req.keep_alive)
            return self._send_error(writer, error(404, f"Unknown path {req.method} {req.path}"), req.keep_alive)
        return await super()._dispatch(req, reader, writer)
