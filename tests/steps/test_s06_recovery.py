"""s06: the recovery chain — one named transition per iteration, each path on its fixture, the caps,
the API's rules on every request, trace replay, and live runs over real HTTP against a stand-in."""

import io
import json
from pathlib import Path

from workbook import scratch
from workbook.api import compare, contract, wire
from workbook.replay import fixtures, trust
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT, STEPS, load_step
from rich.console import Console
from standin import Reply, StandIn, api_error, message, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s06"]  # every step that has the recovery chain
# A pause, a refusal and a stop hook (s07's): these tests run on the steps that handle them.
HOOKED = pytest.mark.parametrize("step", [s for s in STEPS if s >= "s07"], indirect=True)
# Making room when the context is full (s08's): these tests run on the steps that make it.
ROOM = pytest.mark.parametrize("step", [s for s in STEPS if s >= "s08"], indirect=True)
# The trace (s10's) of a run that recovers: these tests run on the steps that keep one.
TRACED = pytest.mark.parametrize("step", [s for s in STEPS if s >= "s10"], indirect=True)
FIXTURES = ROOT / "fixtures"

# fixture -> the transitions its replay must go through, in order
PATHS = {
    "truncated_text": ["escalate", "continue", "done"],
    "truncated_tool_use": ["escalate", "continue", "next_turn", "next_turn", "done"],
    "escalation": ["escalate", "next_turn", "done"],
    "prompt_too_long_collapse": ["next_turn", "next_turn", "collapse", "next_turn", "done"],
    "collapse_then_compact": ["next_turn"] * 4 + ["collapse", "compact", "done"],
    "pause_turn": ["resume_pause", "resume_pause", "done"],
    "overloaded_mid_stream": ["next_turn", "done"],  # the retry is call_model's, below the transitions
    "stop_hook": ["next_turn", "hook_retry", "next_turn", "done"],
    "window_full_after_history": ["next_turn"] * 3 + ["make_room", "done"],
}
FIRST_STEP = {  # the step whose transitions a path needs, when not s06
    **dict.fromkeys(("pause_turn", "stop_hook"), "s07"),
    **dict.fromkeys(
        ("prompt_too_long_collapse", "collapse_then_compact", "window_full_after_history"), "s08"
    ),
}
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


def keeps(step, **settings) -> dict:
    """Those of `settings` the step's Settings has (the trace is s09's)."""
    return {name: value for name, value in settings.items() if name in step.Settings.__dataclass_fields__}


def no_wait(step, attempts: int = 5):
    """A retry policy that never sleeps (s03's Retry), so tests take no time."""
    return step.Retry(lambda seconds: None, lambda: 0.5, attempts)


def flags_of(step, fixture: dict) -> dict:
    """The settings a fixture's own flags (`args`) ask for: its stop hook, web search, limits."""
    args = [part for arg in fixture.get("args", []) for part in arg.split("=", 1)]  # --flag=value too
    hook = args[args.index("--stop-hook") + 1] if "--stop-hook" in args else None
    given = {flag[2:].replace("-", "_"): value for flag, value in zip(args, args[1:])}
    limits = {name: (float if name == "max_cost" else int)(given[name]) for name in LIMITS if name in given}
    return {"stop_hook": hook, "web_search": "--web-search" in args, "budget": step.Budget(**limits)}


LIMITS = ("max_steps", "max_tokens_total", "max_input_tokens", "max_cost")  # s05's Budget, by flag


def settings_for(step, workspace, transport=None, hook_retries=2, attempts=5, **settings):
    """Settings(workspace, **settings), its retries never waiting, with Recovery(hook_retries), and
    the person at the gate of the replay `transport` plays (a trusted recording says yes to its own
    calls); a live run (no transport) has nobody to ask."""
    wanted = {"hook_retries": hook_retries}  # s07's: the stop hook
    recovery = step.Recovery(**{k: v for k, v in wanted.items() if k in step.Recovery.__dataclass_fields__})
    settings.setdefault("ask", trust.recorded_person(transport, workspace) if transport else None)
    return step.Settings(workspace, retry=no_wait(step, attempts), recovery=recovery, **settings)


def run_loop(step, client, workspace, messages=None, transport=None, **settings):
    """The step's agent_loop under settings_for(...); returns the settings, whose recovery.log holds
    the transitions taken. `transport`: the replay's, when `client` is a replay client."""
    ran = settings_for(step, workspace, transport, **settings)
    step.agent_loop(client, messages or [{"role": "user", "content": "go"}], ran)
    return ran


