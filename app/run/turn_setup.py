"""Turn setup: what a turn is answered with, from the rows and the settings.

The agent (the conversation's, else its person's first), the model and thinking level
(Again's, the conversation's pick, the message's, the agent's, else the default), the
tools (built-ins, then the agent's enabled plugins, listed afresh; none for a model that
takes none: Providers.takes_tools), which of them wait for approval, the model's window and
whether it reads images. Needs no runner: a `TurnSetup` and a `Writes` make a Turn anywhere
(tests/test_turn_setup.py).
"""
from __future__ import annotations

import functools

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .. import netguard
from ..agent.pieces import SoFar
from ..plugins import tools as mcp_tools
from ..plugins.sessions import Sessions
from ..config import Config
from ..context.segments import takes_images
from ..knowledge.ranking import Meaning
from ..providers.client import Providers, no_model
from ..providers.connections import may_use
from ..store import Store
from ..tables import Assistant, Item, Picks, picks_of
from ..tools import Tool, allowed, chosen, client_tool, names
from ..tools.knowledge import search_knowledge
from ..tools.standard import builtin_tools
from .turn import Turn
from .writes import Writes

NO_SERVER = ("No model server is set up: the owner adds one on the Connections page (/settings/connections), "
             "or starts Ollama, or starts Tabletalk with AI_URL or AI_ACCOUNTS set (see the README).")


def pick(retry: Item | None, asked: str, sticky: str, default: str) -> str:
    """Again without a model, and a message without one, take the conversation's pick (what
    its composer shows now, `sticky`), then the message's (`asked`), then the agent's."""
    return ((sticky or asked) if retry else (asked or sticky)) or default


