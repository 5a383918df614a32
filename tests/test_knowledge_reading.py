"""Reading documents (app/knowledge): kinds told from bytes, passages cut at the right places,
and every kind read page by page in the child, hostile files included. The documents are
built here, at run time: PDFs written by hand (a text object per page), .docx by python-docx."""
from __future__ import annotations

import asyncio

import docx
import pytest

from app.knowledge.kinds import Unreadable, kind_of
from app.knowledge.passages import PASSAGE, Passage, passages

# --- passages ----------------------------------------------------------------------------------


def test_short_paragraphs_under_one_heading_are_one_passage():
    assert passages(3, [("Intro", "One."), ("Intro", "Two\n  lines."), ("", "")]) == [
        Passage(3, "Intro", "One.\n\nTwo lines.")]


def test_a_heading_change_ends_a_passage():
    got = passages(1, [("A", "first"), ("B", "second"), ("B", "third")])
    assert [(p.heading, p.text) for p in got] == [("A", "first"), ("B", "second\n\nthird")]


def test_passages_break_at_paragraph_ends_first():
    para = "x" * 600
    got = passages(1, [("", para), ("", para), ("", para)])
    assert [p.text for p in got] == [para, para, para]


def test_a_long_paragraph_breaks_at_sentence_ends():
    sentence = "This sentence has some words in it and ends here."  # 50 characters
    got = passages(1, [("", " ".join([sentence] * 50))])
    assert all(len(p.text) <= PASSAGE for p in got)
    assert all(p.text.endswith("ends here.") and p.text.startswith("This") for p in got)
    assert sum(p.text.count("ends here.") for p in got) == 50


def test_a_long_sentence_breaks_between_words_and_a_long_word_inside_it():
    got = passages(1, [("", " ".join(["word"] * 600))])
    assert all(len(p.text) <= PASSAGE and p.text.startswith("word") and p.text.endswith("word") for p in got)
    assert sum(p.text.count("word") for p in got) == 600
    long = passages(1, [("", "y" * 2500)])
    assert [len(p.text) for p in long] == [1000, 1000, 500]


def test_whitespace_and_what_is_not_text_become_one_space_and_empty_passages_go():
    got = passages(2, [("  Head\x00ing \n", "a\tb\x00\x01c\ud800d   e"), ("x", " \n\t ")])
    assert got == [Passage(2, "Head ing", "a b c d e")]


def test_a_huge_heading_is_cut():
    assert len(passages(1, [("h" * 5000, "text")])[0].heading) == 300


# --- kinds -------------------------------------------------------------------------------------


@pytest.mark.parametrize("head, name, kind", [
    (b"%PDF-1.7\n...", "x.bin", "pdf"),
    (b"\xef\xbb\xbf%PDF-1.4", "report.pdf", "pdf"),
    (b"PK\x03\x04rest", "Letter.DOCX", "docx"),
    (b"<html><body>hi", "page.htm", "html"),
    (b"# Title", "notes.markdown", "markdown"),
    (b"a,b\n1,2", "data.csv", "csv"),
    (b"plain words", "notes.txt", "text"),
    (b"caf\xc3\xa9 au lait \xe2\x82", "README", "text"),  # UTF-8, its last character cut by the head
    (b"caf\xe9", "old.txt", "text"),  # Windows-1252, named as text
    (b"\xff\xfeh\x00i\x00", "unicode.txt", "text"),  # UTF-16 with its mark
])
def test_kinds_are_told_from_bytes_and_names(head, name, kind):
    assert kind_of(head, name) == kind


@pytest.mark.parametrize("head, name, words", [
    (b"", "x.txt", "empty"),
    (b"hello", "x.pdf", "named .pdf"),
    (b"PK\x03\x04", "x.zip", "zip archive"),
    (b"PK\x03\x04", "x.xlsx", "zip archive"),
    (b"hello", "x.docx", "named .docx"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "x.doc", "old Office"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "x.png", "not a PDF, Word"),
    (b"ab\x00cd", "x.txt", "not a PDF, Word"),
    (b"\xff\xd8\xff\xe0JFIF", "photo", "not a PDF, Word"),
])
def test_what_is_not_read_is_refused_in_plain_words(head, name, words):
    with pytest.raises(Unreadable) as e:
        kind_of(head, name)
    assert words in e.value.reason


# --- reading, in the child ---------------------------------------------------------------------


def read_all(path, kind, start=1, **kw):
    from app.knowledge.reading import read

    async def go():
        return [page async for page in read(path, kind, start, **kw)]
    return asyncio.run(go())


