"""Protocol-boundary fakes: real servers on 127.0.0.1 that our code talks to over TCP.

Names are re-exported lazily so that `python -m tests.fakes.openai_server`
does not import the module twice (runpy warns about that).
"""

__all__ = [
    "FakeModelServer",
    "delay",
    "drop",
    "error",
    "finish",
    "malformed",
    "rate",
    "reasoning",
    "stall",
    "text",
    "tool_call",
    "usage",
]


def __getattr__(name: str):
    if name in __all__:
        from . import openai_server

        return getattr(openai_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
