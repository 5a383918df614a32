"""The catalogs of model servers: what each lists, read over HTTP and turned into `Choice` rows.

A server that does not answer raises `Unreachable`, whose message becomes the note on its
group. Nothing here streams: that is client.py.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import httpx2

from .ids import GROUP_LOCAL, Choice
from ..config import LOCAL
from ..tables import NO_IMAGES
from .servers import Server, probe

LIST_TIMEOUT = 5.0  # seconds for one catalog request: a page waits on the slowest server at refresh
# ... and for a turn that needs the list to choose its model: a server that answers one request
# at a time lists only once the one it is busy with ends (another process's, say)
PATIENT_TIMEOUT = 60.0
SHOW_AT_ONCE = 8  # Ollama /api/show requests in flight while one catalog is read
OLLAMA_PORT = 11434

log = logging.getLogger(__name__)


class Unreachable(Exception):
    """A catalog that could not be read; the message is the note a person sees."""


def ollama_base(host: str) -> str:
    """OLLAMA_HOST as Ollama itself reads it: without a scheme the port is 11434, with one the
    scheme's own; 0.0.0.0 (where a server listens) is reached at 127.0.0.1."""
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = f"http://{host}"
        default_port = OLLAMA_PORT
    else:
        default_port = None
    parts = urlsplit(host)
    name = parts.hostname or "127.0.0.1"
    if name in ("0.0.0.0", "::"):
        name = "127.0.0.1"
    if ":" in name:
        name = f"[{name}]"
    port = parts.port or default_port
    return f"{parts.scheme}://{name}{f':{port}' if port else ''}{parts.path}"


def where(url: str) -> str:
    """host:port of a URL, for notes (never a path, which could hold a token)."""
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or "(no host)"


def unreachable(e: Exception) -> str:
    if isinstance(e, Unreachable):
        return str(e)
    if isinstance(e, httpx2.TimeoutException):
        return "unreachable: no answer in time"
    if isinstance(e, httpx2.HTTPStatusError):
        code = e.response.status_code
        return f"unreachable: the key was refused ({code})" if code in (401, 403) else f"unreachable: it answered {code}"
    if isinstance(e, httpx2.HTTPError):
        return "unreachable: could not connect"
    return "unreachable: its model list could not be read"


def log_odd(e: Exception, where: str) -> None:
    """A listing that failed in a way no server outage explains is worth a traceback in the log."""
    if not isinstance(e, (httpx2.HTTPError, Unreachable)):
        log.warning("reading the model list of %s failed", where, exc_info=e)


def down(id: str, name: str, group: str, e: Exception) -> Choice:
    """The one row of a provider that did not answer."""
    return Choice(id=id, name=name, group=group, note=unreachable(e), up=False)


def _json(response: httpx2.Response) -> Any:
    response.raise_for_status()
    try:
        return response.json()
    except ValueError:
        raise Unreachable("unreachable: its model list could not be read") from None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def window_in(entry: dict[str, Any]) -> int | None:
    """The context window an OpenAI-style /models entry reports, under any of the usual names
    (OpenRouter's context_length, vLLM's max_model_len, others' context_window)."""
    for key in ("context_length", "max_model_len", "context_window", "max_context_length"):
        if found := _positive(entry.get(key)):
            return found
    top = entry.get("top_provider")
    return _positive(top.get("context_length")) if isinstance(top, dict) else None


def tags_in(entry: dict[str, Any]) -> tuple[str, ...]:
    """What an OpenAI-style entry says the model can do (OpenRouter's supported_parameters
    and architecture.input_modalities); a list that says nothing leaves images allowed."""
    params = entry.get("supported_parameters")
    tags = tuple(t for t, p in (("thinking", "reasoning"), ("tools", "tools")) if p in params) \
        if isinstance(params, list) else ()
    architecture = entry.get("architecture")
    inputs = architecture.get("input_modalities") if isinstance(architecture, dict) else None
    if isinstance(inputs, list):
        tags += ("vision",) if "image" in inputs else (NO_IMAGES,)
    return tags


