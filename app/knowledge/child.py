"""The reading child: one document read page by page, each page one line of JSON on stdout, under limits.

`python -m app.knowledge.child PATH KIND START MEMORY` (run by reading.py, never by hand)
first limits itself (its address space to MEMORY bytes, CPU time, no file written, few files
open, killed with its parent), then writes for each page from START on
`{"page": n, "pages": N, "passages": [[heading, text], ...]}`, flushed. A document it
cannot read ends with `{"unreadable": reason}` and exit status 2; memory running out ends it
with status 3 (nothing more is allocated to say so).

Pages: a PDF's own. The other kinds have none that is stored (Word lays its pages out only
when it shows them), so their text is cut into sections of about SECTION characters at
paragraph ends, each counted as a page: the same bytes always give the same pages, so a
reading resumed at page START goes on where the last one stopped.
"""
from __future__ import annotations

import codecs
import csv
import ctypes
import io
import json
import os
import re
import resource
import signal
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

from .kinds import KINDS, Unreadable
from .passages import cut, passages

SECTION = 4000  # characters of a text kind's "page"
PAGES_MAX = 50_000  # more pages than any real document has: a crafted page tree ends the reading
CPU_SECONDS = 4 * 3600  # a backstop only: reading.py ends a page that takes longer than its page_seconds
FILES = 32  # open at once: the document, the libraries being loaded
UNPACKED_MAX = 200 * 1024 * 1024  # a .docx's unpacked size
RATIO_MAX = 100  # a .docx unpacked to more than 100 times its packed size is a zip bomb (XML packs 5-20 times)
ENTRIES_MAX = 10_000  # files in a .docx
FIELD_MAX = 100_000  # characters of one CSV field
MEMORY_EXIT = 3
UNREADABLE_EXIT = 2
PR_SET_PDEATHSIG = 1  # linux/prctl.h
NO_TEXT = "This PDF has no text layer (it may be scanned images); reading scans is not supported."
NO_PASSWORD = "This PDF is protected by a password."
DAMAGED_PDF = "This PDF is damaged and cannot be read."
DAMAGED_DOCX = "This Word document is damaged and cannot be read."
HEADING_STYLE = re.compile(r"(Heading \d|Title)$")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
BLANK = re.compile(r"\n[ \t]*\n")

Blocks = list[tuple[str, str]]  # (heading, paragraph)


def main(argv: list[str]) -> int:
    path, kind, start, memory = Path(argv[0]), argv[1], int(argv[2]), int(argv[3])
    limit(memory)
    out = sys.stdout.buffer
    try:
        if kind not in KINDS:
            raise Unreadable(f"Documents of the kind {kind!r} are not read.")
        if path.stat().st_size == 0:
            raise Unreadable("The file is empty.")
        found = False
        for number, pages, blocks in (pdf_pages(path, start) if kind == "pdf" else sections(KIND_BLOCKS[kind](path), start)):
            read = passages(number, blocks)
            found = found or bool(read)
            send(out, {"page": number, "pages": pages, "passages": [[p.heading, p.text] for p in read]})
        # Only a reading from the first page knows that no page had text (the pages before
        # START were read by an earlier one).
        if kind == "pdf" and start == 1 and not found:
            raise Unreadable(NO_TEXT)
    except Unreadable as e:
        send(out, {"unreadable": e.reason})
        return UNREADABLE_EXIT
    except MemoryError:
        os._exit(MEMORY_EXIT)
    return 0


def limit(memory: int) -> None:
    """This process's limits, lowered for good (a hostile document cannot raise them again)."""
    lower(resource.RLIMIT_AS, memory)
    lower(resource.RLIMIT_CPU, CPU_SECONDS)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write to a file fails (EFBIG) instead of killing the reader
    lower(resource.RLIMIT_FSIZE, 0)
    lower(resource.RLIMIT_CORE, 0)
    lower(resource.RLIMIT_NOFILE, FILES)
    if sys.platform == "linux":
        # Dies with the worker, even by kill -9. (Had the worker died before this line, the
        # first page written to its closed pipe ends this process.)
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def lower(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))


def send(out, line: dict) -> None:
    out.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
    out.flush()


# --- PDF ------------------------------------------------------------------------------------


def pdf_pages(path: Path, start: int) -> Iterator[tuple[int, int, Blocks]]:
    """A PDF's pages' text layers, each under the outline's entry for it (else the last one before)."""
    import pypdfium2 as pdfium  # each kind's library is loaded only for its documents (the child is new each time)

    try:
        pdf = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as e:
        raise Unreadable({pdfium.raw.FPDF_ERR_PASSWORD: NO_PASSWORD,
                          pdfium.raw.FPDF_ERR_SECURITY: "This PDF is protected in a way that cannot be read.",
                          pdfium.raw.FPDF_ERR_SUCCESS: "This PDF has no pages."}.get(e.err_code, DAMAGED_PDF)) from None
    try:
        count = len(pdf)
        if count > PAGES_MAX:
            raise Unreadable(f"This PDF has {count:,} pages; at most {PAGES_MAX:,} are read.")
        titles = outline(pdf, pdfium.raw)
        before = [i for i in titles if i < start - 1]
        heading = titles[max(before)][-1] if before else ""
        for index in range(start - 1, count):
            heading = titles.get(index, [heading])[0]
            page = pdf[index]
            try:
                text = page.get_textpage()
                try:
                    # PDFium joins a word hyphenated at a line's end and leaves U+FFFE (a noncharacter)
                    # where the hyphen was: "manip\ufffeulation" would be two words to search
                    whole = text.get_text_range().replace("\r\n", "\n").replace("\ufffe", "")
                    blocks = [(heading, p) for p in BLANK.split(whole)]
                finally:
                    text.close()
            finally:
                page.close()
            yield index + 1, count, blocks
            heading = titles.get(index, [heading])[-1]
    finally:
        pdf.close()


def outline(pdf, raw, most: int = 10_000) -> dict[int, list[str]]:
    """The outline's titles by the page index they point to, in the outline's order (its first `most`)."""
    titles: dict[int, list[str]] = {}
    for n, mark in enumerate(pdf.get_toc()):
        if n == most:
            break
        dest = mark.get_dest()
        index = dest.get_index() if dest is not None else None
        if dest is None:  # a GoTo action rather than a destination (LaTeX's hyperref writes these)
            action = raw.FPDFBookmark_GetAction(mark.raw)
            if action and raw.FPDFAction_GetType(action) == raw.PDFACTION_GOTO:
                found = raw.FPDFAction_GetDest(pdf.raw, action)
                index = raw.FPDFDest_GetDestPageIndex(pdf.raw, found) if found else None
        if index is not None and index >= 0 and (title := mark.get_title().strip()):
            titles.setdefault(index, []).append(title)
    return titles


# --- the kinds without pages of their own -----------------------------------------------------


def sections(blocks: Blocks, start: int) -> Iterator[tuple[int, int, Blocks]]:
    """The blocks in "pages" of at most SECTION characters, broken at blocks (a longer block is
    cut as passages are); from page `start`."""
    pages: list[Blocks] = []
    size = SECTION
    for heading, text in blocks:
        for part in cut(" ".join(text.split()), SECTION):
            if part and size + len(part) > SECTION:
                pages.append([])
                size = 0
            if part:
                pages[-1].append((heading, part))
                size += len(part) + 2
    if not pages:
        raise Unreadable("The document holds no text.")
    for number in range(start, len(pages) + 1):
        yield number, len(pages), pages[number - 1]


