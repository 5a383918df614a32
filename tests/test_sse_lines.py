"""The model stream's lines, read straight from the socket's chunks (providers.sse_lines)."""
import gzip

import httpx2
import pytest

from app.providers import sse_lines


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
