"""The Python API drives a conversation without HTTP."""
import asyncio
import time

from app import api
from app import config as configuration
from tests.fakes.openai_server import text


def test_the_api_exports_the_seeds_functions_with_docstrings():
    for name in ["item", "asked", "retried", "stopped", "decided", "assistant", "plugin", "skill",
                 "serve", "choice_of", "in_use", "chips", "keyed", "groups", "shapes"]:
        fn = getattr(api, name)
        assert callable(fn) and fn.__doc__ and fn.__doc__.strip(), name


def test_shapes_describe_every_table_from_the_migrations():
    shapes = api.shapes()
    assert {"assistants", "conversations", "items", "choices", "plugins", "skills", "memories",
            "contexts", "files", "runs"} <= set(shapes)
    items = {c["name"]: c for c in shapes["items"]}
    assert items["kind"]["notnull"] and items["id"]["pk"] and "turn" in items


def test_a_conversation_driven_through_the_api(env, data, fake):
    fake.script([text("Hello from the runner.")])
    store = api.open(data)
    agent = store.default_agent()
    chat = store.new_conversation(agent.id)
    question = store.add(api.asked(chat.id, "Hi, library"))

    def answered():
        row = store.item(question.id)
        return row is not None and row.done

    started = time.monotonic()
    asyncio.run(asyncio.wait_for(api.serve(configuration.load(), until=answered), 20))
    assert time.monotonic() - started < 20
    texts = [it.text for it in store.items(chat.id) if it.kind == "text"]
    assert texts == ["Hello from the runner."]
    blocks = api.keyed(texts[0], "k")
    assert [b.id for b in blocks] == ["k-0"] and "Hello from the runner." in blocks[0].html
    assert fake.streamed[0]["messages"][-1] == {"role": "user", "content": "Hi, library"}
