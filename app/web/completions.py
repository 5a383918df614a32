"""A turn's rows as the Chat Completions API answers (docs/api.md): the chunks of a stream,
each with the place it brings the client to (its SSE id), and the whole completion.

The rows are the answer: a `Transcript` is given the turn's items as they are now, as often
as they change, and says what the client has not had yet, in the rows' order. Text grows by
what was added; a reasoning item is `reasoning_content`; the agent's own tool calls, a call
waiting for approval, notices and a step made again after a restart are the extension
object `tabletalk` of a chunk whose delta is empty; calls of the client's own functions are
the standard `tool_calls`, and the answer then ends with finish_reason "tool_calls".

A place is `TURN.START.ITEM.KO`: the turn, the item the response began after (what came
before is another response's), the item being sent and how far (`t` text or `r` reasoning
and the characters sent, `c` and a call's stage, `e` all of it). Items only grow and their
ids only rise, so a place is enough to go on from, in any process, after any restart.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from ..tables import CLIENT_WAITING, Item

EXTENSION = "tabletalk"
OUTPUT_SHOWN = 4000  # characters of a tool's output an event carries (the page has all of it)
SEPARATOR = "\n\n"   # between two texts of one answer (a step's, then the next step's)
SHOWN_KINDS = ("text", "reasoning", "call", "error", "stop")
PLACE = re.compile(r"(\d{1,18})\.(\d{1,18})\.(\d{1,18})\.([trce])(\d{0,18})")
CALL_SEEN, CALL_WAITING, CALL_ENDED = 1, 2, 3  # a call's stages, as a place says them
ENDED = ("done", "failed", "declined")


@dataclass(frozen=True)
class Place:
    turn: int
    start: int = 0   # the response began after this item
    item: int = 0    # the item being sent (0: none yet)
    kind: str = "e"  # t, r, c, e
    offset: int = 0

    def __str__(self) -> str:
        return f"{self.turn}.{self.start}.{self.item}.{self.kind}{self.offset if self.kind != 'e' else ''}"

    @classmethod
    def parse(cls, raw: str | None) -> Place | None:
        found = PLACE.fullmatch(raw.strip()) if raw else None
        if found is None:
            return None
        turn, start, item, kind, offset = found.groups()
        return cls(int(turn), int(start), int(item), kind, int(offset or 0))


def chunk(base: dict[str, Any], delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def usage_of(used: dict[str, int]) -> dict[str, Any]:
    """A turn's usage (Store.turn_usage) as the API's: summed over the run's model requests."""
    out: dict[str, Any] = {"prompt_tokens": used["prompt"], "completion_tokens": used["completion"],
                           "total_tokens": used["prompt"] + used["completion"]}
    if used["cached"]:
        out["prompt_tokens_details"] = {"cached_tokens": used["cached"]}
    return out


