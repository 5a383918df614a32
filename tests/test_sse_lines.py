"""The model stream's lines, read straight from the socket's chunks (providers.sse_lines)."""
import asyncio
import gzip

import httpx2
import pytest

from app.beat import BEAT_SECONDS, FRAME_SECONDS, PHASE_SECONDS
from app.netguard.sockets import BEAT_FIRST_SECONDS
from app.providers.wire import sse_lines


class Chunks(httpx2.AsyncByteStream):
    def __init__(self, chunks):
        self.chunks = chunks

    async def __aiter__(self):
        for c in self.chunks:
            yield c


async def lines_of(response) -> list[bytes]:
    return [line async for line in sse_lines(response)]


@pytest.mark.parametrize("chunks", [
    [b'data: {"a": 1}\n\ndata: {"b": "\xc3\xa9"}\n\ndata: [DONE]\n\n'],
    [b'da', b'ta: {"a": 1}\r', b'\n\r\ndata: {"b": "\xc3', b'\xa9"}\n', b'\ndata: [DONE]\n\n'],  # cut anywhere
    [b'data: {"a": 1}\n\ndata: {"b": "\xc3\xa9"}\n\ndata: [DONE]'],  # no newline at the end
])
async def test_lines_come_whole_however_the_bytes_are_cut(chunks):
    got = await lines_of(httpx2.Response(200, stream=Chunks(chunks)))
    assert [line for line in got if line] == [b'data: {"a": 1}', 'data: {"b": "é"}'.encode(), b"data: [DONE]"]


async def test_an_encoded_stream_is_decoded_first():
    body = gzip.compress('data: {"b": "é"}\n\ndata: [DONE]\n\n'.encode())
    got = await lines_of(httpx2.Response(200, headers={"content-encoding": "gzip"}, stream=Chunks([body])))
    assert [line for line in got if line] == ['data: {"b": "é"}'.encode(), b"data: [DONE]"]


@pytest.mark.parametrize("html", ["<p>one line</p>", "<pre><code>def f():\n    return 1\n</code></pre>", " x\n\n  y ", ""])
def test_the_feeds_messages_read_back_as_they_were_written(html):
    """feed.encode writes fields without the optional space, but keeps a line's own leading
    space (a reader drops one): every line, code indentation included, reads back the same."""
    from app.feed.dispatch import encode
    from tests.conftest import sse_value

    lines = encode(7, html).decode().split("\n")
    assert lines[0] == "id:7" and lines[-2:] == ["", ""]
    assert "\n".join(sse_value(line, "data") for line in lines[1:-2]) == html


async def test_a_streamed_answer_is_read_once_a_beat_not_once_a_token(env, fake):
    """asyncnet.pace: 200 tokens a second arrive in batches, one a beat (50 ms), so the task
    reading them wakes ~20 times a second, not 200 (each wake-up cost ~100 us). Counted:
    the groups of deltas that arrive together, against the beats the stream lasted."""
    import time

    from app.agent import Message
    from app.beat import BEAT_SECONDS
    from app.config import load
    from app.providers.client import Providers
    from tests.fakes.openai_server import rate, text

    words = " ".join(f"w{i}" for i in range(300))
    fake.script([rate(200), text(words)])
    p = Providers(load())
    try:
        arrivals = []
        started = time.monotonic()
        async for delta in p.stream("fake-model", [Message("user", "hi")], []):
            if delta.text:
                arrivals.append(time.monotonic())
        lasted = time.monotonic() - started
    finally:
        await p.close()
    assert len(arrivals) == 300
    groups = 1 + sum(1 for a, b in zip(arrivals, arrivals[1:]) if b - a > 0.002)
    # A beat's batch read while this process is put off the CPU midway (a loaded machine)
    # shows as two groups: up to twice the beats. A wake-up a token would be ~300 groups.
    assert groups <= 2 * lasted / BEAT_SECONDS + 3, (groups, lasted)
    assert groups < len(arrivals) / 4


async def test_a_paced_stream_reads_each_beat_from_the_socket_without_resuming_its_transport(env, fake, monkeypatch):
    """AsyncioStream._take: at a beat what came is read from the socket with the transport kept
    paused, so the loop's selector is not asked and the socket is not registered and removed
    again every beat; the transport is resumed only when a beat finds nothing (here: before
    the first words, and at most a few times after). Every word arrives, in order."""
    from asyncio import selector_events

    from app.agent import Message
    from app.config import load
    from app.providers.client import Providers
    from tests.fakes.openai_server import rate, text

    resumed = []
    real = selector_events._SelectorTransport.resume_reading
    monkeypatch.setattr(selector_events._SelectorTransport, "resume_reading",
                        lambda self: (resumed.append(1), real(self))[1])
    import time

    words = [f"w{i} " for i in range(300)]
    fake.script([rate(200), text("".join(words))])
    p = Providers(load())
    got, arrivals = [], []
    try:
        async for d in p.stream("fake-model", [Message("user", "hi")], []):
            if d.text:
                got.append(d.text)
                arrivals.append(time.monotonic())
    finally:
        await p.close()
    assert "".join(got) == "".join(words)
    # the beats that brought words (~30 in ~1.5 s): the old way resumed the transport at each
    # one (a count, not a time: a loaded machine makes more beats find nothing, and fewer bring)
    groups = 1 + sum(1 for a, b in zip(arrivals, arrivals[1:]) if b - a > 0.002)
    assert len(resumed) <= 3 + groups // 2, (len(resumed), groups)


