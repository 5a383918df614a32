"""The headers every response carries: what a page may load and who may frame it; and what
no cache may keep."""
from __future__ import annotations

from typing import Any

from litestar import Response

# Scripts only from this server (no inline script anywhere in the templates); nothing from
# another host; no framing. Inline style attributes stay allowed: Markdown tables align
# their cells with them.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


def secured(response: Response) -> Response:
    """The security headers, where the response did not set its own."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def framed_by_this_site(response: Response) -> Response:
    """A page that this site's own pages may frame (and no other)."""
    response.headers["Content-Security-Policy"] = SECURITY_HEADERS["Content-Security-Policy"].replace(
        "frame-ancestors 'none'", "frame-ancestors 'self'")
    response.headers["X-Frame-Options"] = "SAMEORIGIN"
    return response


# What is served to someone signed in is theirs alone: no cache keeps it. Not the browser's
# back/forward cache (Back after Sign out showed the private conversation again in Chromium,
# which Clear-Site-Data: "cache" does not empty), nor a proxy's. A response that says how it
# may be cached keeps its own word (a file's bytes: revalidated on every use, web/files.py).
NO_STORE = (b"cache-control", b"no-store")


def kept_private(send: Any) -> Any:
    """An ASGI `send` whose response start carries Cache-Control: no-store unless it has one."""
    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            if not any(bytes(name).lower() == NO_STORE[0] for name, _ in headers):
                message = {**message, "headers": [*headers, NO_STORE]}
        await send(message)

    return sending


def private(response: Response) -> Response:
    """Cache-Control: no-store on a response served to someone signed in, unless it has its own."""
    response.headers.setdefault("Cache-Control", NO_STORE[1].decode())
    return response
