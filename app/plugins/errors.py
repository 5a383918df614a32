"""What a plugin's failure is: PluginError, whose message the model and people read, and the
leaves of the exception groups the mcp transports raise (where the telling exception is).

Below every other module of the package that reaches a server: link.py raises and words
these, and sessions.py, tools.py, prompts.py and resume.py raise them without reaching back
into link.py for the type.
"""
from __future__ import annotations

from collections.abc import Iterable


class PluginError(Exception):
    """A plugin call that did not give a result; the message is for the model and people."""


def leaves(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc
