"""Model servers the owner added in the browser (the Connections page), beside those the
environment names: what one is, the words a Test answers with, and the prefix its models' ids
take. Their rows are the store's (app/store/connections.py); client.py lists and asks them.

A connection is of one of two kinds:

    openai   any OpenAI-compatible server (OpenAI, OpenRouter, vLLM, LM Studio, llama.cpp,
             LiteLLM): its base URL (…/v1) and a key, the model list at GET {url}/models
    ollama   an Ollama, by its own address: the list at GET /api/tags with each model's
             window and abilities (catalog.ollama_catalog), answers at its /v1

Its models are offered as "PREFIX:MODEL" in the group named as the connection. The prefix is
made from the name when the connection is added and kept when it is renamed, so an agent that
names one of its models keeps it.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx2

from ..config import ACCOUNT_NAME, RESERVED
from .catalog import LIST_TIMEOUT, ollama_base, where

OPENAI, OLLAMA = "openai", "ollama"
KINDS = {OPENAI: "OpenAI-compatible (OpenAI, OpenRouter, vLLM, LM Studio, llama.cpp, LiteLLM…)",
         OLLAMA: "Ollama"}
NAME_MAX = 60


@dataclass(frozen=True)
class ModelConnection:
    """One model server the owner added. `off`: its models switched off (left out of the picker);
    `listed`: what it listed at its last Test that reached it, for the page's switches."""

    id: int
    name: str
    prefix: str
    kind: str
    url: str
    key: str = field(default="", repr=False)  # opened: never in a page or a log line
    off: tuple[str, ...] = ()
    listed: tuple[str, ...] = ()
    has_key: bool = False
    tested: str = ""  # what its last Test said ("Connected: 12 models.", or why not)
    everyone: bool = True  # False: only the owner and `people` may use its models
    people: frozenset[int] = frozenset()
    # its models kept for chosen people, by name: the people (besides the owner) who may use each
    chosen: Mapping[str, frozenset[int]] = field(default_factory=dict, hash=False)

    @property
    def base(self) -> str:
        """Where its OpenAI-compatible requests go (an Ollama's own /v1)."""
        return f"{self.url}/v1" if self.kind == OLLAMA else self.url


@dataclass(frozen=True)
class Tested:
    """What a Test found: `ok`, the words the page shows, and the models listed."""

    ok: bool
    words: str
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class Barred:
    """What one person may not use (Store.barred): the prefixes of the connections kept for
    chosen people they are not among, and the ids (PREFIX:MODEL) of the single models so kept."""

    prefixes: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()


def may_use(model: str, barred: Barred) -> bool:
    """Whether a person may use `model` (an id), given what is barred to them: the one rule
    every picker, form, turn and API request of theirs is held to. A model's rule narrows its
    connection's: both must allow them."""
    prefix, colon, name = model.partition(":")
    return not (colon and name and (prefix in barred.prefixes or model in barred.models))


def address_problem(kind: str, url: str) -> str:
    """Why `url` cannot be a connection of `kind` ('' when it can). Loopback and private
    addresses are allowed: the owner's own servers are where most models run."""
    if kind not in KINDS:
        return "Choose the kind of server: OpenAI-compatible or Ollama."
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        example = "http://127.0.0.1:11434" if kind == OLLAMA else "https://openrouter.ai/api/v1"
        return f"The address must be an http(s) URL, as in {example}."
    if parts.username or parts.password:
        return "Leave the key out of the address: it has a field of its own, which is kept sealed."
    return ""


def clean_url(kind: str, url: str) -> str:
    url = url.strip().rstrip("/")
    return ollama_base(url) if kind == OLLAMA and url else url


def prefix_for(name: str, taken: Collection[str]) -> str:
    """The prefix of a new connection's model ids: its name in a-z, 0-9, - and _, unlike any
    taken (other connections', AI_ACCOUNTS' names, "local")."""
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    stem = re.sub(r"[^a-z0-9_-]+", "-", plain).strip("-_")[:32] or "server"
    if not stem[0].isalnum():
        stem = f"s{stem}"
    prefix, n = stem, 1
    while prefix in taken or prefix in RESERVED or not ACCOUNT_NAME.fullmatch(prefix):
        n += 1
        prefix = f"{stem}-{n}"
    return prefix


def _said(response: httpx2.Response) -> str:
    """The server's own words in an error body (OpenAI's {"error": {"message"}}, Ollama's {"error"})."""
    try:
        body = response.json()
    except ValueError:
        return ""
    err = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(err, dict):
        err = err.get("message")
    return f" It said: “{err[:200]}”" if isinstance(err, str) and err else ""


def _names(kind: str, body: Any) -> list[str] | None:
    """The model names in a listing's body, or None when it is not a listing of that kind."""
    if kind == OLLAMA:
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, list):
            return None
        found = [m.get("model") or m.get("name") for m in models if isinstance(m, dict)]
    else:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return None
        found = [m.get("id") for m in data if isinstance(m, dict)]
    return [n for n in found if isinstance(n, str) and n]


async def check(http: httpx2.AsyncClient, kind: str, url: str, key: str = "",
               timeout: float = LIST_TIMEOUT) -> Tested:
    """Ask the server for its model list, and say what happened in the words the page shows."""
    listing = f"{url}/api/tags" if kind == OLLAMA else f"{url}/models"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    at = where(url)
    try:
        response = await http.get(listing, headers=headers, timeout=timeout)
    except httpx2.TimeoutException:
        return Tested(False, f"Unreachable: {at} did not answer within {timeout:g} s.")
    except httpx2.HTTPError:
        return Tested(False, f"Unreachable: nothing answers at {at} (is the server running, and is the address right?).")
    code = response.status_code
    if code in (401, 403):
        what = "a key" if not key else "the key"
        return Tested(False, f"Wrong key: the server refused {what} ({code}).{_said(response)}")
    if code >= 400:
        hint = "" if kind == OLLAMA or url.endswith("/v1") else " Does the address need to end in /v1?"
        return Tested(False, f"Not {'an Ollama' if kind == OLLAMA else 'an OpenAI-compatible server'}: "
                             f"GET {urlsplit(listing).path} answered {code}.{_said(response)}{hint}")
    try:
        names = _names(kind, response.json())
    except ValueError:
        names = None
    if names is None:
        what = "Ollama's /api/tags" if kind == OLLAMA else "an OpenAI model list at /models"
        return Tested(False, f"Not {'an Ollama' if kind == OLLAMA else 'an OpenAI-compatible server'}: "
                             f"what {at} answered is not {what}.")
    return Tested(True, f"Connected: {len(names)} model{'' if len(names) == 1 else 's'}.", tuple(names))
