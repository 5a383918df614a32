"""The headers every response carries: what a page may load and who may frame it."""
from __future__ import annotations

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
