"""The web search providers the owner may choose, each spoken in its own documented JSON API.

- SearXNG (the usual self-hosted choice): `GET {address}/search?q=...&format=json` at the
  address the owner gives; `results[]` of `{url, title, content}`. An instance answers 403
  when JSON is not among its `search.formats` (settings.yml), and 429 from its limiter.
- Brave Search API: `GET https://api.search.brave.com/res/v1/web/search?q=...&count=N` with
  the key in `X-Subscription-Token`; `web.results[]` of `{title, url, description}`; errors
  `{"type": "ErrorResponse", "error": {"status", "code", "detail"}}` (401 a bad key, 429 the
  rate or the plan's quota, with the X-RateLimit-* headers).
- Tavily: `POST https://api.tavily.com/search` `{query, max_results}` with
  `Authorization: Bearer`; `results[]` of `{title, url, content, score}`; errors
  `{"detail": {"error": "..."}}` (401 a bad key, 429 too many requests, 432 the plan's
  limit, 433 the pay-as-you-go limit).
- Exa: `POST https://api.exa.ai/search` `{query, numResults, contents: {highlights}}` with
  `x-api-key`; `results[]` of `{title, url, highlights[], text}`; errors
  `{requestId, error, tag}` (401 a bad key, 402 the credits spent, 429 the rate limit).
  Chosen as the fourth because it is a plain JSON API that agent tools (Open WebUI,
  LiteLLM, SearXNG's own engines) already speak, made for models: a snippet per result
  taken from the page, and a free tier to try it.

The owner's SearXNG is reached at the address the owner typed, loopback and private
networks included (it is the owner's own server, not an address a model chose); the hosted
ones at their fixed address. Every failure is `SearchFailed`, in words a person reads: the
tool gives them to the model, and the page shows them under the call.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2

from .. import netguard

KINDS = {
    "searxng": "SearXNG (your own)",
    "brave": "Brave Search API",
    "tavily": "Tavily",
    "exa": "Exa",
}
ENDPOINTS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
    "exa": "https://api.exa.ai/search",
}
KEYED = {"brave", "tavily", "exa"}  # SearXNG needs no key
SNIPPET_MAX = 500  # characters of a result's snippet the model reads
BODY_MAX = 2_000_000  # bytes of a provider's answer read


@dataclass(frozen=True)
class SearchProvider:
    """The owner's choice: which provider, at which address (SearXNG's; '' for the others:
    their own, else where to reach them instead), with which key (opened from its seal; never
    shown on a page)."""

    kind: str
    address: str = ""
    key: str = ""

    @property
    def name(self) -> str:
        return KINDS.get(self.kind, self.kind)

    def endpoint(self) -> str:
        if self.kind == "searxng":
            return self.address.rstrip("/") + "/search"
        return self.address.rstrip("/") or ENDPOINTS[self.kind]


@dataclass(frozen=True)
class WebResult:
    title: str
    url: str
    snippet: str


class SearchFailed(Exception):
    """A search that did not come back with results; the message is for the model and the person."""


async def search(provider: SearchProvider, query: str, count: int, timeout: float,
                 guard: netguard.Guard | None = None) -> list[WebResult]:
    """At most `count` results for `query` from `provider`, within `timeout` seconds.
    `guard` (tests: a fake resolver) is used with its address check lifted: the address is
    the owner's own or the provider's fixed one, never a model's."""
    if provider.kind not in KINDS:
        raise SearchFailed(f"the web search provider “{provider.kind}” is not one Tabletalk knows")
    if provider.kind in KEYED and not provider.key:
        raise SearchFailed(f"{provider.name} needs an API key, and none is saved: the owner adds it on the People page")
    method, url, params, body, headers = _request(provider, query, count)
    try:
        # the whole search within the time limit, not each read: a server dripping bytes is cut too
        with anyio.fail_after(timeout):
            async with netguard.guarded_client(guard=guard, allow_private=True, timeout=timeout) as client:
                request = client.build_request(method, url, params=params, json=body, headers=headers)
                response = await client.send(request)
    except (TimeoutError, httpx2.TimeoutException):
        raise SearchFailed(f"{provider.name} did not answer within {timeout:g} s") from None
    except (httpx2.HTTPError, OSError, netguard.Refused) as e:
        raise SearchFailed(f"{provider.name} could not be reached at {_host(url)}: "
                           f"{str(e) or type(e).__name__}") from None
    if response.status_code != 200:
        raise SearchFailed(_failure(provider, response))
    try:
        data = json.loads(response.content[:BODY_MAX])
    except ValueError:
        raise SearchFailed(f"{provider.name} answered with something that is not JSON "
                           f"({response.headers.get('content-type', 'no type')})") from None
    return _hits(provider.kind, data)[:count]


def _request(provider: SearchProvider, query: str, count: int
             ) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None, dict[str, str]]:
    """(method, url, query parameters, JSON body, headers) of one search."""
    url = provider.endpoint()
    accept = {"Accept": "application/json"}
    if provider.kind == "searxng":
        return "GET", url, {"q": query, "format": "json"}, None, accept
    if provider.kind == "brave":
        return "GET", url, {"q": query, "count": count}, None, accept | {"X-Subscription-Token": provider.key}
    if provider.kind == "tavily":
        return "POST", url, None, {"query": query, "max_results": count}, accept | {
            "Authorization": f"Bearer {provider.key}"}
    return "POST", url, None, {"query": query, "numResults": count, "contents": {"highlights": True}}, accept | {
        "x-api-key": provider.key}


