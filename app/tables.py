"""The seed's row types and constructors.

Rows are plain dataclasses; the constructors are pure functions that return a row not yet
stored (id None). Ids, revs and foreign keys are the storage modules' business (app/store/).
"""
from __future__ import annotations

import ipaddress
import json
import re
import shlex
from dataclasses import asdict, dataclass, fields, replace
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

KINDS = ("user", "text", "reasoning", "call", "plan", "error", "retry", "stop", "ask", "sample")
CALL_STATES = ("running", "done", "failed", "approval", "approved", "declined")
# A call may also be `waiting` (an ask's word): a call of a function an API client brought
# (docs/api.md), handed back to it; the run ended there, and its result comes with the
# client's next request.
CLIENT_WAITING = "waiting"
# A plugin's question to the person during a call (`ask`: an MCP elicitation) and its request
# for the model's words (`sample`: MCP sampling) also wait, are answered, or end unanswered
# (docs/plugins.md, app/plugins/asks.py).
ASK_STATES = ("waiting", "accepted", "cancelled", "lost", "stopped", "withdrawn")
NAME_MAX = 80


def file_ids(files: str) -> list[int]:
    """An item's `files` column (attachment ids, commas) as ids."""
    return [int(f) for f in files.split(",") if f.strip().isdigit()]


@dataclass(frozen=True)
class Item:
    """One entry of a conversation's log, as a model API has it."""

    kind: str
    chat: int | None = None
    text: str = ""
    name: str = ""          # a call's tool name
    input: str = ""         # a call's arguments (JSON)
    output: str = ""        # a call's result
    file: int | None = None  # a file a tool made
    files: str = ""         # attachments: file ids, commas
    model: str = ""
    state: str = ""
    done: bool = False
    turn: int = 0           # the user item this belongs to (a user item's own id)
    sources: str = ""       # a call's sources, JSON [{"url", "title"}]
    thinking: str = ""      # a user item's thinking level ('' = the agent's)
    steer: bool = False     # a user item sent "now": read by the model at the run's next step
    read_after: int = 0     # a steering message the model read: the turn's last item id then
    parent: int = 0         # a message starting a turn: the version head it follows (app/branches.py)
    chosen: int = 0         # ... its rank among the edits at its fork: the greatest is current
    answer: int = 0         # ... its turn's current answer version (a head id; 0: the newest)
    thought: float = 0.0    # a reasoning item: seconds the model reasoned (0 until it is over)
    shown: str = ""         # a call's result as the page shows it, when not the output ('' = the output)
    unsent: bool = False    # a call's file is for the person only: not sent to the model
    dispatched: bool = False  # a call sent to its tool (it may have run from here on)
    interrupted: bool = False  # a call a restart cut: with `dispatched`, it may have run
    knowledge: str = ""     # a user item's picks with "/": collections and documents searched for it ("c3,d7")
    outside: bool = False   # a user item whose text a plugin wrote (a prompt): outside text (docs/security.md)
    search_web: bool = False  # a user item sent with the search switch on: the agent is told to search the web
    id: int | None = None
    created: float = 0.0
    updated: float = 0.0
    rev: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown item kind {self.kind!r}")
        if self.state and self.state not in CALL_STATES and self.state not in ASK_STATES:
            raise ValueError(f"unknown call state {self.state!r}")
        if len(self.name) > NAME_MAX:
            raise ValueError(f"a name is at most {NAME_MAX} characters")

    @property
    def file_ids(self) -> list[int]:
        return file_ids(self.files)

    @property
    def starts_turn(self) -> bool:
        """A person's message that began a turn (not one sent into a running answer)."""
        return self.kind == "user" and (self.turn or self.id) == self.id

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Any) -> Item:
        data = dict(row)
        data["done"] = bool(data.get("done"))
        data["steer"] = bool(data.get("steer"))
        data["unsent"] = bool(data.get("unsent"))
        data["dispatched"] = bool(data.get("dispatched"))
        data["interrupted"] = bool(data.get("interrupted"))
        data["outside"] = bool(data.get("outside"))
        data["search_web"] = bool(data.get("search_web"))
        # the field names straight from the class: dataclasses.fields() per row was most of
        # the cost of reading a long conversation
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


