"""A fair corpus for the knowledge search: Debian's documentation packages read through the
app's own reader, and the question set over it (knowledge_questions.json).

Not a benchmark itself (`make bench` skips files starting with "_"); benchmarks/knowledge.py's
`recall` phase uses it. The packages are installed when missing (`make bench-corpus` does the
same); each HTML file is read by app/knowledge/reading.py's `read`, as ingestion reads an
upload (the reading child, trafilatura, the passages of about 1,000 characters), and the
pages read are kept in the system's temporary folder (never in the repository), keyed by the
packages' versions and the reader's code (READER), so a second run does not read them again.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READER = ("kinds.py", "passages.py", "reading.py", "child.py")  # app/knowledge's modules that read a file
QUESTIONS = Path(__file__).resolve().parent / "knowledge_questions.json"

# source name -> (Debian package, folder, the files of it that are read)
SOURCES = {
    "postgresql": ("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html", "*.html"),
    "python": ("python3.11-doc", "/usr/share/doc/python3.11/html", "**/*.html"),
    "debian-reference": ("debian-reference-en", "/usr/share/debian-reference", "*.en.html"),
    "debian-handbook": ("debian-handbook", "/usr/share/doc/debian-handbook/html/en-US", "*.html"),
    # more of Debian's documentation, so that the questions' answers are among ~100,000 passages
    "django": ("python-django-doc", "/usr/share/doc/python-django-doc/html", "**/*.html"),
    "sqlalchemy": ("python-sqlalchemy-doc", "/usr/share/doc/python-sqlalchemy-doc/html", "**/*.html"),
    "git": ("git-doc", "/usr/share/doc/git-doc", "**/*.html"),
    "cmake": ("cmake-doc", "/usr/share/doc/cmake-data/html", "**/*.html"),
    "apache": ("apache2-doc", "/usr/share/doc/apache2-doc/manual/en", "**/*.html"),
    "debian-policy": ("debian-policy", "/usr/share/doc/debian-policy/policy.html", "*.html"),
    "developers-reference": ("developers-reference", "/usr/share/developers-reference", "*.html"),
}
# (python-pandas-doc and python-scipy-doc would add ~7,000 API pages: ~25 minutes more of
# reading on 2 cores, as each file is a reading child of its own, for ~20,000 short passages.)
# Pages that are generated lists of links, not documentation a person reads: the indexes
# (genindex-*, py-modindex, search; PostgreSQL's bookindex), Sphinx's _sources and _modules
# copies; the Developer's Reference's whole book on one page (its chapters are read).
SKIPPED = re.compile(r"(^|/)(genindex[^/]*|py-modindex|search|bookindex|developers-reference)\.html$|(^|/)_")


@dataclass(frozen=True)
class Document:
    name: str  # "postgresql/datatype-datetime.html": the source, then the path inside its folder
    pages: list  # [(number, pages, [(heading, text), ...]), ...]


def installed(package: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip().endswith("installed")


def ensure_packages() -> None:
    """The documentation packages, installed from Debian when missing (quick when they are there)."""
    missing = [p for p, _, _ in SOURCES.values() if not installed(p)]
    if not missing:
        return
    print(f"installing Debian's {' '.join(missing)} for the search corpus", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env, capture_output=True).returncode:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env, check=True, capture_output=True)


def version(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True).stdout


def files(source: str) -> list[tuple[str, Path]]:
    """(name, path) of every file of `source` that is read, in a stable order."""
    _, folder, pattern = SOURCES[source]
    base, out = Path(folder), []
    for path in sorted(base.glob(pattern)):
        rel = path.relative_to(base).as_posix()
        if path.is_file() and not SKIPPED.search(rel):
            out.append((f"{source}/{rel}", path))
    return out


def cache_path(source: str) -> Path:
    """Where `source`'s pages read are kept: the temporary folder, keyed by its package's
    version and the reader's code (READER), so a changed reader reads them again."""
    key = hashlib.sha256(f"{source} {version(SOURCES[source][0])}".encode())
    for f in READER:
        key.update((ROOT / "app" / "knowledge" / f).read_bytes())
    return Path(tempfile.gettempdir()) / f"tabletalk-corpus-{source}-{key.hexdigest()[:12]}.json"


async def read_all(todo: list[tuple[str, Path]], at_once: int) -> list[Document]:
    from app.knowledge.kinds import kind_of
    from app.knowledge.reading import read

    done: dict[str, Document] = {}
    queue = list(reversed(todo))

    async def reader():
        while queue:
            name, path = queue.pop()
            with path.open("rb") as f:
                kind = kind_of(f.read(65536), path.name)
            pages = [(p.number, p.pages, [(x.heading, x.text) for x in p.passages]) async for p in read(path, kind)]
            done[name] = Document(name, pages)

    await asyncio.gather(*(reader() for _ in range(at_once)))
    return [done[name] for name, _ in todo]


def corpus(fresh: bool = False, at_once: int = 2) -> tuple[list[Document], float, int]:
    """(documents, seconds spent reading those not kept from an earlier run, how many sources were kept)."""
    ensure_packages()
    docs, took, kept_sources = [], 0.0, 0
    for source in SOURCES:
        kept = cache_path(source)
        if kept.exists() and not fresh:
            docs += [Document(d["name"], d["pages"]) for d in json.loads(kept.read_text())]
            kept_sources += 1
            continue
        t0 = time.monotonic()
        read = asyncio.run(read_all(files(source), at_once))
        took += time.monotonic() - t0
        print(f"  .. read {source}: {len(read)} files, {sum(len(p[2]) for d in read for p in d.pages):,} passages, "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        tmp = kept.with_suffix(".part")
        tmp.write_text(json.dumps([{"name": d.name, "pages": d.pages} for d in read]))
        tmp.replace(kept)
        docs += read
    return docs, took, kept_sources


def normal(text: str) -> str:
    """`text` as an answer's phrase is looked for in it: case-folded, its whitespace one space,
    without the Markdown marks the reader leaves (`code`, *emphasis*, \\_ escapes)."""
    return " ".join(re.sub(r"[\\*`]", "", text).casefold().split())


def questions() -> list[dict]:
    return json.loads(QUESTIONS.read_text())["questions"]


if __name__ == "__main__":  # the corpus read (or found) and counted
    sys.path.insert(0, str(ROOT))
    docs, took, kept = corpus(fresh="--fresh" in sys.argv)
    n = sum(len(p[2]) for d in docs for p in d.pages)
    by = {}
    for d in docs:
        s = d.name.split("/")[0]
        by[s] = by.get(s, 0) + sum(len(p[2]) for p in d.pages)
    print(f"{len(docs)} files, {n:,} passages {by}, read in {took:.0f} s ({kept} sources kept from an earlier run)")