async def openai_catalog(http: httpx2.AsyncClient, url: str, key: str, group: str, prefix: str = "",
                         only: tuple[str, ...] = (), servers: dict[str, Server] | None = None,
                         timeout: float = LIST_TIMEOUT) -> list[Choice]:
    """The models an OpenAI-compatible server lists at GET {url}/models, ids "{prefix}NAME".
    With `only`, those models in that order (their window taken from the list when it has them).
    With `servers`, the server is also asked what it says about itself (servers.probe), kept
    there under `url`, and the window it runs each model with wins over the list's."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = _json(await http.get(f"{url}/models", headers=headers, timeout=timeout))
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise Unreachable("unreachable: its model list could not be read")
    listed = {m["id"]: m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]}
    said = Server()
    if servers is not None:
        said = servers[url] = await probe(http, url, list(listed.values()), key)
    names = only or tuple(listed)
    return [Choice(id=f"{prefix}{n}", name=shown_name(n), group=group, window=said.windows.get(n) or window_in(listed.get(n, {})),
                   tags=tags_in(listed.get(n, {})))
            for n in names]


def shown_name(name: str) -> str:
    """What the picker calls a model: llama-cpp-python lists a model by its file's path
    (".../SmolLM2-135M-Instruct.Q4_1.gguf"), which says the file's name with a path around it."""
    if name.lower().endswith(".gguf") and "/" in name:
        return name.rsplit("/", 1)[-1][:-5]
    return name


def ollama_window(show: dict[str, Any]) -> int | None:
    """The window Ollama runs a model with: num_ctx when its parameters set one, else the
    model's own context length from model_info (`{architecture}.context_length`)."""
    params = show.get("parameters")
    if isinstance(params, str):
        for line in params.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "num_ctx" and words[1].isdigit() and int(words[1]) > 0:
                return int(words[1])
    info = show.get("model_info")
    if not isinstance(info, dict):
        return None
    arch = info.get("general.architecture")
    if isinstance(arch, str) and (found := _positive(info.get(f"{arch}.context_length"))):
        return found
    return next((v for k, v in info.items() if k.endswith(".context_length") and _positive(v)), None)


async def ollama_catalog(http: httpx2.AsyncClient, base: str, prefix: str = f"{LOCAL}:",
                         group: str = GROUP_LOCAL) -> list[Choice]:
    """Ollama's models (GET /api/tags), each with its window and abilities (POST /api/show),
    ids "{prefix}NAME" in `group` (OLLAMA_HOST's: "local:", this computer; a connection's own).
    Models that only embed are left out: they cannot chat."""
    body = _json(await http.get(f"{base}/api/tags", timeout=LIST_TIMEOUT))
    models = body.get("models") if isinstance(body, dict) else None
    if not isinstance(models, list):
        raise Unreachable("unreachable: its model list could not be read")
    names = [m.get("model") or m.get("name") for m in models if isinstance(m, dict)]
    names = [n for n in names if isinstance(n, str) and n]
    gate = asyncio.Semaphore(SHOW_AT_ONCE)

    async def show(name: str) -> dict[str, Any]:
        async with gate:
            try:
                r = await http.post(f"{base}/api/show", json={"model": name}, timeout=LIST_TIMEOUT)
                found = _json(r)
            except (httpx2.HTTPError, Unreachable):
                return {}  # listed without its details: the model still answers
        return found if isinstance(found, dict) else {}

    async def running() -> dict[str, int]:
        """The window each loaded model runs with now (/api/ps context_length): what Ollama
        uses when no num_ctx is set is its own default, not the model's length."""
        try:
            found = _json(await http.get(f"{base}/api/ps", timeout=LIST_TIMEOUT))
        except (httpx2.HTTPError, Unreachable):
            return {}
        loaded = found.get("models") if isinstance(found, dict) else None
        return {m.get("model") or m.get("name"): n for m in loaded if isinstance(m, dict)
                and (n := _positive(m.get("context_length")))} if isinstance(loaded, list) else {}

    *shows, loaded = await asyncio.gather(*(show(n) for n in names), running())
    out = []
    for name, info in zip(names, shows):
        abilities = info.get("capabilities")
        abilities = [a for a in abilities if isinstance(a, str)] if isinstance(abilities, list) else []
        if abilities and "completion" not in abilities:
            continue
        tags = tuple(t for t in ("thinking", "tools", "vision") if t in abilities)
        if abilities and "vision" not in abilities:
            tags += (NO_IMAGES,)  # Ollama says what it can do, and reading images is not among it
        out.append(Choice(id=f"{prefix}{name}", name=name, group=group,
                          window=loaded.get(name) or ollama_window(info), tags=tags))
    return out
