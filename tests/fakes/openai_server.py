"""A real HTTP server that speaks the OpenAI Chat Completions protocol from a script.

This is the protocol-boundary fake for Tabletalk's tests and benchmarks: the app
talks to it over TCP exactly as it would talk to OpenAI, vLLM, Ollama or
OpenRouter, so everything from the HTTP client's connection pool to the SSE
decoder is exercised for real. Nothing is mocked.

    with FakeModelServer(models={"fake-model": 8192}) as server:
        server.script(
            [reasoning("Let me think."), text("Hello there")],
            [tool_call("search", {"q": "cats"})],
        )
        ...point the app at server.url (AI_URL)...
        server.wait_requests(2)

Each POST /v1/chat/completions consumes the next scripted *turn* (FIFO); when
the queue is empty `server.default` answers. A turn is a list of *steps* made
by the constructors below (`text`, `reasoning`, `tool_call`, `usage`, `error`,
`stall`, `delay`, `hold`, `rate`, `drop`, `malformed`, `finish`), or a callable
`f(request_json) -> steps` for answers that depend on the request. As a
shorthand a turn may also be a bare string (one `text` step) or a single step.

The same turn answers both `"stream": true` (SSE, shaped like OpenAI's chunks,
chunked transfer encoding so an abrupt close is detectable) and
`"stream": false` (one `chat.completion` JSON built from the same steps; the
pacing steps then simply delay the response).

The server runs on its own asyncio loop in a daemon thread, so it serves sync
tests, async tests (whose loop is separate) and subprocesses alike. HTTP is
parsed by hand -- request line, headers, Content-Length body -- because that is
all OpenAI clients send, and it keeps 500 paced streams cheap on one loop.

POST /v1/embeddings answers as OpenAI's does (floats, or base64 when asked) with
`server.embed(text)` (a ValueError it raises answers 400): by default a bag of words hashed into EMBED_DIMS numbers, where
the words of `server.concepts` (a word -> the concept it means) count as their concept,
so "car" and "automobile" can mean the same while sharing no letter. Each request is
kept in `server.embedded`; `server.embed_error` (an `error(...)` step) answers instead.

Run `python -m tests.fakes.openai_server --port 9999 --rate 20 --tokens 200`
for a standalone server that answers every request with the default turn.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import collections
import http
import itertools
import json
import logging
import re
import signal
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Union

__all__ = [
    "FakeModelServer",
    "Step",
    "Turn",
    "text",
    "reasoning",
    "tool_call",
    "usage",
    "error",
    "stall",
    "delay",
    "hold",
    "rate",
    "drop",
    "malformed",
    "finish",
    "empty",
]


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------


class Step:
    """Base class of everything a turn is made of."""


@dataclass(frozen=True)
class _Text(Step):
    pieces: tuple[str, ...]


@dataclass(frozen=True)
class _Reasoning(Step):
    pieces: tuple[str, ...]
    field: str


@dataclass(frozen=True)
class _ToolCall(Step):
    name: str
    arguments: str
    id: str | None
    index: int | None
    pieces: int


@dataclass(frozen=True)
class _Usage(Step):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass(frozen=True)
class _Error(Step):
    status: int
    message: str
    type: str | None
    code: str | None
    retry_after: float | None
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Stall(Step):
    seconds: float


@dataclass(frozen=True)
class _Delay(Step):
    seconds: float


@dataclass(frozen=True)
class _Hold(Step):
    until: threading.Event
    timeout: float


@dataclass(frozen=True)
class _Rate(Step):
    tokens_per_second: float


@dataclass(frozen=True)
class _Drop(Step):
    pass


@dataclass(frozen=True)
class _Malformed(Step):
    pass


@dataclass(frozen=True)
class _Finish(Step):
    reason: str | None


Turn = Union[str, Step, "list[Step]", Callable[[dict], Any]]

_log = logging.getLogger(__name__)
EMBED_DIMS = 256  # the default embedding's numbers
_COMPACT = (",", ":")  # OpenAI sends compact JSON
_WORDS = re.compile(r"\s*\S+\s*")


def _split(s: str, chunk: int | None) -> tuple[str, ...]:
    if chunk is not None:
        if chunk < 1:
            raise ValueError("chunk must be >= 1")
        return tuple(s[i : i + chunk] for i in range(0, len(s), chunk))
    # Word-sized pieces look like real tokenizer output and keep every space,
    # so joining the deltas gives back exactly `s`.
    return tuple(_WORDS.findall(s)) or ((s,) if s else ())


def text(s: str, chunk: int | None = None) -> Step:
    """Content deltas: one per word (spaces kept), or per `chunk` characters."""
    return _Text(_split(s, chunk))


def reasoning(s: str, field: str = "reasoning_content", chunk: int | None = None) -> Step:
    """Reasoning deltas in `delta.reasoning_content` (DeepSeek/vLLM) or,
    with field="reasoning", `delta.reasoning` (OpenRouter/Ollama)."""
    if field not in ("reasoning_content", "reasoning"):
        raise ValueError("field must be 'reasoning_content' or 'reasoning'")
    return _Reasoning(_split(s, chunk), field)


def tool_call(
    name: str,
    arguments: str | dict = "",
    id: str | None = None,
    index: int | None = None,
    pieces: int = 3,
) -> Step:
    """A streamed tool call. `index=None` numbers the turn's calls 0, 1, 2...
    in order; `id=None` makes a unique `call_...` id."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return _ToolCall(name, arguments, id, index, max(1, pieces))


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Step:
    """The usage report, sent as the last chunk before [DONE] wherever it is
    placed in the turn (as OpenAI does with stream_options.include_usage)."""
    return _Usage(prompt_tokens, completion_tokens, cached_tokens)


