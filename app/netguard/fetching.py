"""Fetching a body through a guarded client with size and time limits, following
redirects itself to count the hops and say which one was refused (the page fetch tool).
"""
from __future__ import annotations

from dataclasses import dataclass

import anyio
import httpx2

from .addresses import Refused


# --------------------------------------------------------------------------
# Fetching a body with size and time limits
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetched:
    """What `fetch` got: the final response, its body cut at max_bytes (then `truncated`)."""

    status: int
    headers: httpx2.Headers
    body: bytes
    url: str
    truncated: bool


async def fetch(
    client: httpx2.AsyncClient,
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    max_redirects: int | None = None,
    headers: dict[str, str] | None = None,
) -> Fetched:
    """GET url through `client` (a guarded_client), following up to `max_redirects`
    (default: the client's) redirects, each hop checked; keeps at most `max_bytes` of the
    decoded body and says so with `truncated`. The whole fetch, redirects and body included,
    must finish within `timeout` seconds, else TimeoutError. Raises Refused for a refused
    address, a scheme other than http/https or too many redirects."""
    hops = client.max_redirects if max_redirects is None else max_redirects
    try:
        with anyio.fail_after(timeout):
            return await _follow(client, url, max_bytes, hops, headers)
    except TimeoutError:
        raise TimeoutError(f"gave up on {url} after {timeout:g} s") from None


async def _follow(client, url, max_bytes, hops, headers) -> Fetched:
    try:
        request = client.build_request("GET", url, headers=headers)
    except httpx2.InvalidURL as exc:
        raise Refused(f"refused: {url!r} is not a valid address ({exc})") from None
    came_from = None
    for _ in range(hops + 1):
        try:
            if request.url.scheme not in ("http", "https"):
                raise Refused(f"refused: only http and https addresses can be fetched, not {request.url}")
            response = await client.send(request, stream=True, follow_redirects=False)
        except Refused as exc:
            if came_from is None:
                raise
            raise Refused(f"{exc} (redirected from {came_from})") from None
        try:
            if response.next_request is None:
                body, truncated = await _read(response, max_bytes)
                return Fetched(response.status_code, response.headers, body, str(response.url), truncated)
        finally:
            await response.aclose()
        came_from, request = request.url, response.next_request
    raise Refused(f"refused: more than {hops} redirects, the last to {request.url}")


async def _read(response: httpx2.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            break
    return b"".join(chunks)[:max_bytes], size > max_bytes
