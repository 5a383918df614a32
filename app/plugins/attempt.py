"""What one connection to an MCP server met, for telling its failures apart: the HTTP
statuses, the errors the transports swallowed, the session id the server gave, and the id of
the first event of the latest response stream (where a resumption replays from,
app/plugins/resume.py)."""
from __future__ import annotations

import httpx2


class Attempt:
    """A connection's HTTP statuses since the last `clear`, for telling failures apart."""

    def __init__(self) -> None:
        self.statuses: list[tuple[str, int]] = []
        self.errors: list[BaseException] = []  # what the transport met outside any request
        self.session_id = ""  # the Mcp-Session-Id the server gave (Streamable HTTP)
        self.stderr = ""  # the end of a stdio plugin's standard error, once it stopped
        self.oauth = False  # a 401 named the server's OAuth metadata: it signs people in (app/plugins/oauth.py)
        # The id of the first event of the latest POST answered with a stream (the priming
        # event a server with an event store sends): where a resumption replays from.
        self.primed = ""
        self.said = ""  # the start of the body of the latest HTTP error answered (its own words)
        self.left_out: list[tuple[str, str]] = []  # tools of a listing that cannot be called, and why (link._mend)
        self.unasked: list[BaseException] = []  # of `errors`, those of a GET's stream (it carried no request)

    async def record(self, response: httpx2.Response) -> None:
        self.statuses.append((response.request.method, response.status_code))
        challenge = response.headers.get("www-authenticate", "").lower() if response.status_code == 401 else ""
        if challenge.startswith("bearer") and "resource_metadata=" in challenge:  # RFC 9728: it names its OAuth metadata
            self.oauth = True
        if (given := response.headers.get("mcp-session-id")) and response.status_code < 400:
            self.session_id = given
        streamed = (response.request.method == "POST" and response.status_code == 200
                    and response.headers.get("content-type", "").startswith("text/event-stream"))
        if streamed:
            self.primed = ""
        if response.status_code >= 400 and response.status_code != 401 and _small(response):
            try:  # read here (it is small), the client reads it again from memory
                self.said = (await response.aread()).decode("utf-8", "replace")[:SAID_MAX]
            except httpx2.HTTPError:
                pass
            return
        if isinstance(response.stream, httpx2.AsyncByteStream):  # a body read that fails is noted here:
            response.stream = _Noted(response.stream, self, streamed,  # the transports swallow some of those
                                     response.request.method == "GET")

    async def incoming(self, message: object) -> None:
        """The client's message handler: a transport's failure (a response over the size
        limit ...) arrives here as an exception, not on the call it ends."""
        if isinstance(message, BaseException):
            self.errors.append(message)

    def clear(self) -> None:
        self.statuses.clear()
        self.errors.clear()
        self.unasked.clear()

    @property
    def auth_status(self) -> int | None:
        return next((s for _, s in self.statuses if s in (401, 403)), None)

    @property
    def failed_http(self) -> bool:
        return any(s >= 400 for _, s in self.statuses)

    @property
    def sse_only(self) -> bool:
        """Whether the POSTs met the 4xx with which a server says it only speaks SSE."""
        return any(m == "POST" and 400 <= s < 500 and s not in (401, 403) for m, s in self.statuses)

    @property
    def session_refused(self) -> bool:
        """Whether a POST met the 404 (the spec's word for an unknown session) or the 400 many
        servers answer instead: the session is gone, the request did not run."""
        return any(m == "POST" and s in (400, 404) for m, s in self.statuses)


SAID_MAX = 2000  # characters of an error's body kept


def _small(response: httpx2.Response) -> bool:
    """An error whose body is not a stream and says its length, short enough to read at once."""
    length = response.headers.get("content-length", "")
    kind = response.headers.get("content-type", "")
    return length.isdigit() and int(length) <= 64 * 1024 and not kind.startswith("text/event-stream")


class _Noted(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, attempt: Attempt, streamed: bool = False, get: bool = False):
        self._stream, self._attempt, self._get = stream, attempt, get
        self._head = b"" if streamed else None  # the stream's start, until its first event id is read

    async def __aiter__(self):
        try:
            async for chunk in self._stream:
                if self._head is not None:
                    self._first_id(chunk)
                yield chunk
        except Exception as exc:
            self._attempt.errors.append(exc)
            if self._get:
                self._attempt.unasked.append(exc)
            raise

    def _first_id(self, chunk: bytes) -> None:
        self._head = (self._head or b"") + chunk
        if b"\n\n" not in self._head and len(self._head) < 4096:
            return
        event = self._head.split(b"\n\n", 1)[0].decode("utf-8", "replace")
        self._head = None
        for line in event.splitlines():
            if line.startswith("id:") and (given := line[3:].strip()) and len(given) <= 200 and given.isprintable():
                self._attempt.primed = given
                return

    async def aclose(self) -> None:
        await self._stream.aclose()
