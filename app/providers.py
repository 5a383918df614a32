"""Models: where each model id is answered, the list of choices, the streaming client.

A bare model NAME is answered by the OpenAI-compatible server at AI_URL. (Local models
"local:NAME" and hosted accounts come with the models issue; they resolve here too.)
Every failure leaves this module as a `ModelError` whose message a person can read.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import openai

from .agent import Delta, Message, ModelError
from .config import Config
from .tables import Choice
from .tools import Tool

GROUP_SERVER = "Model server"
RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds before the 2nd, 3rd and 4th try of a busy or failing server
RETRY_AFTER_MAX = 30.0
TRANSIENT = (openai.RateLimitError, openai.InternalServerError)


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


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    key: str
    model: str  # the name the server knows


class Providers:
    """One per process: model clients (with their connection pools) and the model list."""

    def __init__(self, config: Config):
        self.config = config
        self._clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}
        self._http = httpx2.AsyncClient(
            limits=httpx2.Limits(max_connections=2000, max_keepalive_connections=1000),
            timeout=self._timeout(),
        )

    def _timeout(self) -> httpx2.Timeout:
        return httpx2.Timeout(connect=5.0, read=self.config.model_timeout, write=10.0, pool=10.0)

    @property
    def configured(self) -> bool:
        return bool(self.config.ai_url)

    def endpoint(self, model: str) -> Endpoint:
        if not self.config.ai_url:
            raise ModelError("No model server is set up: start Tabletalk with AI_URL set to an OpenAI-compatible server.")
        return Endpoint(self.config.ai_url, self.config.ai_key, model)

    def client(self, endpoint: Endpoint) -> openai.AsyncOpenAI:
        key = (endpoint.base_url, endpoint.key)
        if key not in self._clients:
            self._clients[key] = openai.AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.key or "none",
                max_retries=0,  # retries are ours, so the person can see them
                timeout=self._timeout(),
                http_client=self._http,
            )
        return self._clients[key]

    async def close(self) -> None:
        await self._http.aclose()

    # --- the model list -------------------------------------------------------------

    async def choices(self) -> list[Choice]:
        """What the server at AI_URL offers now; a server that is down gives a note, not an error."""
        if not self.config.ai_url:
            return []
        headers = {"Authorization": f"Bearer {self.config.ai_key}"} if self.config.ai_key else {}
        try:
            r = await self._http.get(f"{self.config.ai_url}/models", headers=headers, timeout=5.0)
            r.raise_for_status()
            data = r.json().get("data") or []
        except (httpx2.HTTPError, ValueError, AttributeError) as e:
            return [Choice(id=self.config.ai_model or "", name=self.config.ai_model or "(default)",
                           group=GROUP_SERVER, note=f"unreachable: {type(e).__name__}")] if self.config.ai_model else []
        out = []
        for m in data:
            if not isinstance(m, dict) or not isinstance(m.get("id"), str):
                continue
            window = next((m[k] for k in ("context_length", "max_model_len", "context_window")
                           if isinstance(m.get(k), int) and m[k] > 0), None)
            out.append(Choice(id=m["id"], name=m["id"], group=GROUP_SERVER, window=window))
        return out

    # --- streaming ------------------------------------------------------------------

    def stream_fn(self, model: str, extra: dict[str, Any] | None = None):
        """The agent loop's model boundary for `model`."""

        def stream(messages: list[Message], tools: list[Tool]) -> AsyncIterator[Delta]:
            return self.stream(model, messages, tools, extra)

        return stream

    async def stream(
        self, model: str, messages: list[Message], tools: list[Tool], extra: dict[str, Any] | None = None
    ) -> AsyncIterator[Delta]:
        endpoint = self.endpoint(model)
        client = self.client(endpoint)
        request: dict[str, Any] = {
            "model": endpoint.model,
            "messages": [m.to_api() for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = [t.schema() for t in tools]
        if extra:
            request.update(extra)
        tries = len(RETRY_DELAYS) + 1
        completions = client.chat.completions.with_streaming_response
        for attempt in range(tries):
            try:
                opened = completions.create(**request)
                response = await opened.__aenter__()
                break
            except TRANSIENT as e:
                if attempt == tries - 1:
                    raise ModelError(f"{plain_words(e, endpoint)} Gave up after {tries} tries.") from e
                wait = retry_after(e) or RETRY_DELAYS[attempt]
                yield Delta(notice=f"{plain_words(e, endpoint)} Trying again in {wait:g} s "
                                   f"(try {attempt + 2} of {tries}).")
                await asyncio.sleep(wait)
            except Exception as e:
                raise ModelError(plain_words(e, endpoint)) from e
        try:
            finished = False
            async for line in response.iter_lines():
                # The SSE lines are parsed here rather than by the SDK: building its typed
                # objects for every chunk cost ~20x the JSON parse and bounded how many
                # answers one worker could stream at once.
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                for delta in deltas(data):
                    if delta is FINISHED:
                        finished = True
                    else:
                        yield delta
        except ModelError:
            raise
        except Exception as e:
            raise ModelError(plain_words(e, endpoint)) from e
        finally:
            await opened.__aexit__(None, None, None)
        if not finished:
            raise ModelError("The connection to the model server was cut before the answer was finished.")

    async def complete(self, model: str, messages: list[Message], max_tokens: int = 40) -> str:
        """A short non-streamed request (titles)."""
        endpoint = self.endpoint(model)
        try:
            r = await self.client(endpoint).chat.completions.create(
                model=endpoint.model, messages=[m.to_api() for m in messages], max_tokens=max_tokens, stream=False
            )
        except Exception as e:
            raise ModelError(plain_words(e, endpoint)) from e
        return (r.choices[0].message.content or "") if r.choices else ""


FINISHED = Delta()  # marks a chunk that carried a finish_reason


def deltas(data: str) -> list[Delta]:
    """One Chat Completions stream chunk (its JSON text) as our deltas."""
    try:
        chunk = json.loads(data)
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


def _server_says(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:300]
    return ""


def plain_words(e: Exception, endpoint: Endpoint) -> str:
    """What went wrong, for the person reading the conversation (never a traceback)."""
    says = _server_says(e) if isinstance(e, openai.APIStatusError) else ""
    tail = f" The server said: “{says}”" if says else ""
    if isinstance(e, openai.APITimeoutError):
        return "The model server stopped sending anything and the request was given up."
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e.__context__
        if isinstance(cause, (httpx2.RemoteProtocolError, httpx2.ReadError)):
            return "The connection to the model server was cut before the answer was finished."
        return f"Could not reach the model server at {endpoint.base_url}. Is it running?"
    if isinstance(e, openai.AuthenticationError):
        return f"The model server refused the key (401). Check AI_KEY.{tail}"
    if isinstance(e, openai.PermissionDeniedError):
        return f"The model server does not allow this request (403).{tail}"
    if isinstance(e, openai.NotFoundError):
        return f"The model server does not know the model “{endpoint.model}”.{tail}"
    if isinstance(e, openai.RateLimitError):
        return f"The model server is busy or over its limit (429); try again in a moment.{tail}"
    if isinstance(e, openai.APIStatusError):
        if e.status_code >= 500:
            return f"The model server failed ({e.status_code}); try again in a moment.{tail}"
        return f"The model server turned the request down ({e.status_code}).{tail}"
    if isinstance(e, (json.JSONDecodeError, openai.APIResponseValidationError, ValueError)):
        return "The model server sent a reply that could not be read."
    if isinstance(e, (httpx2.RemoteProtocolError, httpx2.ReadError)):
        return "The connection to the model server was cut before the answer was finished."
    if isinstance(e, httpx2.TimeoutException):
        return "The model server stopped sending anything and the request was given up."
    if isinstance(e, openai.APIError):
        return f"The model server answered with an error: {e.message[:300]}"
    return f"Something went wrong talking to the model server ({type(e).__name__})."
