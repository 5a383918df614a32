"""A network backend for httpcore2 on asyncio's own streams, for the model servers' streams.

httpcore2's default backend goes through anyio, whose asyncio socket stream pauses the
transport after every read and resumes it on the next (an epoll register and unregister
per read). A streamed answer is one small read per token, hundreds of answers stream at
once, and that churn was ~10% of a busy worker's CPU. asyncio's StreamReader keeps
reading until its buffer is full, so a read is a buffer slice. Errors are mapped to
httpcore2's, as its own backends do, so httpx2 and the openai SDK see what they expect.
"""
from __future__ import annotations

import asyncio
import functools
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpcore2
import httpx2
from httpcore2._utils import is_socket_readable

from ..beat import BEAT_SECONDS, PHASE_SECONDS, PHASES, next_beat

READ_LIMIT = 256 * 1024  # StreamReader's buffer before it pauses the transport
# A stream read less often than a beat (`every`: once a second, an answer nobody follows) is
# read on the beat for its first second: a short model step (a tool call, a title, a one-line
# answer) is not held up to a second for its grid point, while a long one costs a few more
# reads, once (each step of a background agent waited ~0.5 s for its read).
BEAT_FIRST_SECONDS = 1.0
TAKE_BYTES = 64 * 1024  # one read of the socket at a beat (AsyncioStream._take); more reads while they fill it
# Streams being read on each phase of the beat (beat.PHASES): a stream paced takes the phase
# fewest are on, the first on a tie. So one answer alone streams on the beat itself, where the
# runner's scans and the feed's unfollowed polls fall: its reads share their wake-ups (on the
# half-beat it woke for itself ten times a second more: 0.12 against 0.14 s of CPU an answer).
_PACED = [0] * PHASES

