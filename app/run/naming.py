"""A conversation's title: its first words at once (Store.add), then, after the first
answer, a short request to the model names it (after every answer waiting at a server that
answers one request at a time); on any failure, or an answer that is no title
(app/titles.py), the first words stay."""
from __future__ import annotations

from .. import agent as loop
from ..providers.client import Providers
from ..store import Store
from ..tables import Item
from ..titles import first_words, title_from

TITLE_PROMPT = ("Name this conversation in at most six words, in the language it is written in. "
                "Answer with the name only: no quotes, no full stop.")


async def name_conversation(store: Store, providers: Providers, chat: int, user: Item, model: str) -> None:
    """Name the conversation after the answer to `user`, when `user` is its first message
    and the title is still its first words (the person did not rename it)."""
    convo = store.conversation(chat)
    if convo is None or store.first_message(chat) != user.id or convo.title != first_words(user.text) or not model:
        return
    answer = store.answer_text(user.id)
    if not answer.strip():
        return
    try:
        title = await providers.complete(model, [
            loop.Message("system", TITLE_PROMPT),
            loop.Message("user", f"{user.text[:2000]}\n\n---\n\n{answer[:2000]}"),
        ], max_tokens=30)
    except loop.ModelError:
        return
    title = title_from(title)  # at most six words, or none: a sentence or a heading is no title
    if title and (now := store.conversation(chat)) is not None and now.title == convo.title:
        store.set_title(chat, title)
