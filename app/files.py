"""Files: attachments a person sends and files a tool makes.

Bytes live once per content under data/files/ab/cdef... (sha256 hex, split after two
characters), written to a temporary file and renamed into place, so a reader never sees a
half-written file and the same bytes are stored once. The row (app/store/files.py) keeps the person's
name for display, the type sniffed here from the bytes (never the client's word) and the size.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import unicodedata
from pathlib import Path
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
    if b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return OCTET
        return TEXT
    return OCTET


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


def path_of(root: Path, sha256: str) -> Path:
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError("not a sha256")
    return root / sha256[:2] / sha256[2:]


def save(root: Path, data: bytes) -> str:
    """Store the bytes (once per content); returns their sha256."""
    sha = digest(data)
    target = path_of(root, sha)
    if target.exists() and target.stat().st_size == len(data):
        return sha
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return sha


def forget(root: Path, sha256: str) -> None:
    """Remove stored bytes (no row names them any more)."""
    try:
        path_of(root, sha256).unlink()
    except FileNotFoundError:
        pass


def load(root: Path, sha256: str) -> bytes | None:
    try:
        return path_of(root, sha256).read_bytes()
    except (FileNotFoundError, ValueError):
        return None