@dataclass(frozen=True)
class Assistant:
    """An agent: a name, instructions, a model and which tools it may use."""

    name: str
    instructions: str = ""
    model: str = ""
    tools: str = ""     # "" means every tool
    approve: str = ""   # tools that wait for the person's approval
    thinking: str = ""  # how hard its model thinks ('' = the server's default)
    suggestions: str = ""  # what a new conversation suggests asking, one a line ('' = the defaults)
    vet_memories: bool = True  # a memory written after outside tool output waits for approval
    id: int | None = None
    created: float = 0.0
    updated: float = 0.0
    rev: int = 0
    person: int | None = None  # whose agent it is

    def __post_init__(self) -> None:
        check_name(self.name)

    @classmethod
    def from_row(cls, row: Any) -> Assistant:
        data = dict(row)
        if "vet_memories" in data:
            data["vet_memories"] = bool(data["vet_memories"])
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Conversation:
    agent: int | None
    title: str = ""
    id: int | None = None
    created: float = 0.0
    updated: float = 0.0
    rev: int = 0
    person: int | None = None  # whose conversation it is
    pinned: bool = False       # listed on top of the sidebar
    active: int = 0            # when the person last sent a message, in milliseconds
    model: str = ""            # the model last picked in its composer ('' = the agent's)
    thinking: str = ""         # the thinking level last picked ('' = the agent's)
    origin: str = ""           # 'api': made through the API (docs/api.md); '' on a page
    kept_from: str = ""        # the name of whoever had it, removed, when the owner kept their conversations

    @classmethod
    def from_row(cls, row: Any) -> Conversation:
        data = dict(row)
        data["pinned"] = bool(data.get("pinned"))
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Person:
    """Someone who signs in, in one of three roles (docs/people.md): the owner set the app up
    and decides everything; an admin manages people and connections; a member does neither."""

    name: str
    owner: bool = False
    id: int | None = None
    theme: str = ""  # "" follows the system's light or dark; "light" or "dark" as chosen (THEMES)
    admin: bool = False  # never the owner's: the owner ranks above

    @property
    def role(self) -> str:
        return "owner" if self.owner else "admin" if self.admin else "member"

    @property
    def manages(self) -> bool:
        """Whether they manage people and connections: the owner and the admins."""
        return self.owner or self.admin

    def outranks(self, other: Person) -> bool:
        """Whether they may act on `other`'s account (a link for a new password, removing
        them): the owner on everyone else, an admin on members only."""
        return ROLES.index(self.role) < ROLES.index(other.role)


ROLES = ("owner", "admin", "member")  # highest first
ROLE_WORDS = {"owner": "Owner", "admin": "Admin", "member": "Member"}


@dataclass(frozen=True)
class Invitation:
    """A one-time link someone makes an account with (docs/people.md); only its token's
    sha256 is kept. Its `state` is one of INVITATION_STATES, as of `now`."""

    id: int
    admin: bool
    note: str
    made_by: str  # the maker's name ('' when they were removed since)
    created: float
    expires: float
    used: float | None = None
    person: str = ""  # who made their account with it ('' unused, or removed since)
    revoked: float | None = None

    def state(self, now: float) -> str:
        if self.used is not None:
            return "used"
        if self.revoked is not None:
            return "revoked"
        return "expired" if self.expires <= now else "waiting"


THEMES = {"": "System", "light": "Light", "dark": "Dark"}


@dataclass(frozen=True)
class ApiKey:
    """A person's key to the API (docs/api.md): only the sha256 of its token is kept; `shown`
    is its first characters, to tell keys apart; `agent` the one agent it may reach (None:
    every agent of its person); `expires` None never."""

    id: int
    person: int
    name: str
    shown: str
    created: float
    agent: int | None = None
    expires: float | None = None
    used: float | None = None
    requests: int = 0  # requests made with it (of those kept)
    tokens: int = 0    # the tokens their turns took

    @classmethod
    def from_row(cls, row: Any) -> ApiKey:
        keys = row.keys()
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in keys})  # people.theme -> what the account page calls it


