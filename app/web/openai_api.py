"""A person's agents behind the OpenAI chat completions API (docs/api.md): `GET /v1/models`,
`POST /v1/chat/completions` (streamed or whole) and `GET /v1/conversations/{id}/stream`, the
rest of an answer after a client dropped, or after a restart.

Only here: a Bearer key (app/accounts/api_keys.py), never a cookie, so no form token either;
the key is checked before the body is read, and the body is bounded. Every refusal is in the
OpenAI error shape. A request is written as rows like a page's message (the client's
messages become a conversation of that agent, or continue one), the runner answers it, and
the answer is read back from the rows as they change (completions.py): so a client that
drops loses nothing, and one that comes back gets the rest from where it was.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from litestar.response import Stream

from ..accounts.api_keys import ApiKeys, ApiSettings
from ..providers.connections import may_use
from ..store import NotWritten
from ..tables import ApiKey, ClientMessage, Conversation, Item, Person
from ..tools.knowledge import search_knowledge
from ..tools.standard import builtin_tools
from ..serve.worker import Worker
from .authenticate import API_BODY_MAX as BODY_MAX, TooLarge
from .completions import Completion, Place, Transcript, error_body
from .toolkit import TEXT_MAX, an_id, room_to_wait, worker

CONVERSATION = "Tabletalk-Conversation"  # the response's header naming the conversation; a request's continues it
MESSAGES_MAX = 500       # messages of one request
TOOLS_MAX = 128          # the client's own functions in one request
KEEPALIVE_SECONDS = 15.0  # a comment on a stream that has nothing to say, so proxies keep it open
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the API's own rule for a function's name
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(HTTPException):
    """A refusal in the OpenAI error shape: `kind` its type, `code` its code."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, detail=message, headers=headers)
        self.kind, self.code, self.param = kind, code, param


def refused(exc: Exception, status: int, detail: str) -> Response:
    """Any failure on a /v1/ path, as the OpenAI API answers one (app.error_page's, for here)."""
    if isinstance(exc, ApiError):
        body = error_body(detail, exc.kind, exc.code, exc.param)
    else:
        kind = {401: "invalid_request_error", 403: "permission_error", 404: "invalid_request_error",
                413: "invalid_request_error", 429: "rate_limit_error"}.get(status, "invalid_request_error"
                                                                           if status < 500 else "server_error")
        body = error_body(detail, kind, {404: "not_found", 413: "request_too_large"}.get(status))
    headers = dict(getattr(exc, "headers", None) or {})
    return Response(body, status_code=status, headers=headers, media_type="application/json")


# --- who asks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    key: ApiKey
    person: Person
    settings: ApiSettings


def caller(request: Request) -> Caller:
    """The person whose key the request carries (401 without a good one), if the owner lets
    them use the API (403). Read from the header alone: nothing of the body yet."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    keys = ApiKeys(worker(request).store)
    found = keys.holder(token.strip()) if scheme.lower() == "bearer" else None
    if found is None:
        raise ApiError(401, "The API key is missing, wrong, revoked or expired. Make one on your account page and "
                            "send it as `Authorization: Bearer KEY`.", code="invalid_api_key")
    settings = keys.settings()
    if not settings.allows(found[1]):
        raise ApiError(403, "The owner of this Tabletalk has not opened its API to you.", "permission_error",
                       "api_not_allowed")
    return Caller(found[0], found[1], settings)


def agent_of(s: Worker, who: Caller, model: object) -> int:
    """The agent a `model` names (`agent-N`, one of the person's): 404 for any other name,
    403 for an agent the key does not reach or one set to a model the owner keeps for other
    people (nothing is written then)."""
    raw = model if isinstance(model, str) else ""
    agent_id = an_id(raw.removeprefix("agent-")) if raw.startswith("agent-") else None
    agent = s.store.agent(agent_id) if agent_id is not None else None
    if agent is None or agent.person != who.person.id:
        raise ApiError(404, f"There is no model “{raw[:100]}”: GET /v1/models lists yours (agent-N).",
                       code="model_not_found", param="model")
    if who.key.agent is not None and who.key.agent != agent.id:
        raise ApiError(403, f"This key reaches agent-{who.key.agent} only.", "permission_error", "model_not_allowed",
                       "model")
    if not s.store.may_use(who.person.id, agent.model):
        raise ApiError(403, f"agent-{agent.id} answers with the model “{agent.model}”, which the owner keeps for "
                            "chosen people: pick another model on the agent's page.", "permission_error",
                       "model_not_allowed", "model")
    return agent.id


# --- GET /v1/models ---------------------------------------------------------------------------


@get("/v1/models")
async def models(request: Request) -> Response:
    who = caller(request)
    store = worker(request).store
    barred = store.barred(who.person.id)  # an agent set to a model kept for other people is left out
    agents = [a for a in store.agents(who.person.id) if who.key.agent in (None, a.id) and may_use(a.model, barred)]
    return Response({"object": "list", "data": [
        {"id": f"agent-{a.id}", "object": "model", "created": int(a.created), "owned_by": who.person.name,
         "name": a.name} for a in agents]})


# --- the request's body -----------------------------------------------------------------------


async def body_of(request: Request) -> dict[str, Any]:
    if int(request.headers.get("content-length") or 0) > BODY_MAX:
        raise ApiError(413, f"The request is too large: at most {BODY_MAX:,} bytes.", code="request_too_large")
    try:
        raw = await request.body()
    except TooLarge:
        raise ApiError(413, f"The request is too large: at most {BODY_MAX:,} bytes.", code="request_too_large") from None
    try:
        body = json.loads(raw)
    except ValueError:
        raise ApiError(400, "The body is not JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body is a JSON object.")
    return body


def text_of(content: object, where: str) -> str:
    """A message's content as text: a string, or a list of text parts (anything else is a 400)."""
    if content is None:
        return ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"{where}: only text parts are taken (no images or files through the API yet).",
                               param="messages")
            parts.append(part["text"])
        text = "\n".join(parts)
    else:
        raise ApiError(400, f"{where}: the content is a string or a list of text parts.", param="messages")
    if len(text) > TEXT_MAX:
        raise ApiError(400, f"{where} is too long: at most {TEXT_MAX:,} characters.", param="messages")
    return text


