"""Reading documents into passages: durable work taken from rows, as answers are (docs/knowledge.md).

Every worker runs one Ingest beside its runner. It takes the oldest document waiting
(`Store.take_document`: its lease, as a run's), copies its bytes to a file of its own under
`data/reading/`, and has app/knowledge read it in a child process, page after page, from
the page after the last one written. Each page's passages and the progress are one
transaction (`Store.read_page`), written only while the document is this worker's to read.
Once a second the lease is renewed, which is also how a reading learns that the person
stopped or deleted the document, or that another worker took it after this one was held up
past its lease: the child is killed at once and nothing more is written. A worker that
stops leaves what it was reading to the next one (`release_documents`); a kill -9 leaves it
to whoever takes it once its lease has run out.
"""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
from pathlib import Path

from ..config import Config
from ..feed.dispatch import Feed
from ..knowledge.kinds import Unreadable
from ..knowledge.reading import read
from ..store import Store
from ..store.outage import Outage, unavailable
from ..tables import Document

log = logging.getLogger(__name__)

READERS = 2  # documents one worker reads at once: a short one is not held up behind a long one
IDLE_SECONDS = 1.0  # a look for waiting documents at least this often (a commit wakes it sooner)
GAP_SECONDS = 0.25  # ... and at most this often
RENEW_SECONDS = 1.0  # the lease held on, and a stop or a delete seen, this often
PAGE_SECONDS = 60.0  # one page read in longer than this: the document fails, saying which page
MEMORY = 1 << 30  # the most memory the reading child may take (its address space)
STALE_SECONDS = 24 * 3600  # a copy left in data/reading by a killed worker is removed after this
FAILED = "Reading failed on our side (the error is in the server's log); “Read again” tries once more."
GONE = "The document's file is gone."


class Ingest:
    def __init__(self, config: Config, store: Store, feed: Feed, owner: str):
        self.store = store
        self.feed = feed
        self.owner = owner  # the runner's: one name for a worker's leases
        self.lease_seconds = config.lease_seconds
        self.folder = config.data / "reading"
        self.reading: dict[int, asyncio.Task] = {}
        self.stopping = False
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Future | None = None
        self.outage = Outage()  # the database unreachable: said once every few seconds, not every look

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._sweep()
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="ingest")

    async def stop(self) -> None:
        """Shutdown: the readings end (their children killed), and what they were reading is
        left for the next worker, from the page after its last one written."""
        self.stopping = True
        tasks = [t for t in (self._task, *self.reading.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self.store.release_documents(self.owner)
        except Exception as e:  # the database gone: the leases run out by themselves
            log.warning("releasing the documents being read failed: %s", unavailable(e) or e)

    async def _forever(self) -> None:
        clock = asyncio.get_running_loop()
        while not self.stopping:
            started = time.monotonic()
            self._wake = clock.create_future()
            changed = self.feed.next_change()
            try:
                self.take()
                self.outage.answered()  # (the runner's scan says the database is back)
            except Exception as e:
                if why := unavailable(e):
                    if self.outage.failed(why) is not None:
                        log.warning("documents wait to be read: %s", why)
                else:
                    log.exception("looking for documents to read failed")
            # The gap is waited first while documents are read (their pages' commits come
            # within it); with none, the change is: a worker with nothing to read woke at each
            # gap's end only to wait again.
            if self.reading:
                await asyncio.sleep(max(0.0, started + GAP_SECONDS - time.monotonic()))
            rest = started + IDLE_SECONDS - time.monotonic()
            if rest > 0 and not changed.done() and not self._wake.done():
                await asyncio.wait([changed, self._wake], timeout=rest, return_when=asyncio.FIRST_COMPLETED)
            if not self.reading:
                await asyncio.sleep(max(0.0, started + GAP_SECONDS - time.monotonic()))

    def take(self) -> None:
        """Start reading the documents that wait, while this worker has room for them."""
        while len(self.reading) < READERS and self.store.reading_waits():
            document = self.store.take_document(self.owner, self.lease_seconds)
            if document is None:
                return
            task = asyncio.get_running_loop().create_task(self._read(document), name=f"read-{document.id}")
            self.reading[document.id] = task
            task.add_done_callback(lambda _, d=document.id: self._ended(d))

    def _ended(self, document: int) -> None:
        self.reading.pop(document, None)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)  # room for the next one

    async def _read(self, document: Document) -> None:
        copy = self.folder / f"{document.id}-{secrets.token_hex(6)}"
        watch = asyncio.get_running_loop().create_task(self._hold(document.id, asyncio.current_task()))
        try:
            if not await self._copy(document, copy):
                self.store.finish_document(document.id, self.owner, "failed", GONE)
                return
            pages = document.pages or None
            reading = read(copy, document.kind, document.pages_read + 1, page_seconds=PAGE_SECONDS, memory=MEMORY)
            try:
                async for page in reading:
                    pages = page.pages
                    written = self.store.read_page(document.id, self.owner, page.number, page.pages,
                                                   [(p.heading, p.text) for p in page.passages], self.lease_seconds)
                    if not written:  # stopped, deleted or taken by another worker: nothing more
                        return
                    # the child may be many pages ahead, its lines already buffered: the loop's
                    # other work (pages, answers, a shutdown) gets its turn between two pages
                    await asyncio.sleep(0)
            finally:
                await reading.aclose()  # (the child killed, when the loop was left early)
            self.store.finish_document(document.id, self.owner, "ready", pages=pages)
        except Unreadable as e:
            self.store.finish_document(document.id, self.owner, "failed", e.reason)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if why := unavailable(e):  # the lease runs out; the next reader goes on from the last page
                log.warning("reading document %s stopped: %s", document.id, why)
                return
            log.exception("reading document %s failed", document.id)
            try:
                self.store.finish_document(document.id, self.owner, "failed", FAILED)
            except Exception:
                log.exception("marking document %s failed failed", document.id)
        finally:
            watch.cancel()
            copy.unlink(missing_ok=True)

    async def _hold(self, document: int, reading: asyncio.Task | None) -> None:
        """Renew the lease while the document is read; end the reading at once when it is
        no longer this worker's (stopped, deleted, taken by another)."""
        while True:
            await asyncio.sleep(RENEW_SECONDS)
            try:
                held = self.store.renew_document(document, self.owner, self.lease_seconds)
            except Exception as e:
                if not unavailable(e):
                    log.exception("renewing document %s's lease failed", document)
                continue
            if not held:
                if reading is not None:
                    reading.cancel()
                return

    async def _copy(self, document: Document, to: Path) -> bool:
        """The document's bytes in a file the child reads (on PostgreSQL they are rows), a
        chunk at a time, letting the loop go on between chunks. False: the file is gone."""
        found = self.store.file_stream(document.file)
        if found is None:
            return False
        with to.open("wb") as out:
            for chunk in found[1]:
                out.write(chunk)
                await asyncio.sleep(0)
        return True

    def _sweep(self) -> None:
        """Copies a killed worker left behind (a live reader's are newer than a day)."""
        cutoff = time.time() - STALE_SECONDS
        for path in self.folder.iterdir():
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                pass
