"""Turn setup without a runner: what a turn is answered with, from the rows and the settings."""
import asyncio
from dataclasses import replace
from pathlib import Path

from app.config import Config
from app.plugins.sessions import Sessions
from app.providers.client import Providers, no_model
from app.providers.ids import Choice
from app.run.turn_setup import NO_SERVER, TurnSetup
from app.run.writes import Writes


def config(**values) -> Config:
    base = Config(data=Path("."), ai_url="", ai_key="", ai_model="", ollama_host="", private_plugins=False,
                  context_window=8192, model_timeout=60)
    return replace(base, **values)


def setup_of(store, **values) -> TurnSetup:
    c = config(**values)
    return TurnSetup(c, store, Providers(c), Sessions())


def turn_of(setup, store, chat, user, retry=None):
    return asyncio.run(setup.turn(chat, user, retry, Writes(store)))


def test_the_model_comes_from_again_then_the_pick_then_the_message_then_the_agent(store):
    agent = store.default_agent()
    store.update_agent(agent.id, model="agent-model", thinking="low")
    chat = store.new_conversation(agent.id).id
    setup = setup_of(store, ai_model="default-model")
    user = store.ask(chat, "Hi", model="asked-model")
    turn = turn_of(setup, store, chat, user)
    assert (turn.model, turn.thinking) == ("asked-model", "low"), "a message's own model, the agent's thinking"
    store.set_choice(chat, "picked-model", "high")
    assert turn_of(setup, store, chat, user).model == "asked-model", "a new message keeps the model it named"
    again = store.again(user)
    turn = turn_of(setup, store, chat, user, again)
    assert (turn.model, turn.thinking) == ("picked-model", "high"), "Again without a model: the composer's pick"
    named = store.again(user, "again-model")
    assert turn_of(setup, store, chat, user, named).model == "again-model"
    plain = store.ask(chat, "And?")
    assert turn_of(setup, store, chat, plain).model == "picked-model", "a message without one: the pick"
    store.set_choice(chat, "", "")
    assert turn_of(setup, store, chat, store.ask(chat, "More")).model == "agent-model"
    store.update_agent(agent.id, model="")
    assert turn_of(setup, store, chat, store.ask(chat, "Again more")).model == "default-model", "AI_MODEL"


def test_tools_approval_window_and_images_come_from_the_agent_and_the_model_list(store):
    agent = store.default_agent()
    store.update_agent(agent.id, tools="fetch_page,update_plan", approve="update_plan")
    chat = store.new_conversation(agent.id).id
    store.replace_choices([Choice(id="big", name="big", group="Server", window=128_000),
                           Choice(id="blind", name="blind", group="Server", tags=("no-images",))])
    setup = setup_of(store)
    user = store.ask(chat, "Hi", model="big")
    turn = turn_of(setup, store, chat, user)
    assert [t.name for t in turn.tools] == ["fetch_page", "update_plan"]
    assert turn.approve == {"update_plan"}
    assert (turn.window, turn.images) == (128_000, True)
    turn = turn_of(setup, store, chat, store.ask(chat, "Look", model="blind"))
    assert (turn.window, turn.images) == (8192, False), "no window listed: TABLETALK_CONTEXT_WINDOW"


def test_why_a_turn_cannot_be_sent_is_said_in_plain_words(store):
    chat = store.new_conversation(None).id
    assert setup_of(store).unready("m", chat) == NO_SERVER
    served = setup_of(store, ai_url="http://127.0.0.1:9/v1")
    assert served.unready("", chat) == no_model(store.choices())
    assert served.unready("m", chat) == ""
    # a model of a connection the owner keeps for chosen people: refused to anyone else
    team = store.add_connection("Team", "team", "openai", "http://127.0.0.1:9/v1", "")
    store.set_connection_people(team, False, frozenset())
    assert served.unready("team:big", chat).startswith("You may not use the model “team:big”")
    assert served.unready("m", chat) == "" and served.unready("llama3:8b", chat) == ""


def test_web_search_is_offered_once_a_provider_is_chosen_and_the_switch_gives_it_for_one_message(store):
    agent = store.default_agent()
    chat = store.new_conversation(agent.id).id
    setup = setup_of(store)

    def tools(user):
        return [t.name for t in turn_of(setup, store, chat, user).tools]

    assert "web_search" not in tools(store.ask(chat, "Hi")), "no provider chosen: not offered"
    assert "web_search" not in tools(store.ask(chat, "Look it up", search_web=True))
    store.choose_search_provider("searxng", "http://127.0.0.1:9")
    assert tools(store.ask(chat, "Hi"))[:2] == ["fetch_page", "web_search"]
    store.update_agent(agent.id, tools="update_plan")
    assert tools(store.ask(chat, "Hi")) == ["update_plan"]
    assert tools(store.ask(chat, "Look it up", search_web=True)) == ["fetch_page", "web_search", "update_plan"], \
        "the switch gives the search and the page fetch for its message, whatever the tools tab says"
