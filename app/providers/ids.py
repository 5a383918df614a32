"""Model ids and the rows that name models: where an id is answered, the picker's choices.

A model id names where the model runs (`choice_of` splits it):

    local:NAME       this computer: Ollama at OLLAMA_HOST, or the OpenAI-compatible server at
                     LOCAL_AI_URL (Ollama's name wins when both list one)
    ACCOUNT:NAME     a hosted account from AI_ACCOUNTS, e.g. openrouter:meta-llama/llama-3-8b
    NAME             the OpenAI-compatible server at AI_URL

Nothing here reads the network: catalog.py lists, client.py streams.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..config import LOCAL, accounts

GROUP_LOCAL = "This computer"  # Ollama and the server at LOCAL_AI_URL: ids "local:NAME"
GROUP_SERVER = "Model server"  # the server at AI_URL: bare ids


@dataclass(frozen=True)
class Choice:
    """A model a message can name, grouped by where it runs (a hosted account's group is its name).

    A provider that cannot be reached now is one choice with `up` False whose note says why:
    the picker shows it, and nothing can pick it.
    """

    id: str
    name: str
    group: str
    note: str = ""
    window: int | None = None
    tags: tuple[str, ...] = field(default=())  # what the server says the model can do: thinking, tools, vision
    up: bool = True

    @property
    def place(self) -> tuple[int, str, str]:
        """Where its group stands: this computer, then the accounts by name, then the model server."""
        rank = 0 if self.group == GROUP_LOCAL else 2 if self.group == GROUP_SERVER else 1
        return rank, self.group.casefold(), self.group


def choice_of(model_id: str, accounts: Iterable[str] = ()) -> tuple[str, str]:
    """A model id split into where it runs and the name that server knows: ("local", NAME) for
    this computer, (ACCOUNT, NAME) for a hosted account, ("", NAME) for the server at AI_URL.

    Only the prefixes "local" and the `accounts` named count: a bare name may hold a colon
    itself (Ollama's "llama3:8b" at AI_URL).
    """
    prefix, colon, name = model_id.partition(":")
    if colon and name and (prefix == LOCAL or prefix in accounts):
        return prefix, name
    return "", model_id


def groups(choices: Iterable[Choice]) -> list[tuple[str, list[Choice]]]:
    """Choices by group, in the picker's order (`Choice.place`); each group keeps its servers' order."""
    out: dict[tuple[int, str, str], list[Choice]] = {}
    for c in sorted(choices, key=lambda c: c.place):
        out.setdefault(c.place, []).append(c)
    return [(place[2], members) for place, members in out.items()]


# --- hosted accounts --------------------------------------------------------------------