def decoded(data: bytes) -> str:
    """A text file's characters: by its byte-order mark, else UTF-8, else Windows-1252."""
    for bom, codec in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    if b"\x00" in data:
        raise Unreadable("This file is not text: it holds NUL bytes.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def text_blocks(path: Path) -> Blocks:
    """Paragraphs between blank lines."""
    return [("", p) for p in BLANK.split(decoded(path.read_bytes()).replace("\r\n", "\n"))]


def markdown_blocks(path: Path) -> Blocks:
    return markdown(decoded(path.read_bytes()))


def markdown(text: str) -> Blocks:
    """Paragraphs between blank lines, each under the ATX heading (# to ######) above it; a
    `#` inside a fenced code block is no heading."""
    blocks, heading, lines, fenced = [], "", [], None
    for line in text.replace("\r\n", "\n").split("\n"):
        fence = FENCE.match(line)
        if fenced is None and (atx := ATX.match(line)):
            blocks.append((heading, "\n".join(lines)))
            heading, lines = (atx.group(2) or "").strip(), []
            continue
        if fence and fenced in (None, fence.group(1)):
            fenced = fence.group(1) if fenced is None else None
        if not line.strip() and fenced is None:
            blocks.append((heading, "\n".join(lines)))
            lines = []
        else:
            lines.append(line)
    blocks.append((heading, "\n".join(lines)))
    return blocks


# The titles of a manual's boxes (DocBook's admonitions), which a reader takes for headings:
# the paragraphs after such a box are under the heading before it.
BOXES = frozenset({"note", "tip", "warning", "caution", "important", "see also", "example", "notes"})


def html_blocks(path: Path) -> Blocks:
    """The page's main text (trafilatura, as fetch_page reads pages), else all its text;
    scripts never run. Each paragraph is under the page's title and the heading above it
    ("8.3. Character Types — Tips"): a manual's page often has no heading trafilatura keeps
    (DocBook's titles), and its title is what the page is about."""
    import trafilatura

    data = path.read_bytes()
    try:
        text = trafilatura.extract(data, output_format="markdown", include_tables=True, include_comments=False,
                                   favor_recall=True)
    except RecursionError:  # nested deeper than its walk goes
        text = None
    blocks = markdown(text) if text else [("", all_text(data))]
    title, kept, last, out = page_title(data), "", None, []
    for heading, paragraph in blocks:
        heading = heading.replace("¶", "").strip()
        first, _, rest = heading.partition(" ")
        if first.strip("*_:").casefold() in BOXES or heading.casefold() in BOXES:
            if heading != last and rest.strip():
                out.append((under(title, kept), rest.strip()))  # a box's first words, read as its title
        else:
            kept = heading
        last = heading
        out.append((under(title, kept), paragraph))
    return out


def under(title: str, heading: str) -> str:
    """A heading under its page's title, once."""
    if not title or heading.casefold().startswith(title.casefold()):
        return heading
    return f"{title} — {heading}" if heading else title


def page_title(data: bytes) -> str:
    """The page's <title>, its whitespace made one space ("" when it has none)."""
    from lxml import etree, html

    try:
        found = html.document_fromstring(data).findtext(".//title")
    except (etree.ParserError, ValueError):
        return ""
    return " ".join((found or "").split())[:200]


def all_text(data: bytes) -> str:
    from lxml import etree, html

    try:
        tree = html.document_fromstring(data)
    except (etree.ParserError, ValueError):
        return ""
    etree.strip_elements(tree, "script", "style", "noscript", "template", with_tail=False)
    return "\n\n".join(t for t in tree.itertext() if t.strip())


def csv_blocks(path: Path) -> Blocks:
    """Each row as `name: value; name: value`, the names from the header (empty values left out)."""
    text = decoded(path.read_bytes())
    csv.field_size_limit(FIELD_MAX)
    try:
        dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = csv.reader(io.StringIO(text, newline=""), dialect)
    blocks = []
    try:
        header = next(rows, [])
        names = [h.strip() or f"column {i}" for i, h in enumerate(header, 1)]
        for row in rows:
            named = (f"{names[i] if i < len(names) else f'column {i + 1}'}: {v}" for i, v in enumerate(row) if v.strip())
            blocks.append(("", "; ".join(named)))
    except csv.Error as e:
        raise Unreadable(f"This CSV cannot be read: line {rows.line_num}: {e}.") from None
    return blocks or [("", "; ".join(header))]


def docx_blocks(path: Path) -> Blocks:
    """Paragraphs and tables in order (a table's rows as `cell | cell`), under the paragraph
    styled as a heading (Heading 1 to 9, Title) above them."""
    import docx
    from docx.table import Table

    check_zip(path)
    try:
        document = docx.Document(str(path))
        blocks, heading = [], ""
        for part in document.iter_inner_content():
            if isinstance(part, Table):
                rows = (" | ".join(unrepeated(" ".join(c.text.split()) for c in row.cells)) for row in part.rows)
                blocks += [(heading, r) for r in rows]
            elif part.style is not None and HEADING_STYLE.match(part.style.name or ""):
                heading = part.text
            else:
                blocks.append((heading, part.text))
    except (ValueError, KeyError, zipfile.BadZipFile) as e:  # python-docx's word for "not a Word document"
        raise Unreadable(DAMAGED_DOCX) from e
    return blocks


def unrepeated(cells) -> list[str]:
    """A row's cells with a merged cell once (python-docx gives it for every column it spans)."""
    out: list[str] = []
    for c in cells:
        if not out or c != out[-1]:
            out.append(c)
    return out


def check_zip(path: Path) -> None:
    """Unreadable unless `path` is a zip that holds a Word document and unpacks to a bounded size."""
    try:
        with zipfile.ZipFile(path) as z:
            entries = z.infolist()
    except (zipfile.BadZipFile, OSError):
        raise Unreadable(DAMAGED_DOCX) from None
    if len(entries) > ENTRIES_MAX:
        raise Unreadable(f"This Word document holds more than {ENTRIES_MAX:,} files: it is not read.")
    if "word/document.xml" not in {e.filename for e in entries}:
        raise Unreadable("This zip archive is not a Word document.")
    unpacked, packed = sum(e.file_size for e in entries), sum(e.compress_size for e in entries)
    if unpacked > UNPACKED_MAX or unpacked > RATIO_MAX * max(packed, 1) and unpacked > 1024 * 1024:
        raise Unreadable(f"This Word document unpacks to {unpacked:,} bytes from {packed:,} (a zip bomb?): it is not read.")


KIND_BLOCKS = {"docx": docx_blocks, "html": html_blocks, "markdown": markdown_blocks, "text": text_blocks,
               "csv": csv_blocks}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