def _hits(kind: str, data: Any) -> list[WebResult]:
    if not isinstance(data, dict):
        return []
    if kind == "brave":
        web = data.get("web")
        found, snippet = (web.get("results") if isinstance(web, dict) else None), "description"
    else:
        found, snippet = data.get("results"), "content"
    out = []
    for r in found if isinstance(found, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("url"), str):
            continue
        if urlsplit(r["url"]).scheme not in ("http", "https"):
            continue
        text = r.get(snippet)
        if kind == "exa":
            highlights = r.get("highlights")
            text = " … ".join(h for h in highlights if isinstance(h, str)) if isinstance(highlights, list) else r.get(
                "text")
        out.append(WebResult(title=_plain(r.get("title")) or r["url"], url=r["url"], snippet=_plain(text)[:SNIPPET_MAX]))
    return out


def _plain(value: Any) -> str:
    # Brave marks the query's words in snippets with <strong>: the words are what matter
    text = value if isinstance(value, str) else ""
    return " ".join(text.replace("<strong>", "").replace("</strong>", "").split())


def _failure(provider: SearchProvider, response: httpx2.Response) -> str:
    """A provider's error answer in plain words: what happened, and what would help."""
    status, name = response.status_code, provider.name
    said = _said(response)
    wait = _retry_after(response)
    if provider.kind == "searxng" and status == 403:
        return (f"{name} refused the search (403): it may not answer in JSON. Its owner adds “json” to "
                "search.formats in its settings.yml")
    if status in (401, 403):
        return f"{name} did not accept the API key ({status}{': ' + said if said else ''}): the owner checks it on the People page"
    if status in (402, 432, 433) or (provider.kind == "brave" and status == 429 and _month_spent(response, said)):
        return f"{name}'s quota is used up ({status}{': ' + said if said else ''}): no more searches until it is raised or renewed"
    if status == 429:
        return (f"{name} is limiting the rate of searches (429{': ' + said if said else ''})"
                + (f": try again in {wait} s" if wait else ": try again later"))
    return f"{name} answered {status}{': ' + said if said else ''}"


def _said(response: httpx2.Response) -> str:
    """The error's own words from its documented body, cut short."""
    try:
        data = json.loads(response.content[:20_000])
    except ValueError:
        return ""
    words: Any = ""
    if isinstance(data, dict):
        error, detail = data.get("error"), data.get("detail")
        if isinstance(error, dict):  # Brave
            words = " ".join(str(error.get(k, "")) for k in ("code", "detail") if error.get(k))
        elif isinstance(detail, dict):  # Tavily
            words = detail.get("error", "")
        else:  # Exa ({error, tag}), and any {"error": "..."} or {"detail": "..."}
            words = error or detail or data.get("message", "")
            if data.get("tag") and isinstance(words, str):
                words = f"{data['tag']} {words}"
    return " ".join(str(words).split())[:200].rstrip(".")


def _month_spent(response: httpx2.Response, said: str) -> bool:
    """Brave's 429 for the plan's quota rather than its rate: its code says so, or the monthly
    window of X-RateLimit-Remaining ("per second, per month") is at 0."""
    remaining = [r.strip() for r in response.headers.get("x-ratelimit-remaining", "").split(",")]
    return "QUOTA" in said.upper() or (len(remaining) > 1 and remaining[-1] == "0")


def _retry_after(response: httpx2.Response) -> int:
    """Seconds a Retry-After header (seconds, or an HTTP date) or Brave's X-RateLimit-Reset asks to wait; 0: none."""
    raw = response.headers.get("retry-after", "").strip()
    if raw.isdigit():
        return int(raw)
    if raw:
        try:
            when = parsedate_to_datetime(raw)
            date = parsedate_to_datetime(response.headers.get("date", "")) if response.headers.get("date") else None
        except (TypeError, ValueError):
            return 0
        if date is not None:
            return max(int((when - date).total_seconds()), 1)
    reset = response.headers.get("x-ratelimit-reset", "").split(",")[0].strip()
    return int(reset) if reset.isdigit() else 0


def _host(url: str) -> str:
    try:
        return urlsplit(url).netloc or url
    except ValueError:
        return url


def choice_problem(kind: str, address: str, key: str, key_saved: bool) -> str:
    """What is wrong with the owner's choice, in words ('' when nothing is; kind '' is none).
    The address is SearXNG's, which it needs; for a hosted provider it may stay empty (its
    own), or name where to reach it instead (a proxy in front of it)."""
    if kind and kind not in KINDS:
        return "Choose one of the providers offered."
    if kind == "searxng" and not address:
        return "Give SearXNG's address, starting with http:// or https:// (for example http://127.0.0.1:8888)."
    if address:
        try:
            parts = urlsplit(address)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            return "The address starts with http:// or https:// (for example http://127.0.0.1:8888)."
    if kind in KEYED and not key and not key_saved:
        return f"{KINDS[kind]} needs its API key."
    return ""
