"""Thinking levels and the request fields that ask a server for them."""
from __future__ import annotations

from typing import Any

THINKING = ("off", "minimal", "low", "medium", "high", "xhigh")
# Ollama's OpenAI endpoint takes high, medium, low or none (none turns thinking off) and
# refuses anything else; a model that cannot think refuses any level but none.
OLLAMA_EFFORT = {"off": "none", "minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


def thinking_fields(style: str, level: str | None, thinks: bool | None) -> dict[str, Any]:
    """The request fields for a thinking level. `style` is "ollama" or "openai"; `thinks` is
    whether the server said the model can think (None: it did not say).

    OpenAI-style servers (OpenAI, OpenRouter, vLLM ...) get `reasoning_effort` as named; "off"
    sends nothing, since "none" is refused by models that predate it. Ollama gets its own
    effort, "none" for off, and only for a model it lists as thinking.
    """
    if not level:
        return {}
    if level not in THINKING:
        raise ValueError(f"unknown thinking level {level!r}")
    if style == "ollama":
        return {"reasoning_effort": OLLAMA_EFFORT[level]} if thinks else {}
    return {} if level == "off" else {"reasoning_effort": level}
