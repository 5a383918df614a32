"""Bytes on the wire: a follower of a ~2,000-token answer receives at most 1.5x its final HTML,
past each message's framing."""
import re
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import Served
from tests.fakes.openai_server import rate, text

pytestmark = pytest.mark.process

ANSWER = (Path(__file__).parent / "fixtures" / "long_answer.md").read_text()


def test_a_follower_receives_at_most_one_and_a_half_times_the_final_html(served: Served, fake):
    # ~2,100 model tokens, streamed at a realistic pace of 50 word-pieces a second
    fake.script([rate(50), text(ANSWER)])
    client = served.client(follow_redirects=True, timeout=10)
    token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
    chat = served.empty_chat()  # open before its first message, so the page follows the whole answer
    since = re.search(r"events\?since=(\d+)", client.get(chat).text).group(1)
    received = bytearray()
    connected = threading.Event()

    def follow():
        with httpx.stream("GET", f"{served.url}{chat}/events?since={since}", cookies=served.cookies, timeout=60) as r:
            for chunk in r.iter_bytes():
                if not connected.is_set():
                    connected.set()
                    continue  # the first message: the page's own state, before the answer
                received.extend(chunk)
                text_id = re.search(rb'<article id="(i\d+)" data-key="[^"]+" class="item text"', received)
                if text_id and b'id="' + text_id.group(1) + b'-s" class="state done"' in received:
                    return

    follower = threading.Thread(target=follow)
    follower.start()
    assert connected.wait(10)
    client.post(chat + "/ask", data={"_csrf_token": token, "text": "Write the long answer"})
    follower.join(90)
    assert not follower.is_alive()
    page = client.get(chat).text
    final = re.search(r'<article id="i\d+" data-key="[^"]+" class="item text">.*?</article>', page, re.S).group(0)
    # the answer's actions (Copy, Again, its model and time) are the answer's final HTML too
    final += re.search(r'<div id="a\d+" class="actions answer-actions".*?</div>', page, re.S).group(0)
    # counted from the message that opens the answer: the person's message before it (their
    # item, the title, the sidebar's entry, the conversation's menu) is not the answer's cost
    opened = re.search(rb'<article id="i\d+" data-key="[^"]+" class="item text"', received).start()
    answer = received[received.rindex(b"\n\n", 0, opened) + 2:]
    assert len(final) > 15_000, "the answer is as long as the issue asks"
    # A page in the worker that runs the answer is sent each frame's words (app/feed/dispatch.py,
    # Feed.grew): at 50 a second, a message per word or two, each with its framing (`data:`, an
    # append's tag with the block's id, an `id:` line for the rows' messages: under 40 bytes).
    # Past that framing, the page receives the final HTML and at most half again (blocks sent
    # whole again where they changed other than at their end), never a block again and again.
    messages = answer.count(b"\n\n")
    assert messages <= len(ANSWER.split()) + 50, f"{messages} messages for {len(ANSWER.split())} words"
    ratio = (len(answer) - 40 * messages) / len(final.encode())
    assert ratio <= 1.5, (f"{len(answer):,} bytes received in {messages} messages for {len(final.encode()):,} "
                          f"of final HTML ({ratio:.2f}x past their framing)")


def test_a_followed_answer_is_compressed_on_the_wire_and_flushed_per_message(served: Served, fake):
    import zlib

    fake.script([rate(200), text(ANSWER)])
    client = served.client(follow_redirects=True, timeout=10)
    token = re.search(r'name="_csrf_token" value="([^"]+)"', client.get("/").text).group(1)
    chat = served.empty_chat()  # open before its first message, so the page follows the whole answer
    since = re.search(r"events\?since=(\d+)", client.get(chat).text).group(1)
    wire, plain, readable = bytearray(), bytearray(), []
    connected = threading.Event()
    headers = {}

    def follow():
        with httpx.stream("GET", f"{served.url}{chat}/events?since={since}", cookies=served.cookies,
                          headers={"Accept-Encoding": "br, gzip"}, timeout=60) as r:
            headers.update(r.headers)
            inflate = zlib.decompressobj(wbits=31)
            for chunk in r.iter_raw():
                wire.extend(chunk)
                plain.extend(inflate.decompress(chunk))
                # every chunk read ends a whole message: nothing waits in the compressor
                readable.append(plain.endswith(b"\n\n"))
                connected.set()
                if re.search(rb'id="i\d+-s" class="state done"', plain) and b"class=\"item text\"" in plain:
                    return

    follower = threading.Thread(target=follow)
    follower.start()
    assert connected.wait(10)
    client.post(chat + "/ask", data={"_csrf_token": token, "text": "Write the long answer"})
    follower.join(90)
    assert not follower.is_alive()
    assert headers["content-encoding"] == "gzip" and "accept-encoding" in headers["vary"].lower()
    assert len(readable) > 20 and all(readable), "each message is flushed as it is sent"
    markdown = len(ANSWER.encode())
    assert len(wire) < len(plain) / 2.5, f"{len(wire):,} on the wire for {len(plain):,} decoded"
    assert len(wire) < 1.5 * markdown, f"{len(wire):,} on the wire for {markdown:,} bytes of Markdown"
