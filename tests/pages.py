"""Every page a person can reach, in one place, over one set of rows that shows each kind of
thing a page can hold (answers, code, reasoning, an error, a call waiting for approval, a
plugin, a memory, a skill, a second person ...).

Tests that must hold on every page (tests/test_axe.py, and any check of every page's width
or header) take `PAGES` and a `World`. A new page is one line in `PAGES`; a new kind of row
it needs is made in `World.build`.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import COOKIE, Served, password_hash, signed_in, wait_for
from tests.fakes.openai_server import FakeModelServer, error, rate, reasoning, text, tool_call

GUEST = "guest"

ANSWER = "\n\n".join([
    "## What the code does",
    "It doubles a number, with **bold**, *italic*, `inline code` and [a link](https://example.org/).",
    "- one\n- two\n  - nested",
    "```python\ndef double(x):\n    # a line long enough to scroll sideways in a narrow code block: "
    + "x " * 60 + "\n    return x * 2\n```",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "> A quote to end with.",
])
PLAN = "- [x] read the question\n- [ ] answer it"


@dataclass(frozen=True)
class Page:
    name: str        # how the test ids and the table call it
    path: str        # may name the World's ids: {done}, {waiting}, {running}, {agent}, {skill}, {guest}
    who: str = "owner"   # "owner", "guest" (a person who is not the owner) or "" (signed out)
    fresh: bool = False  # served by an app with no account yet (only /setup is reachable then)
    status: int = 200
    shows: str = ""      # a selector the page must match, so each page is the state it is named for
    # axe rules this page is known to break without JavaScript, each with the reason (shown in
    # the table as "n*"); kept short and named, never a blanket pass
    known_without_js: tuple[str, ...] = ()
    only_without_js: bool = False  # a page only a browser without JavaScript loads


PAGES: list[Page] = [
    Page("setup", "/setup", who="", fresh=True),
    Page("signin", "/signin", who=""),
    Page("new conversation", "/", shows="#composer"),
    Page("all conversations", "/conversations"),
    Page("rename conversation", "/c/{done}/rename"),
    Page("conversation", "/c/{done}", shows="article.text .hl pre, article.error, article.reasoning"),
    Page("conversation waiting for approval", "/c/{waiting}", shows="article.call .decide button"),
    Page("conversation answering", "/c/{running}", shows='#status[data-running="1"]'),
    # Without JavaScript the answer being written shows in this frame, which reloads itself
    # every 2 s (<meta http-equiv="refresh">): axe's meta-refresh (WCAG 2.2.1 asks for a way
    # to turn it off). Known, and counted in the table as "+1*".
    Page("conversation answering, its no-JS frame", "/c/{running}/watch",
         known_without_js=("meta-refresh",), only_without_js=True),
    Page("conversation answer versions", "/c/{done}", shows=".answer-actions .pager"),
    Page("conversation, a plugin asks", "/c/{asking}", shows="article.ask .ask-form input, article.sample .decide"),
    Page("a plugin's question on its own page", "/c/{asking}/asks/{ask}", shows="form[id^=ask-] ~ article.ask"),
    Page("conversation editing a message", "/c/{done}?edit={done_turn}", shows="div.edit textarea"),
    Page("delete conversation", "/c/{done}/delete"),
    Page("prompts, skills and resources", "/c/{done}/prompts", shows=".prompt-list"),
    Page("prompts of a new conversation", "/new/{agent}/prompts", shows=".prompt-list"),
    Page("agents", "/agents"),
    Page("agent settings", "/agents/{agent}"),
    Page("agent settings saved", "/agents/{agent}?tab=settings&saved=settings", shows=".saved"),
    Page("agent tools", "/agents/{agent}?tab=tools"),
    Page("agent plugins", "/agents/{agent}?tab=plugins", shows=".plugin.off"),
    Page("agent memory", "/agents/{agent}?tab=memory", shows=".memories form"),
    Page("delete agent", "/agents/{agent}/delete"),
    Page("agent knowledge", "/agents/{agent}?tab=knowledge", shows='input[name="collection"]'),
    Page("knowledge", "/knowledge", shows=".collection-list a"),
    # Without JavaScript a collection with a document being read shows its documents in a frame
    # that reloads itself every 5 s until none is, as the issue asks (the page around it stays):
    # axe's meta-refresh, known (in the frame, and on the page that frames it)
    Page("collection", "/knowledge/{collection}", shows=".document.ready, .document.failed, .document.reading progress",
         known_without_js=("meta-refresh",)),
    Page("collection shared (not its maker)", "/knowledge/{collection}", who=GUEST, shows=".document.ready",
         known_without_js=("meta-refresh",)),
    Page("collection being read, its no-JS frame", "/knowledge/{collection}/watch",
         shows=".document.reading progress", known_without_js=("meta-refresh",), only_without_js=True),
    Page("passage on its page", "/knowledge/passages/{passage}", shows="#passage mark"),
    Page("delete document", "/knowledge/documents/{document}/delete"),
    Page("skills", "/skills"),
    Page("skill", "/skills/{skill}"),
    Page("skill (not the owner)", "/skills/{skill}", who=GUEST),
    Page("skills (not the owner)", "/skills", who=GUEST),
    Page("delete skill", "/skills/{skill}/delete"),
    Page("search", "/search"),
    Page("search results", "/search?q=double", shows="#results li"),
    Page("search without results", "/search?q=zebra"),
    Page("account", "/account"),
    Page("account, theme saved", "/account?saved=theme"),
    Page("people", "/people"),
    Page("usage", "/settings/usage", shows="figure.usage-chart svg title"),
    Page("usage, refused to a member", "/settings/usage", who=GUEST, status=403),
    Page("remove person", "/people/{guest}/delete"),
    Page("a new password, by its one-time link", "/reset?token={reset}", who="", shows='input[name="token"]'),
    Page("an invitation, by its one-time link", "/join?token={invite}", who="", shows='input[name="token"]'),
    Page("an invitation that does not work", "/join?token={used}", who="", status=410),
    Page("the built-in model", "/model", shows="#builtin"),
    Page("keyboard shortcuts", "/help/keys"),
    Page("not found", "/no/such/page", status=404),
    Page("no such conversation", "/c/99999", status=404),
]


@dataclass
class World:
    """The rows behind PAGES, made through the app's own forms on a running server."""

    served: Served
    fresh: Served
    ids: dict[str, int | str] = field(default_factory=dict)
    cookies: dict[str, dict[str, str]] = field(default_factory=dict)

    def url(self, page: Page) -> str:
        return (self.fresh if page.fresh else self.served).url + page.path.format(**self.ids)

    def cookies_for(self, page: Page) -> dict[str, str]:
        return self.cookies.get(page.who, {})

    def build(self, fake: FakeModelServer) -> "World":
        from app.accounts.invitations import Invitations
        from app.accounts.rules import Accounts

        s = self.served
        self.cookies = {"owner": dict(s.cookies), GUEST: {COOKIE: signed_in(s.data, GUEST, owner=False, url=s.database_url)}, "": {}}
        with s.client(timeout=20) as c:
            def form(path: str, **fields) -> httpx.Response:
                token = c.get("/").text.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
                r = c.post(path, data={"_csrf_token": token, **fields}, follow_redirects=False)
                assert r.status_code < 400, (path, r.status_code, r.text[:500])
                return r

            def new_chat() -> int:  # an empty conversation, straight into the database (its first message follows)
                with s.store() as store:
                    return store.new_conversation(store.default_agent(store.owner()).id, person=store.owner()).id

            def idle(chat: int) -> None:
                wait_for(lambda: 'data-running="0"' in c.get(f"/c/{chat}").text, timeout=20)

            agent = int(c.get("/agents").text.split('href="/agents/', 1)[1].split('"', 1)[0])
            form("/agents", name="Researcher")
            tools = ["fetch_page", "update_plan", "remember", "load_skill"]
            form(f"/agents/{agent}/tools", shown=tools, use=tools, approve=["update_plan"])
            form(f"/agents/{agent}/plugins", address="http://127.0.0.1:9/mcp")  # refused by the guard: a status to show
            form(f"/agents/{agent}/plugins", address="http://127.0.0.1:10/mcp", header="X-Key", secret="s3cret")
            form("/skills", name="pdf-forms", description="Filling in PDF forms.",
                 body="# Filling forms\n\n1. Read the form.\n2. Fill it in.\n\n```sh\npdftk form.pdf fill_form data.fdf\n```")
            form("/people", name="someone", password="another long password")
            form("/people/web-search", kind="brave", key="a-brave-key")  # the composer's search switch shows

            # an answer with reasoning and code, made again once; then an error
            done = new_chat()
            fake.script([reasoning("Thinking it over."), text(ANSWER)], [text("A second version, shorter.")],
                        [error(400, "The model refused the request.")])
            form(f"/c/{done}/ask", text="What does the code do?")
            idle(done)
            form(f"/c/{done}/retry")
            idle(done)
            form(f"/c/{done}/ask", text="And now fail, please.")
            idle(done)
            # a call waiting for the person's decision
            waiting = new_chat()
            fake.script([text("I'll make a plan."), tool_call("update_plan", {"plan": PLAN})])  # and it waits
            form(f"/c/{waiting}/ask", text="Plan it")
            wait_for(lambda: "waiting for approval" in c.get(f"/c/{waiting}").text, timeout=20)
            # an answer still being written (slowly: it lasts longer than the tests that look at it)
            running = new_chat()
            fake.script([rate(1), text("Still writing, one word a second. " * 200)])
            form(f"/c/{running}/ask", text="Take your time")
            wait_for(lambda: 'data-running="1"' in c.get(f"/c/{running}").text, timeout=20)

        with s.store() as store:
            store.add_memory(agent, "The person prefers short answers.")
            store.update_plugin(store.plugins(agent)[-1].id, enabled=False)
            skill = store.skills()[0].id
            guest = next(p.id for p in Accounts(store).all() if p.name == "someone")
            reset = Accounts(store).reset_link(guest)
            invitations = Invitations(store)  # the People page lists one of each state
            owner = store.person(store.owner())
            used = invitations.make(owner, note="used")
            invitations.join(used, "joined", password_hash())
            invitations.revoke(invitations.opened(invitations.make(owner, note="withdrawn")).id)
            invite = invitations.make(owner, note="a friend")
            asking, ask = _plugin_asks(store)
            collection, passage, document = _knowledge(store)
            done_turn = store.db.execute("SELECT min(id) FROM items WHERE chat = ? AND kind = 'user'", [done]).fetchone()[0]
        self.ids = {"done": done, "done_turn": done_turn, "waiting": waiting, "running": running,
                    "agent": agent, "skill": skill, "guest": guest, "asking": asking, "ask": ask,
                    "collection": collection, "passage": passage, "document": document, "reset": reset,
                    "invite": invite, "used": used}
        return self


