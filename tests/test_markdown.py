"""Tests for app/markdown (the package): safe rendering, keyed blocks, block diffs, appends."""

from __future__ import annotations

import html as html_lib
import random
import re

import pytest
from bs4 import BeautifulSoup, Tag

from app.markdown import (
    MATHML_ATTRIBUTES,
    MATHML_ELEMENTS,
    Block,
    BlockChanges,
    Pace,
    Rendering,
    append_at,
    block_changes,
    keyed,
    render,
)


def appended(old_html: str, new_html: str) -> str | None:
    """The HTML inserted into `old_html` to give `new_html` (markdown.append_at), or None
    when the block changed otherwise (or not at all)."""
    found = append_at(old_html, new_html)
    return None if found is None else found[1]


def append_selector(block_id: str, depth: int) -> str:
    """The element an append at `depth` goes into, as the page's `grow` extension finds it:
    `[id="k-3"]>:last-child>:last-child` (an attribute selector, so any id is valid)."""
    quoted = block_id.replace("\\", "\\\\").replace('"', '\\"')
    return f'[id="{quoted}"]' + ">:last-child" * depth

# A realistic answer (~1,200 tokens): headings, lists (nested, tasks), fences in several
# languages, a table, a blockquote, an hr, linkify, and a reference defined at the end.
SAMPLE = """# Moving the importer to streaming batches

Here is a plan for the change you asked about. The current importer reads the **whole file** into memory, parses it with `csv.reader`, and only then writes rows; on a 2 GB export that takes ~6 minutes and peaks at 9 GB of RSS. See [the issue][issue] and the [profiling notes](https://wiki.example.org/perf/importer?run=42#summary) for details.

## What changes

1. Read the file in chunks of 64 KiB and feed a *streaming* parser.
2. Write rows in batches of 500 inside one transaction per batch:
   - commit after each batch, so a crash loses at most one batch;
   - keep a cursor row (`import_progress`) so a restart resumes;
   - retry `SQLITE_BUSY` with a short backoff.
3. Report progress every second (rows, bytes, rate).

> **Note:** batching changes the failure mode. A half-imported file is now visible to
> readers, so the UI must show "importing" until the last batch lands.

### The reader

```python
import csv
import io
from collections.abc import Iterator


def rows(path: str, chunk: int = 64 * 1024) -> Iterator[list[str]]:
    # Yield parsed rows without holding the file in memory.
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(iter(lambda: fh.readline(), ""))
        for row in reader:
            if row and not row[0].startswith("#"):
                yield row
```

The writer takes those rows and commits every 500:

```python
def write(db, rows, batch: int = 500) -> int:
    total = 0
    buf: list[tuple] = []
    for row in rows:
        buf.append(tuple(row))
        if len(buf) >= batch:
            with db:
                db.executemany("INSERT INTO items VALUES (?, ?, ?)", buf)
            total += len(buf)
            buf.clear()
    if buf:
        with db:
            db.executemany("INSERT INTO items VALUES (?, ?, ?)", buf)
        total += len(buf)
    return total
```

### Numbers

| Variant | Time | Peak RSS | Rows/s |
|:--------|-----:|---------:|-------:|
| whole file | 6m 02s | 9.1 GB | 55k |
| batches of 100 | 2m 40s | 84 MB | 125k |
| batches of 500 | 1m 51s | 86 MB | 180k |
| batches of 5000 | 1m 47s | 140 MB | 187k |

Batches of 500 are the sweet spot: ~~5000~~ barely helps and costs memory. Anything
above that is noise on this machine (8 cores, NVMe, SQLite 3.45 in WAL mode).

## Shell steps

Run the migration first, then the import; `--resume` picks up after a crash:

```bash
tabletalk migrate
tabletalk import --batch 500 --resume data/export-2024-05.csv
```

If you prefer a config file, the same settings in TOML:

```toml
[import]
batch = 500
resume = true
progress_interval = "1s"
```

Some details worth knowing:

* The progress row is written in the same transaction as the batch, so it never runs
  ahead of the data.
* `PRAGMA journal_mode=WAL` lets readers keep reading while batches commit.
* The backoff is 10 ms doubling to 1 s; after 30 s of `SQLITE_BUSY` the import stops
  with an error instead of hanging forever.
  * This is configurable with `--busy-timeout`.
  * A value of `0` disables the limit (not recommended).

---

### Edge cases

Quoted fields can contain newlines, which is why the reader uses `csv.reader` over lines
and not `str.split`. A field like `"line one
line two"` is still one field. Byte-order marks at the start of the file are stripped by
`encoding="utf-8-sig"` if you need them gone; I left `utf-8` because the exports from
https://export.example.com never carry one.

Files compressed with gzip can be read the same way:

```python
import gzip

def open_any(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return open(path, newline="", encoding="utf-8")
```

And a quick check for the HTTP endpoint that starts an import (JavaScript, from the
admin page):

```javascript
async function startImport(file) {
  const body = new FormData();
  body.append("file", file);
  const res = await fetch("/admin/import", { method: "POST", body });
  if (!res.ok) throw new Error(`import failed: ${res.status}`);
  return res.json();
}
```

Questions to settle before merging:

- [ ] Should a failed batch be retried automatically, or stop the import?
- [ ] Do we keep the old importer behind a flag for one release?
- [x] Is 500 the default? (yes, per the numbers above)

Contact ops@example.com if the NVMe numbers do not match production. The full benchmark
script is in `benchmarks/importer.py`; run it with `python benchmarks/importer.py --rows
1000000` and paste the table into the PR.

[issue]: https://tracker.example.org/issues/1234 "Importer memory"
"""


def soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def joined(blocks: list[Block]) -> str:
    return "".join(b.html for b in blocks)


def inner(block_html: str) -> str:
    """The block's HTML without its wrapper element."""
    m = re.fullmatch(r'<div class="md" id="[^"]*">(.*)</div>', block_html, re.S)
    assert m, block_html
    return m.group(1)


def block_tags(text: str, key: str = "k") -> list[Tag]:
    """The single element inside each block wrapper, checking the wrapper on the way."""
    out = []
    for n, block in enumerate(keyed(text, key)):
        assert block.id == f"{key}-{n}"
        nodes = list(soup(block.html).children)
        assert len(nodes) == 1 and isinstance(nodes[0], Tag)
        wrapper = nodes[0]
        assert wrapper.name == "div" and wrapper["id"] == block.id
        assert wrapper["class"] == ["md"]
        kids = [c for c in wrapper.children]
        assert len(kids) == 1 and isinstance(kids[0], Tag), block.html
        out.append(kids[0])
    return out


# --------------------------------------------------------------------------- basics


def test_empty_text_gives_no_blocks():
    assert keyed("", "k") == []
    assert render("") == ""


def test_basic_blocks_and_ids():
    text = "# Title\n\nA *para* with `code`.\n\n---\n\n    indented\n\n> quote\n> more\n"
    tags = block_tags(text, "item-0007")
    assert [t.name for t in tags] == ["h1", "p", "hr", "div", "blockquote"]
    assert tags[1].em.get_text() == "para"
    assert tags[1].code.get_text() == "code"
    assert tags[3]["class"] == ["code"] and tags[3].pre.code.get_text() == "indented\n"
    blocks = keyed(text, "item-0007")
    assert [b.id for b in blocks] == [f"item-0007-{n}" for n in range(5)]
    with pytest.raises(Exception):
        blocks[0].id = "x"  # frozen


def test_block_is_small_frozen_dataclass():
    b = Block("k-0", "<div></div>")
    assert b == Block(id="k-0", html="<div></div>")
    assert hash(b) == hash(Block("k-0", "<div></div>"))


def test_headings_are_left_as_they_are():
    tags = block_tags("# one\n\n###### six\n\nSetext\n===\n")
    assert [t.name for t in tags] == ["h1", "h6", "h1"]


def test_list_is_one_block_including_nested():
    text = (
        "Intro\n\n"
        "- a\n"
        "  - a.1\n"
        "    1. deep\n"
        "    2. deeper\n"
        "  - a.2\n"
        "\n"
        "- b\n\n"
        "  continued paragraph of b\n\n"
        "1. other list\n"
        "2. two\n\n"
        "After"
    )
    tags = block_tags(text)
    assert [t.name for t in tags] == ["p", "ul", "ol", "p"]
    ul = tags[1]
    assert len(ul.find_all("li", recursive=False)) == 2
    assert ul.find("ol").find_all("li")[1].get_text() == "deeper"
    assert "continued paragraph of b" in ul.get_text()


