"""Embeddings: texts made vectors by a model server's OpenAI-compatible /v1/embeddings (llama.cpp's
server started with --embeddings, Ollama, vLLM, LM Studio, OpenAI), for knowledge search by
meaning (docs/knowledge.md).

A request waits, as a title does, until no answer runs or waits at a server that serves one
at a time (llama-cpp-python ends the answer running when another request arrives). What a
server answers is checked before it is kept: one vector per text, in order, each a vector
(app/knowledge/vectors.py packs it); anything else is a `ModelError` in plain words.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

from ..agent import ModelError
from ..knowledge.vectors import pack
from .asking import Route
from .errors import plain_words

TEXTS_MAX = 32  # texts in one request (servers' batch limits: llama.cpp's default batch is 2,048 tokens)
TEXT_MAX = 2_000  # characters of a text embedded: a passage and its heading fit (app/knowledge/passages.py)


async def embed(route: Route, texts: Sequence[str]) -> list[bytes]:
    """`texts` (at most TEXTS_MAX) as packed vectors, in order."""
    if not texts:
        return []
    if len(texts) > TEXTS_MAX:
        raise ValueError(f"at most {TEXTS_MAX} texts are embedded at once, not {len(texts)}")
    sent = [t[:TEXT_MAX] or " " for t in texts]  # (an empty input is refused by some servers)
    async with route.gate.side() if route.gate is not None else contextlib.nullcontext():
        try:
            r = await route.client.embeddings.create(model=route.endpoint.model, input=sent, encoding_format="float")
        except Exception as e:
            raise ModelError(plain_words(e, route.endpoint)) from e
    data = sorted(getattr(r, "data", None) or [], key=lambda d: getattr(d, "index", 0))
    if len(data) != len(sent):
        raise ModelError(f"The embedding model {route.model} answered {len(data)} vectors for {len(sent)} texts.")
    try:
        vectors = [pack(d.embedding) for d in data]
    except (AttributeError, ValueError) as e:
        raise ModelError(f"The embedding model {route.model} answered what is not a vector: {e}.") from e
    if len({len(v) for v in vectors}) > 1:
        raise ModelError(f"The embedding model {route.model} answered vectors of different sizes.")
    return vectors
