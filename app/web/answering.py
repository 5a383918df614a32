"""Who answers a conversation's next message and with which model, as the pages show it
before anything is sent (app/run/turn_setup.py decides the same for a turn): the agent, the
model that answers when the composer picks none, and which models think."""
from __future__ import annotations

from ..accounts import usage as usage_rules
from ..providers.client import Providers
from ..providers.ids import Choice
from ..store import Store
from ..tables import Assistant, Conversation
from ..serve.worker import Worker
from .templating import model_name


def agent_of(store: Store, convo: Conversation) -> Assistant | None:
    """The conversation's agent; one whose agent was deleted is answered by its person's first."""
    agent = store.agent(convo.agent) if convo.agent else None
    return agent or store.default_agent(convo.person)


def default_model(s: Worker, person: int | None, agent: Assistant | None) -> str:
    """The model a message of `person`'s that picks none is answered with: the agent's, else
    the owner's default while listed (and theirs to use), else AI_MODEL, else the first the
    model list offers them ('' while it offers none)."""
    return (agent.model if agent else "") or Providers.preferred(s.store.choices_for(person), s.store.default_model(),
                                                                 s.config.ai_model)


def unpicked_label(s: Worker, person: int | None, agent: Assistant | None) -> str:
    """What the model picker says while nothing is picked: the model that will answer."""
    model = default_model(s, person, agent)
    if not model:
        return "Model"
    return f"{model_name(model)} ({'the agent’s' if agent and agent.model else 'default'})"


def thinkers(store: Store, choices: list[Choice]) -> frozenset[str]:
    """The models that think: their listing says so (Ollama's capabilities, an OpenAI-style
    list's supported parameters), or an answer of theirs came with reasoning."""
    return frozenset({c.id for c in choices if "thinking" in c.tags} | store.seen_thinking())


def composer(s: Worker, person: int | None, agent: Assistant | None, model: str = "",
             thinking: str = "") -> dict[str, object]:
    """What `person`'s composer pickers need: the models they may use, the label of "not
    picked", the models that think, and whether the Thinking picker is offered for the model
    that answers now (`model`, the conversation's pick, else the default), or keeps a level
    picked before."""
    choices = s.store.choices_for(person)
    thinks = thinkers(s.store, choices)
    answers = model or default_model(s, person, agent)
    return {"choices": choices, "unpicked": unpicked_label(s, person, agent), "thinkers": thinks,
            "default_thinks": default_model(s, person, agent) in thinks,
            "offer_thinking": bool(thinking) or answers in thinks,
            "web_search": s.store.search_provider() is not None,  # the search switch, once the owner chose a provider
            # said before anything is sent, once today's tokens are used (docs/usage.md)
            "limit_words": limit_words(s, person)}


def limit_words(s: Worker, person: int | None) -> str:
    """What the composer says when `person` used today's tokens, else ''."""
    if person is None:
        return ""
    found = usage_rules.allowance(s.store, person)
    return found.words() if found.spent else ""