def test_reference_links_resolve_across_blocks():
    text = (
        "See [the docs][docs] and [Docs].\n\n"
        "Middle paragraph.\n\n"
        '[docs]: https://docs.example.org/guide "The guide"\n'
    )
    tags = block_tags(text)
    assert [t.name for t in tags] == ["p", "p"]  # the definition makes no block
    links = tags[0].find_all("a")
    assert [a["href"] for a in links] == ["https://docs.example.org/guide"] * 2
    assert links[0]["title"] == "The guide"
    # a definition with a bad scheme is not a definition: the text stays text
    tags = block_tags("[x][bad]\n\n[bad]: javascript:alert(1)\n")
    assert tags[0].find("a") is None


def test_unclosed_fence_renders_as_code_so_far():
    blocks = keyed("Here:\n\n```python\ndef f(x):\n    return '<b>' + x", "k")
    assert len(blocks) == 2
    code = block_tags("Here:\n\n```python\ndef f(x):\n    return '<b>' + x")[1]
    assert code.name == "div" and code["class"] == ["code"] and code.find("div", class_="hl")
    assert code.pre.code.get_text() == "def f(x):\n    return '<b>' + x"
    assert code.pre.find("span") is None  # still streaming: plain, highlighted when closed
    assert "&lt;b&gt;" in blocks[1].html
    # just the opening line, and an opening line with a partial info string
    assert block_tags("```")[0].pre.code.get_text() == ""
    assert block_tags("```pyth")[0].pre.code.get_text() == ""
    # once closed it is highlighted
    closed = block_tags("```python\ndef f(x):\n    return x\n```")[0]
    assert closed.find("span", class_="k").get_text() == "def"
    assert closed.pre.code.get_text() == "def f(x):\n    return x\n"


def test_fence_closed_by_its_container_is_highlighted():
    tags = block_tags("- ```python\n  x = 1\n- next\n")
    assert tags[0].find("span", class_="n") is not None
    # but a fence still open at the end of the text, inside a list, is plain
    tags = block_tags("- ```python\n  x = 1")
    assert tags[0].find("div", class_="hl").find("span") is None


def test_linkify():
    text = (
        "See https://example.com/x?a=1&b=2, www.example.org and ops@example.com.\n"
        "Files like app.py, README.md and main.rs stay text; so do ftp://x.example "
        "and //x.example."
    )
    (p,) = block_tags(text)
    hrefs = [a["href"] for a in p.find_all("a")]
    assert hrefs == [
        "https://example.com/x?a=1&b=2",
        "http://www.example.org",
        "mailto:ops@example.com",
    ]
    assert [a.get_text() for a in p.find_all("a")] == [
        "https://example.com/x?a=1&b=2",
        "www.example.org",
        "ops@example.com",
    ]


def test_links_get_rel_and_target():
    text = "[a](https://a.example) <https://b.example> https://c.example [m](mailto:x@y.example)"
    (p,) = block_tags(text)
    links = p.find_all("a")
    assert len(links) == 4
    for a in links:
        assert a["rel"] == ["nofollow", "noopener", "noreferrer"]
        assert a["target"] == "_blank"


def test_non_web_links_stay_text():
    for text in [
        "[x](/relative/path)",
        "[x](#frag)",
        "[x](ftp://files.example/a)",
        "[x](//evil.example/a)",
        "[x](file:///etc/passwd)",
        "[x](https:javascript:alert(1))",
    ]:
        (p,) = block_tags(text)
        assert p.find("a") is None, text
        assert p.get_text() == text


def test_tables():
    text = "| Name | Count |\n|:-----|------:|\n| a `b` | 1 |\n| ~~c~~ | 22 |\n"
    (region,) = block_tags(text)
    # a wide table scrolls sideways in a region the keyboard can reach
    assert region.name == "div" and region["class"] == ["table-scroll"]
    assert region["tabindex"] == "0" and region["role"] == "region" and region["aria-label"]
    table = region.table
    assert [th.get_text() for th in table.thead.find_all("th")] == ["Name", "Count"]
    rows = table.tbody.find_all("tr")
    assert [[td.get_text() for td in tr.find_all("td")] for tr in rows] == [
        ["a b", "1"],
        ["c", "22"],
    ]
    assert rows[1].find("s").get_text() == "c"
    assert table.thead.find_all("th")[1]["style"] == "text-align:right"


def test_strikethrough():
    (p,) = block_tags("keep ~~drop~~ keep")
    assert p.find("s").get_text() == "drop"


def test_code_is_highlighted_with_classes_and_escaped():
    text = '```python\nif a < b and c > d:\n    print("</code><script>alert(1)</script>")\n```\n'
    (block,) = block_tags(text)
    assert block.name == "div" and block["class"] == ["code"]
    head, div = block.find_all("div", recursive=False)
    assert head.find(class_="lang").get_text() == "python"
    assert div["class"] == ["hl"] and div.pre["tabindex"] == "0"
    code = div.pre.code
    assert code.find("span", class_="k") is not None  # keyword
    assert code.find("span", class_="nb").get_text() == "print"
    assert code.get_text() == 'if a < b and c > d:\n    print("</code><script>alert(1)</script>")\n'
    assert div.find("script") is None
    for el in div.find_all(True):
        assert "style" not in el.attrs  # classes only, no inline styles
    assert div.find(class_="linenos") is None


def test_language_aliases_and_info_words():
    (div,) = block_tags("```JS title=x\nconst a = 1;\n```")
    assert div.find("span", class_="kd").get_text() == "const"


def test_unknown_language_is_plain_escaped_code():
    (block,) = block_tags("```no-such-lang\n<b>&amp;</b>\n```")
    assert block.find(class_="lang").get_text() == "no-such-lang"
    div = block.find("div", class_="hl")
    assert div.pre.code.get_text() == "<b>&amp;</b>\n"
    assert div.find("span") is None and div.find("b") is None


def test_inline_code_is_escaped():
    (p,) = block_tags("run `<script>alert(1)</script>` now")
    assert p.code.get_text() == "<script>alert(1)</script>"
    assert p.find("script") is None


def test_raw_html_is_shown_as_text():
    tags = block_tags("<div onclick=x>hi</div>\n\ntext <b>bold</b>")
    assert tags[0].name == "p" and tags[0].get_text() == "<div onclick=x>hi</div>"
    assert tags[1].find("b") is None and tags[1].get_text() == "text <b>bold</b>"


def test_images_become_links_never_img():
    (p,) = block_tags('![a chart *x*](https://img.example/c.png "Chart") and ![](https://img.example/d.png)')
    assert p.find("img") is None
    links = p.find_all("a")
    assert [a["href"] for a in links] == ["https://img.example/c.png", "https://img.example/d.png"]
    assert [a.get_text() for a in links] == ["a chart x", "https://img.example/d.png"]
    assert links[0]["title"] == "Chart"
    for a in links:
        assert a["rel"] == ["nofollow", "noopener", "noreferrer"] and a["target"] == "_blank"
    # an image inside a link: no <a> inside <a>
    (p,) = block_tags("[![logo](https://img.example/l.png)](https://site.example)")
    assert len(p.find_all("a")) == 1 and p.a["href"] == "https://site.example"
    assert p.a.get_text() == "logo"


def test_key_is_escaped_in_the_id():
    (block,) = keyed("x", 'a"b<c')
    assert block.id == 'a"b<c-0'
    wrapper = soup(block.html).div
    assert wrapper["id"] == 'a"b<c-0' and len(wrapper.attrs) == 2


def test_crlf_and_nul():
    blocks = keyed("a\r\nb\r\n\r\n- x\r\n- y\x00\r\n", "k")
    assert [soup(inner(b.html)).find(True).name for b in blocks] == ["p", "ul"]
    assert "\x00" not in joined(blocks)


