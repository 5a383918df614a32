"""What went wrong with a model server, in words a person reads (never a traceback)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx2

from .servers import Endpoint

if TYPE_CHECKING:
    import openai


ENDED_EARLY = ("The model server ended the answer early: it stopped sending without saying the answer was "
               "finished (a server that answers one request at a time may end one when another arrives). "
               "What was written is kept; press Again for a whole answer.")
EMPTY_REPLY = ("The model server answered with an empty reply (no answer and no error). "
               "Try again, or check the model server's log.")


def server_says(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            # llama.cpp's server gives the window and the request's size as fields of their own
            sizes = ", ".join(f"{k}: {err[k]}" for k in ("n_prompt_tokens", "n_ctx") if isinstance(err.get(k), int))
            return err["message"][:300] + (f" ({sizes})" if sizes else "")
    return ""


def plain_words(e: Exception, endpoint: Endpoint) -> str:
    """What went wrong, for the person reading the conversation (never a traceback)."""
    import openai  # imported already by the request that failed (client.py)

    says = server_says(e) if isinstance(e, openai.APIStatusError) else ""
    tail = f" The server said: “{says}”" if says else ""
    if isinstance(e, openai.APITimeoutError):
        return "The model server stopped sending anything and the request was given up."
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e.__context__
        if isinstance(cause, (httpx2.RemoteProtocolError, httpx2.ReadError)):
            return "The connection to the model server was cut before the answer was finished."
        return f"Could not reach the model server at {endpoint.base_url}. Is it running?"
    if isinstance(e, openai.AuthenticationError):
        return f"The model server refused the key (401). Check {endpoint.key_setting}.{tail}"
    if isinstance(e, openai.PermissionDeniedError):
        return f"The model server does not allow this request (403).{tail}"
    if isinstance(e, openai.NotFoundError):
        return f"The model server does not know the model “{endpoint.model}”.{tail}"
    if isinstance(e, openai.RateLimitError):
        return f"The model server is busy or over its limit (429); try again in a moment.{tail}"
    if isinstance(e, openai.APIStatusError):
        if e.status_code >= 500:
            return f"The model server failed ({e.status_code}); try again in a moment.{tail}"
        return f"The model server turned the request down ({e.status_code}).{tail}"
    if isinstance(e, (json.JSONDecodeError, openai.APIResponseValidationError, ValueError)):
        return "The model server sent a reply that could not be read."
    if isinstance(e, (httpx2.RemoteProtocolError, httpx2.ReadError)):
        return "The connection to the model server was cut before the answer was finished."
    if isinstance(e, httpx2.TimeoutException):
        return "The model server stopped sending anything and the request was given up."
    if isinstance(e, openai.APIError):
        return f"The model server answered with an error: {e.message[:300]}"
    return f"Something went wrong talking to the model server ({type(e).__name__})."