def test_a_web_pages_paragraphs_are_under_its_title_and_a_boxs_title_is_no_heading(tmp_path):
    from app.knowledge.child import html_blocks

    path = tmp_path / "datatype-character.html"
    path.write_text("""<html><head><title>8.3. Character
      Types</title></head><body><div class="sect1"><p>SQL defines two primary character types:
      character varying(n) and character(n), where n is a positive integer, and both store
      strings up to n characters in length in the database.</p>
      <h3>Storage¶</h3><p>Short strings need one byte of overhead, and long strings four bytes
      of overhead on disk in the table.</p>
      <div class="tip"><h3>Tip</h3><p>There is no performance difference among these three
      types, apart from increased storage space when using the blank-padded type.</p></div>
      <p>Long values are also stored in background tables so they do not interfere.</p></div>
      </body></html>""")
    blocks = [(h, " ".join(p.split())) for h, p in html_blocks(path) if p.strip()]
    assert blocks[0][0] == "8.3. Character Types", "a page with no heading kept: its title"
    assert {h for h, _ in blocks[1:]} == {"8.3. Character Types — Storage"}, "a Tip box keeps the heading before it"
    assert any("no performance difference" in p for _, p in blocks)


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_a_pdf_is_read_page_by_page_with_its_outline_as_headings(tmp_path):
    from tests.fakes.documents import text_pdf

    path = tmp_path / "manual.pdf"
    path.write_bytes(text_pdf([[f"Page {p} says tern-{p}."] for p in range(1, 6)],
                              outline=[("Introduction", 1), ("Errors", 4)]))
    pages = read_all(path, "pdf")
    assert [(p.number, p.pages) for p in pages] == [(n, 5) for n in range(1, 6)]
    assert [(p.passages[0].heading, p.passages[0].text) for p in pages] == [
        ("Introduction", "Page 1 says tern-1."), ("Introduction", "Page 2 says tern-2."),
        ("Introduction", "Page 3 says tern-3."), ("Errors", "Page 4 says tern-4."), ("Errors", "Page 5 says tern-5.")]
    assert [p.number for p in read_all(path, "pdf", start=4)] == [4, 5], "taken up again from a page"


def test_a_word_hyphenated_at_a_pdf_lines_end_is_read_whole(tmp_path):
    """PDFium joins a word broken across two lines and marks where its hyphen was with U+FFFE;
    left in, "manip\ufffeulation" was found by neither "manipulation" nor "manip" alone, and
    showed a box on the passage's page."""
    from app.knowledge.child import pdf_pages
    from tests.fakes.documents import text_pdf

    path = tmp_path / "libtasn1.pdf"
    path.write_bytes(text_pdf([["Libtasn1 does the DER manip-", "ulation of ASN.1 structures."]]))
    [(number, count, blocks)] = list(pdf_pages(path, 1))
    assert (number, count, blocks) == (1, 1, [("", "Libtasn1 does the DER manipulation of ASN.1 structures.")])


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_a_pdf_without_any_text_fails_saying_so_after_its_pages(tmp_path):
    from tests.fakes.documents import text_pdf

    path = tmp_path / "scan.pdf"
    path.write_bytes(text_pdf([[], []]))
    with pytest.raises(Unreadable, match="no text layer"):
        read_all(path, "pdf")


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_a_pdf_that_needs_a_password_fails_saying_so_and_nothing_of_it_is_read(tmp_path):
    from app.knowledge.child import NO_PASSWORD
    from tests.fakes.documents import text_pdf

    path = tmp_path / "locked.pdf"
    path.write_bytes(text_pdf([["The locked page says tern-7."]], locked=True))
    pages = []
    with pytest.raises(Unreadable) as refused:
        pages = read_all(path, "pdf")
    assert refused.value.reason == NO_PASSWORD and pages == []


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_a_docx_keeps_its_headings_and_tables(tmp_path):
    d = docx.Document()
    d.add_heading("Installing", level=1)
    d.add_paragraph("Run configure, then make.")
    table = d.add_table(rows=2, cols=2)
    for r, row in enumerate([("Option", "Meaning"), ("--prefix", "where to install")]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    d.add_heading("Errors", level=2)
    d.add_paragraph("ASN1_TAG_ERROR: a tag is wrong.")
    path = tmp_path / "manual.docx"
    d.save(path)
    [page] = read_all(path, "docx")
    found = [(p.heading, p.text) for p in page.passages]
    assert ("Errors", "ASN1_TAG_ERROR: a tag is wrong.") in found
    installing = " ".join(t for h, t in found if h == "Installing")
    assert "Run configure" in installing and "--prefix | where to install" in installing, found


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_a_page_that_takes_too_long_ends_the_reading_naming_it(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("a,b\n" + "".join(f"{n},{n * 2}\n" for n in range(200_000)))
    with pytest.raises(Unreadable, match=r"Page 1 took longer than"):
        read_all(path, "csv", page_seconds=1e-6)


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_reading_past_its_memory_fails_in_plain_words(tmp_path):
    path = tmp_path / "line.txt"
    path.write_text("word " * 2_000_000)  # one 10 MB line
    with pytest.raises(Unreadable, match="more than 40 MiB of memory"):
        read_all(path, "text", memory=40 << 20)


@pytest.mark.process  # the child: python -m app.knowledge.child
def test_leaving_the_reading_kills_the_child_at_once(tmp_path):
    from app.knowledge.reading import read
    from tests.test_ingest import my_children

    path = tmp_path / "big.csv"
    path.write_text("a,b\n" + "".join(f"{n},{n * 2}\n" for n in range(200_000)))

    async def go():
        reading = read(path, "csv")
        first = await reading.__anext__()
        assert len(my_children()) == 1
        await reading.aclose()
        return first
    assert asyncio.run(go()).number == 1
    assert my_children() == [], "killed and reaped: no zombie, no orphan"

