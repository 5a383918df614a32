"""Files a person sends, as they arrive: how many at once, how much room they have left, and
their bytes kept on disk, never whole in memory.

- A form with files (multipart) from someone signed in is admitted by the Authenticate
  middleware before its body is read (`admit`): at most UPLOADS_AT_ONCE such requests of one
  person in a worker at once (429), and none whose Content-Length is past the room they have
  left under TABLETALK_STORAGE_MAX (413).
- The multipart parser (Litestar's) spools each file past 1 MB to a temporary file as it
  arrives; `toolkit.attachments` reads each through once, a chunk at a time, in a thread
  (`files.spooled`: sha256, size, type), and `kept` writes its bytes into the store's
  files/ in a thread before the route's write begins (SQLite's; PostgreSQL's chunks are
  written in the write itself, a chunk at a time).
- The route checks what was sent against the room left inside the write that stores it
  (`room_for`), so parallel uploads are counted one after another.
"""
from __future__ import annotations

from collections.abc import Sequence

import anyio
from litestar import Request
from litestar.exceptions import HTTPException

from ..config import Config
from ..files import Spooled
from ..store import Store
from ..serve.worker import Worker

UPLOADS_AT_ONCE = 3    # requests with files one person may be sending to one worker at once
FORM_ROOM = 2_000_000  # what a form carries besides its files (app.body_limit's margin too)


def is_upload(request: Request) -> bool:
    return request.headers.get("content-type", "").lower().startswith("multipart/form-data")


def admit(s: Worker, request: Request, person: int) -> tuple[int, str] | None:
    """Before the body is read: (status, words) when this upload may not begin, else None, and
    it is counted as under way until `done`."""
    if s.receiving[person] >= UPLOADS_AT_ONCE:
        return 429, (f"{UPLOADS_AT_ONCE} of your uploads are being received already: wait for one to end, "
                     "then send this again. Nothing was sent.")
    length = request.headers.get("content-length", "")
    left = s.config.storage_max - s.store.person_files(person)
    if length.isdigit() and int(length) > left + FORM_ROOM:
        return 413, too_much(int(length), left, s.config)
    s.receiving[person] += 1
    return None


def done(s: Worker, person: int) -> None:
    s.receiving[person] -= 1
    if s.receiving[person] <= 0:
        del s.receiving[person]


def too_much(adding: int, left: int, config: Config) -> str:
    return (f"This needs {adding:,} bytes, and {max(0, left):,} bytes of your room for files are left "
            f"(of {config.storage_max:,}): delete some conversations or documents first. Nothing was sent.")


def room_for(store: Store, config: Config, person: int, adding: int) -> None:
    """A 413 in words when `adding` bytes more would put the person past their room for files;
    call it inside the write that stores them."""
    left = config.storage_max - store.person_files(person)
    if adding > left:
        raise HTTPException(status_code=413, detail=too_much(adding, left, config))


def sizes(files: Sequence[tuple[str, bytes | Spooled]]) -> int:
    return sum(data.examined.size if isinstance(data, Spooled) else len(data) for _, data in files)


async def kept(store: Store, files: Sequence[tuple[str, bytes | Spooled]]) -> None:
    """The uploads' bytes written where the store keeps bytes, in a thread, before the route's
    write: on SQLite that is files/ (not part of the write), so the copy and its fsync hold
    neither the event loop nor the write lock. PostgreSQL's are rows of the write itself."""
    blobs = store.blobs
    if blobs.transactional:
        return
    for _, data in files:
        if isinstance(data, Spooled):
            await anyio.to_thread.run_sync(blobs.put, data.chunks(), data.examined.sha256)
