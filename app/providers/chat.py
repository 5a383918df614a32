"""The Chat Completions request, over the providers' one httpx2 client.

What the openai SDK did for Tabletalk, and no more: a POST of the request's JSON to
`BASE/chat/completions` with the key, a streamed response handed over as it is (its SSE
lines were read by hand already: wire.py) or a short one read as JSON, and its failures
told apart by the same names (`APIStatusError` with the status and the parsed body,
`APIConnectionError`, `APITimeoutError`, ...), so errors.py reads them as before. The SDK
was ~0.2 s of every worker's start and ~25 MB of typed models in every worker, for a
request Tabletalk builds itself.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2


class APIError(Exception):
    def __init__(self, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.body = body


class APIConnectionError(APIError):
    """No answer: the server could not be reached, or the connection was cut before one."""


class APITimeoutError(APIConnectionError):
    """No answer in time."""


class APIResponseValidationError(APIError):
    """An answer that is not a chat completion."""


class APIStatusError(APIError):
    """The server answered with an error status (4xx, 5xx)."""

    def __init__(self, message: str, response: httpx2.Response, body: Any) -> None:
        super().__init__(message, body)
        self.response = response
        self.status_code = response.status_code


class AuthenticationError(APIStatusError):  # 401
    pass


class PermissionDeniedError(APIStatusError):  # 403
    pass


class NotFoundError(APIStatusError):  # 404
    pass


class RateLimitError(APIStatusError):  # 429
    pass


class InternalServerError(APIStatusError):  # 5xx
    pass


_BY_STATUS = {401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError, 429: RateLimitError}


def status_error(response: httpx2.Response) -> APIStatusError:
    """The error for a response with an error status (its body read)."""
    text = response.text.strip()
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text or None
    kind = _BY_STATUS.get(response.status_code) or (InternalServerError if response.status_code >= 500
                                                    else APIStatusError)
    return kind(f"Error code: {response.status_code} - {body}", response=response, body=body)


class Chat:
    """Requests to one server's /chat/completions with one key."""

    def __init__(self, http: httpx2.AsyncClient, base_url: str, key: str, timeout: httpx2.Timeout) -> None:
        self.http = http
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {key or 'none'}", "Accept": "application/json"}
        self.timeout = timeout

    def _request(self, fields: dict[str, Any]) -> httpx2.Request:
        body = {k: v for k, v in fields.items() if k != "extra_body"}
        body.update(fields.get("extra_body") or {})  # as the SDK merged it
        return self.http.build_request("POST", self.url, json=body, headers=self.headers, timeout=self.timeout)

    async def _send(self, fields: dict[str, Any], stream: bool) -> httpx2.Response:
        try:
            response = await self.http.send(self._request(fields), stream=stream)
        except httpx2.TimeoutException as e:
            raise APITimeoutError("Request timed out.") from e
        except httpx2.HTTPError as e:  # refused, reset, cut before the answer's head
            raise APIConnectionError("Connection error.") from e
        if response.status_code >= 400:
            try:
                await response.aread()
            except httpx2.HTTPError as e:
                await response.aclose()
                raise APIConnectionError("Connection error.") from e
            await response.aclose()
            raise status_error(response)
        return response

    @asynccontextmanager
    async def stream(self, fields: dict[str, Any]) -> AsyncIterator[httpx2.Response]:
        """The streamed answer's response, its head read and its status a success; closed after."""
        response = await self._send(fields, stream=True)
        try:
            yield response
        finally:
            await response.aclose()

    async def create(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A short (not streamed) answer, as its JSON."""
        response = await self._send(fields, stream=False)
        try:
            found = response.json()
        except ValueError as e:
            raise APIResponseValidationError("The answer is not JSON.") from e
        if not isinstance(found, dict):
            raise APIResponseValidationError("The answer is not a chat completion.")
        return found


def content_of(completion: dict[str, Any]) -> str:
    """The first choice's text of a short answer ('' when it has none)."""
    choices = completion.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""