@dataclass(frozen=True)
class Plugin:
    """An MCP server an agent may use; its tools are offered prefixed with `name`."""

    agent: int
    name: str
    address: str
    header: str = ""
    secret: str = ""
    enabled: bool = True
    status: str = ""
    id: int | None = None
    transport: str = ""  # what the last listing went over: streamable-http, sse or stdio
    status_at: float | None = None  # when `status` was read (seconds since the epoch)
    listed: str = ""  # its tools as of `status`: JSON, the MCP tool definitions (app/plugins/tools.py)
    offers: tuple[str, ...] = ()  # the server's capabilities that matter here: prompts, resources
    kind: str = "http"  # "http" (an address) or "stdio" (a command run on this machine)
    command: str = ""  # stdio: the program, run without a shell
    args: tuple[str, ...] = ()  # stdio: its arguments
    env: tuple[tuple[str, str], ...] = ()  # stdio: its environment (nothing else is passed)
    instructions: str = ""  # what its server says about using it (`initialize`), as of `status`

    def __post_init__(self) -> None:
        check_name(self.name)

    @property
    def where(self) -> str:
        """What the page shows for where the plugin is: its address, or the command it runs, as
        a shell would read it (an argument with spaces quoted: its boundaries seen)."""
        return self.address if self.kind == "http" else shlex.join([self.command, *self.args])


@dataclass(frozen=True)
class Skill:
    name: str
    description: str = ""
    body: str = ""
    id: int | None = None

    def __post_init__(self) -> None:
        check_name(self.name)


def check_name(name: str) -> str:
    if not name or not name.strip():
        raise ValueError("a name is required")
    if len(name) > NAME_MAX:
        raise ValueError(f"a name is at most {NAME_MAX} characters (this one has {len(name)})")
    return name


@dataclass(frozen=True)
class ClientMessage:
    """One message of an API client's request (docs/api.md), as checked: `role` user,
    assistant or tool; its text; the calls an assistant message made, each (the client's id,
    name, arguments); the id of the call a tool message is the result of (`answers`)."""

    role: str
    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    answers: str = ""


# --- the seed's constructors ------------------------------------------------------------


def order(it: Item) -> tuple[int, int, bool, int]:
    """Where an item stands in its conversation: by turn, then by id, except that a steering
    message the model read stands right after the item that was last when it read it."""
    return (it.turn or it.id or 0, it.read_after or it.id or 0, it.read_after > 0, it.id or 0)


def item(kind: str, chat: int | None = None, text: str = "", **values: Any) -> Item:
    """Any item of a conversation's log."""
    return Item(kind=kind, chat=chat, text=text, **values)


def asked(chat: int | None, text: str, model: str = "", files: list[int] | tuple[int, ...] = (),
          thinking: str = "", steer: bool = False, knowledge: str = "", outside: bool = False,
          search_web: bool = False) -> Item:
    """The person's message: a `user` item, not done until it is answered. With `steer`, sent
    "now": the run going reads it at its next step instead of answering it after. `knowledge`:
    the collections and documents picked for it (`Picks`). `outside`: its text is a plugin's
    (a prompt the person picked), not the person's own words. `search_web`: sent with the search
    switch on."""
    return Item(kind="user", chat=chat, text=text, model=model, files=",".join(str(f) for f in files),
                thinking=thinking, steer=steer, knowledge=knowledge, outside=outside, search_web=search_web)


@dataclass(frozen=True)
class Scope:
    """What a knowledge search may see: these collections' documents, those attached to
    `chat`, and these documents (picked for one message)."""

    collections: tuple[int, ...] = ()
    chat: int | None = None
    documents: tuple[int, ...] = ()


PICKS_MAX = 20  # collections and documents picked for one message


@dataclass(frozen=True)
class Picks:
    """The collections and documents a person picked for one message with "/" (or "#"): searched
    for its answer beside the agent's own. Kept on the message as "c3,d7"."""

    collections: tuple[int, ...] = ()
    documents: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Picks:
        """From the message's column, or from the composer's fields joined by commas ("c3",
        "d7"); ValueError for anything else, or more than PICKS_MAX."""
        collections, documents = [], []
        for part in filter(None, (p.strip() for p in text.split(","))):
            kind, number = part[:1], part[1:]
            if kind not in ("c", "d") or not number.isdigit() or len(number) > 18:
                raise ValueError(f"“{part[:40]}” names no collection or document")
            (collections if kind == "c" else documents).append(int(number))
        picks = cls(tuple(dict.fromkeys(collections)), tuple(dict.fromkeys(documents)))
        if len(picks.collections) + len(picks.documents) > PICKS_MAX:
            raise ValueError(f"at most {PICKS_MAX} collections and documents a message")
        return picks

    def __str__(self) -> str:
        return ",".join([f"c{c}" for c in self.collections] + [f"d{d}" for d in self.documents])

    def __bool__(self) -> bool:
        return bool(self.collections or self.documents)


