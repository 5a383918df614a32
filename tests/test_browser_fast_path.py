"""A page in the worker that runs an answer is handed its words from memory, a frame at a
time (app/feed/dispatch.py, `Feed.grew`), and a reconnect in the middle of such a stream
neither repeats nor skips a word: what the page shows is always the start of the answer."""
import asyncio
import re
import threading

import pytest

from tests.conftest import Served, free_port
from tests.fakes.openai_server import rate, text

pytestmark = pytest.mark.browser

WORDS = 240
# plain prose in paragraphs, numbered words (the fake sends them in pieces of a few
# characters): each word is its own, so a repeat or a gap shows
ANSWER = "\n\n".join(" ".join(f"w{n:04d}" for n in range(start, min(start + 40, WORDS)))
                     for start in range(0, WORDS, 40))
EXPECTED = ANSWER.split()

# Every change of the answer's words, as the page shows them: (when, the words)
WATCH = """() => {
  window.__seen = [];
  let last = '';
  const seen = () => {
    const body = document.querySelector('article.text .body');
    // (paragraphs are joined with no whitespace between them: each one's words apart)
    const words = body ? Array.from(body.querySelectorAll('p'), p => p.textContent).join(' ')
                         .split(/\\s+/).filter(Boolean).join(' ') : '';
    if (words !== last) { last = words; window.__seen.push([performance.now(), words]); }
  };
  new MutationObserver(seen).observe(document.getElementById('items'),
                                     {subtree: true, childList: true, characterData: true});
  seen();
}"""

class Cuttable:
    """A TCP proxy on 127.0.0.1 in front of the server, whose open connections `cut` closes
    at once (a network that drops: the browser's stream ends, and it connects again)."""

    def __init__(self, port: int):
        self.target = port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.open: set[asyncio.StreamWriter] = set()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        assert ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self.open |= {writer, up_writer}

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except OSError:
                pass
            finally:
                sink.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        self.open -= {writer, up_writer}

    def cut(self) -> None:
        def close_all() -> None:
            for w in list(self.open):
                w.transport.abort()
        self.loop.call_soon_threadsafe(close_all)

    def close(self) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def proxy(served: Served):
    p = Cuttable(served.port)
    yield p
    p.close()


@pytest.fixture
def page(browser, served: Served, proxy: Cuttable):
    context = browser.new_context(base_url=proxy.url)
    context.add_cookies([{"name": k, "value": v, "url": proxy.url} for k, v in served.cookies.items()])
    errors: list[str] = []
    p = context.new_page()
    p.on("pageerror", lambda e: errors.append(str(e)))
    yield p
    context.close()
    assert errors == [], f"the page raised: {errors}"


def shown_words(seen: list) -> list[list[str]]:
    return [words.split() if words else [] for _, words in seen]


def test_words_reach_the_page_a_frame_at_a_time_and_a_reconnect_repeats_and_skips_none(page, served, proxy, fake):
    fake.script([rate(60), text(ANSWER)])
    streams: list[dict] = []  # the page's requests of its conversation's stream: their headers
    page.on("request", lambda r: streams.append(r.headers) if re.search(r"/c/\d+/events", r.url) else None)
    page.goto(served.empty_chat())  # open before the message: the page follows the whole answer
    page.evaluate(WATCH)
    page.locator("#composer textarea").fill("Count")
    page.locator("#composer textarea").press("Enter")
    # a third of the way, the page's connections are cut, and its stream connects again with
    # its Last-Event-ID: the rows' rev, which the words sent from memory never moved
    page.wait_for_function("() => window.__seen.length && window.__seen.at(-1)[1].split(' ').length > 80",
                           timeout=30_000)
    before = len(streams)
    proxy.cut()
    page.locator("article.text .state.done").wait_for(state="attached", timeout=60_000)
    seen = page.evaluate("window.__seen")
    shown = shown_words(seen)
    assert shown[-1] == EXPECTED, "the answer as the page ends with it"
    for words in shown:  # never a word twice, never one left out: always the answer's start
        # (the model sends pieces of words: the last one shown may be the start of its word)
        whole = words[:-1] == EXPECTED[:len(words) - 1] and EXPECTED[len(words) - 1].startswith(words[-1])
        assert not words or whole, f"the page showed {words[-12:]} (of {len(words)} words)"
    lengths = [len(" ".join(words)) for words in shown]
    assert lengths == sorted(lengths), "what the page shows only grows"
    again = streams[before:]
    assert again and again[0].get("last-event-id"), f"the page's stream was cut and opened again: {streams}"
    # a word every ~17 ms: most frames bring one or two; the reveal grid brought ~6 at a time
    growing = [len(w) for w in shown if 0 < len(w) < WORDS]
    steps = [b - a for a, b in zip(growing, growing[1:]) if b > a]
    assert len(steps) >= WORDS / 3, f"{len(steps)} updates for {WORDS} words: {steps}"


