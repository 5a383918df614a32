"""Two servers behind one address, as the README's "Moving to PostgreSQL" sets them up: two
`tabletalk serve` processes on one database, each with a data folder of its own, behind a
round-robin reverse proxy (written here: asyncio on 127.0.0.1, each request to the next
server, responses streamed through unbuffered, X-Forwarded-For appended). A person signs in,
sends a message with a file and follows the answer live, whichever server each request lands
on, and downloads the file from both."""
from __future__ import annotations

import asyncio
import itertools
import re
import threading

import httpx
import pytest

from tests.conftest import OWNER, PASSWORD, Served, free_port, rows, sse_value, wait_for

pytestmark = pytest.mark.process

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
       "content-length"}


class RoundRobin:
    """A reverse proxy on 127.0.0.1: one request per connection, each to the next backend, its
    response streamed back as it comes (the SSE feed included) and ended by closing."""

    def __init__(self, backends: list[str]):
        self.backends = backends
        self.turn = itertools.cycle(range(len(backends)))
        self.served = [0] * len(backends)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RoundRobin":
        self.thread.start()
        assert self.ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self.stopping = asyncio.Event()
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=None)) as self.client:
            server = await asyncio.start_server(self._one, "127.0.0.1", self.port)
            self.ready.set()
            async with server:
                await self.stopping.wait()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ", 2)
            raw = [(k.strip(), v.strip()) for k, v in (h.split(":", 1) for h in head[1:] if ":" in h)]
            length = int(next((v for k, v in raw if k.lower() == "content-length"), 0))
            headers = [(k, v) for k, v in raw if k.lower() not in HOP]  # Host kept: the address the person used
            body = await reader.readexactly(length) if length else b""
            client = writer.get_extra_info("peername")[0]
            forwarded = [v for k, v in headers if k.lower() == "x-forwarded-for"]
            headers = [(k, v) for k, v in headers if k.lower() != "x-forwarded-for"]
            headers += [("X-Forwarded-For", ", ".join([*forwarded, client])), ("X-Forwarded-Proto", "http")]
            n = next(self.turn)
            self.served[n] += 1
            request = self.client.build_request(method, self.backends[n] + target, headers=headers, content=body)
            response = await self.client.send(request, stream=True)
            try:
                out = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
                out += [f"{k}: {v}" for k, v in response.headers.multi_items() if k.lower() not in HOP]
                writer.write(("\r\n".join([*out, "Connection: close", "", ""])).encode("latin-1"))
                async for chunk in response.aiter_raw():  # as it comes: no buffering of the live feed
                    writer.write(chunk)
                    await writer.drain()
            finally:
                await response.aclose()
        except (asyncio.IncompleteReadError, ConnectionError, httpx.HTTPError):
            pass
        finally:
            writer.close()


@pytest.fixture
def behind_one_address(data, env, pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", pg_url)
    shared = env | {"DATABASE_URL": pg_url, "TABLETALK_TRUSTED_PROXIES": "127.0.0.1"}
    other = tmp_path / "data-b"
    a = Served(data, shared).start()
    b = Served(other, shared | {"TABLETALK_DATA": str(other)}).start()
    try:
        with RoundRobin([a.url, b.url]) as proxy:
            yield proxy
    finally:
        for s in (a, b):
            s.stop()


def token_of(page: str) -> str:
    return re.search(r'name="_csrf_token" value="([^"]+)"', page).group(1)


def test_a_person_signs_in_asks_and_follows_the_answer_through_the_proxy(behind_one_address, fake, data):
    from tests.fakes.openai_server import rate, text

    proxy = behind_one_address
    words = " ".join(f"w{i}" for i in range(60))
    fake.script([rate(40), text(words)])
    # the person's own address, as the proxy sees it: what the servers must take as the client's
    person = httpx.Client(base_url=proxy.url, timeout=20, transport=httpx.HTTPTransport(local_address="127.0.0.3"))
    with person:
        page = person.get("/signin")  # one server renders the form ...
        assert page.status_code == 200
        wrong = person.post("/signin", data={"_csrf_token": token_of(page.text), "name": OWNER, "password": "nope"})
        assert wrong.status_code == 401
        assert rows(data, "SELECT address FROM signins") == [{"address": "127.0.0.3"}], \
            "the client's address, from the proxy's X-Forwarded-For"
        page = person.get("/signin")
        signed = person.post("/signin", data={"_csrf_token": token_of(page.text), "name": OWNER, "password": PASSWORD},
                             follow_redirects=False)  # ... the other takes it
        assert signed.status_code == 303, signed.text
        home = person.get("/")
        assert home.status_code == 200 and "Sign out" in home.text
        started = person.post("/c", data={"_csrf_token": token_of(home.text), "text": "Say the words"},
                              files={"file": ("notes.txt", b"notes sent through one server", "text/plain")},
                              follow_redirects=False)
        assert started.status_code == 303, started.text
        chat = started.headers["location"]
        since = re.search(r"events\?since=(\d+)", person.get(chat).text).group(1)
        messages: list[str] = []
        with person.stream("GET", f"{chat}/events?since={since}") as feed:
            assert feed.headers["content-type"].startswith("text/event-stream")
            data_lines: list[str] = []
            for line in feed.iter_lines():
                if (value := sse_value(line, "data")) is not None:
                    data_lines.append(value)
                elif line == "" and data_lines:
                    messages.append("\n".join(data_lines))
                    data_lines = []
                    if "w59" in messages[-1]:
                        break
        assert len(messages) > 2, "the answer came in pieces, live"
        wait_for(lambda: rows(data, "SELECT done FROM items WHERE kind = 'text'") == [{"done": 1}], 20)
        page = person.get(chat).text
        assert page.count("w59") == 1
        attached = re.search(r'href="(/files/\d+)', page).group(1)
        for _ in proxy.backends:  # the attachment, from each server in turn
            assert person.get(attached).content == b"notes sent through one server"
    assert rows(data, "SELECT text FROM items WHERE kind = 'text'") == [{"text": words}], "answered once"
    assert len(fake.streamed) == 1
    assert all(proxy.served), f"both servers took requests: {proxy.served}"
