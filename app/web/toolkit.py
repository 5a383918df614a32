"""The request toolkit every route module uses: the worker a request is served by, the
person who sent it, the ids and form fields it carries, the rows those ids name (404 unless
they are the person's), and the answer after a form.

Every `*_or_404` has one shape, `(request, raw id) -> row`: an id that is not digits, a row
that does not exist and a row of another person's all answer the same 404, so nobody learns
from the answer whether someone else's row is there.
"""
from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import anyio
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException
from litestar.response import Redirect

from ..files import Spooled, clean_name, spooled
from ..providers.thinking import THINKING
from ..tables import Assistant, Conversation, Person, Skill
from ..serve.worker import Worker
from ..store import Store
from ..accounts import usage as usage_rules
from ..accounts.rules import Accounts

TEXT_MAX = 100_000  # characters in one message
MODEL_MAX = 200     # characters of a model's id
SUGGESTIONS_MAX = 8  # lines of what an agent suggests asking (its settings; a new conversation shows them)


class Refused(Exception):
    """What a form sent that cannot be saved as it is: the form is shown again as typed, with
    `message` beside `field` (the form's own place when ''), answered with `status`."""

    def __init__(self, message: str, *, field: str = "", status: int = 400) -> None:
        super().__init__(message)
        self.message, self.field, self.status = message, field, status


def worker(request: Request) -> Worker:
    """The worker serving this request: its store, feed, model clients and runner."""
    return request.app.state.tabletalk


def me(request: Request) -> Person:
    """The person signed in (guard.authenticate made sure there is one)."""
    return request.state.person


OWNERS = "This is for the owner of this Tabletalk only."
MANAGERS = ("Only the owner and the admins of this Tabletalk manage people and connections: "
            "ask one of them.")


def owner_only(request: Request) -> Person:
    """The owner's pages and forms: anyone else is refused in words (403), not a crash."""
    person = me(request)
    if not person.owner:
        raise HTTPException(status_code=403, detail=OWNERS)
    return person


def managers_only(request: Request) -> Person:
    """People and connections are managed by the owner and the admins (docs/people.md); a
    member is refused in words (403)."""
    person = me(request)
    if not person.manages:
        raise HTTPException(status_code=403, detail=MANAGERS)
    return person


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


# --- ids and the rows they name -------------------------------------------------------------


def an_id(raw: str | None) -> int | None:
    """An id a person sent (URL, form, header): digits only and within SQLite's integers, else None."""
    if raw and raw.isascii() and raw.isdigit() and len(raw) <= 18:
        return int(raw)
    return None


def parse_id(raw: str, what: str = "conversation") -> int:
    """An id from a URL, else 404 "No such `what`." (never a 500)."""
    found = an_id(raw)
    if found is None:
        raise NotFoundException(f"No such {what}.")
    return found


def conversation_or_404(request: Request, raw: str) -> Conversation:
    convo = worker(request).store.conversation(parse_id(raw))
    if convo is None or convo.person != me(request).id:
        raise NotFoundException("No such conversation.")
    return convo


def agent_or_404(request: Request, raw: str) -> Assistant:
    agent = worker(request).store.agent(parse_id(raw, "agent"))
    if agent is None or agent.person != me(request).id:
        raise NotFoundException("No such agent.")
    return agent


def skill_or_404(request: Request, raw: str) -> Skill:
    """Skills are everyone's (shared by all agents): any that exists."""
    found = worker(request).store.skill(parse_id(raw, "skill"))
    if found is None:
        raise NotFoundException("No such skill.")
    return found


def person_or_404(request: Request, raw: str) -> Person:
    """Someone whose account the person signed in may act on (a link for a new password,
    removing them): the owner on anyone else, an admin on members (Person.outranks). A
    member is refused in words, and so is an admin naming the owner or an admin."""
    manager = managers_only(request)
    found = Accounts(worker(request).store).get(parse_id(raw, "person"))
    if found is None:
        raise NotFoundException("No such person.")
    if not manager.outranks(found):
        raise HTTPException(status_code=403, detail="The owner's account is never changed from here." if found.owner
                            else "Only the owner changes an admin's account.")
    return found


def file_or_404(request: Request, raw: str) -> tuple[dict, Iterator[bytes]]:
    """A file's row and its bytes as a stream of chunks, when it is the person's, or a
    document of a collection shared with them."""
    store, file, person = worker(request).store, parse_id(raw, "file"), me(request).id
    row = store.file(file)
    if row is None or (row["person"] != person and not store.file_in_reach(file, person)):
        raise NotFoundException("No such file.")
    found = store.file_stream(file)
    if found is None:
        raise NotFoundException("No such file.")
    return found


# --- how much may wait -----------------------------------------------------------------------

# Messages waiting for answers (the one being answered among them): in one conversation, and
# across one person's. Each is a request to the model once its turn comes; a person queued
# 200 behind a hanging run in a few seconds, and the model server was sent all 200.
QUEUE_MAX = 10
PERSON_QUEUE_MAX = 30


def within_limit(store: Store, person: int | None) -> None:
    """A 429 in the composer's words when `person` used today's tokens (app/accounts/usage.py):
    before anything of the message is read or written."""
    words = usage_rules.refusal(store, person) if person is not None else None
    if words:
        raise HTTPException(status_code=429, detail=words)


def room_to_wait(store: Store, person: int, chat: int | None = None) -> None:
    """A 429 in words when one more message would be past what may wait, or past the tokens
    `person` may use today; call it inside the write that adds the message, so parallel sends
    are counted one after another."""
    within_limit(store, person)
    if chat is not None and store.waiting_messages(chat=chat) >= QUEUE_MAX:
        raise HTTPException(status_code=429, detail=(
            f"{QUEUE_MAX} messages here already wait for their answers: wait for them, or Stop, "
            "before sending more. Nothing was sent."))
    if store.waiting_messages(person=person) >= PERSON_QUEUE_MAX:
        raise HTTPException(status_code=429, detail=(
            f"{PERSON_QUEUE_MAX} of your messages already wait for answers across your conversations: wait "
            "for some of them, or Stop them, before sending more. Nothing was sent."))


# --- form fields ----------------------------------------------------------------------------


async def form_field(request: Request, name: str, limit: int) -> str:
    """A text field of the form ('' when it is missing); not text is a 400, too long a 413."""
    form = await request.form()
    value = form.get(name, "")
    if not isinstance(value, str):
        raise HTTPException(status_code=400, detail=f"“{name}” must be text.")
    if len(value) > limit:
        raise HTTPException(status_code=413, detail=f"“{name}” is too long: at most {limit:,} characters.")
    return value


def thinking_level(raw: str) -> str:
    """'' (the agent's level) or one of models.THINKING, else a clear 400."""
    level = raw.strip()
    if level and level not in THINKING:
        raise HTTPException(status_code=400, detail=f"The thinking level is one of {', '.join(THINKING)}.")
    return level


async def model_field(request: Request) -> str:
    """The `model` field: '' (the usual one) or a model the list offers now to the person
    signed in, else a 400 (a model barred to them reads as one that does not exist)."""
    model = (await form_field(request, "model", MODEL_MAX)).strip()
    if problem := model_problem(worker(request).store, me(request).id, model):
        raise HTTPException(status_code=400, detail=problem)
    return model


def model_problem(store: Store, person: int | None, model: str) -> str:
    """Why `person` may not pick `model` ('' when they may, and for '', the usual one): not
    listed now, or kept for other people (Store.may_use), said alike so that a crafted form
    learns nothing of a model it may not use."""
    if model and (store.choice(model) is None or not store.may_use(person, model)):
        return f"There is no model “{model}” to choose."
    return ""


def megabytes(n: int) -> str:
    """A size as the forms say their limits: "50 MB", "12.3 MB" (MB of 1,048,576 bytes), or
    "300,000 bytes" under one."""
    if n < 1048576:
        return f"{n:,} bytes"
    return f"{n // 1048576:,} MB" if n % 1048576 == 0 else f"{n / 1048576:,.1f} MB"


