"""s06: the recovery chain — one named transition per iteration, each path on its fixture, the caps,
the API's rules on every request, streaming, and live runs over real HTTP against a stand-in.

Each fixture's path runs on every step that has its transitions (s07's pause and stop hook, s08's
making room); the tests of those steps' own mechanisms are in test_s07_really_done.py,
test_s08_full_context.py and test_s10_trace.py (the trace), their shared helpers in tests/recovery_runs.py.
"""

import io
import json
import re

from workbook import scratch
from workbook.api import contract, wire
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import STEPS, load_step
from recovery_runs import (
    FIRST_STEP,
    FIXTURES,
    PATHS,
    assert_every_request_valid,
    body,
    generated,
    live_loop,
    no_wait,
    replay_path,
    replay_streamed,
    reply,
    run_loop,
    streamed_fixture,
)
from rich.console import Console
from standin import message, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s06"]  # every step that has the recovery chain
# (step, fixture name): each path on every step that has its transitions
STEP_PATHS = pytest.mark.parametrize(
    "step,name",
    [(s, name) for s in STEPS_FROM for name in PATHS if s >= FIRST_STEP.get(name, "s06")],
    indirect=["step"],
)


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module, its console silenced."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


# -- each path on its fixture ----------------------------------------------------------------------


@STEP_PATHS
def test_each_fixture_replays_through_its_transitions(step, name):
    transitions, transport, _, _, _ = replay_path(step, name)
    assert transitions == PATHS[name]
    assert transport.cursor == len(transport.fixture["exchanges"])  # every recorded exchange was used


@STEP_PATHS
def test_no_request_ever_has_an_unanswered_tool_use_or_a_split_pair(step, name):
    _, transport, messages, _, _ = replay_path(step, name)
    assert_every_request_valid(transport)
    assert contract.api_rule_problems(json.loads(json.dumps(step.plain(messages)))) == []


def test_every_transition_is_explained_and_shown(step):
    console = io.StringIO()
    step.console = Console(file=console, width=200)
    transitions, *_ = replay_path(step, "truncated_tool_use")
    shown = console.getvalue()
    explained = " ".join(getattr(step, "TRANSITIONS", {})) or step.chain[0].__doc__  # s06: its docstring
    assert all(re.search(rf"\b{t}\b", explained) for t in transitions)
    assert all(f"→ {t}" in shown for t in transitions)


# -- max_tokens: escalate, then continue, never execute a cut call --------------------------------


def test_escalation_resends_the_same_request_with_64k_streamed(step):
    _, transport, _, workspace, _ = replay_path(step, "escalation")
    first, second = transport.seen[:2]
    assert (
        first["max_tokens"] == step.MAX_TOKENS and second["max_tokens"] == step.ESCALATED_MAX_TOKENS == 64000
    )
    assert second["stream"] is True and second["messages"] == first["messages"]
    assert (workspace / "REPORT.md").read_text().endswith("its own pool.\n")  # only the whole call ran


def test_a_tool_call_cut_by_max_tokens_is_answered_never_run(step):
    _, transport, _, workspace, _ = replay_path(step, "truncated_tool_use")
    cut = reply(transport.fixture, 1)["content"][1]
    after = transport.seen[2]["messages"]
    assert after[-2]["content"][1]["id"] == cut["id"]  # the partial reply goes back verbatim
    answer, ask = after[-1]["content"]
    assert answer == {
        "type": "tool_result",
        "tool_use_id": cut["id"],
        "content": step.TRUNCATED_CALL.format("max_tokens"),
        "is_error": True,
    }
    assert ask == {"type": "text", "text": step.CONTINUE_PROMPT}
    assert "argparse" not in (workspace / "summarize.py").read_text()  # the cut content was never written


def test_partial_text_is_kept_and_continued(step):
    _, transport, messages, _, _ = replay_path(step, "truncated_text")
    partial = reply(transport.fixture, 1)["content"]
    assert transport.seen[2]["messages"][1]["content"] == partial
    assert transport.seen[2]["messages"][2]["content"] == [{"type": "text", "text": step.CONTINUE_PROMPT}]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]


