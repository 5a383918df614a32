"""The GGUF models the owner brings: files under `data/models/` (copied or linked there), each
checked by its header (gguf.py) before it is offered, and served by the built-in model's
runtime in SmolLM2's place, one at a time, as `local:NAME` (NAME: the file's name without
`.gguf`). The owner chooses one on the built-in model's page; the supervisor serves it
(app/serve/supervise.py).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from . import NAME, gguf

WINDOW_MAX = 8192  # the window a brought model is served with at most: its memory grows with it
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")  # a model id a picker and a URL carry as it is


@dataclass(frozen=True)
class Brought:
    file: str  # its name under data/models/
    size: int  # bytes
    header: gguf.Header | None
    problem: str  # why it cannot be served, in words ('' when it can)

    @property
    def name(self) -> str:
        """What it is served and listed as (local:NAME)."""
        return self.file.removesuffix(".gguf")

    @property
    def window(self) -> int:
        """The window it is served with: its own, at most WINDOW_MAX."""
        return min(self.header.window, WINDOW_MAX) if self.header else 0


def folder(data: Path) -> Path:
    return data / "models"


def check(path: Path) -> Brought:
    """The file at `path` as a model to offer: its header, or why it cannot be served."""
    try:
        stat = path.stat()
    except OSError as e:
        return Brought(path.name, 0, None, f"it cannot be read ({e.strerror})")
    problem = ""
    name = path.name.removesuffix(".gguf")
    if not _NAME.match(name):
        problem = "its name must be letters, digits, dots, dashes, underscores and pluses (rename the file)"
    elif name == NAME:
        problem = "it has the name of the built-in model (rename the file)"
    if problem:
        return Brought(path.name, stat.st_size, None, problem)
    try:
        header, problem = _header(str(path), stat.st_size, stat.st_mtime_ns)
    except OSError as e:
        return Brought(path.name, stat.st_size, None, f"it cannot be read ({e.strerror})")
    return Brought(path.name, stat.st_size, header, problem)


@functools.lru_cache(maxsize=64)
def _header(path: str, size: int, mtime_ns: int) -> tuple[gguf.Header | None, str]:
    """The header of the file at `path` as it is at (`size`, `mtime_ns`), or why it is none:
    read once per version of the file (a page lists them all at every load)."""
    try:
        return gguf.read(Path(path)), ""
    except gguf.NotAModel as e:
        return None, str(e)


def found(data: Path) -> list[Brought]:
    """Every .gguf file under data/models/, by name, each checked."""
    try:
        paths = sorted(p for p in folder(data).iterdir() if p.name.endswith(".gguf"))
    except OSError:
        return []
    return [check(p) for p in paths]


def one(data: Path, file: str) -> Brought | None:
    """The file named `file` directly under data/models/ (never a path elsewhere), checked."""
    if not file.endswith(".gguf") or "/" in file or "\\" in file or file.startswith("."):
        return None
    path = folder(data) / file
    return check(path) if path.exists() else None


def remove(data: Path, file: str) -> bool:
    """Take the file (or the link to it) out of data/models/; False when it was not there."""
    if one(data, file) is None:
        return False
    (folder(data) / file).unlink(missing_ok=True)
    return True
