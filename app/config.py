"""Every setting Tabletalk reads, from the environment, in one place.

Each name here is documented in the README's settings table; a test fails when one is not.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# name -> (default, what it is for); the README table is checked against this mapping.
SETTINGS: dict[str, tuple[str, str]] = {
    "TABLETALK_DATA": ("./data", "Folder for the SQLite database (tabletalk.db), the secret key and files/."),
    "AI_URL": ("", "Base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:11434/v1)."),
    "AI_KEY": ("", "API key for AI_URL, sent as a Bearer token; optional."),
    "AI_MODEL": ("", "Model to use at AI_URL when a message names none; default: the first the server lists."),
    "OLLAMA_HOST": ("http://127.0.0.1:11434", "Where a local Ollama listens, for models on this computer."),
    "CHAT_PRIVATE_PLUGINS": ("0", "1 lets plugins (MCP servers) live on private or loopback addresses."),
    "TABLETALK_CONTEXT_WINDOW": ("8192", "Context window assumed when a model server does not report one."),
    "TABLETALK_MODEL_TIMEOUT": ("60", "Seconds without a byte from the model before a request is given up."),
}


def _get(name: str) -> str:
    return os.environ.get(name, SETTINGS[name][0]).strip()


@dataclass(frozen=True)
class Config:
    data: Path
    ai_url: str
    ai_key: str
    ai_model: str
    ollama_host: str
    private_plugins: bool
    context_window: int
    model_timeout: float

    @property
    def database(self) -> Path:
        return self.data / "tabletalk.db"

    @property
    def files(self) -> Path:
        return self.data / "files"


def _number(name: str, kind: type) -> int | float:
    raw = _get(name)
    try:
        value = kind(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number, not {raw!r}") from None
    if value <= 0:
        raise SystemExit(f"{name} must be above zero, not {raw!r}")
    return value


def load() -> Config:
    """Read the environment now (tests change it between apps, so this is not cached)."""
    return Config(
        data=Path(_get("TABLETALK_DATA")).expanduser().resolve(),
        ai_url=_get("AI_URL").rstrip("/"),
        ai_key=_get("AI_KEY"),
        ai_model=_get("AI_MODEL"),
        ollama_host=_get("OLLAMA_HOST").rstrip("/"),
        private_plugins=_get("CHAT_PRIVATE_PLUGINS") in {"1", "true", "yes", "on"},
        context_window=int(_number("TABLETALK_CONTEXT_WINDOW", int)),
        model_timeout=float(_number("TABLETALK_MODEL_TIMEOUT", float)),
    )