def replay_path(step, name: str, tmp_path=None, strict: bool = True):
    """Replay fixtures/s06_<name>.json through the step's own loop: (transitions, transport, ...)."""
    fixture = fixtures.load_fixture(FIXTURES / f"s06_{name}.json")
    client, transport = replay.replay_client(fixture, name, strict)
    workspace = scratch.copy_workspace(fixture["workspace"])
    traced = {}  # the steps that keep a trace (s10 on) write one, opened with its run line as main() does
    if hasattr(step, "Trace"):
        traced["trace"] = step.Trace(tmp_path / "trace.jsonl" if tmp_path else None)
        where = {"task": fixture["task"], "workspace": fixture["workspace"], "args": fixture.get("args", [])}
        traced["trace"].write("run", provenance=fixture["provenance"], **where)
    messages = [{"role": "user", "content": fixture["task"]}]
    settings = settings_for(step, workspace, transport, **traced, **keeps(step, **flags_of(step, fixture)))
    turns = step.agent_loop(client, messages, settings)
    return [t for t, _ in settings.recovery.log], transport, messages, workspace, turns


def reply(fixture: dict, n: int) -> dict:
    """The Message of exchange n, whether recorded as a JSON body or as a stream of events."""
    response = fixture["exchanges"][n]["response"]
    return response["body"] if "body" in response else wire.events_to_message(response["stream"])


def body(content: list, stop_reason: str) -> dict:
    return message(content, stop_reason)


def generated(step, replies: list, **settings):
    """Run the loop on a script of replies (dicts, or (status, error body) pairs) in lenient replay:
    (recovery, transport, messages)."""
    exchanges = []
    for reply in replies:
        response = {"status": 200, "body": reply} if "type" in reply else reply
        exchanges.append({"request": {"messages": [{"role": "user", "content": "go"}]}, "response": response})
    client, transport = replay.replay_client({"exchanges": exchanges}, "generated", strict=False)
    messages = [{"role": "user", "content": "go"}]
    ran = run_loop(step, client, scratch.copy_workspace(""), messages, transport, **settings)
    return ran.recovery, transport, messages


def too_long(tokens: int = 203117) -> dict:
    message_ = f"prompt is too long: {tokens} tokens > 200000 maximum"
    return {
        "status": 400,
        "body": {"type": "error", "error": {"type": "invalid_request_error", "message": message_}},
    }


def assert_every_request_valid(transport):
    for n, request in enumerate(transport.seen, 1):
        assert contract.api_rule_problems(request["messages"]) == [], f"request {n}"


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
    assert set(transitions) <= set(step.TRANSITIONS)
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


# -- prompt too long: collapse, then compact once -------------------------------------------------


@ROOM
def test_collapse_keeps_every_pair_and_the_newest_results(step):
    _, transport, _, _, _ = replay_path(step, "prompt_too_long_collapse")
    before, after = transport.seen[2]["messages"], transport.seen[3]["messages"]
    assert len(before) == len(after)
    old, new = after[2]["content"][0], after[4]["content"][0]
    assert old["tool_use_id"] == before[2]["content"][0]["tool_use_id"]
    assert old["content"].startswith("[collapsed: 3934 characters of read_file output")
    assert new == before[4]["content"][0]  # the newest results stay whole


@ROOM
def test_collapse_shrinks_the_context(step):
    _, transport, _, _, _ = replay_path(step, "prompt_too_long_collapse")
    assert (
        step.context_chars(transport.seen[3]["messages"])
        < step.context_chars(transport.seen[2]["messages"]) / 1.5
    )


@ROOM
def test_compaction_asks_for_a_summary_and_continues_from_it(step):
    _, transport, messages, _, _ = replay_path(step, "collapse_then_compact")
    ask, after = transport.seen[6], transport.seen[7]
    assert (
        ask["tool_choice"] == {"type": "none"}
        and ask["messages"][-1]["content"][-1]["text"] == step.SUMMARY_PROMPT
    )
    summary = reply(transport.fixture, 6)["content"][0]["text"]
    assert summary in after["messages"][0]["content"] and after["messages"][0]["content"].startswith(
        "Read all the logs"
    )
    last_call = transport.seen[5]["messages"][-2]
    assert after["messages"][1:] == transport.seen[5]["messages"][-2:] and last_call["role"] == "assistant"


