"""The agent loop, pure: a scripted stream function in, a sequence of events out."""
import asyncio

from app import agent as loop
from app.agent import Delta, Message, ModelError
from app.tools import Result, Tool


def scripted(*steps):
    """A stream function answering each model step with the next list of deltas (or an error)."""
    queue = list(steps)
    seen: list[list[Message]] = []

    async def stream(messages, tools):
        seen.append(list(messages))
        step = queue.pop(0)
        if isinstance(step, Exception):
            raise step
        for d in step:
            if isinstance(d, Exception):
                raise d
            yield d

    stream.seen = seen
    return stream


def echo_tool(name="echo", fail=False, idempotent=False):
    async def run(args, ctx):
        ctx.progress("working")
        if fail:
            raise RuntimeError("disk on fire")
        return Result(f"echo: {args.get('text', '')}")

    return Tool(name, "Echo text back", {"type": "object", "properties": {"text": {"type": "string"}}}, run,
                idempotent=idempotent)


def call(name, args, index=0, id="c1"):
    return Delta(call_index=index, call_id=id, call_name=name, call_arguments=args)


def run(history, tools, stream):
    events = []
    asyncio.run(loop.run(history, tools, stream, events.append))
    return events, list(events[-1].messages)  # what the run added comes with AgentEnd


def kinds(events):
    out = []
    for e in events:
        name = type(e).__name__
        if hasattr(e, "kind"):
            name += f":{e.kind}"
        out.append(name)
    return out


def test_a_plain_answer_is_one_turn_of_nested_lifecycles():
    stream = scripted([Delta(reasoning="hm"), Delta(text="Hel"), Delta(text="lo"),
                       Delta(usage={"prompt": 10, "completion": 2})])
    events, added = run([Message("user", "hi")], [], stream)
    assert kinds(events) == [
        "AgentStart", "StepStart",
        "MessageStart:reasoning", "MessageUpdate:reasoning",
        "MessageStart:text", "MessageUpdate:text", "MessageUpdate:text",
        "Usage", "MessageEnd",
        "StepEnd", "AgentEnd",
    ]
    assert events[6].text == "Hello" and events[6].delta == "lo"
    assert events[8].message == Message("assistant", "Hello") and events[8].reasoning == "hm"
    assert added == [Message("assistant", "Hello")]


def test_tool_calls_loop_back_to_the_model_with_their_results():
    stream = scripted(
        [Delta(text="Let me check."), call("echo", '{"te'), Delta(call_index=0, call_arguments='xt": "a"}')],
        [Delta(text="It said a.")],
    )
    events, added = run([Message("user", "echo a")], [echo_tool()], stream)
    assert [type(e).__name__ for e in events].count("StepStart") == 2
    end = next(e for e in events if isinstance(e, loop.MessageEnd))
    assert end.message.tool_calls == (loop.ToolCall("c1", "echo", '{"text": "a"}'),)
    assert events.index(end) < next(i for i, e in enumerate(events) if isinstance(e, loop.ToolStart)), \
        "a step's message (with its calls) is complete before any tool runs"
    tool_events = [e for e in events if type(e).__name__.startswith("Tool")]
    assert [type(e).__name__ for e in tool_events] == ["ToolStart", "ToolDispatched", "ToolUpdate", "ToolEnd"]
    assert tool_events[-1].ok and tool_events[-1].output == "echo: a"
    second_request = stream.seen[1]
    assert second_request[-2].tool_calls[0].arguments == '{"text": "a"}'
    assert second_request[-1] == Message("tool", "echo: a", tool_call_id="c1")
    assert added[-1] == Message("assistant", "It said a.")


def test_failures_are_data_the_model_sees():
    stream = scripted(
        [call("nope", "{}", 0, "a"), call("echo", "{not json", 1, "b"), call("boom", '{"text": "x"}', 2, "c"),
         call("echo", "[1, 2]", 3, "d"), call("echo", '{"text": 1}', 4, "e")],
        [Delta(text="I see the errors.")],
    )
    events, added = run([Message("user", "go")], [echo_tool(), echo_tool("boom", fail=True)], stream)
    ends = [e for e in events if isinstance(e, loop.ToolEnd)]
    assert [e.ok for e in ends] == [False, False, False, False, False]
    assert "no tool named 'nope'" in ends[0].output
    assert "not valid JSON" in ends[1].output
    assert "disk on fire" in ends[2].output
    assert "JSON object" in ends[3].output
    assert "do not fit the tool's parameters: text: 1 is not of type 'string'" in ends[4].output
    results = [m for m in stream.seen[1] if m.role == "tool"]
    assert [m.tool_call_id for m in results] == ["a", "b", "c", "d", "e"]
    assert added[-1].content == "I see the errors."


def test_a_model_error_ends_the_run_as_an_event_not_an_exception():
    stream = scripted([Delta(text="Partial"), ModelError("The model server failed (500).")])
    events, added = run([Message("user", "hi")], [], stream)
    assert kinds(events)[-4:] == ["MessageEnd", "Failed", "StepEnd", "AgentEnd"]
    assert events[-4].message.content == "Partial" and events[-4].complete is False
    assert events[-3].message == "The model server failed (500)."
    assert added == []


def test_a_model_error_before_any_output():
    events, _ = run([Message("user", "hi")], [], scripted(ModelError("Could not reach the model server.")))
    assert kinds(events) == ["AgentStart", "StepStart", "Failed", "StepEnd", "AgentEnd"]