# --------------------------------------------------------------------------- hostile input

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](java&#x09;script:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](  javascript:alert(1)  )",
    "[x](<javascript:alert(1)>)",
    "[x](java\tscript:alert(1))",
    "[x](\x01javascript:alert(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox)",
    "[x](file:///etc/passwd)",
    "![x](javascript:alert(1))",
    "![x](https://evil.example/x.png)",
    "![x](data:image/png;base64,iVBORw0KGgo=)",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    '<a href="javascript:alert(1)">x</a>',
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    '<iframe src="https://evil.example"></iframe>',
    "<object data=x></object><embed src=x>",
    "<style>body{display:none}</style>",
    '<form action="https://evil.example"><input name=a></form>',
    '<base href="https://evil.example/"><meta http-equiv="refresh" content="0;url=x">',
    "<javascript:alert(1)>",
    "<JAVASCRIPT:alert(1)>",
    "<vbscript:msgbox>",
    "javascript:alert(1) and data:text/html,<script>alert(1)</script>",
    "```\n</code><script>alert(1)</script>\n```",
    "```python\n</code></pre><script>alert(1)</script>\n```",
    "```\n</code><script>alert(1)</script>",
    '[x](https://a.example "a\\" onmouseover=\\"alert(1)")',
    "[x](https://a.example 'a' onmouseover='alert(1)')",
    '[x](https://a.example/" onclick="alert(1))',
    '<https://a.example/"onmouseover="alert(1)>',
    'https://a.example/"onmouseover="alert(1)',
    'www.example.com/"><script>alert(1)</script>',
    '```"><script>alert(1)</script>\ncode\n```',
    "~~~ <img src=x onerror=alert(1)>\ncode\n~~~",
    "[a]: javascript:alert(1)\n\n[a]",
    "[a]\n\n[a]: <javascript:alert(1)>",
    "| a | b |\n|---|---|\n| <script>alert(1)</script> | [x](javascript:alert(1)) |",
    "- <img src=x onerror=alert(1)>\n  - [x](javascript:alert(1))",
    "> <iframe src=x>\n> ![x](javascript:alert(1))",
    "`<script>alert(1)</script>`",
    "[<img src=x onerror=alert(1)>](https://a.example)",
    "[![x](https://a.example/i.png)](javascript:alert(1))",
    "<!-- <script>alert(1)</script> -->",
    "<div\nonclick=alert(1)>x</div>",
]

ALLOWED_TAGS = {
    "div", "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote",
    "pre", "code", "span", "a", "em", "strong", "s", "table", "thead", "tbody", "tr",
    "th", "td", "hr", "br", "button", "input", *MATHML_ELEMENTS,
}
ALLOWED_ATTRS = {"class", "id", "href", "title", "rel", "target", "style", "start",
                 "tabindex", "role", "aria-label", "type", "disabled", "checked",
                 "data-copy", "display", *MATHML_ATTRIBUTES}
FORBIDDEN_TAGS = ["script", "iframe", "svg", "img", "object", "embed", "style", "form",
                  "base", "meta", "link", "frame", "maction", "annotation-xml"]


def assert_inert(html: str) -> None:
    doc = soup(html)
    assert not doc.find_all(FORBIDDEN_TAGS), html
    for el in doc.find_all(True):
        assert el.name in ALLOWED_TAGS, (el.name, html)
        for name, value in el.attrs.items():
            assert not name.lower().startswith("on"), (name, html)
            assert name in ALLOWED_ATTRS, (name, html)
            if name == "style":
                assert re.fullmatch(r"text-align:(left|right|center)", value), html
            if name in MATHML_ATTRIBUTES or name == "display":
                assert el.name in MATHML_ELEMENTS, html
                assert re.fullmatch(r"[-+#.%a-zA-Z0-9 ]*", value), html
        if el.name == "a":
            assert re.match(r"(https?://|mailto:)", el["href"], re.I), html
            assert el["rel"] == ["nofollow", "noopener", "noreferrer"]
            assert el["target"] == "_blank"
        else:
            assert "href" not in el.attrs
        if el.name == "input":  # a task list's box, and nothing else
            assert el["type"] == "checkbox" and el.has_attr("disabled"), html
        if el.name == "button":  # a code block's Copy
            assert el.attrs == {"type": "button", "class": ["copy", "js-only"], "data-copy": "code"}
        if el.name in MATHML_ELEMENTS:  # MathML holds MathML only
            assert el.name == "math" or el.find_parent("math") is not None, html
            assert all(c.name in MATHML_ELEMENTS for c in el.find_all(True)), html
    for a in doc.find_all(href=True):
        assert re.match(r"(https?://|mailto:)", a["href"], re.I), html
    assert "<script" not in html.lower()
    assert "<img" not in html.lower()


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_input_is_inert(text):
    assert_inert(render(text))
    blocks = keyed(text, "k")
    assert_inert(joined(blocks))
    # and inside containers, and as a later block
    for wrapped in (f"- {text}", f"> {text}", f"intro\n\n{text}\n\noutro", f"1. a\n\n   {text}"):
        assert_inert(joined(keyed(wrapped, "k")))
    # every prefix (the text streams in)
    for n in range(1, len(text) + 1):
        assert_inert(joined(keyed(text[:n], "k")))


def test_hostile_specifics():
    (p,) = block_tags("[x](java&#x09;script:alert(1))")
    assert p.find("a") is None
    (p,) = block_tags('[x](https://a.example "a\\" onmouseover=\\"alert(1)")')
    assert p.a["title"] == 'a" onmouseover="alert(1)' and len(p.a.attrs) == 4
    (p,) = block_tags("![x](https://evil.example/x.png)")
    assert p.a["href"] == "https://evil.example/x.png" and p.a.get_text() == "x"
    (p,) = block_tags("<javascript:alert(1)>")
    assert p.get_text() == "<javascript:alert(1)>" and p.find("a") is None
    (p,) = block_tags("&lt;script&gt;")
    assert p.get_text() == "<script>"
    (div,) = block_tags('```"><script>alert(1)</script>\ncode\n```')
    assert div.pre.code.get_text() == "code\n"


# --------------------------------------------------------------------------- keyed == render


CORPUS = [SAMPLE, "x", "# t", "- a\n- b", "```py\nx", "a\n\n\n\nb\n\n", *HOSTILE]


@pytest.mark.parametrize("text", CORPUS)
def test_joined_blocks_are_render_with_wrappers(text):
    blocks = keyed(text, "k")
    # render(text) is the blocks' inner HTML, each followed by the "\n" that ends it
    assert render(text) == "".join(inner(b.html) + "\n" for b in blocks)
    for n, b in enumerate(blocks):
        assert b.html.startswith(f'<div class="md" id="k-{n}">') and b.html.endswith("</div>")


@pytest.mark.parametrize("text", CORPUS)
def test_no_text_between_or_around_blocks(text):
    nodes = list(soup(joined(keyed(text, "k"))).children)
    assert all(isinstance(n, Tag) and n.name == "div" for n in nodes)
    for n in nodes:  # and each wrapper holds exactly one element, nothing around it
        assert [type(c) for c in n.children] == [Tag]


def stream(text: str, seed: int = 7) -> list[str]:
    """Growing prefixes, as 50 ms flushes of a model would produce them."""
    rnd = random.Random(seed)
    out, pos = [], 0
    while pos < len(text):
        pos = min(len(text), pos + rnd.choice([1, 2, 3, 5, 8, 13, 21]))
        out.append(text[:pos])
    return out


def test_ids_stable_while_streaming():
    final = keyed(SAMPLE, "k")
    final_by_id = {b.id: b.html for b in final}
    uses_ref = {b.id for b in final if "tracker.example.org" in b.html}
    assert uses_ref == {"k-1"}  # the first paragraph uses a reference defined at the end
    for prefix in stream(SAMPLE):
        blocks = keyed(prefix, "k")
        assert [b.id for b in blocks] == [f"k-{n}" for n in range(len(blocks))]
        # (+1: the definition's line is a paragraph until it is a whole definition)
        assert len(blocks) <= len(final) + ("\n[issu" in prefix)
        # every block but the growing last one is already final (except the block with
        # the reference link: it changes again while its definition streams in)
        for b in blocks[:-1]:
            if b.id not in uses_ref:
                assert b.html == final_by_id[b.id], (prefix[-40:], b.id)


