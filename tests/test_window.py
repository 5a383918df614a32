"""window.py, pure: the estimate, its calibration, and the choice of what a long conversation sends."""
import random

import pytest

from app.context import window
from app.agent import Message, ToolCall
from app.context.segments import segments
from app.tables import item
from app.context.window import Span, Cut, TooLong, choose, cost, learn


def test_the_raw_count_is_characters_over_four_plus_framing():
    assert window.raw_tokens(Message("user", "x" * 400)) == 100 + window.MESSAGE_TOKENS
    call = Message("assistant", "", tool_calls=(ToolCall("c1", "look", '{"q": "otters"}'),))
    assert window.raw_tokens(call) == (4 + 15) // 4 + window.MESSAGE_TOKENS + window.CALL_TOKENS
    image = Message("user", [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:" + "A" * 90_000}}])
    assert window.raw_tokens(image) == window.MESSAGE_TOKENS + window.IMAGE_TOKENS, "an image's bytes are not its tokens"


def test_calibration_converges_to_the_servers_count_and_follows_drift():
    rng = random.Random(8)
    ratio, samples = 1.0, 0
    errors = []
    for _ in range(30):
        raw = rng.randint(500, 5000)
        reported = round(raw * 1.37 * rng.uniform(0.97, 1.03))  # a tokenizer denser than ours, with noise
        errors.append(abs(window.calibrated(raw, ratio) - reported) / reported)
        ratio, samples = learn(ratio, samples, raw, reported)
    assert errors[0] > 0.25, "before calibration the estimate is off by the tokenizer's difference"
    assert max(errors[-10:]) < 0.05, f"after calibration it is within the noise: {errors[-10:]}"
    for _ in range(15):  # the server changed its tokenizer: the ratio follows
        ratio, samples = learn(ratio, samples, 1000, 900)
    assert abs(ratio - 0.9) < 0.02


def test_nonsense_reports_teach_nothing():
    assert learn(1.2, 5, 1000, 0) == (1.2, 5)
    assert learn(1.2, 5, 0, 500) == (1.2, 5)
    assert learn(1.2, 5, 1000, 50_000) == (1.2, 5), "a usage 50x the request is a server's quirk"


def turns(n, size=100, long_output=0):
    """n turns of `size` raw tokens each (a call with a long output adds `long_output`)."""
    out = []
    for t in range(1, n + 1):
        out.append(Span(t * 10, True, size + long_output, size + min(long_output, 20)))
    return out


def test_a_view_that_fits_is_kept_as_it_is():
    spans = turns(5)
    assert choose(spans, 50, Cut(0, 0), budget=1000) == Cut(0, 0)
    assert choose(spans[2:], 50, Cut(30, 30), budget=1000) == Cut(30, 30), "a cut view stays put while it fits"


def test_long_outputs_go_first_then_the_oldest_turns_in_one_chunk():
    spans = turns(10, size=100, long_output=200)  # 3,000 raw tokens, 1,200 once outputs are shortened
    cut = choose(spans, 0, Cut(), budget=2500)
    assert cut.start == 0 and cut.trim > 0, "shortening outputs was enough: no turn is left out"
    assert cost(spans, 0, cut) <= 2500 * window.PRUNE_TO
    cut = choose(spans, 0, Cut(), budget=900)
    assert cut.start > 10 and cost(spans, 0, cut) <= 900 * window.PRUNE_TO, "then whole early turns"
    assert cut.trim == 100, "everything before the latest turn is shortened"
    # Hysteresis: with room left after the cut, the next turns are added without moving it.
    grown, moves = list(spans), 0
    for t in range(11, 30):
        grown.append(Span(t * 10, True, 300, 120))
        now = choose([b for b in grown if b.turn >= cut.start], 0, cut, budget=900)
        moves += now != cut
        cut = now
        assert cost(grown, 0, cut) <= 900
    assert moves <= 19 // 2, f"the view moved {moves} times in 19 turns: it must move in chunks"


def test_the_quick_sums_agree_with_the_plain_count():
    rng = random.Random(3)
    spans = []
    for t in range(1, 40):
        spans.append(Span(t, True, rng.randint(5, 90), 5))
        spans.extend(Span(t, False, rng.randint(5, 900), rng.randint(5, 60)) for _ in range(rng.randint(0, 3)))
    sums = window._Sums(spans)
    for _ in range(500):
        cut = Cut(rng.choice([0, *range(1, 41)]), rng.choice([0, *range(1, 42)]), rng.randint(0, len(spans) + 2))
        assert sums.cost(7, cut) == cost(spans, 7, cut), cut


def test_the_latest_turn_is_never_left_out_and_its_older_outputs_go_before_an_error():
    spans = [Span(10, True, 100, 100), Span(20, True, 50, 50), Span(20, False, 900, 60), Span(20, False, 80, 80)]
    cut = choose(spans, 0, Cut(), budget=600)
    assert cut.start == 20 and cut.inner == 3, "only the latest turn, its older long output shortened"
    assert cost(spans, 0, cut) == 50 + 60 + 80
    with pytest.raises(TooLong) as e:
        choose([Span(10, True, 5000, 5000)], 100, Cut(), budget=1000, ratio=1.5)
    assert e.value.tokens == round(5100 * 1.5)


def it(kind, id, turn, text="", **kw):
    return item(kind, 1, text, id=id, turn=turn, **kw)


def test_segments_never_part_a_call_from_its_result_and_cut_only_at_turns():
    items = [it("user", 1, 1, "a"), it("text", 2, 1, "calling"),
             it("call", 3, 1, name="f", input="{}", output="x" * 5000, state="done", done=True),
             it("call", 4, 1, name="g", input="{}", output="ok", state="done", done=True),
             it("text", 5, 1, "done"), it("user", 6, 6, "b")]
    segs = segments(items)
    assert [(s.turn, s.starts) for s in segs] == [(1, True), (1, False), (6, True)]
    first = segs[0].messages
    assert [m.role for m in first] == ["user", "assistant", "tool", "tool"], "the calls and their results together"
    short = segs[0].short
    assert len(short[2].content) < 600 and "left out to save room" in short[2].content
    assert short[3].content == "ok", "short outputs stay whole"
    assert segs[2].short is segs[2].messages, "a segment with no long output is not copied"


def test_a_steering_message_stands_where_the_model_read_it():
    # "b" was sent (id 4) while the model streamed the step that then made call 5; it was
    # read after that call's result, so it follows the call, not its own id.
    items = [it("user", 1, 1, "go"), it("text", 2, 1, "on it"),
             it("user", 4, 1, "b", steer=True, read_after=5, done=True),
             it("call", 5, 1, name="f", input="{}", output="r", state="done", done=True),
             it("text", 6, 1, "ok, b")]
    roles = [(m.role, m.content) for s in segments(items) for m in s.messages]
    assert roles == [("user", "go"), ("assistant", "on it"), ("tool", "r"), ("user", "b"), ("assistant", "ok, b")]