ASKED = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "title": "Your name", "description": "As it should be printed"},
    "email": {"type": "string", "format": "email", "title": "Email"},
    "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 2, "title": "Tickets"},
    "member": {"type": "boolean", "title": "I am a member"},
    "seat": {"type": "string", "title": "Seat", "oneOf": [{"const": "a", "title": "Aisle"}, {"const": "w", "title": "Window"}]},
    "meals": {"type": "array", "title": "Meals", "items": {"enum": ["lunch", "dinner"]}, "maxItems": 2},
}}


def _knowledge(store) -> tuple[int, int, int]:
    """A shared collection with a document read (one passage on page 2 under a heading), one that
    failed and one being read (rows as app/run/ingest.py writes them; no reading runs)."""
    owner = store.owner()
    c = store.add_collection(owner, "Manuals", "The GNU manuals we use", shared=True)
    ready = store.add_document(owner, store.add_file("libtasn1.pdf", b"%PDF-1.7 read", owner), "libtasn1.pdf",
                               collection=c, kind="pdf", state="ready")
    store.add_document(owner, store.add_file("scan.pdf", b"%PDF-1.7 scan", owner), "scan.pdf", collection=c,
                       kind="pdf", state="failed",
                       reason="This PDF has no text layer (it may be scanned images); reading scans is not supported.")
    with store.write() as w:
        w.conn.execute("UPDATE documents SET pages = 36, pages_read = 36, passages = 2 WHERE id = ?", [ready])
        passage = w.conn.execute("INSERT INTO passages (document, page, n, heading, text) VALUES (?, 2, 0, 'Errors', "
                                 "'asn1_der_decoding returns ASN1_TAG_ERROR when a tag is wrong.') RETURNING id",
                                 [ready]).fetchone()[0]
        w.conn.execute("INSERT INTO passages (document, page, n, heading, text) VALUES (?, 2, 1, 'Errors', "
                       "'ASN1_DER_ERROR says the DER encoding is broken.')", [ready])
    reading = store.add_document(owner, store.add_file("tides.csv", b"id,name\n1,a\n", owner), "tides.csv",
                                 collection=c, kind="csv", state="stopped")
    with store.write() as w:  # shown as being read: no worker holds it (its lease over), none takes it (stopped)
        w.conn.execute("UPDATE documents SET state = 'reading', pages = 90, pages_read = 30, owner = 'elsewhere', "
                       "leased = 1e12 WHERE id = ?", [reading])
    store.set_agent_collections(store.default_agent(owner).id, [c])
    return c, passage, ready