def test_at_most_three_continuations_then_a_clear_stop(step):
    # each cut reply with an id of its own, as the API gives: it refuses a history repeating an id
    cuts = [
        body([text("and so"), tool_use(f"toolu_cut{n}", "bash", {"command": "touch cut"})], "max_tokens")
        for n in range(5)
    ]
    state, transport, messages = generated(step, cuts)
    assert [t for t, _ in state.log] == ["escalate", "continue", "continue", "continue", "fail"]
    assert "3 continuations" in state.log[-1][1]
    assert len(transport.seen) == 5 and messages[-1]["role"] == "user"  # the last cut reply is not kept
    assert_every_request_valid(transport)


def test_a_normal_turn_after_escalation_is_back_to_the_normal_limit(step):
    cut = body([text("cut")], "max_tokens")
    call = body([tool_use("toolu_1", "list_files", {})], "tool_use")
    state, transport, _ = generated(step, [cut, call, body([text("done")], "end_turn")])
    assert [r["max_tokens"] for r in transport.seen] == [step.MAX_TOKENS, 64000, step.MAX_TOKENS]


# -- a 400 that is not about length ---------------------------------------------------------------


def test_a_bad_request_that_is_not_about_length_is_not_retried(step):
    bad = {
        "status": 400,
        "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
    }
    with pytest.raises(anthropic.BadRequestError):
        generated(step, [bad, body([text("never")], "end_turn")])


# -- an error inside a 200 stream ------------------------------------------------------------------


def broken_stream() -> dict:
    events = wire.message_to_events(body([text("Let me look")], "end_turn"))[:4]
    events.append(
        {
            "event": "error",
            "data": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        }
    )
    return {"status": 200, "stream": events}


def test_the_sdk_raises_a_midstream_error_as_a_status_error_with_status_200():
    client, _ = replay.replay_client(
        {"exchanges": [{"request": {}, "response": broken_stream()}]}, strict=False
    )
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
        ) as s:
            s.get_final_message()
    assert caught.value.status_code == 200 and caught.value.body["error"]["type"] == "overloaded_error"


def test_a_midstream_overload_is_retried_at_most_three_times(step):
    """Like a 529, by s03's retry layer: here with 4 attempts, the first and three retries."""
    ok = body([text("ok")], "end_turn")
    state, transport, _ = generated(step, [broken_stream()] * 3 + [ok], attempts=4)
    assert [t for t, _ in state.log] == ["done"] and len(transport.seen) == 4
    assert transport.seen[0] == transport.seen[3]  # the same request again
    with pytest.raises(step.GaveUp, match="an error inside the stream"):
        generated(step, [broken_stream()] * 4 + [ok], attempts=4)


# -- the default run -------------------------------------------------------------------------------


@pytest.mark.parametrize("step_name", ["s06_recovery"])  # s09's default shows its own idea
def test_with_no_key_it_replays_its_default_fixture(step_name, run_main):
    code, out = run_main(step_name)  # `python s06_recovery.py`, its main() in-process
    assert code == 0, out
    assert "→ escalate  cut at 8000 tokens: reply dropped, sent again with 64000" in out and "→ done" in out
    assert "│ total │" in out and "$0.1298" in out  # a demo that costs cents


# -- live, over real HTTP, against a stand-in that misbehaves in ways no fixture shows --------------


