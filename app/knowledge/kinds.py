"""What kind of document a file is, told from its first bytes and its name, or why it cannot be read.

A PDF is told by `%PDF-` in its first 1,024 bytes (where PDF readers look for it); a Word
document by the zip signature and a name ending in `.docx` (its `word/document.xml` may lie
past the first 64 KiB, so the child checks the zip itself before reading it). The text kinds
are told by their names (.md/.markdown, .html/.htm, .csv, .txt), and a file with any other
name is text when its first bytes are UTF-8 without NUL bytes. `head` is the file's first
bytes: 64 KiB is plenty.
"""
from __future__ import annotations

import codecs
from pathlib import PurePath

KINDS = ("pdf", "docx", "html", "markdown", "text", "csv")
NAMED = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html", ".csv": "csv", ".txt": "text"}
NOT_READ = "This file is not a PDF, Word, HTML, Markdown, text or CSV document."
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # Windows' "Unicode" text: NUL bytes that are text


class Unreadable(Exception):
    """A document that cannot be read, with the reason in plain words a person reads."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def kind_of(head: bytes, name: str) -> str:
    """One of KINDS for a file starting with `head` and named `name`; Unreadable for anything else."""
    ending = PurePath(name.lower()).suffix
    if not head:
        raise Unreadable("The file is empty.")
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if ending == ".pdf":
        raise Unreadable("This file is named .pdf but is not a PDF.")
    if head.startswith(b"PK\x03\x04"):
        if ending == ".docx":
            return "docx"
        raise Unreadable(f"This file is a zip archive, not a Word (.docx) document. {NOT_READ}")
    if ending == ".docx":
        raise Unreadable("This file is named .docx but is not a Word document.")
    if head.startswith(b"\xd0\xcf\x11\xe0"):  # OLE2: Word 97-2003 .doc, old Excel and PowerPoint
        raise Unreadable("This is an old Office document (.doc, .xls, .ppt): save it as .docx and add that.")
    if b"\x00" in head and not head.startswith(UTF16_BOMS):
        raise Unreadable(NOT_READ)
    if ending in NAMED:
        return NAMED[ending]
    try:
        codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=False)  # a character cut at the end is fine
    except UnicodeDecodeError:
        raise Unreadable(NOT_READ) from None
    return "text"