def picks_of(it: Item) -> Picks:
    """A message's picks as kept (written by the web, checked there): none where unreadable."""
    try:
        return Picks.parse(it.knowledge)
    except ValueError:
        return Picks()


def retried(chat: int | None, model: str = "") -> Item:
    """The person's "again": make the last answer anew, from `model` if named."""
    return Item(kind="retry", chat=chat, model=model)


def stopped(chat: int | None) -> Item:
    """The person's "stop": end the run going in this conversation, keeping what was written."""
    return Item(kind="stop", chat=chat)


def decided(call: Item, decision: str) -> Item:
    """The person's decision on a call waiting for approval: the call, approved or declined."""
    if call.kind != "call" or call.state != "approval":
        raise ValueError("only a call waiting for approval can be decided")
    if decision not in ("approve", "decline"):
        raise ValueError("the decision is approve or decline")
    return replace(call, state="approved" if decision == "approve" else "declined")


def again(call: Item) -> Item:
    """A call the person runs again (one a restart cut after it was sent): same tool and
    input, at the end of its turn, approved by that choice."""
    if call.kind != "call":
        raise ValueError("only a call can be run again")
    return Item(kind="call", chat=call.chat, turn=call.turn, name=call.name, input=call.input,
                model=call.model, state="approved")


def assistant(id: int | None = None, name: str = "Assistant", **values: Any) -> Assistant:
    """An agent with the given name and, unless given, no instructions, the default model and every tool."""
    return Assistant(id=id, name=name, **values)


# Second-level suffixes under which the site's name is one label further left.
_SHARED_SUFFIXES = {"co", "com", "net", "org", "gov", "edu", "ac", "or", "ne", "go"}


def site_name(address: str) -> str:
    """What a plugin is called after its site: mcp.example.com -> example, 127.0.0.1 -> 127_0_0_1."""
    host = urlsplit(address if "//" in address else f"//{address}").hostname or ""
    host = host.strip("[]").rstrip(".").lower()
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        labels = [label for label in host.split(".") if label]
        if len(labels) >= 3 and labels[-2] in _SHARED_SUFFIXES and len(labels[-1]) == 2:
            labels = labels[:-1]
        name = labels[-2] if len(labels) >= 2 else (labels[0] if labels else "plugin")
    else:
        name = str(ip).replace(".", "_").replace(":", "_")
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return name[:NAME_MAX] or "plugin"


def plugin(agent: int, address: str, header: str = "", secret: str = "", name: str = "") -> Plugin:
    """An MCP server for an agent, enabled, named after its site unless a name is given."""
    return Plugin(agent=agent, name=name or site_name(address), address=address, header=header, secret=secret)


def skill(name: str, description: str = "", body: str = "") -> Skill:
    """Instructions an agent loads by name when its description fits the task."""
    return Skill(name=name, description=description, body=body)


@dataclass(frozen=True)
class Chip:
    """One site a call's result came from: its first letter, its name, the first page's title."""

    letter: str
    site: str
    title: str
    url: str
    gone: bool = False  # a passage of a document deleted since: said, not linked
    document: bool = False  # a passage of the person's knowledge: `site` is its document, `title` its page


CHIPS_MAX = 6


def sources_text(sources: Iterable[Any]) -> str:
    """A call's sources (tools.Source) as its row keeps them (`Item.sources`): JSON
    [{"url", "title"}], with "document" for a passage of the person's knowledge."""
    return json.dumps([{"url": s.url, "title": s.title} | ({"document": s.document} if s.document else {})
                       for s in sources])