def _plugin_asks(store) -> tuple[int, int]:
    """A conversation in which a plugin's question (elicitation) waits for the person beside a
    sampling request waiting for approval and one answered (rows as app/plugins/asks.py writes them)."""
    import json

    from app.tables import item

    chat = store.new_conversation(store.default_agent(store.owner()).id, person=store.owner()).id
    user = store.add(item("user", chat, "Book the tickets", done=True))
    call = store.add(item("call", chat, turn=user.id, name="tickets_book", input="{}", state="running", dispatched=True))
    asked = store.add(item("ask", chat, "A few details for the booking:", turn=user.id, name="tickets", state="waiting",
                           input=json.dumps({"call": call.id, "schema": ASKED})))
    request = {"call": call.id, "system": "You write short confirmations.", "max_tokens": 50,
               "messages": [{"role": "user", "text": "Confirm two tickets for Friday."}]}
    store.add(item("sample", chat, turn=user.id, name="tickets", model="fake-model", state="done", done=True,
                   input=json.dumps(request), output="Two tickets for Friday are confirmed."))
    store.add(item("sample", chat, turn=user.id, name="tickets", model="fake-model", state="approval",
                   input=json.dumps(request)))
    return chat, asked.id


@contextmanager
def world(tmp: Path, cluster=None) -> Iterator[World]:
    """A served app holding the World's rows (and a second one with no account, for /setup),
    with the fake model server they were made with: on SQLite's files, or with `cluster` (a
    PostgreSQL one, tests/pg.py) on two fresh databases of its own."""
    urls = [cluster.database(), cluster.database()] if cluster else []
    with FakeModelServer(models={"fake-model": 8192, "other-model": 4096}) as fake:
        fake.plain_default = [text("A fitting title")]
        env = {"TABLETALK_DATA": str(tmp / "data"), "AI_URL": fake.url, "AI_KEY": "", "AI_MODEL": ""}
        served = Served(tmp / "data", env | ({"DATABASE_URL": urls[0]} if urls else {})).start()
        fresh = Served(tmp / "fresh", {**env, "TABLETALK_DATA": str(tmp / "fresh")}
                       | ({"DATABASE_URL": urls[1]} if urls else {}), account=False).start()
        try:
            yield World(served, fresh).build(fake)
        finally:
            fresh.stop()
            served.stop()
            for url in urls:
                cluster.drop(url)


__all__ = ["PAGES", "Page", "World", "world"]