_ERROR_DEFAULTS = {
    400: ("Bad request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to do this.", "invalid_request_error", None),
    404: ("The model does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached. Please try again later.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", None),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


def error(
    status: int,
    message: str | None = None,
    type: str | None = None,
    code: str | None = None,
    retry_after: float | None = None,
    headers: dict[str, str] | None = None,
) -> Step:
    """Answer with HTTP `status` and `{"error": {message, type, param, code}}`.

    As the first step (or after only `stall`s) this is a plain HTTP error. Once
    a stream has started it becomes an in-stream `data: {"error": ...}` event,
    which is how OpenAI reports failures mid-generation.
    """
    d_msg, d_type, d_code = _ERROR_DEFAULTS.get(status, ("Error.", "server_error" if status >= 500 else "invalid_request_error", None))
    return _Error(
        status,
        message if message is not None else d_msg,
        type if type is not None else d_type,
        code if code is not None else d_code,
        retry_after,
        tuple((headers or {}).items()),
    )


def stall(seconds: float) -> Step:
    """Send nothing for `seconds`. First in the turn, not even headers go out."""
    return _Stall(seconds)


def delay(seconds: float) -> Step:
    """Pause between chunks (the stream's headers have already gone out)."""
    return _Delay(seconds)


def hold(until: threading.Event, timeout: float = 60) -> Step:
    """Pause (the stream's headers have gone out) until the test sets `until`, or `timeout`
    seconds pass: a run that lasts exactly as long as the test looks at it, on any machine."""
    return _Hold(until, timeout)


def rate(tokens_per_second: float) -> Step:
    """Pace every following text/reasoning/tool-argument delta at this rate.
    `rate(0)` switches pacing off again."""
    return _Rate(tokens_per_second)


def drop() -> Step:
    """Close the TCP connection mid-response: no finish chunk, no [DONE], no
    terminating zero-length chunk -- the client sees a truncated body."""
    return _Drop()


def malformed() -> Step:
    """Send `data: {not json` (or, non-streaming, a `{not json` body)."""
    return _Malformed()


def finish(reason: str | None = "stop") -> Step:
    """Set the finish_reason of the final chunk; `None` omits that chunk."""
    return _Finish(reason)


@dataclass(frozen=True)
class _Empty(Step):
    pass


def empty() -> Step:
    """Answer 200 with event-stream headers and then end the body with nothing in it: what
    llama-cpp-python's server does when a streamed request fails inside it (a prompt over its
    window, a chat template that cannot take image parts). Not streamed, it is a plain 200 of
    an empty answer; script an `error` for the not-streamed ask instead."""
    return _Empty()


def _normalize(turn: Any) -> list[Step]:
    if isinstance(turn, str):
        return [text(turn)]
    if isinstance(turn, Step):
        return [turn]
    steps = list(turn)
    for s in steps:
        if not isinstance(s, Step):
            raise TypeError(f"not a step: {s!r}")
    return steps


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------


class _ClientGone(Exception):
    """The peer went away; stop this connection quietly."""


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


@dataclass
class _Stream:
    """Per-response state while a streamed turn is written."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    keep_alive: bool
    prefix: bytes
    started: bool = False
    interval: float | None = None
    next_at: float = 0.0
    include_usage: bool = False


class FakeModelServer:
    """Scripted OpenAI-compatible server on 127.0.0.1 (see module docstring)."""

    def __init__(
        self,
        models: dict[str, int] | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        require_key: str | None = None,
        kind: str = "",
        slots: int = 1,
    ) -> None:
        self.models: dict[str, int] = dict(models if models is not None else {"fake-model": 8192})
        self.thinkers: set[str] = set()  # models listed as reasoning ones (OpenRouter's supported_parameters)
        # Which real server's own endpoints and list shape to serve (see _kind_dispatch):
        # "" (OpenAI/vLLM-like list), "llama.cpp", "llama-cpp-python" or "lmstudio".
        if kind not in ("", "llama.cpp", "llama-cpp-python", "lmstudio"):
            raise ValueError(f"unknown server kind {kind!r}")
        self.kind = kind
        self.slots = slots  # llama.cpp's total_slots
        self.template_tools = True  # llama.cpp's /props chat_template_caps.supports_tools
        self.probes: list[str] = []  # the paths of every request beyond chat and the model list
        self.active = self.most_active = 0
        # llama-cpp-python ignores stream_options.include_usage: no usage chunk ever
        self.sends_usage = kind != "llama-cpp-python"
        self.host = host
        self.port = port
        self.require_key = require_key
        self.default: Turn = [text("OK")]
        # When set, non-streamed requests (an app's side requests, such as naming a
        # conversation) are answered by this turn and leave the scripted queue alone.
        self.plain_default: Turn | None = None
        self.requests: list[dict] = []
        self.request_headers: list[dict[str, str]] = []
        self.connections = 0  # TCP connections accepted; lets tests see keep-alive reuse
        self.errors: list[BaseException] = []  # exceptions raised by callable turns / server bugs
        self.record_times = False
        self.concepts: dict[str, str] = {}  # word -> what it means, for the default embedding
        self.embed: Callable[[str], list[float]] = self._bag_of_words
        self.embedded: list[dict] = []  # every /v1/embeddings request's body
        self.embed_error: Any = None  # an error(...) step: /v1/embeddings answers it instead
        self.sent_at: list[float] = []
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    # ---- public API ------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def script(self, *turns: Turn) -> "FakeModelServer":
        """Queue turns; each chat request consumes one, first in first out."""
        for t in turns:
            self._queue.append(t if callable(t) else _normalize(t))
        return self

    @property
    def pending(self) -> int:
        """Scripted turns not yet consumed."""
        return len(self._queue)

    def reset(self) -> None:
        """Forget queued turns, recorded requests and times (for shared servers)."""
        self._queue.clear()
        with self._cond:
            self.requests.clear()
            self.request_headers.clear()
        self.sent_at.clear()
        self.errors.clear()

    def wait_requests(self, n: int, timeout: float = 5) -> list[dict]:
        """Block until at least `n` chat requests arrived; TimeoutError otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= n, timeout):
                raise TimeoutError(f"expected {n} chat requests, got {len(self.requests)} within {timeout}s")
            return self.requests

    async def await_requests(self, n: int, timeout: float = 5) -> list[dict]:
        """`wait_requests` for async tests, without blocking their event loop."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"expected {n} chat requests, got {len(self.requests)} within {timeout}s")
            await asyncio.sleep(0.005)
        return self.requests

    def start(self) -> "FakeModelServer":
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    # A big backlog: benchmarks open hundreds of connections at once.
                    asyncio.start_server(self._handle, self.host, self.port, backlog=2048)
                )
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as e:  # bind failure must reach the caller of start()
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"FakeModelServer:{self.port}", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=5)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        self._thread = None
        self._loop = None

    def __enter__(self) -> "FakeModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- connection handling --------------------------------------------

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                req = await self._read_request(reader)
                if req is None:
                    break
                keep = await self._dispatch(req, reader, writer)
                if not (keep and req.keep_alive):
                    break
        except (_ClientGone, ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client left; that is its right and not worth a traceback
        except Exception as e:
            # A bug in the fake itself: keep it visible to the test (the
            # fixture can assert on server.errors) without killing the loop.
            self.errors.append(e)
            _log.exception("fake OpenAI server failed on a request")
        except asyncio.CancelledError:
            # Only stop() cancels us. Swallowed because Python 3.11's
            # start_server callback calls task.exception() on a cancelled
            # task and prints the resulting CancelledError as a traceback.
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None  # clean close between requests
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            raise _ClientGone from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length") or 0)
        body = await reader.readexactly(length) if length else b""
        conn = headers.get("connection", "").lower()
        keep_alive = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        return _Request(method, target.split("?", 1)[0], headers, body, keep_alive)

    async def _dispatch(self, req: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; return False when the connection must close."""
        path = req.path.rstrip("/")
        if self.require_key is not None and req.headers.get("authorization") != f"Bearer {self.require_key}":
            if path == "/v1/chat/completions":
                try:
                    self._record(req, json.loads(req.body or b"null"))
                except ValueError:
                    self._record(req)
            return self._send_error(writer, error(401), req.keep_alive)
        if self.kind and (answered := self._kind_dispatch(req, path, writer)) is not None:
            return answered
        if req.method == "GET" and path == "/v1/models":
            data = [self._model_json(m, n) for m, n in self.models.items()]
            return self._send_json(writer, 200, {"object": "list", "data": data}, req.keep_alive)
        if req.method == "GET" and path.startswith("/v1/models/"):
            name = path[len("/v1/models/") :]
            if name in self.models:
                return self._send_json(writer, 200, self._model_json(name, self.models[name]), req.keep_alive)
            return self._send_error(writer, error(404, f"The model '{name}' does not exist"), req.keep_alive)
        if req.method == "POST" and path == "/v1/embeddings":
            return self._embeddings(req, writer)
        if req.method == "POST" and path == "/v1/chat/completions":
            body = self._json_body(req)
            if isinstance(body, Step):
                return self._send_error(writer, body, req.keep_alive)
            self._record(req, body)
            try:
                steps = self._next_turn(body)
            except Exception as e:  # a broken callable turn is the test's bug: show it, keep serving
                self.errors.append(e)
                return self._send_error(writer, error(500, f"fake server: turn raised {e!r}"), req.keep_alive)
            if steps is None:
                msg = f"The model '{body.get('model')}' does not exist or you do not have access to it."
                return self._send_error(writer, error(404, msg, code="model_not_found"), req.keep_alive)
            self.active += 1  # chat requests being answered at once (most_active: the most seen)
            self.most_active = max(self.most_active, self.active)
            try:
                if body.get("stream"):
                    return await self._stream_turn(body, steps, req, reader, writer)
                return await self._complete_turn(body, steps, req, writer)
            finally:
                self.active -= 1
        return self._send_error(writer, error(404, f"Unknown path {req.method} {req.path}", code="unknown_url"), req.keep_alive)

    def _bag_of_words(self, text: str) -> list[float]:
        vector = [0.0] * EMBED_DIMS
        for word in re.findall(r"[^\W_]+", text.casefold()):
            meant = self.concepts.get(word, word)
            vector[int.from_bytes(hashlib.blake2b(meant.encode(), digest_size=4).digest(), "big") % EMBED_DIMS] += 1.0
        vector[-1] += 0.01  # (never all zeros)
        return vector

    @staticmethod
    def _json_body(req: _Request) -> dict | Step:
        """A request's JSON object, or the 400 that refuses it."""
        try:
            body = json.loads(req.body or b"null")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            return error(400, f"Invalid JSON body: {e}")
        return body

    def _embeddings(self, req: _Request, writer) -> bool:
        body = self._json_body(req)
        if isinstance(body, Step):
            return self._send_error(writer, body, req.keep_alive)
        self.embedded.append(body)
        if self.embed_error is not None:
            return self._send_error(writer, self.embed_error, req.keep_alive)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return self._send_error(writer, error(400, "'input' must be a string or a list of strings"), req.keep_alive)
        if body.get("model") not in self.models:
            return self._send_error(writer, error(404, f"The model '{body.get('model')}' does not exist"), req.keep_alive)
        data = []
        for n, t in enumerate(texts):
            try:
                vector = self.embed(t)
            except ValueError as e:  # the text refused, as llama.cpp's "input is too large"
                return self._send_error(writer, error(400, str(e)), req.keep_alive)
            if body.get("encoding_format") == "base64":
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": n, "embedding": vector})
        tokens = sum(len(t.split()) for t in texts)
        return self._send_json(writer, 200, {"object": "list", "data": data, "model": body["model"],
                                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}, req.keep_alive)

    def _record(self, req: _Request, body: Any = None) -> None:
        with self._cond:
            self.requests.append(body if body is not None else {})
            self.request_headers.append(req.headers)
            self._cond.notify_all()

    @property
    def streamed(self) -> list[dict]:
        """The streamed chat requests only (the conversation's own, not side requests)."""
        return [r for r in self.requests if r.get("stream")]

    def _next_turn(self, body: dict) -> list[Step] | None:
        if not body.get("stream") and self.plain_default is not None:
            t = self.plain_default
            return t(body) if callable(t) else _normalize(t)
        try:
            turn = self._queue.popleft()
        except IndexError:
            # Only the unscripted default checks the model: a scripted turn is
            # the test saying exactly what the "model" answers.
            if self.models and body.get("model") not in self.models:
                return None
            turn = self.default
        if callable(turn):
            turn = turn(body)
        return _normalize(turn)

    # ---- other servers' own endpoints (kind) --------------------------------
    # Shapes as each project documents and serves them: llama.cpp's server (tools/server
    # README: /props, /slots, /tokenize, /v1/models with `meta`), llama-cpp-python 0.3.x
    # (llama_cpp/server/app.py: /v1/models owned_by "me", /extras/tokenize/count), LM Studio
    # (REST API v0: /api/v0/models with loaded_context_length).

    def _kind_dispatch(self, req: _Request, path: str, writer) -> bool | None:
        get, post = req.method == "GET", req.method == "POST"
        if get and path == "/v1/models":
            return self._send_json(writer, 200, {"object": "list", "data": [
                self._kind_model(m, n) for m, n in self.models.items()]}, req.keep_alive)
        if path in ("/v1/chat/completions",):
            return None
        self.probes.append(path)
        ctx = next(iter(self.models.values()), 0)
        if self.kind == "llama.cpp" and get and path == "/props":
            return self._send_json(writer, 200, {"default_generation_settings": {"n_ctx": ctx, "params": {}},
                                                 "total_slots": self.slots, "model_path": "model.gguf",
                                                 "modalities": {"vision": False, "audio": False},
                                                 "chat_template_caps": {"supports_tools": self.template_tools,
                                                                        "supports_system_role": True}},
                                   req.keep_alive)
        if self.kind == "llama.cpp" and get and path == "/slots":
            return self._send_json(writer, 200, [{"id": i, "n_ctx": ctx, "is_processing": False}
                                                 for i in range(self.slots)], req.keep_alive)
        if self.kind == "llama.cpp" and post and path == "/tokenize":
            said = json.loads(req.body or b"{}").get("content", "")
            return self._send_json(writer, 200, {"tokens": list(range(len(_WORDS.findall(said))))}, req.keep_alive)
        if self.kind == "llama-cpp-python" and post and path == "/extras/tokenize/count":
            said = json.loads(req.body or b"{}").get("input", "")
            return self._send_json(writer, 200, {"count": len(_WORDS.findall(said))}, req.keep_alive)
        if self.kind == "lmstudio" and get and path == "/api/v0/models":
            return self._send_json(writer, 200, {"object": "list", "data": [
                {"id": m, "object": "model", "type": "llm", "publisher": "lmstudio-community", "arch": "llama",
                 "compatibility_type": "gguf", "quantization": "Q4_K_M", "state": "loaded",
                 "max_context_length": n * 4, "loaded_context_length": n} for m, n in self.models.items()]},
                req.keep_alive)
        return None

    def _kind_model(self, name: str, ctx: int) -> dict:
        if self.kind == "llama.cpp":
            return {"id": name, "object": "model", "created": 0, "owned_by": "llamacpp",
                    "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx_train": ctx * 4, "n_embd": 576}}
        if self.kind == "llama-cpp-python":
            return {"id": name, "object": "model", "owned_by": "me", "permissions": []}
        return {"id": name, "object": "model", "owned_by": "organization_owner"}

    def _model_json(self, name: str, ctx: int) -> dict:
        listed = {"id": name, "object": "model", "created": 0, "owned_by": "fake", "context_length": ctx, "max_model_len": ctx}
        if name in self.thinkers:  # as OpenRouter lists a model that reasons
            listed["supported_parameters"] = ["reasoning", "include_reasoning", "max_tokens"]
        return listed

    # ---- plain responses --------------------------------------------------

    @staticmethod
    def _head(status: int, headers: Iterable[tuple[str, str]], keep_alive: bool) -> bytes:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:  # e.g. Anthropic-style 529, unknown to HTTPStatus
            phrase = "Error"
        lines = [f"HTTP/1.1 {status} {phrase}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_json(self, writer, status: int, obj: Any, keep_alive: bool, extra=(), raw: bytes | None = None) -> bool:
        payload = raw if raw is not None else json.dumps(obj).encode()
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(payload))),
            ("x-request-id", f"req_fake_{next(self._ids)}"),
            *extra,
        ]
        if writer.transport.is_closing():
            raise _ClientGone
        writer.write(self._head(status, headers, keep_alive) + payload)
        return True

    def _send_error(self, writer, e: _Error, keep_alive: bool) -> bool:
        extra = list(e.headers)
        if e.retry_after is not None:
            extra.append(("Retry-After", f"{e.retry_after:g}"))
        body = {"error": {"message": e.message, "type": e.type, "param": None, "code": e.code}}
        return self._send_json(writer, e.status, body, keep_alive, extra)

    # ---- streaming ---------------------------------------------------------

    async def _write(self, st: _Stream, payload: bytes) -> None:
        """Write one SSE event as one HTTP/1.1 chunk."""
        # Checking before writing keeps asyncio from logging
        # "socket.send() raised exception" once the peer has gone.
        if st.writer.transport.is_closing() or st.reader.at_eof():
            raise _ClientGone
        if self.record_times:  # before the bytes go: a client that has read them finds them counted
            self.sent_at.append(time.monotonic())
        st.writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        await st.writer.drain()

    async def _start(self, st: _Stream) -> None:
        if st.started:
            return
        st.started = True
        head = self._head(
            200,
            [
                ("Content-Type", "text/event-stream; charset=utf-8"),
                ("Cache-Control", "no-cache"),
                ("Transfer-Encoding", "chunked"),
                ("x-request-id", f"req_fake_{next(self._ids)}"),
            ],
            st.keep_alive,
        )
        if st.writer.transport.is_closing():
            raise _ClientGone
        st.writer.write(head)
        # OpenAI opens every stream with an empty assistant delta.
        await self._write(st, self._chunk(st, {"role": "assistant", "content": "", "refusal": None}))

    def _chunk(self, st: _Stream, delta: dict, finish_reason: str | None = None) -> bytes:
        # Hand-assembled around a precomputed prefix: this runs ~10k times a
        # second in the 500-stream benchmark, so only the delta is serialized.
        fr = b"null" if finish_reason is None else json.dumps(finish_reason).encode()
        return b'%s%s,"logprobs":null,"finish_reason":%s}]%s}\n\n' % (
            st.prefix,
            json.dumps(delta, ensure_ascii=False, separators=_COMPACT).encode(),
            fr,
            b',"usage":null' if st.include_usage else b"",
        )

    async def _pace(self, st: _Stream) -> None:
        if st.interval is None:
            return
        now = time.monotonic()
        if st.next_at > now:
            await asyncio.sleep(st.next_at - now)
            now = st.next_at
        # An absolute schedule avoids drift; restarting from `now` when late
        # avoids a catch-up burst after the loop was busy.
        st.next_at = max(st.next_at, now) + st.interval

    async def _stream_turn(self, body, steps, req, reader, writer) -> bool:
        model = str(body.get("model") or next(iter(self.models), "fake-model"))
        cid = f"chatcmpl-fake{next(self._ids)}"
        created = int(time.time())
        head = '{"id":%s,"object":"chat.completion.chunk","created":%d,"model":%s,"system_fingerprint":"fp_fake",' % (
            json.dumps(cid),
            created,
            json.dumps(model),
        )
        st = _Stream(reader, writer, req.keep_alive, f'data: {head}"choices":[{{"index":0,"delta":'.encode())
        st.include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and self.sends_usage
        finish_reason: str | None = "stop"
        explicit_finish = False
        usage_step: _Usage | None = None
        tool_indexes = itertools.count()
        tool_seen = False
        n_pieces = 0

        for step in steps:
            match step:
                case _Stall(seconds):
                    await asyncio.sleep(seconds)
                case _Delay(seconds):
                    await self._start(st)
                    await asyncio.sleep(seconds)
                case _Hold(until, timeout):
                    await self._start(st)
                    await asyncio.to_thread(until.wait, timeout)
                case _Rate(tps):
                    st.interval = 1.0 / tps if tps > 0 else None
                    st.next_at = 0.0
                case _Text(pieces):
                    await self._start(st)
                    for p in pieces:
                        await self._pace(st)
                        await self._write(st, self._chunk(st, {"content": p}))
                    n_pieces += len(pieces)
                case _Reasoning(pieces, fieldname):
                    await self._start(st)
                    for p in pieces:
                        await self._pace(st)
                        await self._write(st, self._chunk(st, {fieldname: p}))
                    n_pieces += len(pieces)
                case _ToolCall():
                    await self._start(st)
                    tool_seen = True
                    idx = step.index if step.index is not None else next(tool_indexes)
                    call_id = step.id or f"call_fake{next(self._ids)}"
                    for i, part in enumerate(_parts(step.arguments, step.pieces)):
                        await self._pace(st)
                        if i == 0:
                            tc = {"index": idx, "id": call_id, "type": "function", "function": {"name": step.name, "arguments": part}}
                        else:
                            tc = {"index": idx, "function": {"arguments": part}}
                        await self._write(st, self._chunk(st, {"tool_calls": [tc]}))
                        n_pieces += 1
                case _Usage():
                    usage_step = step
                case _Finish(reason):
                    finish_reason, explicit_finish = reason, True
                case _Error():
                    if not st.started:
                        return self._send_error(writer, step, req.keep_alive)
                    event = {"error": {"message": step.message, "type": step.type, "param": None, "code": step.code}}
                    await self._write(st, b"data: %s\n\n" % json.dumps(event).encode())
                    return await self._end_chunked(st)
                case _Drop():
                    if st.started:
                        await writer.drain()
                    return False  # the handler closes the socket without a last chunk
                case _Empty():
                    writer.write(self._head(200, [("Content-Type", "text/event-stream; charset=utf-8"),
                                                  ("Transfer-Encoding", "chunked")], req.keep_alive))
                    st.started = True
                    return await self._end_chunked(st)
                case _Malformed():
                    await self._start(st)
                    await self._write(st, b"data: {not json\n\n")

        await self._start(st)
        if not explicit_finish and tool_seen:
            finish_reason = "tool_calls"
        if finish_reason is not None:
            await self._write(st, self._chunk(st, {}, finish_reason))
        if usage_step is None and st.include_usage:
            usage_step = _Usage(_estimate_prompt_tokens(body), n_pieces, 0)
        if usage_step is not None:
            # OpenAI's usage chunk has no choices at all.
            u = json.dumps(_usage_json(usage_step), separators=_COMPACT)
            await self._write(st, f'data: {head}"choices":[],"usage":{u}}}\n\n'.encode())
        await self._write(st, b"data: [DONE]\n\n")
        return await self._end_chunked(st)

    async def _end_chunked(self, st: _Stream) -> bool:
        if st.writer.transport.is_closing():
            raise _ClientGone
        st.writer.write(b"0\r\n\r\n")
        await st.writer.drain()
        return True

    # ---- non-streaming -------------------------------------------------------

    async def _complete_turn(self, body, steps, req, writer) -> bool:
        model = str(body.get("model") or next(iter(self.models), "fake-model"))
        content: list[str] = []
        reasoning_parts: dict[str, list[str]] = {}
        calls: dict[int, dict] = {}
        tool_indexes = itertools.count()
        finish_reason: str | None = "stop"
        explicit_finish = False
        usage_step: _Usage | None = None
        interval: float | None = None
        n_pieces = 0

        async def pace(n: int) -> None:
            if interval is not None and n:
                await asyncio.sleep(n * interval)

        for step in steps:
            match step:
                case _Stall(seconds) | _Delay(seconds):
                    await asyncio.sleep(seconds)
                case _Hold(until, timeout):
                    await asyncio.to_thread(until.wait, timeout)
                case _Rate(tps):
                    interval = 1.0 / tps if tps > 0 else None
                case _Text(pieces):
                    await pace(len(pieces))
                    content.extend(pieces)
                    n_pieces += len(pieces)
                case _Reasoning(pieces, fieldname):
                    await pace(len(pieces))
                    reasoning_parts.setdefault(fieldname, []).extend(pieces)
                    n_pieces += len(pieces)
                case _ToolCall():
                    await pace(step.pieces)
                    idx = step.index if step.index is not None else next(tool_indexes)
                    calls[idx] = {
                        "id": step.id or f"call_fake{next(self._ids)}",
                        "type": "function",
                        "function": {"name": step.name, "arguments": step.arguments},
                    }
                    n_pieces += step.pieces
                case _Usage():
                    usage_step = step
                case _Finish(reason):
                    finish_reason, explicit_finish = reason, True
                case _Error():
                    return self._send_error(writer, step, req.keep_alive)
                case _Drop():
                    return False
                case _Malformed():
                    return self._send_json(writer, 200, None, req.keep_alive, raw=b"{not json")

        if not explicit_finish and calls:
            finish_reason = "tool_calls"
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content else None, "refusal": None}
        for fieldname, parts in reasoning_parts.items():
            message[fieldname] = "".join(parts)
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        if usage_step is None:
            usage_step = _Usage(_estimate_prompt_tokens(body), n_pieces, 0)
        completion = {
            "id": f"chatcmpl-fake{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": _usage_json(usage_step),
        }
        if self.record_times:
            self.sent_at.append(time.monotonic())
        return self._send_json(writer, 200, completion, req.keep_alive)


