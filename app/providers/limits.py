"""What a model server cannot take, learned from how it fails: its window, image parts,
tools, a reasoning field.

A server that says its window only in an error ("exceed context window of 2048") or fails
on image parts it cannot read teaches the model's `Limits`; the request is then made again,
once, without what was refused (`Retry`), and every later request is built to fit
(`Lessons`: what one process learned, or every worker's once kept in rows). The words of
every server we know are read here: llama.cpp's server, llama-cpp-python, vLLM, OpenAI and
the proxies that pass its words on, LM Studio.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..agent import Again, Message
from ..context import window
from ..tools import Tool

MIN_ANSWER = 256  # tokens an answer step may always be, whatever the estimate of the request says


@dataclass(frozen=True)
class Limits:
    """What one model (by id) was found to take; the defaults until a server refused."""

    window: int | None = None   # the window a server's error named
    images: bool = True
    tools: bool = True
    reasoning: bool = True

    def learned(self, **what: object) -> Limits:
        return replace(self, **what)


class Lessons:
    """What models were found to take, for every request of one process: this process's word
    until the worker keeps it in rows (`keep`), then any worker's. A bounded answer is sized
    by the window a turn is cut to and the calibration of the estimate (`room`)."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens  # TABLETALK_MAX_TOKENS: the most a bounded answer may be
        self._limits: dict[str, Limits] = {}
        self.remember: Callable[[str, Limits], None] | None = None
        self.recall: Callable[[str], Limits] | None = None
        self.window_of: Callable[[str], int] | None = None
        self.ratio_of: Callable[[str], float] | None = None
        self.on_count: Callable[[str, int, int], None] | None = None  # a server's count of a refused request

    def keep(self, store: Any, window_of: Callable[[str], int]) -> None:
        """Keep what is learned in `store`'s rows (app/store: limits, calibrations), and size
        answers by `window_of` (the window a turn is cut to)."""
        self.remember, self.recall, self.window_of = store.set_limits, store.limits, window_of
        self.ratio_of = lambda model: store.calibration(model)[0]

        def on_count(model: str, raw: int, counted: int) -> None:
            store.set_calibration(model, *window.learn(*store.calibration(model), raw, counted))

        self.on_count = on_count

    def of(self, model: str) -> Limits:
        """What `model` was found to take: the stored word (any worker's), else this one's."""
        if self.recall is not None:
            return self.recall(model)
        return self._limits.get(model) or Limits()

    def learn(self, model: str, limits: Limits) -> None:
        self._limits[model] = limits
        if self.remember is not None:
            self.remember(model, limits)

    def room(self, model: str, messages: list[Message], tools: list[Tool]) -> int:
        """max_tokens: the setting, and never more than the window leaves after this request
        (vLLM and others refuse a request whose max_tokens does not fit)."""
        cap = self.max_tokens
        size = self.window_of(model) if self.window_of else 0
        if size:
            ratio = self.ratio_of(model) if self.ratio_of else 1.0
            used = window.calibrated(window.request_tokens(messages, tools), ratio)
            cap = min(cap, max(MIN_ANSWER, size - used - size // 20))
        return cap


class Retry(Again):
    """The request failed on something now learned (`limits`): make it again, built anew to
    fit (the agent loop prepares it again, once per cause). The message is the notice the
    person sees about it."""

    def __init__(self, notice: str, limits: Limits, cause: str, failure: str = ""):
        super().__init__(notice)
        self.limits = limits
        self.cause = cause  # "window", "images", "tools", "reasoning"
        self.failure = failure  # what the person reads when it fails again the same way


# The window a context overflow's words name, by the servers that say it so.
_WINDOW_WORDS = (
    re.compile(r"maximum context length is ([\d,]+)", re.I),            # OpenAI, vLLM, llama-cpp-python (400)
    re.compile(r"exceed(?:s)? context window of ([\d,]+)", re.I),       # llama-cpp-python's ValueError
    re.compile(r"available context size \(([\d,]+) tokens?\)", re.I),   # llama.cpp's server
    re.compile(r"context length of only ([\d,]+)", re.I),               # LM Studio
    re.compile(r"context (?:window|length|size) (?:is|of) ([\d,]+)", re.I),
    re.compile(r"\bn_ctx\W+(\d+)"),                                     # llama.cpp's error body
)
_OVERFLOW_WORDS = re.compile(
    r"context[ _-]?length[ _-]?exceeded|exceed_context_size|exceeds? (?:the )?(?:available )?context"
    r"|maximum context length|context window|too many tokens|prompt is too long|input is too long"
    r"|greater than the context length|context length of only", re.I)


def overflow(text: str) -> int | None | bool:
    """Whether `text` (a server's error) says the request did not fit the model's window:
    the window it names, True when it names none, False when it is about something else."""
    if not _OVERFLOW_WORDS.search(text) and "n_ctx" not in text:
        return False
    for words in _WINDOW_WORDS:
        if (found := words.search(text)) and (n := int(found.group(1).replace(",", ""))) > 0:
            return n
    return True


_PROMPT_WORDS = (
    re.compile(r"\(([\d,]+) in the messages", re.I),              # OpenAI, vLLM, llama-cpp-python
    re.compile(r"requested tokens \(([\d,]+)\)", re.I),            # llama-cpp-python's ValueError
    re.compile(r"request \(([\d,]+) tokens?\) exceeds", re.I),      # llama.cpp's server
    re.compile(r"\bn_prompt_tokens\W+(\d+)"),
    re.compile(r"your (?:messages|request|prompt) (?:resulted in|has) ([\d,]+) (?:input )?tokens", re.I),
)


def prompt_tokens(text: str) -> int | None:
    """The size of the refused request's prompt, by the server's count, where its error says."""
    for words in _PROMPT_WORDS:
        if (found := words.search(text)) and (n := int(found.group(1).replace(",", ""))) > 0:
            return n
    return None


def too_long(window: int | None, says: str) -> str:
    """What the person reads when a request does not fit even after it was cut to fit."""
    size = f" of {window:,} tokens" if window else ""
    return (f"The conversation does not fit the model’s window{size}, even with its earlier part left out. "
            f"Send a shorter message, or start a new conversation. The server said: “{says[:300]}”")


_IMAGE_WORDS = re.compile(r"image|vision|multimodal|multi-modal|mmproj|image_url"
                          r"|can only concatenate str \(not \"list\"\)|content must be a string", re.I)
_TOOL_WORDS = re.compile(r"\btools?\b|tool_choice|function calling|functions? (?:are|is) not supported", re.I)
_REASONING_WORDS = re.compile(r"reasoning|thinking", re.I)


def refused(text: str, status: int | None, *, images: bool, tools: bool, reasoning: bool) -> str:
    """What of the request a failure refused, when the request carried it: "images",
    "tools", "reasoning" or "". A server's 5xx on a request with images is taken for its chat
    template failing on them (llama-cpp-python's, with a text-only model), since the same
    request without them is tried before anything is marked."""
    if images and (_IMAGE_WORDS.search(text) or (status is not None and status >= 500)):
        return "images"
    if status is not None and 400 <= status < 500 or status is None:
        if tools and _TOOL_WORDS.search(text):
            return "tools"
        if reasoning and _REASONING_WORDS.search(text):
            return "reasoning"
    return ""


NOTICES = {
    "images": ("This model does not read images (its server failed on the image), so it was answered "
               "again without it; the model was told the file’s name. Later messages to it send images by name only."),
    "tools": "This model’s server refused tools, so it was answered again without them; later requests send none.",
    "reasoning": ("This model’s server refused the thinking level, so it was answered again without one; "
                  "later requests send none."),
}


def window_notice(window: int) -> str:
    return (f"The model server’s window is {window:,} tokens, smaller than Tabletalk assumed: the earlier part "
            f"of the conversation was left out to fit, and the request was made again.")