@ROOM
def test_at_most_one_compaction_per_turn_no_death_spiral(step):
    big = "x" * 3000
    replies = [
        body([tool_use("toolu_1", "bash", {"command": f"echo {big}"})], "tool_use"),
        body([tool_use("toolu_2", "bash", {"command": f"echo {big}"})], "tool_use"),
        too_long(),
        too_long(),
        body([text("summary of the work")], "end_turn"),
        too_long(),
    ]
    state, transport, _ = generated(step, replies)
    assert [t for t, _ in state.log] == ["next_turn", "next_turn", "collapse", "compact", "fail"]
    assert sum(1 for r in transport.seen if r.get("tool_choice")) == 1 and len(transport.seen) == 6
    assert_every_request_valid(transport)


@ROOM
def test_a_reply_cut_by_the_context_window_is_kept_its_calls_answered_not_run(step, tmp_path):
    big = "y" * 3000
    cut = tool_use("toolu_3", "bash", {"command": f"touch {tmp_path}/ran"})
    replies = [
        body([tool_use("toolu_1", "bash", {"command": f"echo {big}"})], "tool_use"),
        body([tool_use("toolu_2", "bash", {"command": f"echo {big}"})], "tool_use"),
        body([text("partial"), cut], "model_context_window_exceeded"),
        body([text("fits now")], "end_turn"),
    ]
    state, transport, _ = generated(step, replies)
    assert [t for t, _ in state.log] == ["next_turn", "next_turn", "make_room", "done"]
    sent = transport.seen[3]
    assert sent["max_tokens"] == step.MAX_TOKENS  # the window was the limit, not max_tokens: no escalation
    kept, answer = sent["messages"][-2:]
    assert kept["content"][0] == {"type": "text", "text": "partial"}  # the reply is kept, verbatim
    assert answer["content"][0]["is_error"] and "context_window" in answer["content"][0]["content"]
    assert answer["content"][-1] == {"type": "text", "text": step.ROOM_PROMPT}
    assert not (tmp_path / "ran").exists()  # the cut call never ran
    assert "collapsed" in json.dumps(sent["messages"][2])  # room was made


def counted(step, input_tokens: int):
    """A Budget with the default limits that has counted one reply of `input_tokens` input tokens."""
    budget = step.Budget(max_tokens_total=10**9)
    used = message([text("x")], "model_context_window_exceeded", input_tokens, 5)
    budget.spend(anthropic.types.Message.model_validate(used))
    return budget


@ROOM
def test_after_making_room_the_input_limit_judges_what_the_next_request_holds(step):
    budget = counted(step, 190_000)
    assert budget.exceeded().startswith("input limit: the last request sent 190,000 input tokens")
    budget.made_room(50_105, 13_520)  # 190,000 * 13,520 / 50,105: about 51,268 tokens, under 150,000
    assert budget.exceeded() == ""
    assert budget.exceeded().startswith("input limit: the last request sent")  # it judged one request


@ROOM
def test_room_made_but_not_enough_is_an_input_limit_that_says_so(step):
    budget = counted(step, 190_000)
    budget.made_room(100, 90)
    assert budget.exceeded() == (
        "input limit: after making room the next request still holds about 171,000 input tokens "
        "(--max-input-tokens 150,000)"
    )


@ROOM
def test_the_window_full_after_history_fixture_goes_on_under_the_default_input_limit(step, run_main):
    code, out = run_main(step.__name__, "--replay", "fixtures/s06_window_full_after_history.json")
    assert code == 0 and "Traceback" not in out, out
    assert "tokens in 190000" in out and "→ make_room" in out and "input limit" not in out
    assert "stopped: the model ended its turn (stop_reason end_turn)" in out


@ROOM
def test_with_nothing_to_collapse_or_compact_the_reason_says_so(step):
    state = step.Recovery()
    full = anthropic.types.Message.model_validate(message([text("x")], "model_context_window_exceeded"))
    transition, why = step.next_transition(full, state, [{"role": "user", "content": "go"}], None)
    assert transition == "fail" and "already" not in why
    assert why == (
        "model_context_window_exceeded, and this turn: no old tool result to collapse, "
        "no earlier turn to summarize: giving up"
    )
    state.collapsed = state.compacted = True
    _, why = step.next_transition(full, state, [{"role": "user", "content": "go"}], None)
    assert "already collapsed once, already compacted once" in why


@HOOKED
def test_a_refusal_shows_its_stop_details(step, run_main):
    code, out = run_main(step.__name__, "--replay", "fixtures/s06_refusal.json")
    assert code == 0 and "refusal (cyber: The request asks for self-spreading malicious code.)" in out, out
    assert "→ done" in out  # the model's own decision: nothing to recover


def test_a_bad_request_that_is_not_about_length_is_not_retried(step):
    bad = {
        "status": 400,
        "body": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}},
    }
    with pytest.raises(anthropic.BadRequestError):
        generated(step, [bad, body([text("never")], "end_turn")])


