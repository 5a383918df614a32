"""One request to a model, streamed or short, and what its failures teach.

`stream` builds the request by what the model was found to take (limits.py), waits its turn
at a server that serves one request at a time (servers.Gate), reads the stream into deltas
(wire.py), and turns every way it can fail into either a `Retry` (something was learned: the
agent loop makes the request again, built anew) or a `ModelError` in plain words:

- a stream that brings nothing at all (llama-cpp-python answers 200 and then nothing when a
  request overflows its window or its chat template fails on image parts) is asked why: the
  same request, not streamed, for one token, whose error says what the stream could not;
- an answer that ends without a finish reason (llama-cpp-python ends a running request when
  another arrives) is made again once when nothing of it was written, else said to be cut;
- an answer without usage is counted by the server's tokenizer where it has one.

Its functions are passed what they read: where the request goes (a `Route`, found by the client,
client.py, when the request begins) and what models were found to take (`limits.Lessons`).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2

from ..context import window
from ..netguard.sockets import pace
from ..agent import Delta, Message, ModelError
from ..tools import Tool
from . import limits
from .errors import EMPTY_REPLY, ENDED_EARLY, plain_words, server_says
from .limits import Lessons
from .servers import Endpoint, Gate, Server, count_tokens
from .wire import FINISHED, cache_marked, deltas, sse_lines, takes_cache_marks

if TYPE_CHECKING:
    import openai

RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds before the 2nd, 3rd and 4th try of a busy or failing server
RETRY_AFTER_MAX = 30.0


def transient(e: Exception) -> bool:
    """A busy or failing server (429, 5xx): worth another try. (openai is imported by the
    client that made the request: client.py.)"""
    import openai

    return isinstance(e, (openai.RateLimitError, openai.InternalServerError))

EARLY_PAUSE = 0.5  # seconds before an answer ended early is asked for again
WAITING = "Waiting for the model server: it answers one request at a time, and another is running."


@dataclass(frozen=True)
class Route:
    """Where a request for one model goes, as the client found it when the request began
    (Providers.route)."""

    model: str  # the id asked for (the server's own name is `endpoint.model`)
    endpoint: Endpoint
    client: openai.AsyncOpenAI
    server: Server  # what the server said about itself
    gate: Gate | None  # None: the server queues requests itself
    http: httpx2.AsyncClient  # the client's connections, for the server's tokenizer
    bounded: bool  # the request carries max_tokens (Providers.bounded)
    thinking: Callable[[str | None], dict[str, Any]]  # the request fields for a thinking level


def retry_after(e: Exception) -> float | None:
    """The wait a server asked for (Retry-After, or retry-after-ms), capped."""
    response = getattr(e, "response", None)
    if response is None:
        return None
    headers = response.headers
    try:
        if "retry-after-ms" in headers:
            return min(float(headers["retry-after-ms"]) / 1000, RETRY_AFTER_MAX)
        if "retry-after" in headers:
            return min(float(headers["retry-after"]), RETRY_AFTER_MAX)
    except ValueError:
        return None
    return None


def has_images(messages: list[dict[str, Any]]) -> bool:
    return any(isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
               for m in messages)


def text_of(messages: list[Message]) -> str:
    """A request's words, for a tokenizer to count."""
    out = []
    for m in messages:
        if isinstance(m.content, str):
            out.append(m.content)
        else:
            out.extend(p.get("text", "") for p in m.content if p.get("type") == "text")
        out.extend(f"{c.name} {c.arguments}" for c in m.tool_calls)
    return "\n".join(out)