def test_live_a_tool_use_cut_three_ways_is_never_run_and_always_answered(step, tmp_path):
    def brain(req, n):  # cut at 8000, again at 64000, then a short call that works, then done
        if n < 2:
            cut = {"command": "echo partial > cut.txt; echo and then some"}
            return message([text("running"), tool_use(f"toolu_cut{n}", "bash", cut)], "max_tokens")
        if n == 2:
            return message(
                [tool_use("toolu_ok", "write_file", {"path": "ok.txt", "content": "ok"})], "tool_use"
            )
        return message([text("done")])

    names, api = live_loop(step, brain, tmp_path)
    assert names == ["escalate", "continue", "next_turn", "done"] and api.rule_problems == []
    assert [r["body"]["max_tokens"] for r in api.requests] == [step.MAX_TOKENS, 64000, 64000, step.MAX_TOKENS]
    assert all(r["body"].get("stream") for r in api.requests[1:3])  # 64k is always streamed
    answer = api.requests[2]["body"]["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "toolu_cut1" and answer["is_error"] and "cut off" in answer["content"]
    assert not (tmp_path / "cut.txt").exists() and (tmp_path / "ok.txt").exists()


def test_an_escalated_call_streams_even_when_the_loop_does_not(step):
    cut, fine = body([text("cut")], "max_tokens"), body([text("fine")], "end_turn")
    client, transport = replay.replay_client(
        {"exchanges": [{"request": {}, "response": {"status": 200, "body": b}} for b in (cut, fine)]},
        strict=False,
    )
    run_loop(step, client, scratch.copy_workspace(""), transport=transport, stream=False)
    assert [r.get("stream") for r in transport.seen] == [None, True]


# -- streaming (new in s06: an escalated reply must stream) ----------------------------------------

STREAMED = sorted(  # the recordings every reply of which is a plain streamed Message
    p.stem
    for p in FIXTURES.glob("s05_*.json")
    if all("stream" in e["response"] for e in fixtures.load_fixture(p)["exchanges"])
)


@pytest.mark.parametrize("name", STREAMED)
def test_a_streamed_reply_is_the_same_message_as_its_json_body(name):
    """Each recorded stream, parsed by the SDK's own SSE code, equals the Message it adds up to."""
    for exchange in fixtures.load_fixture(FIXTURES / f"{name}.json")["exchanges"]:
        body = wire.events_to_message(exchange["response"]["stream"])
        one = {"exchanges": [exchange], "task": "", "workspace": ""}
        client, _ = replay.replay_client(one, name, strict=False)
        request = {
            "model": "claude-sonnet-5",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "x"}],
        }
        with client.messages.stream(**request) as stream:
            streamed = stream.get_final_message()
        client, _ = replay.replay_client(one, name, strict=False)
        whole = client.messages.create(**request)  # replay serves the same recording as JSON
        expected = anthropic.types.Message.model_validate(body).to_dict(exclude_none=True)
        assert streamed.to_dict(exclude_none=True) == whole.to_dict(exclude_none=True) == expected


def test_every_request_asks_for_a_stream_unless_told_not_to(step):
    recorded = streamed_fixture("s05_streamed")
    for stream in (True, False):
        client, transport = replay.replay_client(recorded, "s05_streamed.json", strict=False)
        workspace = scratch.copy_workspace("notes_app")
        settings = step.Settings(workspace, stream=stream, retry=no_wait(step))
        step.agent_loop(client, [{"role": "user", "content": "go"}], settings)
        assert [body.get("stream") for body in transport.seen] == [True if stream else None] * 3


def test_text_shows_as_it_arrives_and_each_tool_call_once_with_its_result(step, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, width=200, force_terminal=False))
    replay_streamed(step, "s05_streamed")
    text_ = out.getvalue()
    asked = text_.index("grep config\\[ … (8 chars)")  # the pattern; the glob app/*.py counted
    assert text_.index("model: The server indexes config by section.") < asked
    assert asked < text_.index("app/server.py:10:")  # the call, then its result under it
    assert text_.count("grep config\\[") == 1 and "asks for" not in text_  # shown once
    assert "waiting for the model" not in text_


def test_a_non_streamed_recording_replays_through_the_script_unstreamed(script):
    code, out = script("--replay", "fixtures/s03_fix_failing_test.json")
    assert code == 0 and "run ended: the model ended its turn (stop_reason end_turn)" in out, out


def test_no_stream_on_a_streamed_recording_is_refused_in_one_line_that_says_what_to_do(run_main):
    """A reader tried `python s06_recovery.py --no-stream`: the replay stopped at turn 1 with `stream:
    expected true, got null`. Now it is refused before the run starts, as a --permission the recording
    cannot follow is."""
    code, out = run_main("s06_recovery", "--no-stream")
    assert code == 1 and "Traceback" not in out and "turn 1" not in out
    [line] = out.strip().splitlines()
    assert "was recorded streaming" in line and "drop --no-stream" in line
    code, out = run_main("s06_recovery", "--no-stream", "--replay", "fixtures/s05_brake_then_limit.json")
    assert code == 0, out  # a recording made without streaming replays under --no-stream as before