def sources_of(text: str) -> list[dict[str, str]]:
    """A call's sources from its row: [{"url", "title"}]; [] for none, or for what is not that."""
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return [s for s in found if isinstance(s, dict) and isinstance(s.get("url"), str)] if isinstance(found, list) else []


# Stored JSON a page parses to show (a call's input, a plugin's question) is parsed only within
# these bounds: json's parser and printer recurse once a level, so ~1,000 levels of `{"a":`
# (a few KB a model may send as a call's input) raised RecursionError on every render, and
# the conversation's page, export and feed answered 500 for good.
PARSED_MAX = 100_000  # characters
DEPTH_MAX = 100       # levels of nesting
INPUT_SHOWN = 100_000  # characters of a call's input shown as it came (not JSON, or past the bounds)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def nesting(text: str) -> int:
    """How deeply JSON text nests (arrays and objects), read without parsing it: linear, no
    recursion. Brackets inside strings do not count."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth = depth + 1 if bracket in "[{" else depth - 1
        deepest = max(deepest, depth)
    return deepest


def bounded_json(text: str) -> Any:
    """Stored JSON text parsed for a page; ValueError when it is not JSON or past the bounds."""
    if len(text) > PARSED_MAX or nesting(text) > DEPTH_MAX:
        raise ValueError("too long or too deeply nested to parse for a page")
    try:
        return json.loads(text)
    except RecursionError:  # the bounds leave room; a nearly full stack must not make it a 500
        raise ValueError("too deeply nested to parse here") from None


def pretty_json(text: str) -> str | None:
    """A call's input as people read JSON (indented, as written); None when it is not JSON, or
    too long or deep to parse for display (then it is shown as it came: `input_shown`)."""
    try:
        return json.dumps(bounded_json(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return None


def input_shown(text: str) -> str:
    """A call's input as a page shows it: indented JSON, else as it came, cut at INPUT_SHOWN
    characters (saying how many more there are: the export has them all)."""
    pretty = pretty_json(text)
    if pretty is not None:
        return pretty
    if len(text) <= INPUT_SHOWN:
        return text
    return text[:INPUT_SHOWN] + f"\n… {len(text) - INPUT_SHOWN:,} more characters not shown"


PASSAGE_PATH = re.compile(r"/knowledge/passages/(\d{1,18})")  # a passage of a person's document (web/knowledge.py)


def cited_passages(items: list) -> set[int]:
    """The passages the items' sources name (a knowledge search's chips)."""
    return {int(m.group(1)) for it in items if it.sources and "/knowledge/passages/" in it.sources
            for s in sources_of(it.sources) if (m := PASSAGE_PATH.fullmatch(s["url"]))}


def chips(sources: str | list[dict[str, str]], gone: frozenset[int] = frozenset()) -> list[Chip]:
    """Sources as chips: one per site (its first page), six at most, http(s) only; or one per
    document of the person's knowledge (its passage's page here, `/knowledge/passages/N#passage`),
    `gone` when that passage is among those deleted since (`gone`: their ids)."""
    if isinstance(sources, str):
        sources = sources_of(sources)
    out: list[Chip] = []
    seen: set[str] = set()
    for s in sources if isinstance(sources, list) else []:
        url = s.get("url", "") if isinstance(s, dict) else ""
        if found := PASSAGE_PATH.fullmatch(url):
            document = (s.get("document") or "").strip() or "document"
            if document in seen:
                continue
            seen.add(document)
            # "libtasn1.md, page 5" (the tool's title) beside its document's name: "page 5"
            title = (s.get("title") or "").strip().removeprefix(f"{document}, ") or document
            out.append(Chip(letter=document[:1].upper(), site=document[:60], title=title[:120], url=url + "#passage",
                            gone=int(found.group(1)) in gone, document=True))  # (the page opens at the passage it marks)
            if len(out) == CHIPS_MAX:
                break
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            continue
        site = parts.hostname.lower().removeprefix("www.")
        if site in seen:
            continue
        seen.add(site)
        title = (s.get("title") or "").strip() or site
        out.append(Chip(letter=site[:1].upper(), site=site, title=title[:120], url=url))
        if len(out) == CHIPS_MAX:
            break
    return out


@dataclass(frozen=True)
class Builtin:
    """The built-in model's row: its install and its server."""

    state: str = ""  # '' not chosen, 'wanted', 'installing', 'ready', 'failed'
    step: int = 0
    steps: int = 0
    what: str = ""
    percent: int = -1
    line: str = ""
    error: str = ""
    pid: int = 0
    started: float = 0.0
    finished: float = 0.0
    serving: str = ""  # '', 'starting', 'up', 'restarting', 'stopped'
    url: str = ""
    restarts: int = 0
    model: str = ""  # what it serves: '' SmolLM2, else a GGUF the owner brought (its file under data/models/)
    rev: int = 0

    COLUMNS = ("state", "step", "steps", "what", "percent", "line", "error", "pid", "started", "finished",
               "serving", "url", "restarts", "model")

    @classmethod
    def from_row(cls, row) -> "Builtin":
        return cls(**{k: row[k] for k in (*cls.COLUMNS, "rev")})

    @property
    def busy(self) -> bool:
        """Chosen and on its way: the page shows progress, not the offer."""
        return self.state in ("wanted", "installing")


