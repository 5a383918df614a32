"""The model clients: where each model id is answered, the list of choices, the streaming client.

"local:NAME" is answered by Ollama (OLLAMA_HOST, through its OpenAI-compatible /v1) or by
the server at LOCAL_AI_URL, whichever listed NAME; "ACCOUNT:NAME" by a hosted account from
AI_ACCOUNTS, else by the connection the owner added with that prefix (connections.py, read
from the rows at each listing and each request, so a change applies at once in every worker);
a bare NAME by the server at AI_URL (see ids.py). Every failure leaves this module as a
`ModelError` whose message a person can read.
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import httpx2

from .. import builtin
from ..agent import Delta, Message, ModelError
from ..netguard.sockets import PooledTransport
from ..config import LOCAL, Account, Config
from ..tools import Tool
from . import asking, catalog, embeddings
from .asking import Route
from .connections import OLLAMA as OLLAMA_KIND, ModelConnection
from .ids import GROUP_LOCAL, GROUP_SERVER, Choice, choice_of, groups
from .limits import Lessons
from .servers import Endpoint, Gate, Server
from .thinking import THINKING, thinking_fields
from .builtin import listing

if TYPE_CHECKING:
    import openai

OLLAMA, LOCAL_SERVER, BUILTIN = "ollama", "local", "builtin"  # the servers a "local:" id can live on


def no_model(choices: list[Choice]) -> str:
    """Why no model could be chosen, in plain words: a server that is down says so."""
    down = [c for c in choices if not c.up]
    if down:
        said = "; ".join(f"{c.name}: {c.note}" for c in down)
        return (f"No model is available: {said}. Start the model server (the list is read again by itself "
                f"while one is down), or set AI_MODEL.")
    return "No model is available: the model server lists none and AI_MODEL is not set."


class Providers:
    """One per process: model clients (with their connection pools) and the model list."""

    def __init__(self, config: Config, connections: Callable[[], Collection[ModelConnection]] = tuple):
        self.config = config
        self.accounts = {a.name: a for a in config.accounts}
        # The servers the owner added (the store's rows, keys opened): read at each listing and
        # each request rather than kept, so an edit on one worker is what every other one uses next.
        self.connections = connections
        self.ollama = catalog.ollama_base(config.ollama_host) if config.ollama_host else ""
        # What the last listing learned: which server has each local name, and which of
        # Ollama's models can think (it refuses a thinking level for the others). Per process;
        # every worker lists at start, and a local name missing here is looked up again
        # before it is used (`locate`).
        self._local: dict[str, set[str]] = {OLLAMA: set(), LOCAL_SERVER: set(), BUILTIN: set()}
        self._thinkers: dict[str, set[str]] = {}  # by an Ollama's /v1 address
        self._ollama_answered = False
        self._clients: dict[tuple[str, str], openai.AsyncOpenAI] = {}
        # What servers said about themselves at the last listing (servers.probe), by base URL,
        # the gates of those that serve a set number of requests at once, and their listings
        # (kept while one is busy: llama-cpp-python ends a running answer for any request).
        self._servers: dict[str, Server] = {}
        self._gates: dict[str, Gate] = {}
        self._listings: dict[str, list[Choice]] = {}
        # What models were found not to take (limits.py): the worker keeps it in rows.
        self.lessons = Lessons(config.max_tokens)
        # on asyncio's streams, not anyio's: see asyncnet (a read per token, hundreds at once)
        self._http = httpx2.AsyncClient(
            transport=PooledTransport(limits=httpx2.Limits(max_connections=2000, max_keepalive_connections=1000)),
            timeout=self._timeout(),
        )

    def _timeout(self) -> httpx2.Timeout:
        return httpx2.Timeout(connect=5.0, read=self.config.model_timeout, write=10.0, pool=10.0)

    @property
    def ollama_answered(self) -> bool:
        """The Ollama at OLLAMA_HOST answered this process's last listing."""
        return self._ollama_answered

    @property
    def configured(self) -> bool:
        """Some model server is set up (an Ollama at the default address counts once it answered)."""
        c = self.config
        return bool(c.ai_url or c.accounts or c.local_ai_url or (self.ollama and c.ollama_set) or self._ollama_answered
                    or builtin.installed(c.data) or self.connections())

    def _split(self, model: str) -> tuple[str, str, ModelConnection | None]:
        """`choice_of` over the accounts and the connections: (prefix, name, the connection
        answering it). An account of AI_ACCOUNTS wins a prefix a connection has too."""
        added = {k.prefix: k for k in self.connections()}
        kind, name = choice_of(model, [*self.accounts, *added])
        return kind, name, None if kind in self.accounts else added.get(kind)

    def endpoint(self, model: str) -> Endpoint:
        """Where `model` (an id) is answered, from what the last listing learned."""
        kind, name, added = self._split(model)
        if added is not None:
            return Endpoint(added.base, added.key, name, style="ollama" if added.kind == OLLAMA_KIND else "openai",
                            key_setting=f"the key of the connection “{added.name}” on the Connections page")
        if kind == LOCAL and name in self._local[BUILTIN] - self._local[OLLAMA] - self._local[LOCAL_SERVER]:
            if not (url := builtin.url_of(self.config.data)):  # between a death and its restart
                raise ModelError("The built-in model is starting again; try again in a moment.")
            # SmolLM2 is never sent tools; a model the owner brought is, where its server says it reads them
            return Endpoint(url, "", name, key_setting="the built-in model (Tabletalk sends it no key)",
                            tools=name != builtin.NAME)
        if kind == LOCAL:
            # Ollama's when it listed the name (it wins a name both list) or is the only one.
            elsewhere = name not in self._local[OLLAMA] and (name in self._local[LOCAL_SERVER] or not self.ollama)
            if elsewhere and self.config.local_ai_url:
                return Endpoint(self.config.local_ai_url, "", name,
                                key_setting="the server at LOCAL_AI_URL (Tabletalk sends it no key)")
            if not self.ollama:
                raise ModelError("No model server on this computer is set up: set OLLAMA_HOST or LOCAL_AI_URL.")
            return Endpoint(f"{self.ollama}/v1", "", name, style="ollama",
                            key_setting="the Ollama at OLLAMA_HOST (Tabletalk sends it no key)")
        if kind:
            account = self.accounts[kind]
            return Endpoint(account.url, account.key, name, key_setting=f"the key of “{kind}” in AI_ACCOUNTS")
        if not self.config.ai_url:
            raise ModelError("No model server answers models without a prefix: add one on the Connections page, "
                             "or start Tabletalk with AI_URL set to an OpenAI-compatible server.")
        return Endpoint(self.config.ai_url, self.config.ai_key, model)

    async def locate(self, model: str) -> Endpoint:
        """`endpoint`, after listing this computer's servers when both could have a local name
        this process has not seen listed (a refresh in another worker, a model pulled since)."""
        kind, name = choice_of(model, self.accounts)
        known = name in self._local[OLLAMA] or name in self._local[LOCAL_SERVER] or name in self._local[BUILTIN]
        if kind == LOCAL and not known and builtin.installed(self.config.data):
            await self._list_builtin()  # started since this worker listed
            known = name in self._local[BUILTIN]
        if kind == LOCAL and not known and self.ollama and self.config.local_ai_url:
            await asyncio.gather(self._list_ollama(), self._list_local_server())
        return self.endpoint(model)

    async def takes_tools(self, model: str) -> bool:
        """Whether a turn with `model` offers it tools at all: not the built-in model (docs/
        local-model.md), nor a model whose server says they never reach it (servers.py). Tools
        sent there would only be counted against its window, and its usage would not match."""
        try:
            endpoint = await self.locate(model)
        except ModelError:
            return True  # where it is answered is not known now: its request says why
        return endpoint.tools and self.server(endpoint).tools

    def client(self, endpoint: Endpoint) -> openai.AsyncOpenAI:
        key = (endpoint.base_url, endpoint.key)
        if key not in self._clients:
            import openai  # ~0.2 s and ~25 MB: imported by the first request, not by every start

            self._clients[key] = openai.AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.key or "none",
                max_retries=0,  # retries are ours, so the person can see them
                timeout=self._timeout(),
                http_client=self._http,
            )
        return self._clients[key]

    @property
    def http(self) -> httpx2.AsyncClient:
        return self._http

    async def close(self) -> None:
        await self._http.aclose()

    # --- the model list -------------------------------------------------------------

    async def choices(self, patient: bool = False) -> list[Choice]:
        """Every model reachable now, in the picker's order (`ids.groups`). A provider that
        is down is one row that says so, and never keeps the others from being listed.
        `patient`: a turn waits for a slow list (a server busy with one request lists when
        that ends); a page does not."""
        wait = catalog.PATIENT_TIMEOUT if patient else catalog.LIST_TIMEOUT
        c = self.config
        listings = await asyncio.gather(
            self._list_ollama(),
            self._list_local_server(wait),
            self._list_builtin(),
            *(self._list_account(a) for a in c.accounts),
            *(self._list_connection(k, wait) for k in self.connections() if k.prefix not in self.accounts),
            self._list_server(wait),
        )
        out: list[Choice] = []
        seen: set[str] = set()
        for listing in listings:
            for choice in listing:
                if choice.id not in seen:  # a local name both servers list: Ollama's (listed first)
                    seen.add(choice.id)
                    out.append(choice)
        return [choice for _, members in groups(out) for choice in members]

    @staticmethod
    def preferred(choices: list[Choice], chosen: str = "", configured: str = "") -> str:
        """The model to use when none is named: the default the owner chose on the Connections
        page (`chosen`) while it is listed, else AI_MODEL (`configured`), else the first the
        server at AI_URL lists (it was set up by hand), else the first on this computer, else
        the first of an account or connection."""
        if chosen and any(c.id == chosen and c.up for c in choices):
            return chosen
        if configured:
            return configured
        first = {GROUP_SERVER: 0, GROUP_LOCAL: 1}
        offered = sorted((c for c in choices if c.up), key=lambda c: first.get(c.group, 2))
        return offered[0].id if offered else ""

    async def _listed(self, read, down: Choice) -> list[Choice]:
        try:
            found = await read
        except Exception as e:  # whatever one server does, the others are still listed
            catalog.log_odd(e, down.name)
            return [catalog.down(down.id, down.name, down.group, e)]
        return found

    async def _list_ollama(self) -> list[Choice]:
        if not self.ollama:
            return []
        try:
            found = await catalog.ollama_catalog(self._http, self.ollama)
        except Exception as e:
            self._ollama_answered = False
            self._local[OLLAMA] = set()
            catalog.log_odd(e, self.ollama)
            # Not running at the address nobody set: most likely no Ollama here, not news.
            return [catalog.down("!ollama", f"Ollama at {catalog.where(self.ollama)}", GROUP_LOCAL, e)] \
                if self.config.ollama_set else []
        self._ollama_answered = True
        self._local[OLLAMA] = {choice.name for choice in found}
        self._thinkers[f"{self.ollama}/v1"] = {choice.name for choice in found if "thinking" in choice.tags}
        return found

    async def _list_probed(self, url: str, key: str, group: str, prefix: str, down: Choice,
                           wait: float = catalog.LIST_TIMEOUT) -> list[Choice]:
        """A server set up by hand: listed, and asked what it says about itself. One busy
        with all the requests it serves at once keeps its last listing: asking it now could
        end an answer it is giving (llama-cpp-python ends the running request for any other)."""
        gate = self._gates.get(url)
        if gate is not None and gate.busy and url in self._listings:
            return self._listings[url]
        found = await self._listed(catalog.openai_catalog(self._http, url, key, group, prefix, servers=self._servers,
                                                           timeout=wait), down)
        if all(c.up for c in found):
            self._listings[url] = found
        elif url in self._listings and self.server_at(url).slots and "in time" in found[0].note:
            # one request at a time, and busy with another worker's: it lists when that ends
            return self._listings[url]
        else:
            self._servers.pop(url, None)
            self._listings.pop(url, None)
        return found

    async def _list_local_server(self, wait: float = catalog.LIST_TIMEOUT) -> list[Choice]:
        url = self.config.local_ai_url
        if not url:
            return []
        found = await self._list_probed(url, "", GROUP_LOCAL, f"{LOCAL}:",
                                        Choice("!local", f"Server at {catalog.where(url)}", GROUP_LOCAL), wait)
        self._local[LOCAL_SERVER] = {choice.id.partition(":")[2] for choice in found if choice.up}  # the server's names
        return found

    async def _list_builtin(self) -> list[Choice]:
        url = builtin.url_of(self.config.data)
        gate = self._gates.get(url) if url else None
        if gate is not None and gate.busy and url in self._listings:
            found = self._listings[url]  # busy answering: asking it now would end that answer
        else:
            found = await listing(self._http, self.config.data, servers=self._servers)
            if url and found and all(c.up for c in found):
                self._listings[url] = found
        self._local[BUILTIN] = {choice.id.partition(":")[2] for choice in found if choice.up}
        return found

    async def _list_account(self, account: Account) -> list[Choice]:
        return await self._listed(
            catalog.openai_catalog(self._http, account.url, account.key, account.name, f"{account.name}:", account.models),
            Choice(f"!account:{account.name}", catalog.where(account.url), account.name))

    async def _list_connection(self, k: ModelConnection, wait: float = catalog.LIST_TIMEOUT) -> list[Choice]:
        """A connection's models, less those switched off; one down is a row that says so."""
        down = Choice(f"!connection:{k.prefix}", catalog.where(k.url), k.name)
        if k.kind == OLLAMA_KIND:
            found = await self._listed(catalog.ollama_catalog(self._http, k.url, f"{k.prefix}:", k.name), down)
            self._thinkers[k.base] = {c.id.partition(":")[2] for c in found if "thinking" in c.tags}
        else:
            found = await self._list_probed(k.url, k.key, k.name, f"{k.prefix}:", down, wait)
        return [c for c in found if not c.up or c.id.partition(":")[2] not in k.off]

    async def _list_server(self, wait: float = catalog.LIST_TIMEOUT) -> list[Choice]:
        if not self.config.ai_url:
            return []
        return await self._list_probed(self.config.ai_url, self.config.ai_key, GROUP_SERVER, "",
                                       Choice("!server", f"AI_URL ({catalog.where(self.config.ai_url)})", GROUP_SERVER),
                                       wait)

    # --- streaming ------------------------------------------------------------------

    def stream_fn(self, model: str, extra: dict[str, Any] | None = None, thinking: str | None = None,
                  every: Callable[[], float] | None = None):
        """The agent loop's model boundary for `model`, thinking at `thinking` (THINKING;
        None: as the server likes), its streams read every `every()` seconds (asking.stream)."""

        def stream(messages: list[Message], tools: list[Tool]) -> AsyncIterator[Delta]:
            return self.stream(model, messages, tools, extra, thinking=thinking, every=every)

        return stream

    def thinking(self, endpoint: Endpoint, level: str | None) -> dict[str, Any]:
        """The request fields that ask the model at `endpoint` to think at `level`."""
        thinks = endpoint.model in self._thinkers.get(endpoint.base_url, set()) if endpoint.style == "ollama" else None
        try:
            return thinking_fields(endpoint.style, level, thinks)
        except ValueError:
            raise ModelError(f"“{level}” is not a thinking level; choose one of {', '.join(THINKING)}.") from None

    def stream(self, model: str, messages: list[Message], tools: list[Tool], extra: dict[str, Any] | None = None,
               thinking: str | None = None, every: Callable[[], float] | None = None) -> AsyncIterator[Delta]:
        return asking.stream(functools.partial(self.route, model), self.lessons, messages, tools, extra, thinking,
                             every)

    async def complete(self, model: str, messages: list[Message], max_tokens: int = 40) -> str:
        """A short non-streamed request (titles), without thinking where the server can turn it off."""
        return await asking.complete(functools.partial(self.route, model), self.lessons, messages, max_tokens)

    async def embed(self, model: str, texts: Sequence[str]) -> list[bytes]:
        """`texts` as vectors of the embedding model `model` (packed: app/knowledge/vectors.py)."""
        return await embeddings.embed(await self.route(model), texts)

    async def route(self, model: str) -> Route:
        """Where a request for `model` goes now (`locate`): the client, the word and the gate of
        the server there."""
        endpoint = await self.locate(model)
        return Route(model, endpoint, self.client(endpoint), self.server(endpoint), self.gate(endpoint), self._http,
                     self.bounded(model, endpoint), functools.partial(self.thinking, endpoint))

    # --- what servers said and what they taught ---------------------------------------

    def bounded(self, model: str, endpoint: Endpoint) -> bool:
        """Whether requests for `model` carry max_tokens: on this computer, and at AI_URL when
        it is a server we recognise (llama.cpp, llama-cpp-python, vLLM, LM Studio). Hosted
        services bound answers themselves, and some of their models refuse max_tokens."""
        kind, _, added = self._split(model)
        return kind == LOCAL or ((kind == "" or added is not None) and bool(self.server(endpoint).kind))

    def server(self, endpoint: Endpoint) -> Server:
        return self.server_at(endpoint.base_url)

    def server_at(self, url: str) -> Server:
        return self._servers.get(url) or Server()

    def gate(self, endpoint: Endpoint) -> Gate | None:
        """The gate of a server that serves a set number of requests at once (None: it queues itself)."""
        slots = self.server(endpoint).slots
        if not slots:
            return None
        gate = self._gates.get(endpoint.base_url)
        if gate is None or gate.slots != slots:
            gate = self._gates[endpoint.base_url] = Gate(slots)
        return gate
