"""Safe Markdown -> HTML, split into keyed top-level blocks for the live feed.

Public API
----------
``render(text, growing=False) -> str``
    The whole Markdown as HTML (what ``MarkdownIt.render`` gives: every top-level block
    ends with ``"\\n"``). For places that need no ids (messages, skill bodies ...).
``keyed(text, key, growing=False) -> list[Block]``
    The same HTML cut into top-level blocks. Block ``n`` (from 0) has id ``f"{key}-{n}"``
    and its ``html`` is one wrapper element carrying that id::

        <div class="md" id="{key}-{n}">{the block's HTML}</div>

    with the ``"\\n"`` that ends the block dropped, so that joining the blocks leaves no
    text between them (htmx's upsert drops text nodes between elements). Precisely::

        "".join(b.html for b in keyed(t, k)) ==
        "".join(f'<div class="md" id="{k}-{n}">{part}</div>' ...)
        where render(t) == "".join(part + "\\n" for part in parts)

    A top-level block is a paragraph, heading, fence, indented code, hr, table,
    blockquote or a whole list (nested lists included). The text is parsed once with one
    env, so reference links defined later resolve in earlier blocks. Empty text -> [].

    ``growing=True`` (both functions): ``text`` is the start of an answer that is still
    streaming. The render is then of a slightly shorter text, closed at its very end
    (see "Growing text" below), so that each block's HTML is, as far as it can be, the
    HTML a longer text gives it minus something at its end: the feed can send appends.
    ``growing=False`` is the final render, exactly as before. The rules that keep the
    HTML safe are the same for both.
``Rendering(key, pace=PACE)``, ``.blocks(text, growing=False, now=None) -> list[Block]``
    ``keyed`` for one text rendered again and again as it grows (an answer the feed
    follows): each render goes on from what the last one found (``keyed`` makes a fresh
    one each call). ``now`` (a monotonic clock's seconds) measures the stream's pace: a
    slow stream's render shows all it can instead of waiting for the grid. All that a render keeps between two calls is here; whoever follows
    the text holds it (app/feed/followed.py) and drops it with the text. ``.finished``:
    the last render was the final one.
``Pace(reveal=REVEAL_STEP, cadence=16, tips=True, cuts=True, slow=4)``
    How a growing render moves on (the reveal grid, the cadence of a big open block, the
    grid steps a second under which a stream is slow) and
    the shortcuts it takes; the app renders at ``PACE``. Tests and benchmarks give another
    (no grid; a shortcut off, to compare with the render it stands for).
``block_changes(sent, blocks) -> BlockChanges``  (a NamedTuple: changed, new, gone)
    What to send to a page that holds ``sent`` (id -> html) of this item: blocks whose
    html changed, blocks not sent yet, and sent ids that no longer exist.
    ``changes_since(old, new)`` is the same for two tuples of blocks, linear only in C
    over the blocks they share at the start.
``append_at(old_html, new_html) -> tuple[int, str] | None``
    The append path: when ``new_html`` is ``old_html`` with balanced HTML inserted just
    before one of the closing tags that end it, (depth, the inserted part), else None;
    ``depth`` 0 is the block element, 1 its last element child, ...
``task_counts(text) -> (done, total)``
    The task list boxes of a text (the plan card's "3 of 5 done").
``counting() -> Work``
    A context manager: the work every render does inside it (characters parsed, scanned,
    highlighted, HTML made; growing and final renders made), for the tests and benchmarks that prove
    rendering linear by counts, not times.
``REVEAL_STEP``, ``INLINE_BUDGET``, ``MATH_MAX``, ``MATHML_ELEMENTS``, ``MATHML_ATTRIBUTES``,
``CODE_CLASS``, ``BLOCK_CLASS``: the limits and names the pages, styles and tests share.

Growing text (``growing=True``; the details are at the top of ``growing.py``):

- a reveal grid: only the first ``REVEAL_STEP * (len(text) // REVEAL_STEP)`` characters
  (40: ~10 tokens, ~200 ms at 50 tokens/s) are rendered, so a follower gets at most one
  update per 40 characters however often the runner flushes (each update costs ~60
  bytes of wrapper: at ~10 characters a flush that alone was 2.3x the final HTML);
- the edge is stabilised: unclosed ``**`` / ``*`` / ``_`` / ``~~`` / inline code at the
  end are closed (``**bol`` -> ``<strong>bol</strong>``, so ``**bold**`` is an append
  inside it); a link or image waits from its ``[`` until its ``)`` (none is guessed),
  and so do a trailing bare URL or email (linkify), ``<autolink``, a delimiter run,
  ``\\``, ``!``, ``&entity``, a line of only block syntax (``-``, ``1.``, ``##``,
  ``>``, ``|---|``, fence markers), a table's header and partial rows, a reference
  definition being typed; a fence in a known language grows by whole lines,
  highlighted as they come, so its closing changes nothing;
- no close is skipped: where the render at the previous grid point showed an element
  open (auto-closed ``**bol``, a list item), this one stops at its close, and what
  follows comes one step later as an append after it.

What stays a re-send: a list turning loose (a blank line between items re-renders all
items with ``<p>``), a reference definition arriving at the end (the blocks that use it
change), a fence whose highlighting of earlier lines changes at its close (a
multi-line docstring), and the final render jumping past a close the last growing
render showed open (one re-send of the last block, at most). A follower sees the text
up to ~40 characters (plus what waits at the edge) later than the runner wrote it; an
answer's first step is not held back: a text shorter than ``REVEAL_STEP`` shows what
it has (its first words reach the page with the first write).

Speed: one module-level MarkdownIt; lexers and highlighted fences are cached, and so are
inline children (see ``_inline_cached``). Every pass is linear in its input:

- A ``Rendering``'s growing render keeps the blocks before the last open one (their
  tokens and HTML: once the lines that end them are whole they never change) and
  parses again only from there (from the block holding the look-back window's start);
  a new reference definition re-renders the kept blocks. The long answer streamed 40
  characters a flush gives the block parser ~38x its length in all (a whole parse per
  flush was ~420x at 4 times its length, and grew with it).
- A big open block is rendered every sixteenth of its length instead of every grid
  step (``incremental.cadence``): each byte of it is parsed a bounded number of times.
- A render looks at the whole answer once (the compare with the last render's text); a
  paragraph that grew by plain text is the last render plus that text, escaped
  (``incremental._grown_tip``: no parse, no replay, no render).
- The edge scanner (``scan``) finds link labels by one remembering walk and backtick
  runs from one index; tests count the characters it steps over.
- An inline budget (``engine.INLINE_BUDGET``): past 20,000 characters of inline syntax in
  one text (~1 MB of ordinary Markdown), paragraphs are shown as text, growing and final
  alike; a hostile megabyte (all ``[``) renders in ~0.02 s (markdown-it alone: ~7 s).

Safety: raw HTML is never passed through (``html=False``); only ``http:``, ``https:``
and ``mailto:`` links survive (any other destination leaves the Markdown as text);
every link gets ``rel="nofollow noopener noreferrer"`` and ``target="_blank"``; a
Markdown image becomes a link to its URL labelled with its alt text (never ``<img>``,
the page never fetches from another host). Bare domains are linkified only when they
start with ``www.`` (otherwise ``app.py`` or ``README.md`` -- ccTLDs -- became links).
Math (``$…$``, ``$$…$$``, ``\\(…\\)``, ``\\[…\\]``) is MathML rebuilt from an allow-list
(``mathml``); task list items get a disabled check box; tables, code and display math sit
in focusable regions (``tabindex="0"``). See docs/markdown.md.

Code: a *closed* fence whose language Pygments knows is highlighted on the server with
CSS classes (``static/code.css``). Unknown languages, indented code and a fence left
open at the very end of the text (the model is still streaming it) render as escaped
plain code in the same wrapper: ``<div class="hl"><pre tabindex="0"><code>...</code></pre></div>``,
itself the last child of ``<div class="code">``, after a header with the language and a
Copy button (``data-copy="code"``, class ``js-only``).
Keeping a streaming fence plain makes its HTML grow only at the end, so the feed can
append to it; it is highlighted once, when its closing fence arrives. With
``growing=True`` a streaming fence in a known language shows its whole lines,
highlighted (Pygments' HTML is per line, so it grows only at its end too).

Parts
-----
One concern per module; each imports only from those listed above it.

``counting`` the work renders do, counted while a test or a benchmark counts it.
``mathml``   math delimiters, and LaTeX -> allow-listed MathML (latex2mathml).
``code``     code blocks: their wrapper, Pygments' lexers, highlighting (whole, or growing).
``engine``   the one configured MarkdownIt and its safety rules (links, images,
             linkify), Pygments highlighting, cached inline parsing, task lists.
``labels``   link label ends and backtick runs of one text, each found once.
``scan``     the inline delimiter/link scanner the growing edge uses.
``edge``     where a growing answer's last block stops showing (uses ``scan``).
``growing``  the growing render: reveal grid, the region parsed again, no close skipped;
             ``Pace``.
``settled``  the complete blocks between a head and its open last block, their tokens kept.
``incremental``  what a text's last growing render found final (``Head``); the cadence.
``blocks``   ``render``, ``keyed``, ``Rendering`` and ``Block`` (uses ``engine``,
             ``growing`` and ``incremental``).
``diff``     ``block_changes``, ``changes_since``, ``BlockChanges``, ``append_at`` (compares
             rendered HTML only).

This package only hands on the public API above (its modules import nothing from it).
The app, the benchmarks and the tests use this face; only the unit tests of ``labels``'
index import that module. Module-level caches are only of what a content decides (a
formula's MathML, an inline run's tokens, a fence's highlighting, a lexer, a scan), never
of one text's renders: those are its ``Rendering``'s.
"""

from __future__ import annotations

from .blocks import BLOCK_CLASS, Block, Rendering, keyed, render
from .counting import Work, counting
from .diff import BlockChanges, append_at, block_changes, changes_since
from .engine import CODE_CLASS, INLINE_BUDGET, task_counts
from .growing import PACE, REVEAL_STEP, Pace
from .mathml import ATTRIBUTES as MATHML_ATTRIBUTES
from .mathml import ELEMENTS as MATHML_ELEMENTS
from .mathml import MATH_MAX

__all__ = [
    "Block",
    "BlockChanges",
    "render",
    "keyed",
    "Rendering",
    "Pace",
    "PACE",
    "counting",
    "Work",
    "INLINE_BUDGET",
    "block_changes",
    "changes_since",
    "append_at",
    "CODE_CLASS",
    "task_counts",
    "MATH_MAX",
    "MATHML_ELEMENTS",
    "MATHML_ATTRIBUTES",
    "BLOCK_CLASS",
    "REVEAL_STEP",
]
