"""Items to model messages: the one place a conversation's log becomes a request."""
from app import branches
from app.agent import Message, ToolCall
from app.context.segments import segments, system_prompt
from app.tables import assistant, item


def to_messages(agent, items):
    """The request's messages for a conversation whose log is `items`: the system prompt,
    then the current path (branches.on_path) as the model is sent it."""
    prompt = system_prompt(agent)
    head = [Message("system", prompt)] if prompt else []
    return head + [m for s in segments(branches.on_path(items)) for m in s.messages]


def it(kind, id, turn, text="", **kw):
    return item(kind, 1, text, id=id, turn=turn, **kw)


def test_messages_hold_the_persons_words_answers_and_calls_not_reasoning_or_errors():
    agent = assistant(1, "A", instructions="Be brief.")
    items = [
        it("user", 1, 1, "Weather?"),
        it("reasoning", 2, 1, "I should look it up."),
        it("text", 3, 1, "Let me check."),
        it("call", 4, 1, name="weather", input='{"city": "Oslo"}', output="rain", state="done", done=True),
        it("text", 5, 1, "It rains."),
        it("user", 6, 6, "Thanks", parent=1),
        it("error", 7, 6, "The model server failed (500)."),
    ]
    assert to_messages(agent, items) == [
        Message("system", "Be brief."),
        Message("user", "Weather?"),
        Message("assistant", "Let me check.", tool_calls=(ToolCall("call_4", "weather", '{"city": "Oslo"}'),)),
        Message("tool", "rain", tool_call_id="call_4"),
        Message("assistant", "It rains."),
        Message("user", "Thanks"),
    ]


def test_a_stopped_answer_goes_as_far_as_it_got():
    items = [it("user", 1, 1, "Count"), it("text", 2, 1, "1, 2, 3,", done=True), it("stop", 3, 1)]
    assert to_messages(None, items)[-1] == Message("assistant", "1, 2, 3,")


def test_only_the_newest_version_of_an_answer_is_sent():
    items = [it("user", 1, 1, "Joke?"), it("text", 2, 1, "Old joke."), it("retry", 3, 1),
             it("text", 4, 1, "New joke."), it("user", 5, 5, "Another", parent=3)]
    assert [m.content for m in to_messages(None, items)] == ["Joke?", "New joke.", "Another"]
    # with the first version chosen, the path goes through it (and "Another" followed the second)
    chosen = [it("user", 1, 1, "Joke?", answer=1), *items[1:]]
    assert [m.content for m in to_messages(None, chosen)] == ["Joke?", "Old joke."]


def test_after_an_edit_only_the_current_branch_is_sent():
    # "Hi" was answered, then edited to "Hello" (a sibling: the same parent, 0), answered anew
    items = [it("user", 1, 1, "Hi", chosen=1), it("text", 2, 1, "Hi there."), it("user", 3, 3, "More?", parent=1, chosen=3),
             it("text", 4, 3, "Sure."), it("user", 5, 5, "Hello", chosen=5), it("text", 6, 5, "Hello to you.")]
    assert [m.content for m in to_messages(None, items)] == ["Hello", "Hello to you."]
    back = [it("user", 1, 1, "Hi", chosen=9), *items[1:]]  # the pager went back to the first version
    assert [m.content for m in to_messages(None, back)] == ["Hi", "Hi there.", "More?", "Sure."]


def test_calls_without_a_result_say_why():
    items = [it("user", 1, 1, "go"),
             it("call", 2, 1, name="a", input="{}", state="declined"),
             it("call", 3, 1, name="b", input="{}", state="approval"),
             it("call", 4, 1, name="c", input="{}", state="failed", output="Interrupted by a restart."),
             it("call", 5, 1, name="d", input="{}", state="done", output="", done=True)]  # an MCP result with no content
    tool_messages = [m.content for m in to_messages(None, items) if m.role == "tool"]
    assert tool_messages == ["The person declined this call.", "This call is waiting for the person's approval.",
                             "Interrupted by a restart.", "The tool finished and returned nothing."]

