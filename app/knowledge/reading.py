"""A document read page by page in a child process that can neither hang nor exhaust the server.

`read` runs `python -m app.knowledge.child` (child.py) and yields each page as soon as the
child sends its line. The child limits itself (address space, CPU time, no files written,
few open) and dies with this process. A page that takes longer than `page_seconds` kills
it, naming the page; so does the consumer leaving the loop (`aclose`, or its task
cancelled: the person pressed Stop): the child is killed and reaped before `read` returns.

What cannot be read is `Unreadable`, with the reason for the person: the child's own
(`{"unreadable": reason}` as its last line: a password, a zip bomb, an empty file), memory
running out (its exit status 3, or killed by the system), a crash of the library reading
the file. A PDF without text on any page is read page by page like any other (each page
with no passages), and then the child's last line says so: `read` has yielded every page
and raises Unreadable(NO_TEXT) after the last one, so its pages are written and the document
fails with that reason. An error of our own code in the child (a traceback, exit status 1)
is a RuntimeError with the end of its stderr, for the server's log.
"""
from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from .child import CPU_SECONDS, MEMORY_EXIT
from .kinds import Unreadable
from .passages import Passage

ROOT = Path(__file__).resolve().parents[2]  # where `-m app.knowledge.child` is found
LINE_MAX = 16 * 1024 * 1024  # one page's JSON: a real page's text is a few KiB
STDERR_KEPT = 4096
OUT_OF_MEMORY = ("MemoryError", "bad_alloc", "out of memory", "Cannot allocate memory")


@dataclass(frozen=True)
class Page:
    number: int  # 1-based
    pages: int  # how many the document has (a text kind's sections of about 4,000 characters)
    passages: tuple[Passage, ...]


async def read(path: str | Path, kind: str, start: int = 1, *, page_seconds: float = 60,
               memory: int = 1 << 30) -> AsyncIterator[Page]:
    """Pages `start`, `start` + 1, ... of the document of `kind` at `path`, as they are read."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.knowledge.child", str(path), kind, str(start), str(memory),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=ROOT, limit=LINE_MAX,
        # a session of its own: a signal to the server's process group (Ctrl-C, a supervisor's
        # SIGTERM) stops the server, which releases the document, and not the child under it,
        # which would fail the document as crashed; it dies with its worker all the same (child.py)
        start_new_session=True)
    errors = asyncio.ensure_future(tail(child.stderr))
    number = start
    try:
        while line := await within(child.stdout.readline(), page_seconds, number):
            sent = json.loads(line)
            if "unreadable" in sent:
                raise Unreadable(sent["unreadable"])
            number = sent["page"]
            yield Page(number, sent["pages"], tuple(Passage(number, h, t) for h, t in sent["passages"]))
            number += 1
        code = await within(child.wait(), page_seconds, number)
        if code != 0:
            raise ended(code, await errors, number, memory)
    finally:
        if child.returncode is None:
            with suppress(ProcessLookupError):
                child.kill()
        await child.wait()  # reaped: no zombie left behind
        errors.cancel()


async def within(waiting, seconds: float, number: int):
    """`waiting` awaited for `seconds` at most. asyncio.timeout, not wait_for: on Python 3.11
    wait_for loses a cancellation that comes as what it waits for is done (a child's lines
    buffered ahead: at once), and a reading told to stop at a server's stop read on, page
    after page, until granian killed the worker 5 s later, its document still leased."""
    try:
        async with asyncio.timeout(seconds):
            return await waiting
    except TimeoutError:
        raise Unreadable(f"Page {number} took longer than {seconds:g} s to read.") from None
    except ValueError:  # a line longer than LINE_MAX
        raise Unreadable(f"Page {number} holds more text than can be read.") from None


async def tail(stream: asyncio.StreamReader) -> str:
    """The last STDERR_KEPT bytes the child wrote to stderr (read as it goes, so it never blocks on a full pipe)."""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-STDERR_KEPT:]
    return kept.decode(errors="replace")


def ended(code: int, stderr: str, number: int, memory: int) -> Exception:
    """What a child's exit status (not 0) and its stderr say went wrong on page `number`."""
    short_of_memory = Unreadable(f"Reading needed more than {size(memory)} of memory.")
    if code == MEMORY_EXIT or code == -signal.SIGKILL:  # (SIGKILL: the system's out-of-memory killer; ours comes only after read ended)
        return short_of_memory
    if code == -signal.SIGXCPU:
        return Unreadable(f"Reading took more than {CPU_SECONDS // 3600} hours of processor time.")
    if any(words in stderr for words in OUT_OF_MEMORY):
        return short_of_memory
    if code < 0:
        return Unreadable(f"The reader crashed on page {number}: the file may be damaged.")
    return RuntimeError(f"the reading child ended with status {code} on page {number}: {stderr.strip()[-1000:]}")


def size(n: int) -> str:
    for unit, bytes_ in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= bytes_:
            return f"{n / bytes_:g} {unit}"
    return f"{n} bytes"