def test_a_worker_killed_mid_answer_leaves_every_page_showing_each_word_once(browser, data, env, fake):
    """Exactly once across a worker's death, on `serve --workers 2`: pages follow one answer,
    their streams on both workers (as the kernel gives them: pages are opened until each
    worker's feed marks the conversation followed); those on the answer's worker are handed
    its words from memory, written to the rows once a second, the others read the rows,
    written on the beat for them. A third of the way the worker running
    the answer is killed (-9): its pages' streams end and connect again (to either worker),
    and the other worker takes the lease when it runs out and makes the step again whole.
    At every change each page shows the start of the answer, never a word twice or one left
    out (a step made again starts again), and each ends with all of it."""
    import os
    import signal
    import time

    from tests.conftest import app_store, wait_for

    fake.script([rate(60), text(ANSWER)], [rate(120), text(ANSWER)])
    # the other worker takes the answer over 3 s after the kill
    served = Served(data, {**env, "TABLETALK_LEASE_SECONDS": "3"}, workers=2).start()
    context = served.context(browser)
    errors: list[str] = []
    try:
        chat = served.empty_chat()
        number = int(chat.rsplit("/", 1)[1])

        def followed_in() -> set[str]:  # the workers whose feeds mark the conversation followed (m057)
            with app_store(data) as store:
                return {r[0].split(":")[1] for r in store.db.conn.execute(
                    "SELECT marker FROM watched WHERE chat = ?", [number]).fetchall()}

        # pages are opened until the kernel has given streams to both workers (their marks say it)
        pages, streams = [], []  # each page's requests of its conversation's stream
        while len(pages) < 12 and (len(pages) < 4 or len(followed_in()) < 2):
            n = len(pages)
            streams.append(0)
            p = context.new_page()
            p.on("pageerror", lambda e: errors.append(str(e)))
            p.on("request", lambda r, n=n: streams.__setitem__(n, streams[n] + 1) if "/events" in r.url else None)
            p.goto(chat)
            p.wait_for_function("() => window.htmx && document.documentElement.classList.contains('js')")
            p.evaluate(WATCH)
            pages.append(p)
            wait_for(lambda: len(followed_in()) >= 1, timeout=10)
            time.sleep(0.3)  # (a feed marks a new conversation at its next turn)
        assert len(followed_in()) == 2, f"{len(pages)} pages' streams all on one worker"
        pages[0].locator("#composer textarea").fill("Count")
        pages[0].locator("#composer textarea").press("Enter")
        pages[0].wait_for_function("() => window.__seen.length && window.__seen.at(-1)[1].split(' ').length > 80",
                                   timeout=30_000)
        with app_store(data) as store:
            owner = store.db.conn.execute("SELECT owner FROM runs WHERE chat = ?", [number]).fetchone()[0]
        before = list(streams)
        os.kill(int(owner.split(":")[1]), signal.SIGKILL)
        for p in pages:
            p.locator("article.text .state.done").wait_for(state="attached", timeout=60_000)
        for n, p in enumerate(pages):
            shown = shown_words(p.evaluate("window.__seen"))
            assert shown[-1] == EXPECTED, f"page {n} ends with the answer"
            for words in shown:
                whole = words[:-1] == EXPECTED[:len(words) - 1] and EXPECTED[len(words) - 1].startswith(words[-1])
                assert not words or whole, f"page {n} showed {words[-12:]} (of {len(words)} words)"
        assert len(fake.streamed) == 2, "the step cut by the kill was made again, once"
        assert any(b > a for a, b in zip(before, streams)), f"a page's stream was on the killed worker: {streams}"
    finally:
        context.close()
        served.stop()
    assert errors == [], f"a page raised: {errors}"