@ROOM
@pytest.mark.parametrize("shape", [1, 2, 3, 5, 8])
def test_compaction_never_splits_a_tool_use_from_its_result(step, shape):
    messages = [{"role": "user", "content": "task"}]
    for n in range(shape):
        messages.append({"role": "assistant", "content": [tool_use(f"toolu_{n}", "bash", {"command": "ls"})]})
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "z" * 500}],
            }
        )
    client, transport = replay.replay_client(
        {
            "exchanges": [
                {"request": {}, "response": {"status": 200, "body": body([text("sum")], "end_turn")}}
            ]
        },
        strict=False,
    )
    step.compact(client, messages, step.Settings(scratch.copy_workspace(""), retry=no_wait(step)))
    assert (
        contract.api_rule_problems(messages) == []
        and contract.api_rule_problems(transport.seen[0]["messages"]) == []
    )
    assert messages[1]["content"][0]["id"] == f"toolu_{shape - 1}" and len(messages) == 3


# -- pause_turn, refusal ---------------------------------------------------------------------------


@HOOKED
def test_pause_turn_content_goes_back_unchanged_with_no_new_user_message(step):
    _, transport, messages, _, _ = replay_path(step, "pause_turn")
    responses = [reply(transport.fixture, n)["content"] for n in range(3)]
    second, third = transport.seen[1]["messages"], transport.seen[2]["messages"]
    assert [m["role"] for m in second] == [m["role"] for m in third] == ["user", "assistant"]
    assert (
        compare.normalize_messages(second)[1]["content"]
        == compare.normalize_messages([{"role": "assistant", "content": responses[0]}])[0]["content"]
    )
    assert third[1]["content"] == second[1]["content"] + responses[1]
    assert any(t["name"] == "web_search" for t in transport.seen[0]["tools"])


@HOOKED
def test_pauses_are_bounded(step):
    state, transport, _ = generated(step, [body([text("searching")], "pause_turn")] * (step.MAX_PAUSES + 1))
    assert [t for t, _ in state.log] == ["resume_pause"] * step.MAX_PAUSES + ["fail"]


@HOOKED
def test_a_refusal_stops_cleanly_and_says_so(step):
    state, transport, _ = generated(step, [body([text("I can't help with that.")], "refusal")])
    assert state.log == [("done", "refusal: the model declined to go on, so the loop stops here")]
    assert len(transport.seen) == 1


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


# -- the stop hook ---------------------------------------------------------------------------------


@HOOKED
def test_a_failing_stop_hook_goes_back_to_the_model(step):
    _, transport, _, workspace, _ = replay_path(step, "stop_hook")
    feedback = transport.seen[2]["messages"][-1]["content"]
    assert (
        "check failed: expected 'Hello, Ada!', got 'Hello, Ada'" in feedback and "[exit code 1]" in feedback
    )
    ended = anthropic.types.Message.model_validate(body([text("done")], "end_turn"))
    hook = step.run_stop_hook(step.Settings(workspace, stop_hook="sh check.sh"), ended)
    assert hook == step.HookResult(True, "check passed\n[exit code 0]")


@HOOKED
def test_stop_hook_retries_are_capped(step):
    done = body([text("done")], "end_turn")
    state, transport, _ = generated(step, [done] * 3, stop_hook="echo still red; exit 1", hook_retries=2)
    assert [t for t, _ in state.log] == ["hook_retry", "hook_retry", "fail"] and len(transport.seen) == 3
    assert "still red" in transport.seen[1]["messages"][-1]["content"]


# -- trace replay ----------------------------------------------------------------------------------


@TRACED
@pytest.mark.parametrize("name", PATHS)
def test_a_trace_replays_to_the_same_transitions(step, name, tmp_path):
    transitions, *_ = replay_path(step, name, tmp_path)
    fixture = step.trace_to_fixture(tmp_path / "trace.jsonl", step.__name__)
    assert fixtures.fixture_problems(fixture) == []
    recorded = fixtures.load_fixture(FIXTURES / f"s06_{name}.json")["exchanges"]
    retried = sum(any(e["event"] == "error" for e in x["response"].get("stream", [])) for x in recorded)
    # call_model's retries happen below the trace: a stream that broke and was retried is not in it
    assert len(fixture["exchanges"]) == len(recorded) - retried
    (tmp_path / "again.json").write_text(json.dumps(fixture))
    again, *_ = replay_path_file(step, tmp_path / "again.json")
    assert again == transitions


