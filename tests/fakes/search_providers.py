"""Fake web search providers on 127.0.0.1, each answering its documented JSON shape.

    with FakeSearch() as fake:
        SearchProvider("brave", fake.url("/brave/res/v1/web/search"), "good")

Paths (the hosted providers' own paths under a prefix; the key decides the answer):

    GET  /searxng/search?q=..&format=json   SearXNG: {query, number_of_results, results[{url, title, content,
                                            engine, ...}], answers, corrections, infoboxes, suggestions,
                                            unresponsive_engines}; 403 without format=json (JSON not enabled)
    GET  /searxng-off/search                403, as an instance whose settings.yml leaves JSON out
    GET  /searxng-busy/search               429 from its limiter, Retry-After: 30
    GET  /brave/res/v1/web/search?q=&count= Brave: {type: "search", query, web: {type, results[{title, url,
                                            description, ...}]}}; X-Subscription-Token checked
    POST /tavily/search {query, max_results} Tavily: {query, answer, images, results[{title, url, content,
                                            score, raw_content}], response_time}; Authorization: Bearer
    POST /exa/search {query, numResults, contents} Exa: {requestId, resolvedSearchType, results[{id, title,
                                            url, publishedDate, author, highlights, highlightScores}]}; x-api-key

Keys: "good" answers, "bad" a rejected key (401), "spent" the quota used up (Brave 429
QUOTA_LIMITED, Tavily 432, Exa 402; Brave's "month": its 429 with the monthly window of
X-RateLimit-Remaining at 0), "busy" a rate limit with Retry-After (429), "slow"
answers after `slow` seconds. `requests` keeps (method, path, headers, body) of each.
`pages` (title, url, snippet) are what a good search finds.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

DEFAULT_PAGES = [
    ("Tide tables for Brest", "https://tides.example/brest", "High water at 06:12 and 18:40 today."),
    ("Tides explained", "https://www.science.example/tides", "The moon pulls the oceans <strong>twice</strong> a day."),
    ("More tide tables", "https://tides.example/more", "Another page of the same site."),
]


class FakeSearch:
    def __init__(self, pages=None, slow: float = 5.0):
        self.pages = list(pages or DEFAULT_PAGES)
        self.slow = slow
        self.requests: list[tuple[str, str, dict[str, str], object]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                fake._answer(self, None)

            def do_POST(self):
                size = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(size) or b"null")
                except ValueError:
                    body = None
                fake._answer(self, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> "FakeSearch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- answers ------------------------------------------------------------------------

    def _answer(self, h: BaseHTTPRequestHandler, body) -> None:
        parts = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        headers = {k.lower(): v for k, v in h.headers.items()}
        self.requests.append((h.command, h.path, headers, body))
        prefix = parts.path.split("/")[1]
        if prefix.startswith("searxng"):
            return self._searxng(h, prefix, query)
        key = {"brave": headers.get("x-subscription-token", ""),
               "tavily": headers.get("authorization", "").removeprefix("Bearer "),
               "exa": headers.get("x-api-key", "")}.get(prefix)
        if key is None:
            return self._send(h, 404, {"detail": "Not Found"})
        if key == "slow":
            time.sleep(self.slow)
        if key not in ("good", "slow"):
            return getattr(self, f"_{prefix}_error")(h, key)
        if prefix == "brave":
            count = int(query.get("count", 20))
            return self._send(h, 200, {"type": "search", "query": {"original": query.get("q", "")},
                                       "mixed": {"type": "mixed", "main": []},
                                       "web": {"type": "search", "family_friendly": True, "results": [
                                           {"type": "search_result", "title": t, "url": u, "description": s,
                                            "is_source_local": False, "language": "en",
                                            "profile": {"name": u.split("/")[2]}, "meta_url": {"hostname": u.split("/")[2]}}
                                           for t, u, s in self.pages[:count]]}})
        if prefix == "tavily":
            count = int((body or {}).get("max_results", 5))
            return self._send(h, 200, {"query": (body or {}).get("query", ""), "follow_up_questions": None,
                                       "answer": None, "images": [], "response_time": 0.42,
                                       "results": [{"title": t, "url": u, "content": s, "score": 0.9,
                                                    "raw_content": None} for t, u, s in self.pages[:count]]})
        count = int((body or {}).get("numResults", 10))
        return self._send(h, 200, {"requestId": "b5947044c4b78efa9552a7c89b306d95", "resolvedSearchType": "neural",
                                   "results": [{"id": u, "title": t, "url": u, "publishedDate": "2026-12-01T00:00:00.000Z",
                                                "author": None, "highlights": [s], "highlightScores": [0.5]}
                                               for t, u, s in self.pages[:count]],
                                   "costDollars": {"total": 0.005}})

    def _searxng(self, h, prefix: str, query: dict[str, str]) -> None:
        if prefix == "searxng-off" or query.get("format") != "json":
            return self._send(h, 403, b"<html><body><h1>403 Forbidden</h1></body></html>", "text/html")
        if prefix == "searxng-busy":
            return self._send(h, 429, b"Too Many Requests", "text/plain", {"Retry-After": "30"})
        results = [{"url": u, "title": t, "content": s, "engine": "duckduckgo", "parsed_url": ["https", u.split("/")[2]],
                    "template": "default.html", "engines": ["duckduckgo"], "positions": [n + 1], "score": 1.0,
                    "category": "general"} for n, (t, u, s) in enumerate(self.pages)]
        self._send(h, 200, {"query": query.get("q", ""), "number_of_results": 0, "results": results, "answers": [],
                            "corrections": [], "infoboxes": [], "suggestions": [], "unresponsive_engines": []})

    def _brave_error(self, h, key: str) -> None:
        status, code, detail = {
            "bad": (401, "SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid."),
            "spent": (429, "QUOTA_LIMITED", "Request quota limit exceeded for plan."),
            # the same quota said only by the headers: the monthly window at 0
            "month": (429, "RATE_LIMITED", "Request rate limit exceeded for plan."),
        }.get(key, (429, "RATE_LIMITED", "Request rate limit exceeded for plan."))
        extra = {"X-RateLimit-Limit": "1, 2000", "X-RateLimit-Policy": "1;w=1, 2000;w=2592000",
                 "X-RateLimit-Remaining": "0, 1500", "X-RateLimit-Reset": "1, 1419704"} if status == 429 else {}
        if key == "busy":
            extra["Retry-After"] = "1"
        if key in ("spent", "month"):
            extra["X-RateLimit-Remaining"] = "1, 0"
        self._send(h, status, {"type": "ErrorResponse", "error": {
            "id": "c4b7d8a0-5d3c-4b6e-9d8f-2a1b3c4d5e6f", "status": status, "code": code, "detail": detail,
            "meta": {"component": "rate_limiter" if status == 429 else "authentication"}}, "time": 1733500000},
            extra=extra)

    def _tavily_error(self, h, key: str) -> None:
        status, said = {
            "bad": (401, "Unauthorized: missing or invalid API key."),
            "spent": (432, "This request exceeds your plan's set usage limit. Please upgrade your plan or contact "
                           "support@tavily.com"),
        }.get(key, (429, "Your request has been blocked due to excessive requests. Please reduce rate of requests."))
        self._send(h, status, {"detail": {"error": said}}, extra={"retry-after": "20"} if status == 429 else {})

    def _exa_error(self, h, key: str) -> None:
        status, said, tag = {
            "bad": (401, "Invalid API key", "INVALID_API_KEY"),
            "spent": (402, "You have exceeded your credits limit. Top up at dashboard.exa.ai", "NO_MORE_CREDITS"),
        }.get(key, (429, "Rate limit exceeded", "RATE_LIMIT_EXCEEDED"))
        self._send(h, status, {"requestId": "2f6a3e1b9c", "error": said, "tag": tag},
                   extra={"Retry-After": "7"} if status == 429 else {})

    @staticmethod
    def _send(h, status: int, body, kind: str = "application/json", extra: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", kind)
        h.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