class AsyncioStream(httpcore2.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.paced = False  # see `pace`
        # how often it is read while paced, asked at each wait (`pace`; None: once a beat)
        self.every: Callable[[], float] | None = None
        self.phase = 0.0  # where on the beat it is read while paced (beat.PHASES, _PACED)
        self._phase = 0
        # Paced, the transport stays paused from beat to beat and a beat's bytes are read from
        # the socket here (`_take`; -1: not this stream's to read, TLS). `_held`: paused by it.
        self._fd = _fd_of(writer)
        self._held = False
        # The stream's pace: seconds between its events (SSE messages), averaged over the last
        # few reads, and when the last read brought any. A stream slower than its grid is read
        # as it comes: waiting for a grid point first would only wake once more to find nothing.
        self._gap = 0.0
        self._got_at: float | None = None
        self._paced_at = 0.0  # when it was paced (BEAT_FIRST_SECONDS)

    def pace(self, on: bool, every: Callable[[], float] | None = None) -> None:
        self.every = every
        if on and not self.paced:
            self._gap, self._got_at = 0.0, None  # (a pooled connection's next stream: its own pace)
            self._paced_at = time.monotonic()
            self._phase = _PACED.index(min(_PACED))
            _PACED[self._phase] += 1
            self.phase = self._phase * PHASE_SECONDS
        elif self.paced and not on:
            _PACED[self._phase] -= 1
        self.paced = on
        if not on:
            self._let_go()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        reader = self._reader
        if self.paced and not reader._buffer and not reader.at_eof() and self._gap < self._every():
            await self._next_beat()
        elif self._held:
            self._let_go()
        try:
            if reader._buffer:  # returns at once: no timeout to arm and cancel (a timer each read)
                data = await reader.read(max_bytes)
            else:
                async with asyncio.timeout(timeout):
                    data = await reader.read(max_bytes)
        except TimeoutError as e:
            raise httpcore2.ReadTimeout(str(e) or "timed out reading") from e
        except OSError as e:
            raise httpcore2.ReadError(str(e)) from e
        if data and self.paced:
            self._paced_by(data)
        return data

    def _every(self) -> float:
        """Seconds between reads while paced: `every()`, or the beat (no `every`, or within
        BEAT_FIRST_SECONDS of the pace's start when `every()` is longer)."""
        if self.every is None:
            return BEAT_SECONDS
        every = self.every()
        if every > BEAT_SECONDS and time.monotonic() - self._paced_at < BEAT_FIRST_SECONDS:
            return BEAT_SECONDS
        return every

    def _paced_by(self, data: bytes) -> None:
        """Measure the stream's pace at a read that brought `data`."""
        now = asyncio.get_running_loop().time()
        if self._got_at is not None:
            gap = (now - self._got_at) / max(1, data.count(b"\n\n"))
            self._gap = 0.75 * self._gap + 0.25 * gap
        self._got_at = now

    async def _next_beat(self) -> None:
        """Nothing buffered: wait for the next beat, not for the next byte, with the socket
        out of the loop's selector meanwhile, so what arrives (a token every 5 ms at 200 a
        second) waits in the kernel and is read in one go, one wake-up a beat.

        At the beat the socket is read here, at once (`_take`), the transport kept paused:
        what came during the beat is in the reader without a turn of the loop for the
        selector, and without registering the socket and removing it again every beat (a
        paused transport resumed costs an epoll_ctl each way and a caught KeyError in
        asyncio's _add_reader). Only when nothing came (or the connection ended, or the
        socket failed: the transport then sees it as it would have) is the transport resumed,
        to wait for the next byte."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        every = self._every()
        self._writer.transport.pause_reading()
        self._held = True
        try:
            await asyncio.sleep(next_beat(now - self.phase, every) + self.phase - now)
        except BaseException:
            self._let_go()
            raise
        if not self._take():
            self._let_go()

    def _take(self) -> bool:
        """What the kernel holds for the paused transport, read into the reader; False when
        nothing could be (nothing came, EOF, an error: left to the transport, resumed)."""
        if self._fd < 0 or self._writer.transport.is_closing():
            return False
        took = False
        while True:
            try:
                data = os.read(self._fd, TAKE_BYTES)
            except (BlockingIOError, InterruptedError):
                return took
            except OSError:
                return took  # the transport, resumed on the next read that finds nothing, reports it
            if not data:
                return took  # EOF: the transport sees it too once resumed
            self._reader.feed_data(data)
            took = True
            if len(data) < TAKE_BYTES:
                return True

    def _let_go(self) -> None:
        self._held = False
        if not self._writer.transport.is_closing():
            self._writer.transport.resume_reading()

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(buffer)
                await self._writer.drain()
        except TimeoutError as e:
            raise httpcore2.WriteTimeout(str(e) or "timed out writing") from e
        except OSError as e:
            raise httpcore2.WriteError(str(e)) from e

    async def aclose(self) -> None:
        # Aborted, as httpcore2's own backend (anyio's stream) closes a connection: what is
        # unsent is dropped and nothing is waited for. It waited for StreamWriter.wait_closed,
        # which awaits the stream's one close future bare: a run stopped while its answer's
        # connection closed (httpcore2 closes it after every streamed answer, read up to
        # [DONE]) cancelled that future, and the pool closing the same connection as the
        # worker stopped raised the run's CancelledError. One turn of the loop lets the
        # socket close before this returns (connection_lost is called soon after the abort).
        self._writer.transport.abort()
        await asyncio.sleep(0)

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore2.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
            self._fd = -1  # the bytes on the socket are TLS records now: the SSL transport's to read
        except TimeoutError as e:
            await self.aclose()
            raise httpcore2.ConnectTimeout(str(e) or "timed out starting TLS") from e
        except (OSError, ssl.SSLError) as e:
            await self.aclose()
            raise httpcore2.ConnectError(str(e)) from e
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "socket":
            return self._writer.get_extra_info("socket")
        if info == "is_readable":
            # a pooled connection the server closed: its EOF may already sit in the reader
            if self._reader.at_eof() or getattr(self._reader, "_eof", False):
                return True
            sock = self._writer.get_extra_info("socket")
            return sock is not None and is_socket_readable(sock)
        return None


def pace(response: httpx2.Response, on: bool = True, every: Callable[[], float] | None = None) -> None:
    """Read `response`'s body once a beat (on; every `every()` seconds when given, asked at
    each wait: a frame while a page here follows the answer) or as it comes (off: before its connection
    serves another request). A streamed answer is a chunk per token, and waking its task for
    each one cost ~100 us a token (the loop, httpcore2's and h11's layers, the agent loop),
    ten times parsing it: read a beat's worth at once, the task wakes at most 20 times a
    second (app/beat.py). Nothing shows later for it: the runner writes the growth at once
    after the beat (run/writes.py). A response over another transport (a proxy) is read as it
    comes."""
    stream = response.extensions.get("network_stream")
    if isinstance(stream, AsyncioStream):
        stream.pace(on, every)


def _fd_of(writer: asyncio.StreamWriter) -> int:
    """The socket's descriptor, for `AsyncioStream._take` (a plain TCP or Unix socket: TLS
    bytes are the SSL transport's to read)."""
    if writer.get_extra_info("sslcontext") is not None:
        return -1
    sock = writer.get_extra_info("socket")
    return sock.fileno() if sock is not None else -1


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, limit=READ_LIMIT, local_addr=(local_address, 0) if local_address else None)
        except TimeoutError as e:
            raise httpcore2.ConnectTimeout(str(e) or f"timed out connecting to {host}:{port}") from e
        except OSError as e:
            raise httpcore2.ConnectError(str(e)) from e
        sock = writer.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore2.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_unix_connection(path, limit=READ_LIMIT)
        except TimeoutError as e:
            raise httpcore2.ConnectTimeout(str(e) or f"timed out connecting to {path}") from e
        except OSError as e:
            raise httpcore2.ConnectError(str(e)) from e
        return AsyncioStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def tls_context(verify: ssl.SSLContext | str | bool, cert, trust_env: bool, http1: bool, http2: bool) -> ssl.SSLContext:
    """httpx2's TLS context for these settings. The usual one (the system's CAs, no client
    certificate) is made once a process and shared: making one reads the CA bundle, ~20 ms of
    CPU that every worker start, plugin connection, page fetch and web search paid. Shared
    per http1/http2 pair, since httpcore2 sets the context's ALPN protocols from them at each
    connection (the same value each time for one pair)."""
    if verify is True and cert is None:
        return _usual_tls(trust_env, http1, http2)
    return httpx2.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)


@functools.cache
def _usual_tls(trust_env: bool, http1: bool, http2: bool) -> ssl.SSLContext:
    return httpx2.create_ssl_context(verify=True, trust_env=trust_env)


class PooledTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport over a connection pool on `backend` (default: AsyncioBackend; the
    guard's transport, netguard.GuardedTransport, passes its GuardedBackend).

    AsyncHTTPTransport takes no network backend and its __init__ only builds `self._pool`,
    so this builds that pool itself and inherits request handling and error mapping."""

    def __init__(self, *, backend: httpcore2.AsyncNetworkBackend | None = None,
                 limits: httpx2.Limits | None = None, verify: ssl.SSLContext | str | bool = True,
                 cert=None, trust_env: bool = True, http1: bool = True, http2: bool = False) -> None:
        limits = limits or httpx2.Limits(max_connections=100, max_keepalive_connections=20)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=tls_context(verify, cert, trust_env, http1, http2),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=http1,
            http2=http2,
            network_backend=backend or AsyncioBackend(),
        )