def replay_path_file(step, path):
    fixture = fixtures.load_fixture(path)
    client, transport = replay.replay_client(fixture, path.name)
    workspace = scratch.copy_workspace(fixture["workspace"])
    messages = [{"role": "user", "content": fixture["task"]}]
    # a converted trace is on no trust list: its commands would meet the gate
    settings = run_loop(
        step,
        client,
        workspace,
        messages,
        transport,
        permission="all",
        **keeps(step, **flags_of(step, fixture)),
    )
    return [t for t, _ in settings.recovery.log], transport


@TRACED
def test_main_writes_a_trace_and_replays_it(step, tmp_path):
    trace = tmp_path / "run.jsonl"
    assert step.main(["--replay", "fixtures/s06_stop_hook.json", "--trace", str(trace)]) == 0
    shown = io.StringIO()
    step.console = Console(file=shown, width=200)
    assert step.main(["--replay", str(trace), "--permission", "all"]) == 0  # a trace is on no trust list
    arrows = [line.split()[1] for line in shown.getvalue().splitlines() if line.startswith("→")]
    assert arrows == PATHS["stop_hook"]


@pytest.mark.parametrize("step_name", ["s06_recovery"])  # s09's default shows its own idea
def test_with_no_key_it_replays_its_default_fixture(step_name, run_main):
    code, out = run_main(step_name)  # `python s06_recovery.py`, its main() in-process
    assert code == 0, out
    assert "→ escalate  cut at 8000 tokens: reply dropped, sent again with 64000" in out and "→ done" in out
    assert "│ total │" in out and "$0.1298" in out  # a demo that costs cents


# -- live, over real HTTP, against a stand-in that misbehaves in ways no fixture shows --------------


def streamed(brain):
    """A stand-in brain whose Message replies go out as SSE when the request asked to stream."""

    def wrapper(body_, n):
        reply = brain(body_, n)
        if isinstance(reply, dict) and body_.get("stream"):
            return Reply(events=wire.message_to_events(reply))
        return reply

    return wrapper


def size(body_) -> int:
    return len(json.dumps(body_["messages"]))


@ROOM
def test_live_truncation_overflow_and_pauses_keep_every_request_valid(step, tmp_path):
    """Reads two big files, is cut inside a write twice, overflows until the context shrinks, pauses."""
    (tmp_path / "a.txt").write_text("a" * 4000)
    (tmp_path / "b.txt").write_text("b" * 4000)
    limit = {}

    def brain(req, n):
        last = req["messages"][-1]
        if n == 0:
            return message([tool_use("toolu_a", "read_file", {"path": "a.txt"})], "tool_use")
        if n == 1:
            return message([tool_use("toolu_b", "read_file", {"path": "b.txt"})], "tool_use")
        if "limit" not in limit:  # from now on, anything as large as the two files is too long
            limit["limit"] = size(req) - 1000
        if size(req) > limit["limit"]:
            return api_error(
                400, "invalid_request_error", f"prompt is too long: {size(req)} tokens > 200000 maximum"
            )
        if (
            last["role"] == "user"
            and isinstance(last["content"], list)
            and last["content"][0].get("tool_use_id") == "toolu_b"
        ):
            cut = {"path": "c.txt", "content": "c" * 50}
            return message([text("writing"), tool_use(f"toolu_cut{n}", "write_file", cut)], "max_tokens")
        if last["role"] == "user" and "cut off" in json.dumps(last["content"]):
            return message([text("pausing")], "pause_turn")  # paused right after the continuation
        return message([text("done")], "end_turn")  # the paused turn, resumed, ends

    with StandIn(streamed(brain)) as api:
        client = anthropic.Anthropic(api_key="test", base_url=api.url, max_retries=0)
        state = run_loop(step, client, tmp_path).recovery
    assert api.rule_problems == []
    names = [t for t, _ in state.log]
    assert names[:3] == ["next_turn", "next_turn", "collapse"] and "escalate" in names and "continue" in names
    assert "resume_pause" in names and names[-1] == "done"
    assert not (tmp_path / "c.txt").exists()  # the cut write_file never ran