def apply_append(old_html: str, block_id: str, depth: int, fragment: str) -> str:
    """What the browser does with an append: parse, insert, serialize."""
    doc = soup(old_html)
    (target,) = doc.select(append_selector(block_id, depth))
    # parsed inside a <pre>: html.parser (not browsers) folds whitespace-only text
    # elsewhere, and a fragment of highlighted code can end with blank lines
    (wrapper,) = soup(f"<pre>{fragment}</pre>").contents
    for node in list(wrapper.contents):
        target.append(node)
    return str(doc)


def test_feed_simulation_sends_small_multiple_of_final_html():
    """Simulate the feed over a streamed answer with block_changes + the append path."""
    page: dict[str, str] = {}
    sent_bytes = appends = replaces = 0
    for prefix in stream(SAMPLE):
        blocks = keyed(prefix, "k")
        changed, new, gone = block_changes(page, blocks)
        for b in changed:
            found = append_at(page[b.id], b.html)
            if found is None:
                sent_bytes += len(b.html)
                replaces += 1
            else:
                depth, fragment = found
                assert appended(page[b.id], b.html) == fragment
                assert apply_append(page[b.id], b.id, depth, fragment) == str(soup(b.html))
                sent_bytes += len(fragment)
                appends += 1
            page[b.id] = b.html
        for b in new:
            sent_bytes += len(b.html)
            page[b.id] = b.html
        for id_ in gone:
            del page[id_]
    final = keyed(SAMPLE, "k")
    assert page == {b.id: b.html for b in final}
    final_size = len(joined(final))
    assert appends > replaces
    assert sent_bytes < 4 * final_size, (sent_bytes, final_size, appends, replaces)


def test_every_prefix_keeps_wrapper_invariants():
    text = SAMPLE[:1500]
    for n in range(1, len(text) + 1):
        blocks = keyed(text[:n], "k")
        html = joined(blocks)
        assert all(isinstance(x, Tag) for x in soup(html).children)
        assert render(text[:n]) == "".join(inner(b.html) + "\n" for b in blocks)


# --------------------------------------------------------------------------- block_changes


def test_block_changes():
    sent = {"k-0": "<a0>", "k-1": "<a1>", "k-2": "<a2>"}
    blocks = [Block("k-0", "<a0>"), Block("k-1", "<b1>"), Block("k-3", "<b3>")]
    changes = block_changes(sent, blocks)
    assert isinstance(changes, BlockChanges) and isinstance(changes, tuple)
    changed, new, gone = changes
    assert changed == [Block("k-1", "<b1>")]
    assert new == [Block("k-3", "<b3>")]
    assert gone == ["k-2"]
    assert sent == {"k-0": "<a0>", "k-1": "<a1>", "k-2": "<a2>"}  # not mutated
    assert block_changes({}, blocks) == ([], blocks, [])
    assert block_changes({"k-0": "<a0>"}, []) == ([], [], ["k-0"])
    assert block_changes({b.id: b.html for b in blocks}, blocks) == ([], [], [])


def test_block_changes_on_real_growth():
    a = keyed("Para one.\n\nPara tw", "k")
    b = keyed("Para one.\n\nPara two.\n\n- item", "k")
    changed, new, gone = block_changes({x.id: x.html for x in a}, b)
    assert [x.id for x in changed] == ["k-1"] and [x.id for x in new] == ["k-2"]
    assert gone == []
    # a definition arriving removes its paragraph-so-far
    a = keyed("[r][]\n\n[r]:", "k")
    b = keyed("[r][]\n\n[r]: https://r.example", "k")
    changed, new, gone = block_changes({x.id: x.html for x in a}, b)
    assert [x.id for x in changed] == ["k-0"] and new == [] and gone == ["k-1"]


# --------------------------------------------------------------------------- appended


def test_appended_growing_paragraph():
    old = keyed("Hello wor", "k")[0].html
    new = keyed("Hello world, and *more*", "k")[0].html
    assert appended(old, new) == "ld, and <em>more</em>"
    assert append_at(old, new) == (1, "ld, and <em>more</em>")
    assert append_selector("k-0", 1) == '[id="k-0"]>:last-child'


def test_appended_growing_code_block():
    old = keyed("```python\nx = 1\n", "k")[0].html
    new = keyed("```python\nx = 1\nif x < 2:", "k")[0].html
    assert append_at(old, new) == (4, "if x &lt; 2:")  # div.md > div.code > div.hl > pre > code


def test_appended_list_items():
    old = keyed("- a\n- b", "k")[0].html
    grow = keyed("- a\n- bc", "k")[0].html
    more = keyed("- a\n- bc\n- d", "k")[0].html
    assert append_at(old, grow) == (2, "c")  # into the last li
    assert append_at(grow, more) == (1, "<li>d</li>\n")  # into the ul
    nested = keyed("- a\n- bc\n  - x", "k")[0].html
    # a nested list is inserted into the last li
    assert append_at(grow, nested) == (2, "\n<ul>\n<li>x</li>\n</ul>\n")


def test_appended_table_rows():
    old = keyed("| a |\n|---|\n| 1 |", "k")[0].html
    new = keyed("| a |\n|---|\n| 1 |\n| 2 |", "k")[0].html
    depth, frag = append_at(old, new)
    assert frag == "<tr>\n<td>2</td>\n</tr>\n" and depth == 3  # region > table > tbody


def test_appended_none_when_not_an_append():
    p = keyed("Hello", "k")[0].html
    assert appended(p, p) is None
    assert appended(keyed("Hello world", "k")[0].html, p) is None  # shrank
    assert appended(p, keyed("Hallo there", "k")[0].html) is None  # changed inside
    assert appended(p, keyed("# Hello", "k")[0].html) is None  # other element
    # emphasis closing turns earlier text into markup: not an append
    assert appended(keyed("a *b", "k")[0].html, keyed("a *b*", "k")[0].html) is None
    # a fence closing gets highlighted: not an append
    assert appended(keyed("```py\nx = 1\n", "k")[0].html, keyed("```py\nx = 1\n```", "k")[0].html) is None
    # a tight list becoming loose rewrites the items
    assert appended(keyed("- a\n- b", "k")[0].html, keyed("- a\n- b\n\n- c", "k")[0].html) is None


def test_appended_pure_strings():
    assert appended("<p>ab</p>", "<p>abc</p>") == "c"
    assert append_at("<div><p>ab</p>\n</div>", "<div><p>ab</p>\n<p>c</p>\n</div>") == (0, "<p>c</p>\n")
    # the unbalanced split is skipped in favour of the balanced one
    assert append_at("<ul><li>a</li></ul>", "<ul><li>a</li><li>a</li></ul>") == (0, "<li>a</li>")
    assert appended("<p>a</p>", "<p>a</p><p>b</p>") is None  # after the root: no
    assert appended("text", "text more") is None  # no closing tags at all
    assert appended("<p>a<br>b</p>", "<p>a<br>b<br>c</p>") == "<br>c"
    assert appended("<p>a</p>", "<p>a</b></p>") is None


# --------------------------------------------------------------------------- growing

import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import app.markdown as markdown_module  # noqa: E402
from app.markdown import Pace, Rendering  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LONG_ANSWER = (ROOT / "tests" / "fixtures" / "long_answer.md").read_text(encoding="utf-8")
GRID = markdown_module.REVEAL_STEP
GROWING = [markdown_module.PACE]  # the pace of this module's growing renders (`no_grid` sets another)
_RENDERINGS: dict[tuple[str, Pace], Rendering] = {}


def grown(text: str, key: str = "k") -> list[Block]:
    """The growing render of `text`, going on from the last one of `key` at this pace (as the
    feed's renders of an answer do)."""
    pace = GROWING[0]
    rendering = _RENDERINGS.get((key, pace))
    if rendering is None:
        rendering = _RENDERINGS[key, pace] = Rendering(key, pace)
    return rendering.blocks(text, growing=True)


def grown_html(text: str) -> str:
    """`render(text, growing=True)` at this pace."""
    return render(text, growing=True, pace=GROWING[0])


@pytest.fixture
def no_grid():
    """Growing renders without the reveal grid: each prefix shows all it can."""
    GROWING[0] = Pace(reveal=1)
    yield
    GROWING[0] = markdown_module.PACE