def build(route: Route, lessons: Lessons, messages: list[Message], tools: list[Tool],
          thinking: str | None) -> dict[str, Any]:
    """The request's fields, by what the model was found to take."""
    found = lessons.of(route.model)
    endpoint = route.endpoint
    sent = [m.to_api() for m in messages]
    request: dict[str, Any] = {
        "model": endpoint.model,
        "messages": cache_marked(sent) if takes_cache_marks(endpoint) else sent,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools and found.tools and endpoint.tools:  # the built-in model is sent none (docs/local-model.md)
        request["tools"] = [t.schema() for t in tools]
    if found.reasoning:
        request.update(route.thinking(thinking))
    if route.bounded:
        request["max_tokens"] = lessons.room(route.model, messages, tools)
    return request


def failure(route: Route, lessons: Lessons, e: Exception, request: dict[str, Any],
            messages: list[Message], tools: list[Tool]) -> ModelError:
    """What a failed request means: a `Retry` when it taught something, else plain words."""
    import openai

    endpoint, model = route.endpoint, route.model
    status = e.status_code if isinstance(e, openai.APIStatusError) else None
    says = server_says(e) if isinstance(e, openai.APIStatusError) else ""
    if status is None or not says:
        return ModelError(plain_words(e, endpoint))
    found = lessons.of(model)
    size = limits.overflow(says)
    if size is not False:
        counted = limits.prompt_tokens(says)
        if counted and lessons.on_count:
            lessons.on_count(model, window.request_tokens(messages, tools), counted)
        if isinstance(size, int):
            lessons.learn(model, found.learned(window=size))
            return limits.Retry(limits.window_notice(size), found, "window", failure=limits.too_long(size, says))
        return ModelError(limits.too_long(None, says))
    what = limits.refused(says, status, images=has_images(request["messages"]), tools="tools" in request,
                         reasoning="reasoning_effort" in request)
    if what:
        lessons.learn(model, found.learned(**{what: False}))
        return limits.Retry(limits.NOTICES[what], found, what, failure=plain_words(e, endpoint))
    return ModelError(plain_words(e, endpoint))


async def diagnosis(route: Route, lessons: Lessons, request: dict[str, Any], messages: list[Message],
                    tools: list[Tool]) -> ModelError:
    """Why a stream brought nothing: the same request, not streamed, for one token. Its error
    says what the stream could not; when it answers, the stream was empty for no reason given."""
    asked = {k: v for k, v in request.items() if k not in ("stream", "stream_options")}
    import openai

    asked |= {"stream": False, "max_tokens": 1}
    for again in (False, True):
        try:
            await route.client.chat.completions.create(**asked)
        except openai.APIConnectionError:
            if again:  # the connection the stream left was closed under it: once more, anew
                return ModelError(EMPTY_REPLY)
        except Exception as e:
            return failure(route, lessons, e, request, messages, tools)
        else:
            break
    return ModelError(EMPTY_REPLY)


async def stream(locate: Callable[[], Awaitable[Route]], lessons: Lessons, messages: list[Message],
                 tools: list[Tool], extra: dict[str, Any] | None = None,
                 thinking: str | None = None, every: Callable[[], float] | None = None) -> AsyncIterator[Delta]:
    """One streamed answer's deltas; `locate` finds where it goes when it begins. `every()`:
    how often its stream is read once words come (netguard.sockets.pace; None: once a beat)."""
    route = await locate()
    request = build(route, lessons, messages, tools, thinking)
    if extra:
        request.update(extra)
    gate = route.gate
    waited = gate is not None and gate.full
    if waited:
        yield Delta(notice=WAITING)
    began = time.monotonic()
    async with gate.answer() if gate is not None else contextlib.nullcontext():
        if waited:
            yield Delta(notice=f"Waited {time.monotonic() - began:.0f} s for the model server, "
                               f"which answers one request at a time.")
        for again in (False, True):
            ended_early = False
            async for delta in _one(route, lessons, request, messages, tools, every):
                if delta is ENDED:
                    ended_early = True
                else:
                    yield delta
            if not ended_early:
                return
            if again:
                raise ModelError(ENDED_EARLY)
            await asyncio.sleep(EARLY_PAUSE)


ENDED = Delta()  # _one's word that the answer ended early with nothing of it written


async def _one(route: Route, lessons: Lessons, request: dict[str, Any], messages: list[Message],
               tools: list[Tool], every: Callable[[], float] | None = None) -> AsyncIterator[Delta]:
    """One try of the streamed request: its deltas, then ENDED when it ended with no finish
    reason before anything was written (the caller asks again once)."""
    endpoint, server = route.endpoint, route.server
    tries = len(RETRY_DELAYS) + 1
    completions = route.client.chat.completions.with_streaming_response
    problem = ""  # what the last failed try met, for the notice once a try answers
    for attempt in range(tries):
        try:
            opened = completions.create(**request)
            response = await opened.__aenter__()
            break
        except Exception as e:
            if not transient(e):
                raise failure(route, lessons, e, request, messages, tools) from e
            if getattr(e, "status_code", None) != 429 and \
                    isinstance(taught := failure(route, lessons, e, request, messages, tools), limits.Retry):
                raise taught from e
            if attempt == tries - 1:
                raise ModelError(f"{plain_words(e, endpoint)} Gave up after {tries} tries.") from e
            wait = retry_after(e) or RETRY_DELAYS[attempt]
            problem = plain_words(e, endpoint)
            yield Delta(notice=f"{problem} Trying again in {wait:g} s (try {attempt + 2} of {tries}).")
            await asyncio.sleep(wait)
    if problem:  # the notice no longer says it is about to try: it says how it went
        yield Delta(notice=f"{problem} It answered on try {attempt + 1} of {tries}.")
    finished = received = wrote = counted = False
    answer: list[str] = []
    cut: Exception | None = None
    paced = False  # read as it comes until the first words (they are written at once), then once a beat
    try:
        async for line in sse_lines(response.http_response):
            # The SSE lines are parsed here rather than by the SDK: building its typed
            # objects for every chunk cost ~20x the JSON parse and bounded how many
            # answers one worker could stream at once.
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            received = True
            if data == b"[DONE]":
                break
            for delta in deltas(data):
                if delta is FINISHED:
                    finished = True
                    continue
                if delta.usage:
                    counted = True
                if delta.text or delta.reasoning or delta.call_index is not None:
                    wrote = True
                    answer.append(delta.text or delta.reasoning or delta.call_arguments)
                    if not paced:
                        pace(response.http_response, every=every)
                        paced = True
                yield delta
    except ModelError:
        raise
    except Exception as e:
        cut = e
    finally:
        pace(response.http_response, on=False)
        await opened.__aexit__(None, None, None)
    if not received and not isinstance(cut, httpx2.TimeoutException):
        # ended with nothing in it (or cut before anything came): not a wait that ran out
        raise await diagnosis(route, lessons, request, messages, tools)
    if cut is not None:
        raise ModelError(plain_words(cut, endpoint)) from cut
    if not finished:
        if not wrote:
            yield ENDED
            return
        raise ModelError(ENDED_EARLY)
    if not counted and server.tokenize:
        sent = text_of(messages) + "".join(json.dumps(t, separators=(",", ":")) for t in request.get("tools", ()))
        prompt = await count_tokens(route.http, server, endpoint.model, sent)
        if prompt:
            completion = await count_tokens(route.http, server, endpoint.model, "".join(answer)) or 0
            yield Delta(usage={"prompt": prompt + window.MESSAGE_TOKENS * len(messages), "completion": completion,
                               "cached": 0, "counted": 1})


async def complete(locate: Callable[[], Awaitable[Route]], lessons: Lessons, messages: list[Message],
                   max_tokens: int = 40) -> str:
    """A short non-streamed request (titles), without thinking where the server can turn it
    off, after every answer waiting at a server that serves one request at a time."""
    route = await locate()
    gate = route.gate
    found = lessons.of(route.model)
    async with gate.side() if gate is not None else contextlib.nullcontext():
        try:
            r = await route.client.chat.completions.create(
                model=route.endpoint.model, messages=[m.to_api() for m in messages], max_tokens=max_tokens,
                stream=False, extra_body=(route.thinking("off") if found.reasoning else None) or None,
            )
        except Exception as e:
            raise ModelError(plain_words(e, route.endpoint)) from e
    return (r.choices[0].message.content or "") if r.choices else ""
