"""s08: making room when the context is full — old tool results collapsed, the newest kept, then one
compaction a turn that never splits a tool_use from its result; a reply cut by the context window kept
and its calls answered, not run; after room is made the input limit judges the next request.

Each test runs against every step from s08 on, replayed and live against a stand-in; each fixture's path
of transitions is in test_s06_recovery.py.
"""

import io
import json

from workbook import scratch
from workbook.api import contract
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import STEPS, load_step
from recovery_runs import (
    assert_every_request_valid,
    body,
    generated,
    live_loop,
    no_wait,
    replay_path,
    reply,
    run_loop,
    size,
    streamed,
    too_long,
)
from rich.console import Console
from standin import StandIn, api_error, message, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s08"]  # every step that makes room


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module, its console silenced."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


def test_collapse_keeps_every_pair_and_the_newest_results(step):
    _, transport, _, _, _ = replay_path(step, "prompt_too_long_collapse")
    before, after = transport.seen[2]["messages"], transport.seen[3]["messages"]
    assert len(before) == len(after)
    old, new = after[2]["content"][0], after[4]["content"][0]
    assert old["tool_use_id"] == before[2]["content"][0]["tool_use_id"]
    assert old["content"].startswith("[collapsed: 3934 characters of read_file output")
    assert new == before[4]["content"][0]  # the newest results stay whole


def test_collapse_shrinks_the_context(step):
    _, transport, _, _, _ = replay_path(step, "prompt_too_long_collapse")
    assert (
        step.context_chars(transport.seen[3]["messages"])
        < step.context_chars(transport.seen[2]["messages"]) / 1.5
    )


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


def test_after_making_room_the_input_limit_judges_what_the_next_request_holds(step):
    budget = counted(step, 190_000)
    assert budget.exceeded().startswith("input limit: the last request sent 190,000 input tokens")
    budget.made_room(50_105, 13_520)  # 190,000 * 13,520 / 50,105: about 51,268 tokens, under 150,000
    assert budget.exceeded() == ""
    assert budget.exceeded().startswith("input limit: the last request sent")  # it judged one request


def test_room_made_but_not_enough_is_an_input_limit_that_says_so(step):
    budget = counted(step, 190_000)
    budget.made_room(100, 90)
    assert budget.exceeded() == (
        "input limit: after making room the next request still holds about 171,000 input tokens "
        "(--max-input-tokens 150,000)"
    )


def test_the_window_full_after_history_fixture_goes_on_under_the_default_input_limit(step, run_main):
    code, out = run_main(step.__name__, "--replay", "fixtures/s06_window_full_after_history.json")
    assert code == 0 and "Traceback" not in out, out
    assert "tokens in 190000" in out and "→ make_room" in out and "input limit" not in out
    assert "run ended: the model ended its turn (stop_reason end_turn)" in out


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


def test_live_a_window_that_fills_after_history_makes_room_and_goes_on(step, tmp_path, monkeypatch):
    """Every limit at its default: 190,000 input tokens fill the window, the old reads collapse, and the
    next request is sent, judged by what it holds, not by the 190,000 the last one sent."""
    code, requests, out = live_main(step, tmp_path, monkeypatch, fills_after_history(190_000))
    assert code == 0 and len(requests) == 5, out
    assert "→ make_room" in out and "input limit" not in out and "run ended: the model ended its turn" in out
    assert "collapsed" in json.dumps(requests[4]["body"]["messages"]) and size(requests[4]["body"]) < size(
        requests[3]["body"]
    )


def test_live_room_made_but_not_enough_stops_at_the_input_limit(step, tmp_path, monkeypatch):
    code, requests, out = live_main(
        step, tmp_path, monkeypatch, fills_after_history(190_000), "--max-input-tokens", "1000"
    )
    assert code == 0 and len(requests) == 4, out
    assert (
        "→ make_room" in out
        and "run ended: input limit: after making room the next request still holds" in out
    )


def test_live_a_window_full_on_the_first_reply_gives_the_true_reason(step, tmp_path, monkeypatch):
    full = message([text("Reading")], "model_context_window_exceeded", 190_000, 5)
    code, requests, out = live_main(step, tmp_path, monkeypatch, lambda req, n: full)
    assert code == 1 and len(requests) == 1, out
    assert "no old tool result to collapse, no earlier turn to summarize: giving up" in out
    assert "already collapsed" not in out


def test_a_summary_too_long_in_one_turn_is_not_blamed_for_a_later_turns_failure(step):
    """Compaction's own request was too long in an earlier turn; tools have run since. A later 400 with
    nothing to shrink fails for its own turn's reasons, not "even the summary's request"."""
    state = step.Recovery()
    state.summary_too_long = True
    state.new_turn()  # tools ran
    transition, why = step.next_transition(None, state, [{"role": "user", "content": "go"}], None)
    assert transition == "fail" and "no earlier turn to summarize" in why and "summary's request" not in why
