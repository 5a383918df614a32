"""app/netguard/sockets.py's streams as httpcore2 closes them: by the task that read a response, and
again by the pool as the worker stops."""
import asyncio
import socket
from contextlib import contextmanager

import httpcore2
import pytest

from app.netguard.sockets import AsyncioBackend


@contextmanager
def deaf_peer():
    """A listening socket on loopback whose accepted connection reads nothing, with small
    buffers both ways: what a stream writes past them stays unsent in its transport."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before listen: the peer takes little
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server


async def connected_with_unsent_bytes(server: socket.socket):
    """A stream to `server`'s peer holding bytes it could not send, and that peer."""
    stream = await AsyncioBackend().connect_tcp(
        "127.0.0.1", server.getsockname()[1], timeout=5, socket_options=[(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)])
    peer, _ = server.accept()
    with pytest.raises(httpcore2.WriteTimeout):
        await stream.write(b"x" * 4_000_000, timeout=0.2)  # more than the kernels hold
    return stream, peer


def received_until_the_end(peer: socket.socket) -> int:
    """The bytes the peer reads before the connection ends (raises on a timeout)."""
    peer.settimeout(10)
    got = 0
    while chunk := peer.recv(1 << 16):
        got += len(chunk)
    return got


async def test_a_close_ends_at_once_dropping_what_the_peer_did_not_read():
    """As httpcore2's own backend closes (anyio's stream: the transport aborted): a model
    server that stopped reading holds neither a run's close nor the worker's stop."""
    with deaf_peer() as server:
        stream, peer = await connected_with_unsent_bytes(server)
        with peer:
            closing = asyncio.create_task(stream.aclose())
            await asyncio.wait([closing], timeout=10)
            assert closing.done() and closing.exception() is None, "closed while the peer still reads nothing"
            got = await asyncio.to_thread(received_until_the_end, peer)
        assert got < 4_000_000, "the connection ended, what was unsent dropped"


async def test_a_close_cancelled_midway_leaves_the_next_close_to_end():
    """httpcore2 closes a connection after every streamed answer (read up to [DONE], not to
    the end of its body), in the run's task, and a worker that stops cancels that task,
    maybe in the close. The pool closes the same connection again as the worker stops: that
    close ends, and does not raise the run's CancelledError. It did (issue 39): the close
    waited for StreamWriter.wait_closed, which awaits the stream's one close future bare, so
    the cancelled run cancelled that future, and the worker's stop failed there."""
    with deaf_peer() as server:
        stream, peer = await connected_with_unsent_bytes(server)
        with peer:
            run = asyncio.create_task(stream.aclose())
            await asyncio.sleep(0)
            assert not run.done(), "the run's task is inside its close"
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run  # the task stopped sees its own cancellation
            pool = asyncio.create_task(stream.aclose())
            await asyncio.wait([pool], timeout=10)
            assert not pool.cancelled(), "the pool's close raised the run's CancelledError"
            assert pool.done() and pool.exception() is None
            await asyncio.to_thread(received_until_the_end, peer)  # and the connection is closed
