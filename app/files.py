"""Files: attachments a person sends and files a tool makes.

The rules for what is stored and how it is served: the name cleaned, the type sniffed from
the bytes (never the client's word), the Content-Disposition. The bytes are kept once per
content by the store (app/store/blobs.py: files/ beside SQLite's database, rows of
PostgreSQL's); the row (app/store/files.py) keeps the person's name for display, the type
and the size.
"""
from __future__ import annotations

import codecs
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import quote

NAME_MAX = 255
OCTET = "application/octet-stream"
TEXT = "text/plain; charset=utf-8"
# Served inline (shown in the page); everything else is a download. Never SVG or HTML.
IMAGES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# Text sent to a model in one message at most (characters); the rest is cut with a note.
TEXT_TO_MODEL_MAX = 100_000


def sniff(data: bytes) -> str:
    """The type from the bytes: a few magic numbers, else UTF-8 text without NULs, else octet-stream."""
    return examine([data]).type


def _magic(data: bytes) -> str | None:
    """The type a file's first bytes name (16 are enough), else None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data.startswith(b"ID3") or data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    if data.startswith(b"OggS"):
        return "audio/ogg"
    if data.startswith(b"fLaC"):
        return "audio/flac"
    return None


MAGIC_BYTES = 16   # what _magic reads
HEAD = 64 * 1024   # the first bytes of an upload kept beside it (what a document's kind is told from)
READ = 256 * 1024  # bytes read at a time from an upload's file


@dataclass(frozen=True)
class Examined:
    """What some bytes are, read through once: their sha256, size and type (`sniff`'s rule)."""

    sha256: str
    size: int
    type: str


def examine(chunks: Iterable[bytes]) -> Examined:
    """Bytes given as chunks, read once, a chunk at a time: never held whole (an upload of
    90 MB is read as 256 KB pieces). Text is UTF-8 without NULs, decoded as it comes."""
    hashing, size, head = hashlib.sha256(), 0, b""
    text, utf8 = True, codecs.getincrementaldecoder("utf-8")()
    for chunk in chunks:
        hashing.update(chunk)
        size += len(chunk)
        if len(head) < MAGIC_BYTES:
            head += chunk[:MAGIC_BYTES - len(head)]
        if text:
            try:
                utf8.decode(chunk)
                text = b"\x00" not in chunk
            except UnicodeDecodeError:
                text = False
    if text:
        try:
            utf8.decode(b"", final=True)  # a sequence cut at the end is not text
        except UnicodeDecodeError:
            text = False
    kind = _magic(head) or (TEXT if text else OCTET)
    return Examined(hashing.hexdigest(), size, kind)


@dataclass(frozen=True)
class Spooled:
    """A file a person sent, its bytes in a file on disk while the request lasts (the multipart
    parser spools each past 1 MB): the name as sent, what it is (read once), its first bytes."""

    name: str
    file: BinaryIO
    examined: Examined
    head: bytes

    def chunks(self) -> Iterator[bytes]:
        """Its bytes from the start, READ at a time."""
        self.file.seek(0)
        while chunk := self.file.read(READ):
            yield chunk


def spooled(name: str, file: BinaryIO) -> Spooled:
    """The file `file` holds, read through once (blocking: run it in a thread)."""
    file.seek(0)
    head = file.read(HEAD)
    file.seek(0)
    return Spooled(name, file, examine(iter(lambda: file.read(READ), b"")), head)


def is_image(kind: str) -> bool:
    return kind in IMAGES


# Played by the page's <audio> (a tool's sound); served with its type, as a download.
AUDIO = ("audio/wav", "audio/mpeg", "audio/ogg", "audio/flac")


def is_audio(kind: str) -> bool:
    return kind in AUDIO


def is_text(kind: str) -> bool:
    return kind.startswith("text/plain")


_UNSAFE = re.compile(r'[\x00-\x1f\x7f"\\/:*?<>|;]')


def clean_name(raw: str | None) -> str:
    """A name safe to show and to put in a header: the last path part only, no control
    characters, quotes or separators, not only dots, at most 255 characters (the extension kept)."""
    name = unicodedata.normalize("NFC", raw or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")  # CR, LF, bidi overrides...
    name = _UNSAFE.sub("_", name).strip().strip(".").strip()
    if not name:
        name = "file"
    if len(name) > NAME_MAX:
        stem, dot, ext = name.rpartition(".")
        if dot and 0 < len(ext) <= 16:
            name = stem[: NAME_MAX - len(ext) - 1] + "." + ext
        else:
            name = name[:NAME_MAX]
    return name


def disposition(name: str, inline: bool) -> str:
    """Content-Disposition (RFC 6266): an ASCII fallback and the real name as filename*."""
    name = clean_name(name)
    fallback = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\%' else "_" for ch in name) or "file"
    return f"{'inline' if inline else 'attachment'}; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