async def attachments(request: Request, most: int, count: int, per: str = "a message") -> list[Spooled]:
    """The `file` inputs of a multipart form, checked before anything is written: each read
    through once, a chunk at a time in a thread, from the file the multipart parser spooled it
    to (files.spooled: its sha256, size and type; never held whole, web/uploads.py). An input
    left empty by the browser (no name, no bytes) is skipped. At most `count` files `per`
    ("a message", "at once")."""
    form = await request.form()
    out: list[Spooled] = []
    for value in form.getall("file") if "file" in form else []:
        if isinstance(value, str):
            if value:
                raise HTTPException(status_code=400, detail="“file” must be a file.")
            continue
        name = value.filename or ""
        sent = await anyio.to_thread.run_sync(spooled, name, value.file)
        if not name and not sent.examined.size:
            continue
        shown = clean_name(name)
        if not sent.examined.size:
            raise HTTPException(status_code=400, detail=f"“{shown}” is empty: there is nothing in it.")
        if sent.examined.size > most:
            raise HTTPException(status_code=413, detail=f"“{shown}” is too large: at most {megabytes(most)} a file.")
        out.append(sent)
        if len(out) > count:
            raise HTTPException(status_code=413, detail=f"Too many files: at most {count} {per}.")
    return out


def local_path(raw: object) -> str:
    """Where to go back to: a path on this site only (never //host or a scheme), else "/".

    No whitespace or control character anywhere: a browser drops tab, CR and LF from a URL
    before it reads it (the WHATWG URL parser), so `/<TAB>/evil.example/` would be
    `//evil.example/`, another site; nothing a path of ours holds needs one (a space is %20)."""
    if (isinstance(raw, str) and raw.startswith("/") and not raw.startswith("//") and "\\" not in raw
            and len(raw) < 2000 and not any(c.isspace() or not c.isprintable() for c in raw)):
        return raw
    return "/"


def came_from(request: Request, fallback: str) -> str:
    """The page a form was sent from (the Referer, sent for this site's own pages), else `fallback`."""
    parts = urlsplit(request.headers.get("referer", ""))
    if not parts.path or parts.netloc != request.url.netloc:
        return fallback
    return local_path((parts.path + (f"?{parts.query}" if parts.query else "")).strip())


# --- the answer after a form ----------------------------------------------------------------


def done(request: Request, back: str) -> Response:
    """The change shows where it was made: htmx gets 204 (the feed brings the change), a plain
    form a 303 back to the page (`back`)."""
    if is_htmx(request):
        return Response(b"", status_code=204)
    return Redirect(back, status_code=303)


def go(request: Request, to: str) -> Response:
    """The form leads to another page (or the same one loaded again): htmx gets 204 with
    HX-Redirect (a header: what is not ASCII in the path is %-escaped), a plain form a 303."""
    if is_htmx(request):
        return Response(b"", status_code=204, headers={"HX-Redirect": quote(to, safe="/?&=%:@+,;~-._!*'()")})
    return Redirect(to, status_code=303)


# The page above each part of the app, for an error page to lead back to.
PARENTS = (("/agents", "your agents"), ("/knowledge", "your knowledge"), ("/skills", "the skills"), ("/people", "the people"),
           ("/account", "your account"), ("/search", "search"))


def way_back(request: Request) -> tuple[str, str]:
    """Where the error page leads: the page the person came from (the Referer, when it is a
    page of this site and not the one that failed), else the page above the one asked for."""
    referer = urlsplit(request.headers.get("referer", ""))
    here = request.url
    came = referer.path + (f"?{referer.query}" if referer.query else "")
    # the Referer's path passes the check every way back passes: `http://APP//evil.example/x`
    # is this origin, and its path `//evil.example/x` a link off the site
    if (referer.scheme, referer.netloc) == (here.scheme, here.netloc) and local_path(came) == came \
            and (referer.path, referer.query) != (here.path, here.query or ""):
        return came, "the page you came from"
    if getattr(request.state, "person", None) is None:
        return "/signin", "sign in"
    for prefix, label in PARENTS:
        if here.path == prefix or here.path.startswith(prefix + "/"):
            if here.path != prefix or request.method != "GET":
                return prefix, label
    return "/", "your conversations"