@TRACED
def test_live_main_end_to_end_with_a_stop_hook(step, tmp_path, monkeypatch):
    monkeypatch.setattr(step, "RUNS", tmp_path / "runs")
    (tmp_path / "flag").write_text("red")
    replies = [
        message([text("done")], "end_turn"),
        message([tool_use("toolu_1", "write_file", {"path": "flag", "content": "green"})], "tool_use"),
        message([text("now really done")], "end_turn"),
    ]
    shown = io.StringIO()
    step.console = Console(file=shown, width=200)
    with StandIn(streamed(lambda req, n: replies[n])) as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        argv = ["make it green", "--workspace", str(tmp_path), "--permission", "auto"]
        trace = ["--trace", str(tmp_path / "live.jsonl")]
        assert step.main([*argv, *trace, "--stop-hook", "grep -q green flag"]) == 0
    assert api.rule_problems == [] and len(api.requests) == 3
    assert "→ hook_retry" in shown.getvalue() and "stop hook passed" in shown.getvalue()
    assert all(r["body"]["stream"] is True for r in api.requests)
    # the live run becomes a lesson: its trace replays offline, with no server, to the same transitions
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    again = io.StringIO()
    step.console = Console(file=again, width=200)
    assert step.main(["--replay", str(tmp_path / "live.jsonl")]) == 0
    arrows = [line.split()[1] for line in again.getvalue().splitlines() if line.startswith("→")]
    assert arrows == ["hook_retry", "next_turn", "done"]


def live_loop(step, brain, workspace, **settings):
    """agent_loop against the stand-in over real HTTP; returns (transitions, the stand-in)."""
    with StandIn(streamed(brain)) as api:
        client = anthropic.Anthropic(api_key="test", base_url=api.url, max_retries=0)
        state = run_loop(step, client, workspace, **settings).recovery
    return [t for t, _ in state.log], api


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


@ROOM
def test_live_prompt_too_long_until_the_context_shrinks(step, tmp_path):
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(name * 3000)
    limit = 5000  # characters of messages the stand-in accepts: less than the three files together

    def brain(req, n):
        if size(req) > limit:
            return api_error(
                400, "invalid_request_error", f"prompt is too long: {size(req)} tokens > 200000 maximum"
            )
        done = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if done < 3 and "compacted" not in json.dumps(req["messages"][0]):
            path = "abc"[done] + ".txt"
            return message([tool_use(f"toolu_{done}", "read_file", {"path": path})], "tool_use")
        if req.get("tool_choice") == {"type": "none"}:
            return message([text("Read a.txt, b.txt and c.txt: three letters repeated.")])
        return message([text("done")])

    names, api = live_loop(step, brain, tmp_path)
    assert api.rule_problems == [] and names[-1] == "done"
    assert "collapse" in names
    sizes = [size(r["body"]) for r in api.requests]
    assert sizes[-1] <= limit < max(sizes)  # it went over, and came back under


@ROOM
def test_live_a_summary_request_too_long_itself_ends_in_fail_saying_so(step, tmp_path):
    """The history before the last turn has nothing to collapse and sits just under the limit: the
    request for its summary (that history, and the summary prompt) is too long too. The run fails,
    saying why, in place of a 400 taken for a bug (issue 49)."""
    limit = 6000  # characters of messages the stand-in accepts

    def brain(req, n):
        if size(req) > limit:
            return api_error(400, "invalid_request_error", f"prompt is too long: {size(req)} tokens > 5000")
        said = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if said == 0:  # a long reply, no tool output to collapse: the next request is just under the limit
            filler = text("x" * (limit - size(req) - 400))  # the call and its result take about 270 more
            return message([filler, tool_use("toolu_0", "list_files", {})], "tool_use")
        if said == 1:
            return message([text("one more look"), tool_use("toolu_1", "list_files", {})], "tool_use")
        return message([text("done")])

    with StandIn(streamed(brain)) as api:
        client = anthropic.Anthropic(api_key="test", base_url=api.url, max_retries=0)
        log = run_loop(step, client, tmp_path).recovery.log
    assert [name for name, _ in log][-3:] == ["next_turn", "compact", "fail"], log
    assert "even the summary's request was too long" in log[-1][1]
    summary_asked = [r for r in api.requests if r["body"].get("tool_choice") == {"type": "none"}]
    assert len(summary_asked) == 1 and size(summary_asked[0]["body"]) > limit


@HOOKED
def test_live_pause_turn_is_resumed_with_the_content_unchanged(step, tmp_path):
    paused = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    ]

    def brain(req, n):
        return message(paused, "pause_turn") if n < 2 else message([text("answer")])

    names, api = live_loop(step, brain, tmp_path, web_search=True)
    assert names == ["resume_pause", "resume_pause", "done"] and api.rule_problems == []
    second, third = (r["body"]["messages"] for r in api.requests[1:])
    assert second[-1] == {"role": "assistant", "content": paused}
    assert third[-1] == {"role": "assistant", "content": paused + paused} and len(third) == 2
    assert any(t.get("name") == "web_search" for t in api.requests[0]["body"]["tools"])