def benchmark():
    spec = importlib.util.spec_from_file_location(
        "markdown_stream", ROOT / "benchmarks" / "markdown_stream.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("text", [*CORPUS, LONG_ANSWER])
def test_growing_false_is_the_final_render(text):
    assert keyed(text, "k", growing=False) == keyed(text, "k")
    assert render(text, growing=False) == render(text)


def test_final_render_keeps_the_edge_as_written():
    # growing=False renders what is there, unfinished syntax included
    assert render("He said **bol") == "<p>He said **bol</p>\n"
    assert render("a `cod") == "<p>a `cod</p>\n"
    assert render("Title\n-") == "<h2>Title</h2>\n"
    assert render("| a | b |\n|--") == "<p>| a | b |\n|--</p>\n"
    assert render("```python\nx = 1\ny =").endswith(
        '<div class="hl"><pre tabindex="0"><code>x = 1\ny =</code></pre></div></div>\n'
    )
    link = render("see [docs](https://exa")
    assert "[docs](" in link and 'href="https://exa"' in link  # linkified as it stands


def test_growing_complete_text_is_the_final_render(no_grid):
    # nothing is unfinished at the end of these: the growing render is the final one
    for text in (SAMPLE, LONG_ANSWER, "# t", "- a\n- b\n", "para\n\n```py\nx = 1\n```\n"):
        assert grown(text) == keyed(text, "k"), text


def test_growing_edge_emphasis_and_code_are_closed(no_grid):
    cases = {
        "He said **bol": "<p>He said <strong>bol</strong></p>",
        "a *it": "<p>a <em>it</em></p>",
        "a _it": "<p>a <em>it</em></p>",
        "a ~~str": "<p>a <s>str</s></p>",
        "a `cod": "<p>a <code>cod</code></p>",
        "a ``co`d": "<p>a <code>co`d</code></p>",
        "a ***bi": "<p>a <em><strong>bi</strong></em></p>",
        "**bold *it": "<p><strong>bold <em>it</em></strong></p>",
        "**bold `x": "<p><strong>bold <code>x</code></strong></p>",
        "# A **big": "<h1>A <strong>big</strong></h1>",
        "- item **b": "<ul>\n<li>item <strong>b</strong></li>\n</ul>",
        "> quote *i": "<blockquote>\n<p>quote <em>i</em></p>\n</blockquote>",
        # a delimiter run at the very end waits (opener or closer: the next character says)
        "He said **": "<p>He said</p>",
        "He said **bold*": "<p>He said <strong>bold</strong></p>",
        "2 * 3 = 6 and a*": "<p>2 * 3 = 6 and a</p>",
        "snake_case_name": "<p>snake_case_name</p>",
    }
    for text, html in cases.items():
        (block,) = grown(text)
        assert inner(block.html) == html, text
    # the close arriving is an append inside the element
    for a, b, fragment in [
        ("He said **bol", "He said **bold**", "d"),
        ("a `cod", "a `code`", "e"),
        ("a ~~str", "a ~~strike~~", "ike"),
        ("He said **bol", "He said **bold *and*", "d <em>and</em>"),
    ]:
        assert appended(grown(a)[0].html, grown(b)[0].html) == fragment, (a, b)
    # text after the close, in the same flush: only the last block changes, and it is small
    old, new = grown("He said **bol"), grown("He said **bold** and")
    assert [b.id for b in old] == [b.id for b in new] == ["k-0"]
    assert inner(new[0].html) == "<p>He said <strong>bold</strong> and</p>"


def test_growing_edge_links_wait_until_whole(no_grid):
    for text, html in [
        ("see [link text", "<p>see</p>"),
        ("see [link text]", "<p>see</p>"),
        ("see [link text](", "<p>see</p>"),
        ("see [link text](http://exa", "<p>see</p>"),
        ("see [link text](<https://a.example", "<p>see</p>"),
        ('see [t](https://a.example "tit', "<p>see</p>"),
        ("see ![alt](https://img.exa", "<p>see</p>"),
        ("see !", "<p>see</p>"),
        ("see <https://exa", "<p>see</p>"),
        ("see https://exa", "<p>see</p>"),  # linkify: its href would change as it grows
        ("see www.exa", "<p>see</p>"),
        ("mail ops@exa", "<p>mail</p>"),
        ("see h", "<p>see</p>"),  # may be the start of https://
        ("a \\", "<p>a</p>"),
        ("a &am", "<p>a</p>"),
    ]:
        blocks = grown(text)
        assert [inner(b.html) for b in blocks] == [html], text
    # the whole link then comes as one append
    old = grown("see [link text](http://exa")[0].html
    new = grown("see [link text](http://example.com/a) and")[0].html
    depth, fragment = append_at(old, new)
    assert depth == 1 and fragment.startswith(' <a href="http://example.com/a"')
    # a bracket that is no link shows once that is clear
    assert inner(grown("arr[0] = 1")[0].html) == "<p>arr[0] = 1</p>"
    # a link far back (given up waiting for) shows as text
    long_label = "see [" + "word " * 100
    assert "word" in grown(long_label)[0].html


def test_growing_edge_block_syntax_waits(no_grid):
    assert [inner(b.html) for b in grown("para\n\n-")] == ["<p>para</p>"]
    assert [inner(b.html) for b in grown("Title\n-")] == ["<p>Title</p>"]  # not setext yet
    for tail in ["#", "##", "1.", "1", ">", "```", "~~", "--", "* ", "|", "|--", "- ["]:
        assert [inner(b.html) for b in grown(f"para\n\n{tail}")] == ["<p>para</p>"], tail
    assert [inner(b.html) for b in grown("para\n\n---")] == ["<p>para</p>", "<hr />"]
    # a list item's marker without its text yet
    assert inner(grown("- a\n- ")[0].html) == "<ul>\n<li>a</li>\n</ul>"
    assert inner(grown("- a\n  - [x](https://x.exa")[0].html) == "<ul>\n<li>a</li>\n</ul>"
    # a heading shows once it has text
    assert inner(grown("para\n\n## Ti")[1].html) == "<h2>Ti</h2>"


def test_growing_edge_tables(no_grid):
    head = "| a | b |\n|:--|--:|\n"
    assert grown("| a | b |") == []  # maybe a table's header row
    assert grown("| a | b |\n|:--|--") == []  # its delimiter row is being typed
    table = grown(head)[0].html
    assert "<th style=\"text-align:left\">a</th>" in table and "<tbody>" not in table
    assert grown(head + "| 1 | 2") == grown(head)  # a row shows once it is complete
    assert grown(head + "| 1 | 2 |\n| 3") == grown(head + "| 1 | 2 |")
    depth, fragment = append_at(table, grown(head + "| 1 | 2 |")[0].html)
    assert depth == 2 and fragment.startswith("<tbody>")  # region > table
    two = grown(head + "| 1 | 2 |\n| 3 | 4 |")[0].html
    assert append_at(grown(head + "| 1 | 2 |")[0].html, two) == (
        3, '<tr>\n<td style="text-align:left">3</td>\n<td style="text-align:right">4</td>\n</tr>\n'
    )


def test_growing_edge_fences(no_grid):
    assert grown("intro\n\n```pyth") == grown("intro")  # the info string is being typed
    empty = grown("```python\n")[0].html
    one = grown("```python\nx = 1\ny =")[0].html  # whole lines only, highlighted
    assert '<span class="n">x</span>' in one and "y" not in BeautifulSoup(one, "html.parser").code.get_text()
    assert append_at(empty, one)[0] == 4  # div.md > div.code > div.hl > pre > code
    two = grown("```python\nx = 1\ny = 2\n``")[0].html  # a closing fence arriving waits
    assert append_at(one, two) == (4, '<span class="n">y</span> <span class="o">=</span> '
                                      '<span class="mi">2</span>\n')
    closed = "```python\nx = 1\ny = 2\n```"
    assert grown(closed) == keyed(closed, "k")  # its closing changes nothing
    assert grown(closed)[0].html == two
    # no language (or an unknown one): plain, and partial lines show
    assert inner(grown("```\nx = 1\ny =")[0].html).endswith("y =</code></pre></div></div>")
    # inside a list item too
    assert grown("- step:\n  ```bash\n  make te")[0].html == grown("- step:\n  ```bash\n")[0].html


def test_growing_edge_reference_definition_waits(no_grid):
    before = grown("[a][r] and more\n\n")
    for tail in ["[", "[r", "[r]", "[r]:", "[r]: https://r.exa", '[r]: https://r.example "T']:
        assert grown(f"[a][r] and more\n\n{tail}") == before, tail
    done = grown('[a][r] and more\n\n[r]: https://r.example "T"\n')
    assert 'href="https://r.example"' in done[0].html


def test_growing_renders_within_a_grid_step_are_equal():
    text = LONG_ANSWER[: 5 * GRID]
    # less than one step: what there is (an answer's first words show with its first write)
    assert [b.html for b in grown("Hello")] == ['<div class="md" id="k-0"><p>Hello</p></div>']
    for n in range(GRID, len(text), GRID):
        first = grown(text[:n])
        for m in range(n + 1, n + GRID):
            assert grown(text[:m]) == first


def test_growing_grid_turns_a_close_into_appends():
    # at one grid point `**bol` is open; by the next its close and more text arrived
    text = ("lorem ipsum " * 10)[: GRID - 5] + "**bol" + "d** and then more words " * 6
    a, b, c = (grown(text[:n])[0].html for n in (GRID, 2 * GRID, 3 * GRID))
    assert inner(a).endswith("<strong>bol</strong></p>")
    assert append_at(a, b) == (2, "d")  # this render stops at the close
    depth, fragment = append_at(b, c)  # and the next adds what follows, after it
    assert depth == 1 and fragment.startswith(" and then more words")
    # a list item that ends while the next starts: the same
    items = "".join(f"- item number {i} has `code` and **bold** text\n" for i in range(8))
    renders = [grown(items[:n])[0].html for n in range(GRID, len(items), GRID)]
    for old, new in zip(renders, renders[1:]):
        assert old == new or append_at(old, new) is not None, (old[-80:], new[-80:])


STREAMED = [SAMPLE, LONG_ANSWER]


@pytest.mark.parametrize("text", STREAMED, ids=["sample", "long_answer"])
def test_growing_stream_is_safe_and_keyed(text):
    final = keyed(text, "k")
    final_by_id = {b.id: b.html for b in final}
    uses_ref = {  # blocks whose links come from a definition at the very end
        b.id for b in final
        if "tracker.example.org" in b.html or "docs.example.com/api/rate-limits" in b.html
    }
    checked: set[str] = set()
    for prefix in stream(text, seed=3):
        blocks = grown(prefix)
        assert [b.id for b in blocks] == [f"k-{n}" for n in range(len(blocks))]
        assert len(blocks) <= len(final)
        assert grown_html(prefix) == "".join(inner(b.html) + "\n" for b in blocks)
        for b in blocks:
            if b.html not in checked:  # each block's html once (most repeat)
                checked.add(b.html)
                assert_inert(b.html)
                (node,) = soup(b.html).children
                assert isinstance(node, Tag) and [type(c) for c in node.children] == [Tag]
        # every block but the last is already final
        for b in blocks[:-1]:
            if b.id not in uses_ref:
                assert b.html == final_by_id[b.id], (prefix[-60:], b.id)


@pytest.mark.parametrize("text", HOSTILE)
def test_growing_hostile_prefixes_are_inert(text, no_grid):
    for wrapped in (text, f"- {text}", f"**{text}", f"[{text}](https://a.example)"):
        for n in range(1, len(wrapped) + 1):
            assert_inert(joined(grown(wrapped[:n])))


@pytest.mark.parametrize("text", HOSTILE)
def test_growing_hostile_prefixes_are_inert_on_the_grid(text):
    intro = "An intro paragraph, with a few words in it. " * 2
    for wrapped in (f"{intro}{text}", f"- {intro}\n- {text}", f"> {intro}{text}"):
        for n in range(len(intro), len(wrapped) + 1):
            assert_inert(joined(grown(wrapped[:n])))


def test_growing_feed_simulation_applies_appends_in_the_dom():
    """The feed over a streamed answer with growing renders: what the page holds after
    each append is the new render, and nearly everything is an append."""
    page: dict[str, str] = {}
    appends = replaces = 0
    for prefix in [*stream(SAMPLE, seed=11), None]:
        blocks = grown(prefix) if prefix is not None else keyed(SAMPLE, "k")
        changed, new, gone = block_changes(page, blocks)
        for b in changed:
            found = append_at(page[b.id], b.html)
            if found is None:
                replaces += 1
            else:
                depth, fragment = found
                assert apply_append(page[b.id], b.id, depth, fragment) == str(soup(b.html))
                appends += 1
            page[b.id] = b.html
        for b in new:
            page[b.id] = b.html
        for id_ in gone:
            del page[id_]
    assert page == {b.id: b.html for b in keyed(SAMPLE, "k")}
    # re-sent: only the paragraph whose link is defined at the very end, when it arrives
    assert replaces <= 1 and appends > 50, (appends, replaces)


def test_byte_ratio_of_the_long_answer_at_10_characters_a_flush():
    bench = benchmark()
    assert bench.load_answer() == LONG_ANSWER
    run = bench.simulate(LONG_ANSWER, 10)
    assert run.ratio <= 1.5, (run.feed.sent, run.final_bytes, run.feed.appends, run.feed.replaces)
    assert run.feed.replaces <= 2
    # the same stream rendered as final text on every flush: far more
    assert bench.simulate(LONG_ANSWER, 10, growing=False).ratio > 3


def test_an_empty_link_destination_renders_no_href():
    from app.markdown import render as _render
    html = _render("[x]() and [y]( )")
    assert 'href=""' not in html and "<a>x</a>" in html


# --------------------------------------------------------------------------- math, tasks, code

MATH_SAMPLE = r"""## Energy and area

Einstein's $E = mc^2$ ties mass to energy, and \(a^2 + b^2 = c^2\) is Pythagoras. A ticket costs $5 and a meal $10, which is money and stays text.

$$\int_0^1 x^2\,dx = \frac{1}{3}$$

The same sum in brackets, over three lines:

\[
\sum_{k=1}^{n} k = \frac{n(n+1)}{2}
\]

- [x] derive the formula
- [ ] check it numerically
- [ ] write it up with \(n = 10\)

> **Note:** a quoted remark, with $\alpha$ in it.

| n | sum |
|---|----:|
| 10 | $55$ |
| 100 | 5050 |

```python
def total(n: int) -> int:
    return n * (n + 1) // 2
```
"""


def maths(html: str) -> list[Tag]:
    return soup(html).find_all("math")


def test_math_arrives_as_mathml():
    doc = soup(render(MATH_SAMPLE))
    inline = doc.find_all("math", attrs={"display": "inline"})
    display = doc.find_all("math", attrs={"display": "block"})
    assert len(inline) == 5 and len(display) == 2
    assert inline[0].find("msup").get_text() == "c2"  # $E = mc^2$
    for m in display:  # each display formula in its own focusable region, scrolling sideways
        region = m.parent
        assert region.name == "div" and region["class"] == ["math-display"]
        assert region["tabindex"] == "0" and region["role"] == "region" and region["aria-label"]
    assert display[0].find("mspace")["width"] == "0.167em"  # the `\,` reached LaTeX
    assert display[1].find("mfrac") is not None and display[1].find("munderover") is not None
    assert "costs $5 and a meal $10, which" in doc.get_text()
    assert_inert(render(MATH_SAMPLE))
    # every block holds one element, as ever
    assert [t.name for t in block_tags(MATH_SAMPLE)] == [
        "h2", "p", "div", "p", "div", "ul", "blockquote", "div", "div"]


def test_math_delimiters():
    for text, display in [
        ("$x^2$", "inline"), ("\\(x^2\\)", "inline"), ("a $$x^2$$ b", "block"),
        ("a \\[x^2\\] b", "block"), ("$$\nx^2\n$$", "block"), ("\\[\nx^2\n\\]", "block"),
        ("$$ x^2 $$", "block"), ("- $x^2$", "inline"), ("> \\[x^2\\]", "block"),
        ("$a\\$b$", "inline"),
    ]:
        (m,) = maths(render(text))
        assert m["display"] == display, text
    # inside a paragraph, display math is phrasing content: no <div> inside the <p>
    (p,) = block_tags("a $$x^2$$ b")
    assert p.name == "p" and p.find("div") is None and p.find("span", class_="math-display")


def test_money_and_code_stay_text():
    for text in ["It costs $5 and $10.", "from $3.50 to $4", "$ x $", "pay $5, get $", "\\$x\\$",
                 "a $ and a $", "`$x$` in code", "1$x$2", "\\(\\)", "$$\n\n$$"]:
        assert not maths(render(text)), text
    assert render("It costs $5 and $10.") == "<p>It costs $5 and $10.</p>\n"
    (block,) = block_tags("```\n$x$ \\(y\\)\n```")
    assert block.find("math") is None and block.code.get_text() == "$x$ \\(y\\)\n"


HOSTILE_LATEX = [
    r"\href{javascript:alert(1)}{x}",
    r"\href{data:text/html,<script>alert(1)</script>}{x}",
    r"\text{<script>alert(1)</script>}",
    r"\text{<img src=x onerror=alert(1)>}",
    r"\text{</math><script>alert(1)</script>}",
    r"\mathrm{<svg onload=alert(1)>}",
    r"\text{<!-- x --> <![CDATA[ y ]]>}",
    r"\text{&lt;script&gt;alert(1)&lt;/script&gt;}",
    r"\style{background:url(javascript:alert(1))}{x}",
    r"\class{x onmouseover=alert(1)}{y}",
    r"\color{javascript:alert(1)}{x}",
    r"\color{red\" onclick=\"alert(1)}{x}",
    r"\mathcolor{red}{x} \colorbox{red}{y}",
    r"\htmlId{a}{b} \cssId{a}{b} \toggle{a}{b}\endtoggle",
    r"\operatorname{<a href=javascript:alert(1)>x</a>}",
]


@pytest.mark.parametrize("latex", HOSTILE_LATEX)
def test_hostile_latex_stays_inert(latex):
    for text in (f"${latex}$", f"$${latex}$$", f"\\({latex}\\)", f"a \\[{latex}\\] b",
                 f"$$\n{latex}\n$$", f"\\[\n{latex}\n\\]", f"- [ ] ${latex}$", f"| ${latex}$ |\n|---|"):
        html = render(text)
        assert_inert(html)
        doc = soup(html)
        assert not doc.find_all(href=True) and "javascript" not in str(doc.find_all("math"))
        for el in doc.find_all(True):
            assert not any(a.startswith("on") for a in el.attrs), html
        for m in doc.find_all("math"):
            for el in m.find_all(True):
                assert not {"style", "class", "href", "id"} & set(el.attrs), html
        assert_inert(joined(keyed(text, "k")))


def test_math_errors_and_huge_inputs_show_the_source():
    from app.markdown import MATH_MAX
    for latex in ["\\frac{", "\\sqrt" * 50, "x^2^3", "{" * 200 + "x" + "}" * 200,
                  "a" * (MATH_MAX + 1), "\\begin{matrix}" + "a&" * 800]:
        doc = soup(render(f"$${latex}$$"))
        assert doc.find("math") is None, latex[:40]
        source = doc.find("code", class_="math-source")
        assert source is not None and source.get_text() == latex.strip(), latex[:40]
    # a formula within the bound renders, and its MathML is bounded by a small multiple of it
    big = render("$$" + "x+" * (MATH_MAX // 2 - 1) + "x$$")
    assert soup(big).find("math") is not None and len(big) < 64 * 1024
    # many formulas: the output grows linearly with the input (each one is bounded)
    many = render(" ".join(f"${i}x$" for i in range(500)))
    assert len(maths(many)) == 500 and len(many) < 500 * 200


def test_math_openers_without_closers_stay_linear():
    # a text full of openers that never close: each closer search is bounded, so the
    # parse looks at a bounded number of characters per opener (the text stays text)
    for opener in ["\\(", "\\[", "$"]:
        text = (opener + "x ") * 5000
        html = render(text)
        assert not maths(html) and len(html) < 2 * len(text)
        assert not maths(joined(grown(text)))


def test_task_lists_are_disabled_check_boxes():
    (ul,) = block_tags("- [ ] to do\n- [x] done\n- [X] also done\n  - [ ] nested\n- plain\n")
    assert ul["class"] == ["tasks"]
    items = ul.find_all("li", recursive=False)
    assert [li.get("class") for li in items] == [["task"], ["task"], ["task"], None]
    boxes = ul.find_all("input")
    assert len(boxes) == 4
    assert all(b["type"] == "checkbox" and b.has_attr("disabled") and b.get("aria-label") for b in boxes)
    assert [b.has_attr("checked") for b in boxes] == [False, True, True, False]
    assert items[0].get_text(strip=True) == "to do" and "[" not in items[1].get_text()
    # not tasks: no text after the box, outside a list, in code
    for text in ["- [ ]", "- [x]", "[ ] a", "- `[ ] a`", "- [link](https://a.example) b"]:
        assert "<input" not in render(text), text
    assert markdown_module.task_counts("- [x] a\n- [ ] b\n- [x] c\n* [ ] d\n1. [x] e\n") == (3, 5)
    assert markdown_module.task_counts("no tasks\n```\n- [x] code\n```") == (0, 0)


def test_task_boxes_leave_the_inline_cache_alone():
    # the inline children are cached by content and shared: a task item must not change them
    assert "<input" in render("- [ ] same words")
    assert render("[ ] same words") == "<p>[ ] same words</p>\n"
    assert render("- [ ] same words") == render("- [ ] same words")
    assert render("- [ ] same words").count("<input") == 1


def test_code_blocks_have_a_language_and_a_copy_button():
    (block,) = block_tags("```python\nprint(1)\n```")
    head = block.find("div", class_="code-head")
    assert head.find(class_="lang").get_text() == "python"
    button = head.find("button")
    assert button.attrs == {"type": "button", "class": ["copy", "js-only"], "data-copy": "code"}
    assert button.get_text() == "Copy"
    assert block.pre["tabindex"] == "0"  # a long line scrolls with the keyboard
    assert list(block.children)[-1]["class"] == ["hl"]  # the code last: a streaming fence grows at the end
    (indented,) = block_tags("    x = 1")
    assert indented.find(class_="lang").get_text() == "" and indented.find("button")
    (odd,) = block_tags('```"><b>' + "x" * 100 + "\ncode\n```")
    assert odd.find("b") is None and len(odd.find(class_="lang").get_text()) <= 32


def test_growing_math_waits_for_its_close(no_grid):
    for text, html in [
        ("Energy $E = mc", "<p>Energy</p>"),
        ("Energy $", "<p>Energy</p>"),
        ("Energy \\(a +", "<p>Energy</p>"),
        ("Energy \\[a +", "<p>Energy</p>"),
        ("Energy $$a +", "<p>Energy</p>"),
        ("Energy $$a + b$", "<p>Energy</p>"),
    ]:
        assert [inner(b.html) for b in grown(text)] == [html], text
    # a display block waits whole, then comes as one new block
    assert [inner(b.html) for b in grown("intro\n\n$$\n\\int_0^1 x")] == ["<p>intro</p>"]
    assert [inner(b.html) for b in grown("intro\n\n\\[\n\\int_0^1 x\n\\")] == ["<p>intro</p>"]
    assert grown("intro\n\n$$\nx\n$$")[1] == keyed("intro\n\n$$\nx\n$$", "k")[1]
    # the close arriving is an append after the text before it
    old = grown("Energy $E = mc")[0].html
    new = grown("Energy $E = mc^2$ and more")[0].html
    depth, fragment = append_at(old, new)
    assert depth == 1 and fragment.startswith(' <math display="inline">') and fragment.endswith(" and more")
    # money is no math: a `$` without its close waits only so long, then shows as text
    money = "It costs $10 a month" + ", which is fine" * 20
    assert "$10" in grown(money)[0].html
    assert "$10" not in grown("costs $5 and $10")[0].html  # (it may still be math)
    # math holding `*`, `[` or "`" opens no emphasis, link or code at the edge
    for text in ["$a*b$ and", "$[0, 1)$ and", "$`x$ and", "\\(a_1 * b_1\\) and"]:
        assert grown(text) == keyed(text, "k"), text


def test_growing_task_list(no_grid):
    assert grown("- [") == [] and grown("- [ ]") == [] and grown("- [x") == []
    one = grown("- [ ] wri")[0].html
    assert "<input" in one and append_at(one, grown("- [ ] write it")[0].html) == (2, "te it")
    two = grown("- [ ] write it\n- [x] do")[0].html
    assert append_at(grown("- [ ] write it")[0].html, two)[0] == 1


def test_growing_math_sample_is_safe_and_keyed():
    test_growing_stream_is_safe_and_keyed(MATH_SAMPLE)


def test_growing_complete_math_sample_is_the_final_render(no_grid):
    assert grown(MATH_SAMPLE) == keyed(MATH_SAMPLE, "k")


def test_growing_feed_over_math_sends_appends():
    """The feed over the math sample: the page ends equal to the final render, and the
    new block kinds (math, tasks, wrapped tables and code) grow by appends."""
    page: dict[str, str] = {}
    appends = replaces = sent = 0
    for prefix in [*stream(MATH_SAMPLE, seed=5), None]:
        blocks = grown(prefix) if prefix is not None else keyed(MATH_SAMPLE, "k")
        changed, new, gone = block_changes(page, blocks)
        for b in changed:
            found = append_at(page[b.id], b.html)
            if found is None:
                replaces += 1
                sent += len(b.html)
            else:
                depth, fragment = found
                assert apply_append(page[b.id], b.id, depth, fragment) == str(soup(b.html))
                appends += 1
                sent += len(fragment)
            page[b.id] = b.html
        for b in new:
            page[b.id] = b.html
            sent += len(b.html)
        for id_ in gone:
            del page[id_]
    assert page == {b.id: b.html for b in keyed(MATH_SAMPLE, "k")}
    assert replaces <= 1 and appends > 5, (appends, replaces)
    assert sent < 1.5 * len(joined(keyed(MATH_SAMPLE, "k"))) + 60 * (appends + replaces)


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PIECES = ["word", "more words", "$x^2$", "\\(a+b\\)", "$5", "$10 and", "$$y$$", "**bold**",
          "`c$d`", "\\,", "a*b", "$a*b$", "\\[z\\]", "[l](https://a.example)", "\\$", "$", "\\("]
BLOCKS = [
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map(" ".join),
    st.sampled_from(["$$\n\\int_0^1 x\\,dx\n$$", "\\[\n\\frac{a}{b}\n\\]", "> quoted $q$",
                     "- [ ] to do $t$\n- [x] done", "| a | $b$ |\n|---|---|\n| 1 | $2$ |",
                     "```python\nx = '$y$'\n```"]),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(*BLOCKS), min_size=1, max_size=5), st.sampled_from([1, GRID]))
def test_growing_math_property(blocks, step):
    """Any mix of math, money and the new block kinds, with and without the reveal grid:
    every growing render is inert and keyed like the final one, and every block before
    the last is already final."""
    GROWING[0] = Pace(reveal=step)
    try:
        check_growing(blocks)
    finally:
        GROWING[0] = markdown_module.PACE


def check_growing(blocks: list[str]) -> None:
    text = "\n\n".join(blocks) + "\n"
    final = keyed(text, "k")
    assert_inert(joined(final))
    final_by_id = {b.id: b.html for b in final}
    for n in range(1, len(text) + 1):
        got = grown(text[:n])
        assert grown_html(text[:n]) == "".join(inner(b.html) + "\n" for b in got)
        assert_inert(joined(got))
        for b in got[:-1]:
            assert b.html == final_by_id.get(b.id), (text[:n], b.id)


# --------------------------------------------------------------------------- slow streams

_TAG = re.compile(r"<[^>]+>")


def _visible(blocks) -> str:
    return html_lib.unescape(_TAG.sub("", "".join(b.html for b in blocks)))


def _stream(text: str, step: int, every: float, rendering: Rendering, start: float = 0.0, begin: int = 0):
    """`text` grown `step` characters at a time, one render each `every` seconds (the clock
    given, not read): each render's blocks, with the prefix it was of."""
    now = start
    for end in range(begin + step, len(text) + step, step):
        now += every
        yield text[:end], rendering.blocks(text[:end], growing=True, now=now)


def test_a_slow_stream_shows_all_it_can_at_each_render():
    # a word every 100 ms (~60 characters a second, under SLOW grid steps): each render is
    # the render with no grid of what came, not the last grid point's
    rendering, matched, renders = Rendering("s"), 0, 0
    for prefix, blocks in _stream(LONG_ANSWER[:3000], 6, 0.1, rendering):
        renders += 1
        whole = [b.html for b in keyed(prefix, "s", growing=True, pace=Pace(reveal=1))]
        matched += [b.html for b in blocks] == whole
    # the replay from the last render may stop one at a close it showed open (3 in growing.py)
    assert matched >= 0.9 * renders, (matched, renders)


def test_a_fast_stream_keeps_the_grid():
    # 6 characters every 2 ms (3,000 a second, over SLOW grid steps): the grid's renders, as a
    # fresh one makes them
    pace = Pace(cadence=0)  # the cadence is unlike a fresh render on purpose (test_markdown_linear)
    rendering = Rendering("f", pace)
    for prefix, blocks in _stream(LONG_ANSWER[:3000], 6, 0.002, rendering):
        assert [b.html for b in blocks] == [b.html for b in keyed(prefix, "f", growing=True, pace=pace)], prefix[-60:]


def _words(visible: str) -> str:
    """Visible text without the brackets of reference links (`[text][label]` -> `text`)."""
    return re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", visible).rstrip()


def test_a_stream_that_slows_and_speeds_never_takes_back_what_it_showed():
    # slow, fast, slow ...: what the page shows only grows, and ends as the final render
    rendering, shown, now, at = Rendering("m"), "", 0.0, 0
    text = LONG_ANSWER
    # (characters, seconds apart): slow phases under SLOW grid steps a second, fast ones over it
    phases = [(5, 0.1), (9, 0.002), (3, 0.08), (40, 0.001), (7, 0.12)] * 12
    for step, every in phases:
        end = min(len(text), at + step * 30)
        for prefix, blocks in _stream(text[:end], step, every, rendering, now, at):
            seen = _visible(blocks)
            # (but a full reference link's brackets: `[API reference][api-docs]` shows as it is
            # written until its definition comes, often last, and then as the link it is)
            assert len(_words(seen)) >= len(_words(shown)), (prefix[-60:], shown[-60:], seen[-60:])
            shown = seen
        now += every * 30
        at = end
        if at >= len(text):
            break
    assert [b.html for b in rendering.blocks(text)] == [b.html for b in keyed(text, "m")]


def test_without_a_clock_a_growing_render_keeps_the_grid():
    # a page's own render (no clock given) is the grid's, however little the text grew
    rendering = Rendering("g")
    for end in range(41, 400, 3):
        grid = [b.html for b in rendering.blocks(LONG_ANSWER[:end], growing=True)]
        assert grid == [b.html for b in keyed(LONG_ANSWER[:end], "g", growing=True)]


def test_one_text_renders_the_same_whatever_the_time():
    # the feed and a page catching up render one text in one dispatch, at two moments: the
    # page then takes the feed's next appends, so both must be the same blocks (a reload in
    # the middle of a slow answer lost the words between the two cuts)
    text = ("Short paragraphs of plain words. " * 3 + "\n\n") * 20
    rendering = Rendering("t")
    for end in range(40, 1234, 40):  # a fast stream: the grid
        rendering.blocks(text[:end], growing=True, now=end / 4000)
    first = [b.html for b in rendering.blocks(text[:1234], growing=True, now=0.31)]
    for now in (5.0, 10.0):  # asked again later, when the pace measured would be a slow one's
        assert [b.html for b in rendering.blocks(text[:1234], growing=True, now=now)] == first
    # and a slow stream's render of the text after it, the same again however fast it is asked
    slow = [b.html for b in rendering.blocks(text[:1240], growing=True, now=11.0)]
    assert [b.html for b in rendering.blocks(text[:1240], growing=True, now=11.001)] == slow