def test_a_run_that_never_stops_calling_tools_is_cut_off():
    stream = scripted(*[[call("echo", "{}", 0, f"c{i}")] for i in range(3)])
    events = []
    asyncio.run(loop.run([Message("user", "loop")], [echo_tool()], stream, events.append, max_steps=3))
    assert isinstance(events[-2], loop.Failed) and "3 steps" in events[-2].message


def test_cancellation_propagates_so_a_run_can_be_stopped():
    async def slow(messages, tools):
        yield Delta(text="a")
        await asyncio.sleep(10)
        yield Delta(text="b")

    async def main():
        events = []
        task = asyncio.create_task(loop.run([Message("user", "hi")], [], slow, events.append))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return events
        raise AssertionError("the loop swallowed the cancellation")

    events = asyncio.run(main())
    assert kinds(events)[-1] == "MessageUpdate:text"


def test_a_growing_answer_is_kept_as_pieces_and_joined_when_read():
    """Each update says the text as it was then, without copying the text at each chunk:
    the pieces are joined when read (the runner binds the latest one in SQL)."""
    import sqlite3
    pieces = loop.Pieces()
    updates = [pieces.add(w) for w in ("a", "bc", "d")]
    assert pieces._pieces == ["a", "bc", "d"]  # nothing joined yet
    assert [str(u) for u in updates] == ["a", "abc", "abcd"]
    assert pieces._pieces == ["abcd"]  # joined once, kept joined
    later = pieces.add("e")
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (text TEXT)")
    db.executemany("INSERT INTO t VALUES (?)", [[later], [updates[1]]])
    assert [r[0] for r in db.execute("SELECT text FROM t")] == ["abcde", "abc"]


def test_messages_become_the_chat_completions_shape():
    m = Message("assistant", "", tool_calls=(loop.ToolCall("c1", "echo", '{"text": "a"}'),))
    assert m.to_api() == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "a"}'}}]}
    assert Message("tool", "out", tool_call_id="c1").to_api() == {"role": "tool", "content": "out", "tool_call_id": "c1"}


def test_a_gate_can_hold_a_call_and_decline_it():
    asked = []

    async def gate(call):
        asked.append(call.name)
        await asyncio.sleep(0.01)  # waiting for the person
        return "The person declined this call." if call.id == "no" else None

    stream = scripted([call("echo", '{"text": "a"}', 0, "no"), call("echo", '{"text": "b"}', 1, "yes")],
                      [Delta(text="ok")])
    events = []
    asyncio.run(loop.run([Message("user", "go")], [echo_tool()], stream, events.append, gate=gate))
    assert asked == ["echo", "echo"]
    declined = [e for e in events if isinstance(e, loop.ToolDeclined)]
    assert [d.call.id for d in declined] == ["no"]
    assert [e.call.id for e in events if isinstance(e, loop.ToolStart)] == ["yes"]
    results = {m.tool_call_id: m.content for m in stream.seen[1] if m.role == "tool"}
    assert results == {"no": "The person declined this call.", "yes": "echo: b"}


def test_steering_messages_go_in_at_the_step_boundary_after_the_calls():
    stream = scripted([call("echo", '{"text": "a"}')], [Delta(text="Done.")])
    inbox = [[], [Message("user", "b")], [], []]  # the person sends "b" while the call runs

    def steering():
        return inbox.pop(0)

    events = []
    asyncio.run(loop.run([Message("user", "go")], [echo_tool()], stream, events.append, steering=steering))
    added = events[-1].messages
    assert [(m.role, m.content) for m in stream.seen[1]][-3:] == [("assistant", ""), ("tool", "echo: a"), ("user", "b")]
    assert len(stream.seen) == 2, "the model finished after reading it: nothing else was sent meanwhile"
    assert added[-1] == Message("assistant", "Done.")


def test_a_message_sent_as_the_model_finishes_brings_one_more_step():
    stream = scripted([Delta(text="Done.")], [Delta(text="And b: yes.")])
    inbox = [[], [Message("user", "b")], []]
    asyncio.run(loop.run([Message("user", "go")], [], stream, lambda e: None, steering=lambda: inbox.pop(0)))
    assert [m.content for m in stream.seen[1]] == ["go", "Done.", "b"]


def test_a_request_that_cannot_be_prepared_fails_in_plain_words():
    def prepare():
        raise ModelError("Your message is too long.")

    stream = scripted()
    events = []
    asyncio.run(loop.run([Message("user", "x" * 10)], [], stream, events.append, prepare=prepare))
    assert stream.seen == [] and [e.message for e in events if isinstance(e, loop.Failed)] == ["Your message is too long."]


def test_a_bare_mcp_name_is_answered_with_the_plugin_tool_it_means():
    from dataclasses import replace

    fs_read = replace(echo_tool("fs_read_text_file"), plugin="fs")
    other = replace(echo_tool("git_read_text"), plugin="git")
    stream = scripted([call("read_text_file", "{}", 0, "a"), call("read", "{}", 1, "b")], [Delta(text="ok")])
    events, _ = run([Message("user", "go")], [fs_read, other, echo_tool("read_text")], stream)
    ends = [e.output for e in events if isinstance(e, loop.ToolEnd)]
    assert ends[0] == "Error: there is no tool named 'read_text_file'. Did you mean 'fs_read_text_file'?"
    assert ends[1] == "Error: there is no tool named 'read'.", "no guess when it is not one tool"