def test_a_paced_stream_takes_the_phase_fewest_are_on():
    """One answer alone is read on the beat itself (where the runner's scans and the feed's
    polls fall: their wake-ups are shared); more are spread over the beat's phases."""
    from types import SimpleNamespace

    from app.netguard import sockets
    from app.beat import PHASE_SECONDS

    transport = SimpleNamespace(is_closing=lambda: False, resume_reading=lambda: None)
    writer = SimpleNamespace(transport=transport, get_extra_info=lambda name: None)
    streams = [sockets.AsyncioStream(None, writer) for _ in range(3)]
    before = list(sockets._PACED)
    try:
        streams[0].pace(True)
        streams[0].pace(True)  # paced once, counted once
        streams[1].pace(True)
        assert [streams[0].phase, streams[1].phase] == [0.0, PHASE_SECONDS]
        streams[0].pace(False)
        streams[2].pace(True)
        assert streams[2].phase == 0.0, "the phase left free"
    finally:
        for s in streams:
            s.pace(False)
    assert sockets._PACED == before


async def test_an_answer_nobody_follows_is_read_once_a_second_not_once_a_beat(env, data, fake, monkeypatch):
    """Runner._read_every: with no page and no API stream following its conversation, the
    model's stream is read once a second (its growth is written once a second), not once a
    beat: a model sending 20 chunks a second for ~3 s is read a few times, not ~60 (each
    read a wake-up of the worker with its HTTP, SSE and agent layers). Counted: the reads of
    the socket that brought bytes once the stream was paced. All of the answer is kept."""
    from app import api
    from app.netguard.sockets import AsyncioStream
    from tests.conftest import serve_in_loop
    from tests.fakes.openai_server import rate, text

    reads = []
    real = AsyncioStream.read

    async def read(self, max_bytes, timeout=None):
        data = await real(self, max_bytes, timeout)
        if data and self.paced:
            reads.append(asyncio.get_running_loop().time())
        return data

    monkeypatch.setattr(AsyncioStream, "read", read)
    words = "".join(f"w{i} " for i in range(60))
    fake.script([rate(20), text(words)])
    store = api.open()
    try:
        chat = store.new_conversation(store.default_agent().id).id
        store.add(api.asked("Hello", chat))
        await serve_in_loop(until=lambda: all(it.done for it in store.items(chat) if it.kind == "user"))
        said = [it.text for it in store.items(chat) if it.kind == "text"]
    finally:
        store.db.conn.close()
    assert "".join(said).strip() == words.strip(), said
    # its first second is read on the beat (BEAT_FIRST_SECONDS: ~20 reads); the rest once a second
    later = [t for t in reads if t >= reads[0] + BEAT_FIRST_SECONDS + PHASE_SECONDS] if reads else []
    lasted = later[-1] - reads[0] if later else 0.0
    assert lasted > 2.0, "the answer streamed for its ~3 s"
    # once a beat would be ~40 reads after its first second; a loaded machine may split a second's read in two
    assert len(later) <= 2 * (lasted - BEAT_FIRST_SECONDS) + 4, (len(later), lasted)


def test_a_stream_read_once_a_second_is_read_on_the_beat_for_its_first_second(monkeypatch):
    """AsyncioStream._every: a stream paced to be read less often than a beat (an answer
    nobody follows: once a second) is read on the beat for its first BEAT_FIRST_SECONDS, so a
    short model step (a tool call, a title) is not held up to a second for its grid point; a
    stream paced on the beat or the frame keeps its pace from the start."""
    from types import SimpleNamespace

    from app.netguard import sockets

    now = [100.0]
    monkeypatch.setattr(sockets.time, "monotonic", lambda: now[0])
    transport = SimpleNamespace(is_closing=lambda: False, resume_reading=lambda: None)
    writer = SimpleNamespace(transport=transport, get_extra_info=lambda name: None)
    stream, framed = sockets.AsyncioStream(None, writer), sockets.AsyncioStream(None, writer)
    try:
        stream.pace(True, lambda: 1.0)
        framed.pace(True, lambda: FRAME_SECONDS)
        assert stream._every() == BEAT_SECONDS and framed._every() == FRAME_SECONDS
        now[0] += BEAT_FIRST_SECONDS - 0.01
        assert stream._every() == BEAT_SECONDS
        now[0] += 0.02
        assert stream._every() == 1.0 and framed._every() == FRAME_SECONDS
        stream.pace(False)
        stream.pace(True, lambda: 1.0)  # the connection's next answer: its own first second
        assert stream._every() == BEAT_SECONDS
    finally:
        stream.pace(False)
        framed.pace(False)