def test_an_escalated_call_streams_even_when_the_loop_does_not(step):
    cut, fine = body([text("cut")], "max_tokens"), body([text("fine")], "end_turn")
    client, transport = replay.replay_client(
        {"exchanges": [{"request": {}, "response": {"status": 200, "body": b}} for b in (cut, fine)]},
        strict=False,
    )
    run_loop(step, client, scratch.copy_workspace(""), transport=transport, stream=False)
    assert [r.get("stream") for r in transport.seen] == [None, True]


@TRACED
def test_a_trace_that_is_not_json_is_one_line(step, tmp_path):
    (tmp_path / "bad.jsonl").write_text("not json\n")
    shown = io.StringIO()
    step.console = Console(file=shown, width=300)
    assert step.main(["--replay", str(tmp_path / "bad.jsonl")]) == 1
    assert "error:" in shown.getvalue() and "not a JSON-lines trace" in shown.getvalue()


@HOOKED
@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_bad_hook_retry_count_is_one_line(step, bad, capsys):
    with pytest.raises(SystemExit) as stopped:
        step.main(["--stop-hook", "true", "--stop-hook-retries", bad])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"--stop-hook-retries: invalid count value: '{bad}'" in err
    assert "Traceback" not in err


@TRACED
def test_the_trace_of_a_collapsed_run_rebuilds_every_request(step, tmp_path):
    """Collapse rewrites old messages in place; each model_call line still says where what it sent
    stops being what the line before logged (new_from), so the history rebuilds from the trace alone."""
    _, transport, _, _, _ = replay_path(step, "prompt_too_long_collapse", tmp_path=tmp_path)
    rebuilt = step.trace_to_fixture(tmp_path / "trace.jsonl")["exchanges"]
    assert [e["request"]["messages"] for e in rebuilt] == [request["messages"] for request in transport.seen]
    # Each turn starts where the last one's request ended, but the one after the collapse, which
    # rewrote the history from message 2 (the oldest tool result) on.
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [line["request"]["new_from"] for line in lines if line["event"] == "model_call"] == [0, 1, 3, 2, 5]


def fills_after_history(last_input: int):
    """A brain that reads three files, one a turn (10 input tokens each), then fills the window at
    `last_input` input tokens with its grep cut, then answers."""

    def brain(req, n):
        if n < 3:
            return message([tool_use(f"toolu_{n}", "read_file", {"path": f"{'abc'[n]}.txt"})], "tool_use")
        if n == 3:
            cut = tool_use("toolu_cut", "grep", {"pattern": "b"})
            return message([text("Now the pattern:"), cut], "model_context_window_exceeded", last_input, 20)
        return message([text("Three files, three letters.")])

    return brain


def live_main(step, tmp_path, monkeypatch, brain, *flags):
    """step.main live against the stand-in, in a workspace of three 3,000-character files."""
    for name in "abc":
        (tmp_path / f"{name}.txt").write_text(name * 3000)
    monkeypatch.setattr(step, "RUNS", tmp_path / "runs")
    shown = io.StringIO()
    step.console = Console(file=shown, width=200)
    with StandIn(streamed(brain)) as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        argv = ["read them all", "--workspace", str(tmp_path), "--permission", "auto", *flags]
        code = step.main(argv)
    assert api.rule_problems == []
    return code, api.requests, shown.getvalue()


@ROOM
def test_live_a_window_that_fills_after_history_makes_room_and_goes_on(step, tmp_path, monkeypatch):
    """Every limit at its default: 190,000 input tokens fill the window, the old reads collapse, and the
    next request is sent, judged by what it holds, not by the 190,000 the last one sent."""
    code, requests, out = live_main(step, tmp_path, monkeypatch, fills_after_history(190_000))
    assert code == 0 and len(requests) == 5, out
    assert "→ make_room" in out and "input limit" not in out and "stopped: the model ended its turn" in out
    assert "collapsed" in json.dumps(requests[4]["body"]["messages"]) and size(requests[4]["body"]) < size(
        requests[3]["body"]
    )


@ROOM
def test_live_room_made_but_not_enough_stops_at_the_input_limit(step, tmp_path, monkeypatch):
    code, requests, out = live_main(
        step, tmp_path, monkeypatch, fills_after_history(190_000), "--max-input-tokens", "1000"
    )
    assert code == 0 and len(requests) == 4, out
    assert (
        "→ make_room" in out and "stopped: input limit: after making room the next request still holds" in out
    )


