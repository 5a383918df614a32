"""Real documents made here, for tests and benchmarks that read them: PDFs with a text layer
(Helvetica, one text object a page, a correct cross-reference table, an outline when asked),
as any PDF writer makes them and PDFium reads them."""
from __future__ import annotations


def _escaped(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(pages: list[list[str]], outline: list[tuple[str, int]] = (), locked: bool = False) -> bytes:
    """A PDF whose page n (from 1) holds the lines `pages[n - 1]` (Latin-1 text), with an
    outline of (title, page) entries when given. `locked`: under the standard security
    handler (RC4, revision 2) with a user password that is not the empty one, as a reader
    finds a PDF it needs a password to open (its /U entry matches no password: nothing
    here encrypts, and no reader gets past the check to the unencrypted text)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in last: it names the pages and the outline
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for lines in pages:
        text = b"BT /F1 10 Tf 12 TL 50 780 Td " + b" ".join(
            b"(" + _escaped(line).encode("latin-1", "replace") + b") '" for line in lines) + b" ET"
        content = add(b"<< /Length %d >>\nstream\n" % len(text) + text + b"\nendstream")
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                        b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (tree, content, font)))
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    outlines = b""
    if outline:
        root = add(b"")
        items = [add(b"") for _ in outline]
        for i, ((title, page), number) in enumerate(zip(outline, items)):
            links = b""
            if i > 0:
                links += b" /Prev %d 0 R" % items[i - 1]
            if i < len(items) - 1:
                links += b" /Next %d 0 R" % items[i + 1]
            objects[number - 1] = (b"<< /Title (" + _escaped(title).encode("latin-1", "replace") + b") /Parent %d 0 R"
                                   % root + links + b" /Dest [%d 0 R /Fit] >>" % kids[page - 1])
        objects[root - 1] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (
            items[0], items[-1], len(items))
        outlines = b" /Outlines %d 0 R /PageMode /UseOutlines" % root
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R" % tree + outlines + b" >>"
    security = b""
    if locked:
        handler = add(b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>" % (b"ab" * 32, b"cd" * 32))
        security = b" /Encrypt %d 0 R /ID [<%s> <%s>]" % (handler, b"01" * 16, b"01" * 16)
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R" % (len(objects) + 1, catalog) + security
    out += b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)