@dataclass
class Transcript:
    """What one response has sent of turn `place.turn`, and what comes next."""

    place: Place
    model: str                      # as the client named it: agent-N
    page: str                       # the conversation's page, where a call is approved
    client: frozenset[str] = frozenset()  # the names of the client's own functions
    created: int = field(default_factory=lambda: int(time.time()))
    handed: int = 0                 # the client's calls sent in this response
    said: bool = False              # content sent in this response
    approvals: dict[int, float] = field(default_factory=dict)  # calls waiting for approval: since when
    failure: str = ""               # the run ended failing, in these words
    stopped: bool = False

    @property
    def base(self) -> dict[str, Any]:
        return {"id": f"chatcmpl-{self.place.turn}", "object": "chat.completion.chunk", "created": self.created,
                "model": self.model}

    def start(self) -> tuple[str, dict[str, Any]]:
        return str(self.place), chunk(self.base, {"role": "assistant", "content": ""})

    def event(self, what: dict[str, Any]) -> dict[str, Any]:
        return chunk(self.base, {}, **{EXTENSION: what})

    def is_client(self, it: Item) -> bool:
        return it.kind == "call" and (it.state == CLIENT_WAITING or (it.name in self.client and it.state == "done"
                                                                and not it.dispatched))

    def advance(self, items: list[Item], now: float) -> list[tuple[str, dict[str, Any]]]:
        """The chunks the client has not had yet from `items` (the turn's, as they are now),
        each with its place; `now` (a monotonic clock) dates the waits for approval."""
        place, out = self.place, []
        mine = sorted((it for it in items if it.kind in SHOWN_KINDS and it.id > place.start), key=lambda it: it.id)
        present = {it.id for it in mine}

        def send(at: Place, payload: dict[str, Any]) -> None:
            out.append((str(at), payload))

        if place.item and place.item not in present and place.kind in "tr" and place.offset:
            # a restart cut the step being sent, and it is made again: what was sent of it goes
            field_ = "content" if place.kind == "t" else "reasoning_content"
            sent = place.offset + (len(SEPARATOR) if place.kind == "t" and self._texted(mine, place.item) else 0)
            place = replace(place, kind="e", offset=0)
            send(place, self.event({"type": "withdrawn", "field": field_, "characters": sent,
                                    "message": "A restart cut this step; it was made again, and follows anew."}))
        for it in mine:
            if it.id < place.item or (it.id == place.item and place.kind == "e"):
                continue
            at = place.offset if it.id == place.item else 0
            if it.kind in ("text", "reasoning"):
                kind = "t" if it.kind == "text" else "r"
                if len(it.text) > at:
                    piece = it.text[at:]
                    if kind == "t" and not at and self._texted(mine, it.id):
                        piece = SEPARATOR + piece
                    place = Place(place.turn, place.start, it.id, kind, len(it.text))
                    send(place, chunk(self.base, {"content" if kind == "t" else "reasoning_content": piece}))
                    self.said = self.said or kind == "t"
                if not it.done:
                    place = Place(place.turn, place.start, it.id, kind, len(it.text))
                    break
            elif it.kind == "call":
                if self.is_client(it):
                    if it.state == CLIENT_WAITING:
                        place = Place(place.turn, place.start, it.id)
                        send(place, chunk(self.base, {"tool_calls": [{
                            "index": self.handed, "id": f"call_{it.id}", "type": "function",
                            "function": {"name": it.name, "arguments": it.input or "{}"}}]}))
                        self.handed += 1
                    continue
                stage = at if place.kind == "c" and it.id == place.item else 0
                if stage < CALL_SEEN:
                    stage = CALL_SEEN
                    send(Place(place.turn, place.start, it.id, "c", stage), self.event(
                        {"type": "tool_call", "id": f"call_{it.id}", "name": it.name, "arguments": it.input or "{}"}))
                if it.state == "approval":
                    self.approvals.setdefault(it.id, now)
                    if stage < CALL_WAITING:
                        stage = CALL_WAITING
                        send(Place(place.turn, place.start, it.id, "c", stage), self.event(
                            {"type": "approval", "id": f"call_{it.id}", "name": it.name, "url": self.page,
                             "message": f"Waiting for approval on the web page: {self.page} ({it.name})"}))
                else:
                    self.approvals.pop(it.id, None)
                if not it.done or it.state not in ENDED:
                    place = Place(place.turn, place.start, it.id, "c", stage)
                    break
                place = Place(place.turn, place.start, it.id)
                send(place, self.event({"type": "tool_result", "id": f"call_{it.id}", "name": it.name,
                                        "state": it.state, "output": it.output[:OUTPUT_SHOWN],
                                        "cut": len(it.output) > OUTPUT_SHOWN}))
            elif it.kind == "error":
                place = Place(place.turn, place.start, it.id)
                if it.state == "failed":
                    self.failure = it.text
                else:
                    send(place, self.event({"type": "notice", "text": it.text}))
            elif it.kind == "stop":
                self.stopped = True
        self.place = place
        return out

    def _texted(self, mine: list[Item], before: int) -> bool:
        """Whether this response's content has a text before item `before` (a separator goes between)."""
        return any(it.kind == "text" and it.text and it.id < before for it in mine)

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.handed else "stop"

    def end(self, used: dict[str, int] | None) -> list[tuple[str | None, dict[str, Any]]]:
        """The last chunks of a turn that ended: its failure (the SDKs raise it), or the finish
        and, when asked for (`used`), the usage."""
        if self.failure and not self.said and not self.handed:
            return [(None, error_body(self.failure, "server_error", "model_error"))]
        out: list[tuple[str | None, dict[str, Any]]] = []
        if self.stopped:
            out.append((str(self.place), self.event({"type": "stopped", "message": "Stopped on the web page."})))
        elif self.failure:
            out.append((str(self.place), self.event({"type": "failed", "message": self.failure})))
        out.append((str(self.place), chunk(self.base, {}, self.finish_reason)))
        if used is not None:
            out.append((None, {**self.base, "choices": [], "usage": usage_of(used)}))
        return out


def error_body(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An error as the OpenAI API words it."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass
class Completion:
    """A whole answer gathered from a transcript's chunks: what a request without `stream` gets."""

    content: str = ""
    reasoning: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def take(self, payload: dict[str, Any]) -> None:
        if EXTENSION in payload:
            what = payload[EXTENSION]
            if what.get("type") == "withdrawn":
                if what["field"] == "content":
                    self.content = self.content[:max(len(self.content) - what["characters"], 0)]
                else:
                    self.reasoning = self.reasoning[:max(len(self.reasoning) - what["characters"], 0)]
            self.events.append(what)
            return
        for choice in payload.get("choices", ()):
            delta = choice["delta"]
            self.content += delta.get("content") or ""
            self.reasoning += delta.get("reasoning_content") or ""
            self.calls.extend({k: v for k, v in c.items() if k != "index"} for c in delta.get("tool_calls", ()))

    def body(self, transcript: Transcript, chat: int, used: dict[str, int]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or (None if self.calls else "")}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.calls:
            message["tool_calls"] = self.calls
        return {"id": f"chatcmpl-{transcript.place.turn}", "object": "chat.completion",
                "created": transcript.created, "model": transcript.model,
                "choices": [{"index": 0, "message": message, "finish_reason": transcript.finish_reason}],
                "usage": usage_of(used), EXTENSION: {"conversation": chat, "events": self.events}}