@ROOM
def test_live_a_window_full_on_the_first_reply_gives_the_true_reason(step, tmp_path, monkeypatch):
    full = message([text("Reading")], "model_context_window_exceeded", 190_000, 5)
    code, requests, out = live_main(step, tmp_path, monkeypatch, lambda req, n: full)
    assert code == 1 and len(requests) == 1, out
    assert "no old tool result to collapse, no earlier turn to summarize: giving up" in out
    assert "already collapsed" not in out


# -- streaming (new in s06: an escalated reply must stream) ----------------------------------------

STREAMED = sorted(  # the recordings every reply of which is a plain streamed Message
    p.stem
    for p in FIXTURES.glob("s05_*.json")
    if all("stream" in e["response"] for e in fixtures.load_fixture(p)["exchanges"])
)


def streamed_fixture(name: str) -> dict:
    return fixtures.load_fixture(FIXTURES / f"{name}.json")


def replay_streamed(step, name: str, tmp_path=None):
    """Replay fixtures/NAME.json (streamed) through the step's loop: (turns, budget, transport)."""
    recorded = streamed_fixture(name)
    client, transport = replay.replay_client(recorded, f"{name}.json", max_retries=0)
    workspace = scratch.copy_workspace(recorded["workspace"])
    trace = step.Trace(tmp_path / "trace.jsonl" if tmp_path else None) if hasattr(step, "Trace") else None
    person = trust.recorded_person(transport, workspace)
    settings = step.Settings(workspace, retry=no_wait(step), ask=person, **keeps(step, trace=trace))
    turns = step.agent_loop(client, [{"role": "user", "content": recorded["task"]}], settings)
    return turns, settings.budget, transport


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
    assert code == 0 and "stopped: the model ended its turn (stop_reason end_turn)" in out, out


def traced(path: Path) -> list[dict]:
    """The trace's lines of the kinds every run writes (recovery adds transitions and context lines)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line["event"] in ("start", "model_call", "tools", "stop")]


def rebuilt_requests(lines: list[dict]) -> list[dict]:
    """Every request body the run sent, rebuilt from the trace alone (what a trace's replay does)."""
    start, messages, bodies = lines[0], [], []
    for line in lines:
        if line["event"] == "model_call" and "response" in line:
            request = line["request"]
            messages = messages[: request["new_from"]] + request["new_messages"]
            assert len(messages) == request["messages_count"]
            body = {k: start[k] for k in ("model", "max_tokens", "system", "tools")}
            bodies.append(body | {"messages": messages, "stream": start["stream"]})
    return bodies


@TRACED
def test_the_trace_rebuilds_every_request_and_response_exactly(step, tmp_path):
    turns, budget, transport = replay_streamed(step, "s05_streamed", tmp_path=tmp_path)
    lines = traced(tmp_path / "trace.jsonl")
    events = [line["event"] for line in lines]
    assert events == ["start", "model_call", "tools", "model_call", "tools", "model_call", "stop"]
    assert rebuilt_requests(lines) == transport.seen
    responses = [line["response"] for line in lines if line["event"] == "model_call"]
    assert responses == [turn.to_dict(mode="json") for turn in turns]
    assert lines[-1] == lines[-1] | {"reason": budget.reason, "steps": 3, "tokens": budget.tokens}
    assert [line["next"] for line in lines if line["event"] == "tools"] == ["continue", "continue"]


@TRACED
def test_a_fatal_error_is_the_last_layer_named_in_the_trace(script, tmp_path):
    code, out = script("--replay", "fixtures/s03_bad_key.json", "--trace", str(tmp_path / "t.jsonl"))
    assert code == 1 and "check ANTHROPIC_API_KEY" in out
    lines = traced(tmp_path / "t.jsonl")
    assert [line["event"] for line in lines] == ["start", "model_call", "stop"]
    assert lines[1]["error"]["status"] == 401 and lines[2]["reason"].startswith(
        "fatal error: the API refused"
    )


@HOOKED
def test_web_searches_cost_ten_dollars_a_thousand_beside_the_tokens(step):
    split = anthropic.types.Usage(
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=3_000_000,
        cache_creation={"ephemeral_5m_input_tokens": 1_000_000, "ephemeral_1h_input_tokens": 2_000_000},
        server_tool_use={"web_search_requests": 3, "web_fetch_requests": 0},
    )
    priced = anthropic.types.Message.model_validate(message([text("ok")]) | {"usage": split.to_dict()})
    assert step.Budget().price(priced) == pytest.approx(1 * 3.75 + 2 * 6.00 + 3 * 0.01)