@dataclass
class TurnSetup:
    config: Config
    store: Store
    providers: Providers
    sessions: Sessions  # the worker's plugin sessions, which the turns' plugin calls are made in
    # the public-address guard's stand-in for page fetches and searches (tests: names that
    # resolve to a loopback server playing a public one); None: the guard as it is
    guard: netguard.Guard | None = None

    async def turn(self, chat: int, user: Item, retry: Item | None, writes: Writes,
                   changed: Callable[[float], Awaitable[None]] | None = None, store: Store | None = None,
                   grew: Callable[[int, int, SoFar], None] | None = None) -> Turn:
        """The Turn that answers `user` (again, for `retry`) in conversation `chat`, writing
        through `store` (the runner's run: its view held to the lease, Store.fenced)."""
        convo = self.store.conversation(chat)
        agent = self.store.agent(convo.agent) if convo and convo.agent else None
        agent = agent or self.store.default_agent(convo.person if convo else None)  # never another person's
        model = (retry.model if retry else "") or pick(retry, user.model, convo.model if convo else "",
                                                       agent.model if agent else "")
        model = model or await self.default_model(convo.person if convo else None)
        thinking = pick(retry, user.thinking, convo.thinking if convo else "", agent.thinking if agent else "")
        # a plugin's call keeps its rows through the run's store, and may ask the person (its
        # wake-ups) or the agent's model (sampling)
        plugins = mcp_tools.PluginRun(self.sessions, store or self.store, changed,
                                      functools.partial(self.providers.complete, model), model)
        takes_tools = await self.providers.takes_tools(model)
        tools = await self.tools_for(agent, chat, plugins, picks_of(user), user.search_web) if takes_tools else []
        # what an API client brought (docs/api.md): its system messages, and its own functions,
        # which its calls go back to (a tool of the agent's with such a name is left out)
        system, functions = self.store.api_chat(chat) or ("", [])
        if takes_tools and functions:
            theirs = [client_tool(f) for f in functions]
            tools = [t for t in tools if t.name not in {c.name for c in theirs}] + theirs
        # by identity: a tool that only shows a name approval was set for does not get it
        approve = {t.name for t in tools if agent and not t.client and chosen(t, names(agent.approve))}
        # what a server's failure taught about the model is read again at each step (limits)
        limits = lambda: (self.window_of(model), self.images_for(model))  # noqa: E731
        window, images = limits()
        return Turn(store or self.store, writes, chat, user, agent, model, retry=retry, tools=tools, approve=approve,
                    changed=changed, grew=grew, window=window, share=self.config.context_share,
                    images=images, thinking=thinking, limits=limits,
                    meaning=self.meaning if self.config.embeddings else None, brought=system,
                    person=convo.person if convo else None)

    async def meaning(self, text: str) -> Meaning:
        """`text`'s vector by the embedding model (AI_EMBEDDINGS): a knowledge search's question."""
        return Meaning(self.config.embeddings, (await self.providers.embed(self.config.embeddings, [text]))[0])

    def unready(self, model: str, chat: int) -> str:
        """Why a turn with `model` in conversation `chat` cannot be sent to any model, in plain
        words ('' when it can): no server, no model, or one the owner keeps for other people (its
        connection or the model itself: a crafted form, an agent set before, a pick kept from
        before the owner's change, the API: all end here, at the turn's start, so an answer
        already being written is not cut)."""
        if not self.providers.configured:
            return NO_SERVER
        convo = self.store.conversation(chat)
        if model and not self.store.may_use(convo.person if convo else None, model):
            return (f"You may not use the model “{model}”: the owner keeps it for chosen people. "
                    "Pick another model.")
        return "" if model else no_model(self.store.choices())

    async def tools_for(self, agent: Assistant | None, chat: int | None, plugins: mcp_tools.PluginRun,
                        picks: Picks = Picks(), search_web: bool = False) -> list[Tool]:
        """The tools this agent may use now: built-in ones, then its enabled plugins' (as
        app.plugins.tools.refresh finds them: an address listed at each run, a command's
        listing kept while fresh; given to the run as `plugins`); and the search of the
        person's documents when the conversation may see
        any (the agent's collections, files attached to it, or what was picked for the
        message, `picks`: its Knowledge tab decides, not the tools tab). A message sent with the
        search switch on (`search_web`) is given web_search and fetch_page, whatever the tools
        tab says, once the owner chose a provider."""
        search = self.store.search_provider()
        # web_search is offered only once the owner chose a provider (the People page)
        every = builtin_tools(search, self.guard)
        found = [t for t in every if search is not None or t.name != "web_search"]
        taken = {t.name for t in every} | {search_knowledge.name}
        if agent is not None and agent.id is not None:
            found.extend(await mcp_tools.agent_tools(self.store, self.config, agent, taken, plugins, chat))
        kept = {id(t) for t in allowed(found, agent.tools if agent else "")}
        asked = {"web_search", "fetch_page"} if search_web and search is not None else set()
        found = [t for t in found if id(t) in kept or (not t.plugin and t.name in asked)]
        if chat is not None and self.store.has_knowledge(self.store.knowledge_scope(chat, agent.id if agent else None,
                                                                                      picks)):
            found.append(search_knowledge)
        return found

    async def default_model(self, person: int | None) -> str:
        """The owner's default (the Connections page) while listed and `person`'s to use; else
        AI_MODEL; else the first model the server at AI_URL lists, else this computer's, else an
        account's or a connection's (of those `person` may use)."""
        chosen = self.store.default_model()
        barred = self.store.barred(person)
        return self.providers.preferred(self.store.choices_for(person), chosen, self.config.ai_model) or \
            self.providers.preferred([c for c in await self.providers.choices(patient=True)  # a busy one-at-a-time
                                      if may_use(c.id, barred)], chosen)  # server lists late

    def images_for(self, model: str) -> bool:
        """Whether `model` is sent attached images: unless its model list says it reads none."""
        choice = self.store.choice(model)
        return takes_images(choice.tags if choice else ()) and self.store.limits(model).images

    def window_of(self, model: str) -> int:
        """The window a server's error taught (providers/limits.py), else the listed one, else
        TABLETALK_CONTEXT_WINDOW."""
        return self.store.limits(model).window or self.store.model_window(model) or self.config.context_window