def messages_of(raw: object) -> tuple[list[ClientMessage], str]:
    """The client's messages, checked: (user, assistant and tool messages; the system text)."""
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "`messages` is a list of at least one message.", param="messages")
    if len(raw) > MESSAGES_MAX:
        raise ApiError(400, f"Too many messages: at most {MESSAGES_MAX} in one request.", param="messages")
    out, system = [], []
    for n, m in enumerate(raw):
        where = f"Message {n + 1}"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ApiError(400, f"{where}: its role is one of {', '.join(ROLES)}.", param="messages")
        role, text = m["role"], text_of(m.get("content"), where)
        if role in ("system", "developer"):
            system.append(text)
        elif role == "assistant":
            out.append(ClientMessage("assistant", text, calls=calls_of(m.get("tool_calls"), where)))
        elif role == "tool":
            answers = m.get("tool_call_id")
            if not isinstance(answers, str) or not answers:
                raise ApiError(400, f"{where}: a tool message names the call it answers (tool_call_id).",
                               param="messages")
            out.append(ClientMessage("tool", text, answers=answers))
        else:
            out.append(ClientMessage("user", text))
    return out, "\n\n".join(t for t in system if t.strip())


def calls_of(raw: object, where: str) -> tuple[tuple[str, str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ApiError(400, f"{where}: tool_calls is a list.", param="messages")
    out = []
    for c in raw:
        function = c.get("function") if isinstance(c, dict) else None
        if not (isinstance(function, dict) and isinstance(c.get("id"), str) and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments", ""), str)):
            raise ApiError(400, f"{where}: each tool call has an id and a function with a name and arguments.",
                           param="messages")
        out.append((c["id"], function["name"], function.get("arguments") or "{}"))
    return tuple(out)


def functions_of(raw: object) -> list[dict[str, Any]]:
    """The client's own functions (`tools`), checked: offered to the model, their calls handed back."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > TOOLS_MAX:
        raise ApiError(400, f"`tools` is a list of at most {TOOLS_MAX} functions.", param="tools")
    ours = {t.name for t in builtin_tools()} | {search_knowledge.name}
    out, seen = [], set()
    for t in raw:
        function = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
            raise ApiError(400, "Each tool is {\"type\": \"function\", \"function\": {\"name\": ...}}, its name "
                                "1 to 64 letters, digits, _ or -.", param="tools")
        if name in ours or name in seen:
            raise ApiError(400, f"The function name “{name}” is taken (by the agent's own tools, or twice).",
                           param="tools")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ApiError(400, f"The parameters of “{name}” are a JSON schema object.", param="tools")
        description = function.get("description")
        seen.add(name)
        out.append({"type": "function", "function": {"name": name, "description": description
                                                      if isinstance(description, str) else "",
                                                      "parameters": parameters or {"type": "object", "properties": {}}}})
    return out


# --- POST /v1/chat/completions ----------------------------------------------------------------


@post("/v1/chat/completions", status_code=200)
async def completions(request: Request) -> Response:
    s = worker(request)
    who = caller(request)  # before anything of the body is read
    body = await body_of(request)
    agent = agent_of(s, who, body.get("model"))
    messages, system = messages_of(body.get("messages"))
    functions = functions_of(body.get("tools"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "`stream` is true or false.", param="stream")
    if body.get("n", 1) != 1:
        raise ApiError(400, "Only one answer a request (n = 1).", param="n")
    options = body.get("stream_options") or {}
    usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
    # One transaction: the request counted (and refused past the limit), the rows it writes,
    # what it asked. One commit wakes the runner: a write before it would have had the runner
    # scan for nothing, and then wait out its gap (~100 ms) before finding the message.
    with s.store.write():
        request_row, wait = ApiKeys(s.store).count(who.person, who.key, who.settings)
        if wait:
            raise ApiError(429, f"Too many requests: at most {who.settings.per_minute} a minute. Try again in "
                                f"{wait:.0f} s.", "rate_limit_error", "rate_limit_exceeded",
                           headers={"Retry-After": str(int(wait + 0.999))})
        convo, turn, place = write(s, who, agent, request.headers.get(CONVERSATION), messages, system, functions)
        s.store.api_request_asked(request_row, convo.id, turn.id)
    transcript = Transcript(place, f"agent-{agent}", page_of(request, convo.id), frozenset(
        f["function"]["name"] for f in functions))
    before = s.store.turn_usage(turn.id)
    headers = {CONVERSATION: str(convo.id), **HEADERS}
    if stream:
        return Stream(sse(s, convo.id, transcript, who.settings, before if usage else None),
                      media_type="text/event-stream", headers=headers)
    whole = Completion()
    async for _, payload in follow(s, convo.id, transcript, who.settings):
        whole.take(payload)
    if transcript.failure and not whole.content and not whole.calls:
        raise ApiError(502, transcript.failure, "server_error", "model_error", headers={CONVERSATION: str(convo.id)})
    used = subtract(s.store.turn_usage(turn.id), before)
    return Response(whole.body(transcript, convo.id, used), headers=headers)


def write(s: Worker, who: Caller, agent: int, named: str | None, messages: list[ClientMessage], system: str,
          functions: list[dict]) -> tuple[Conversation, Item, Place]:
    """The request as rows: a new conversation of `agent` holding the messages, or, with the
    conversation's header, its new last message (or its results of the client's calls).
    (the conversation, the turn answered, where the response begins)."""
    try:
        if named is None:
            room_to_wait(s.store, who.person.id)  # the bound a page's messages have (issue 38's queue)
            convo, turn = s.store.start_api_conversation(agent, who.person.id, messages, system, functions)
            return convo, turn, Place(turn.id)
        convo = continued(s, who, agent, named)
        with s.store.write():
            s.store.set_api_chat(convo.id, system, functions)
            if messages[-1].role == "user":
                room_to_wait(s.store, who.person.id, convo.id)
                turn = s.store.ask(convo.id, messages[-1].text)
                return convo, turn, Place(turn.id)
            last = s.store.last_turn(convo.id)
            results = trailing_results(messages)
            waiting = {f"call_{c.id}": c.id for c in s.store.client_calls(convo.id, last.id)} if last else {}
            unknown = [r for r in results if r not in waiting]
            if last is None or unknown:
                raise NotWritten(f"The tool results answer no call of this conversation that waits for one: "
                                 f"{', '.join(unknown)[:200] or 'none waits'}.")
            turn = s.store.client_results(convo.id, last.id, {waiting[r]: text for r, text in results.items()})
            return convo, turn, Place(turn.id, start=max(waiting.values()))
    except NotWritten as e:
        raise ApiError(400, str(e), param="messages") from None


def continued(s: Worker, who: Caller, agent: int, named: str) -> Conversation:
    chat = an_id(named.strip())
    convo = s.store.conversation(chat) if chat is not None else None
    if convo is None or convo.person != who.person.id:
        raise ApiError(404, f"There is no conversation “{named[:40]}” of yours to continue.",
                       code="conversation_not_found")
    if convo.agent != agent:
        raise ApiError(400, f"Conversation {convo.id} is with agent-{convo.agent}: name that model to continue it.",
                       param="model")
    return convo


def trailing_results(messages: list[ClientMessage]) -> dict[str, str]:
    """The tool messages at the end of a request: the client's results, by the call they answer."""
    out: dict[str, str] = {}
    for m in reversed(messages):
        if m.role != "tool":
            break
        out[m.answers] = m.text
    return out


def page_of(request: Request, chat: int) -> str:
    scheme = "https" if request.headers.get("x-forwarded-proto", "").lower() == "https" else request.url.scheme
    return f"{scheme}://{request.url.netloc}/c/{chat}"


def subtract(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: now[k] - before.get(k, 0) for k in now}


# --- following the answer ---------------------------------------------------------------------


async def follow(s: Worker, chat: int, transcript: Transcript, settings: ApiSettings,
                 keepalive: bool = False) -> AsyncIterator[tuple[str | None, dict[str, Any] | None]]:
    """The transcript's chunks as the turn's rows change, until the turn ends; (None, None)
    when a keep-alive is due (`keepalive`). A call that waits for approval longer than the
    owner's `approval_seconds` is declined, in those words."""
    turn = transcript.place.turn
    watcher = s.feed.watch(chat)  # before reading: nothing committed after is missed
    try:
        items = {it.id: it for it in s.store.turn_items(chat, turn, turn)}
        if not items:
            transcript.failure = "The conversation was deleted."
            return
        yield transcript.start()
        while True:
            for place, payload in transcript.advance(list(items.values()), time.monotonic()):
                yield place, payload
            user = items.get(turn)
            if user is None or user.done:
                break
            if s.feed.closed:
                return  # shutdown: the client comes back with its place
            due = [since + settings.approval_seconds for since in transcript.approvals.values()]
            wait = min([KEEPALIVE_SECONDS, *[d - time.monotonic() for d in due]])
            if wait <= 0:
                for call in list(transcript.approvals):
                    if transcript.approvals[call] + settings.approval_seconds <= time.monotonic():
                        s.store.decline_unapproved(call, f"Not approved within {settings.approval_seconds} s of the "
                                                         "API request that waited for it, so it was declined.")
                        transcript.approvals.pop(call)
            else:
                before = watcher.rev
                await watcher.wait(wait)
                if keepalive and watcher.rev == before and not watcher.items and not watcher.gone:
                    yield None, None
            changed, gone = watcher.take()
            for it in changed:
                if it.turn == turn:
                    items[it.id] = it
            for dom in gone:
                if dom == f"c{chat}":
                    items.pop(turn, None)  # deleted: the turn ends
                    transcript.failure = "The conversation was deleted."
                elif dom.startswith("i") and dom[1:].isdigit():
                    items.pop(int(dom[1:]), None)
    finally:
        s.feed.unwatch(watcher)


def sse_message(place: str | None, payload: dict[str, Any]) -> bytes:
    return (f"id: {place}\n" if place else "").encode() + b"data: " + json.dumps(payload, ensure_ascii=False,
                                                                                 separators=(",", ":")).encode() + b"\n\n"


async def sse(s: Worker, chat: int, transcript: Transcript, settings: ApiSettings,
              before: dict[str, int] | None) -> AsyncIterator[bytes]:
    """The stream of a turn's answer; with `before` (include_usage), its usage since then last."""
    async for place, payload in follow(s, chat, transcript, settings, keepalive=True):
        yield b": keep-alive\n\n" if payload is None else sse_message(place, payload)
    if s.feed.closed and not transcript_ended(s, chat, transcript):
        return  # shutdown: no [DONE], so the client knows to come back
    used = subtract(s.store.turn_usage(transcript.place.turn), before) if before is not None else None
    for place, payload in transcript.end(used):
        yield sse_message(place, payload)
    yield b"data: [DONE]\n\n"


def transcript_ended(s: Worker, chat: int, transcript: Transcript) -> bool:
    user = s.store.item(transcript.place.turn)
    return user is None or user.done


# --- GET /v1/conversations/{id}/stream --------------------------------------------------------


@get("/v1/conversations/{chat:str}/stream")
async def stream_again(request: Request, chat: FromPath[str]) -> Response:
    """The rest of a conversation's last answer, from the place in `Last-Event-ID` (else from
    where its last request began): for a client that dropped, or a server that restarted."""
    s = worker(request)
    who = caller(request)
    chat_id = an_id(chat)
    convo = s.store.conversation(chat_id) if chat_id is not None else None
    if convo is None or convo.person != who.person.id or (who.key.agent not in (None, convo.agent)):
        raise ApiError(404, "No such conversation of yours.", code="conversation_not_found")
    brought = s.store.api_chat(convo.id)
    client = frozenset(f["function"]["name"] for f in (brought[1] if brought else []))
    place = Place.parse(request.headers.get("last-event-id"))
    if place is None:
        last = s.store.last_turn(convo.id)
        if last is None:
            raise ApiError(404, "That conversation has no answer to follow yet.", code="conversation_not_found")
        answered = [c.id for c in s.store.turn_items(convo.id, last.id, last.id)
                    if c.kind == "call" and c.name in client and c.state == "done" and not c.dispatched]
        place = Place(last.id, start=max(answered, default=0))
    else:
        turn = s.store.item(place.turn)
        if turn is None or turn.chat != convo.id:
            raise ApiError(404, "That place is not in this conversation.", code="conversation_not_found")
    transcript = Transcript(place, f"agent-{convo.agent}", page_of(request, convo.id), client)
    return Stream(sse(s, convo.id, transcript, who.settings, {"prompt": 0, "completion": 0, "cached": 0,
                                                              "requests": 0, "estimated": 0}),
                  media_type="text/event-stream", headers={CONVERSATION: str(convo.id), **HEADERS})


routes = [models, completions, stream_again]