def _parts(s: str, n: int) -> list[str]:
    """Split `s` into at most `n` nearly equal parts (at least one, maybe empty)."""
    n = max(1, min(n, len(s)))
    size = -(-len(s) // n) if s else 0
    return [s[i : i + size] for i in range(0, len(s), size)] if s else [""]


def _usage_json(u: _Usage) -> dict:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def _estimate_prompt_tokens(body: dict) -> int:
    # ~4 characters per token is the usual rule of thumb; good enough for a fake.
    return max(1, len(json.dumps(body.get("messages", ""))) // 4)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

_LOREM = (
    "the quick brown fox jumps over a lazy dog while seven tired wizards "
    "quietly brew strong coffee and discuss **markdown**, `code`, tables and lists"
).split()


def _main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.fakes.openai_server", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9999)
    p.add_argument("--model", action="append", metavar="NAME[:CTX]", help="served model (repeatable); default fake-model:8192")
    p.add_argument("--rate", type=float, default=0, help="tokens per second per stream (0 = as fast as possible)")
    p.add_argument("--tokens", type=int, default=0, help="words in the default reply (0 = just 'OK')")
    p.add_argument("--reasoning", type=int, default=0, help="words of reasoning before the reply")
    p.add_argument("--key", default=None, help="require this API key")
    a = p.parse_args(argv)

    models = {}
    for m in a.model or ["fake-model:8192"]:
        name, _, ctx = m.partition(":")
        models[name] = int(ctx or 8192)
    server = FakeModelServer(models=models, port=a.port, host=a.host, require_key=a.key)

    def words(n: int) -> str:
        return " ".join(itertools.islice(itertools.cycle(_LOREM), n))

    turn: list[Step] = [rate(a.rate)] if a.rate else []
    if a.reasoning:
        turn.append(reasoning(words(a.reasoning)))
    turn.append(text(words(a.tokens) if a.tokens else "OK"))
    server.default = turn
    server.start()
    print(f"fake OpenAI server at {server.url} serving {', '.join(models)} (Ctrl-C to stop)", flush=True)

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    # `kill` should end it as quietly as Ctrl-C does.
    signal.signal(signal.SIGTERM, interrupt)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    try:
        server.stop()
    except KeyboardInterrupt:
        pass  # a second Ctrl-C while stopping; the daemon thread dies with us


if __name__ == "__main__":
    _main()