NO_IMAGES = "no-images"  # a Choice tag: its model list says this model reads no images


# --- knowledge (docs/knowledge.md) ------------------------------------------------------

DOCUMENT_STATES = ("queued", "reading", "ready", "failed", "stopped")
COLLECTION_NAME_MAX = 200
COLLECTION_DESCRIPTION_MAX = 2000


@dataclass(frozen=True)
class Collection:
    """A person's collection of documents, which the agents it is given to search; `shared`:
    every person may give it to their agents (the owner shares)."""

    id: int
    person: int
    name: str
    description: str = ""
    shared: bool = False
    documents: int = 0
    ready: int = 0

    @classmethod
    def from_row(cls, row: Any) -> Collection:
        keys = row.keys()
        return cls(id=row["id"], person=row["person"], name=row["name"], description=row["description"],
                   shared=bool(row["shared"]), documents=row["documents"] if "documents" in keys else 0,
                   ready=row["ready"] if "ready" in keys else 0)


def counted(n: int, noun: str) -> str:
    """ "1 page", "2 pages", "8,123 pages": a count with its noun."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Document:
    """A file read into passages: its state, and how far its reading got (`pages_read` of
    `pages`, 0 while unknown)."""

    id: int
    person: int
    name: str
    file: int
    collection: int | None = None
    chat: int | None = None
    kind: str = ""
    state: str = "queued"
    reason: str = ""
    pages: int = 0
    pages_read: int = 0
    passages: int = 0
    rev: int = 0
    sent: str = ""  # attached to a message: how its last request had it, "whole" or "searched" ("" not yet)

    COLUMNS = ("id", "person", "name", "file", "collection", "chat", "kind", "state", "reason", "pages",
               "pages_read", "passages", "rev", "sent")

    @classmethod
    def from_row(cls, row: Any) -> Document:
        return cls(**{k: row[k] for k in cls.COLUMNS})

    @property
    def busy(self) -> bool:
        """Still to be read, or being read: its page follows it."""
        return self.state in ("queued", "reading")

    @property
    def progress(self) -> str:
        """How far it got, in words: "page 3 of 36", "queued", "ready: 36 pages"."""
        if self.state == "queued":
            return "queued"
        if self.state == "reading":
            return f"reading page {min(self.pages_read + 1, self.pages):,} of {self.pages:,}" if self.pages else "reading"
        if self.state == "ready":
            read = f"ready: {counted(self.pages, 'page')}, {counted(self.passages, 'passage')}"
            return read + {"whole": ", sent whole to the model", "searched": ", searched: too long for the model to be "
                           "sent whole"}.get(self.sent, "")
        if self.state == "stopped":
            return f"stopped at page {self.pages_read:,} of {self.pages:,}" if self.pages else "stopped"
        return f"failed: {self.reason}" if self.reason else "failed"


@dataclass(frozen=True)
class Attached:
    """A document attached to a message, as its request reads it: its row, and its text with
    each page marked when the whole of it fits what a message may send (else None: it is
    searched)."""

    document: Document
    text: str | None


@dataclass(frozen=True)
class Found:
    """A passage a knowledge search found: where it is, and its text."""

    passage: int
    document: int
    name: str  # its document's
    page: int
    heading: str
    text: str
    score: float
