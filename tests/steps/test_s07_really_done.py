"""s07: really done — a pause_turn resumed with its content unchanged and no new user message, pauses
bounded, a refusal that stops cleanly saying so, a stop hook whose failure goes back to the model (its
retries capped, a bad count one line), web searches priced beside the tokens.

Each test runs against every step from s07 on; the recovery chain's own tests, and each fixture's path
of transitions on every step that has it, are in test_s06_recovery.py.
"""

import io

from workbook.api import compare

import anthropic
import pytest
from conftest import STEPS, load_step
from recovery_runs import (
    body,
    generated,
    live_loop,
    replay_path,
    reply,
)
from rich.console import Console
from standin import message, text

STEPS_FROM = [s for s in STEPS if s >= "s07"]  # every step with a pause, a refusal and a stop hook


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module, its console silenced."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


def test_a_refusal_shows_its_stop_details(step, run_main):
    code, out = run_main(step.__name__, "--replay", "fixtures/s06_refusal.json")
    assert code == 0 and "refusal (cyber: The request asks for self-spreading malicious code.)" in out, out
    assert "→ done" in out  # the model's own decision: nothing to recover


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


def test_pauses_are_bounded(step):
    state, transport, _ = generated(step, [body([text("searching")], "pause_turn")] * (step.MAX_PAUSES + 1))
    assert [t for t, _ in state.log] == ["resume_pause"] * step.MAX_PAUSES + ["fail"]


def test_a_refusal_stops_cleanly_and_says_so(step):
    state, transport, _ = generated(step, [body([text("I can't help with that.")], "refusal")])
    assert state.log == [("done", "refusal: the model declined to go on, so the loop stops here")]
    assert len(transport.seen) == 1


def test_a_failing_stop_hook_goes_back_to_the_model(step):
    _, transport, _, workspace, _ = replay_path(step, "stop_hook")
    feedback = transport.seen[2]["messages"][-1]["content"]
    assert (
        "check failed: expected 'Hello, Ada!', got 'Hello, Ada'" in feedback and "[exit code 1]" in feedback
    )
    ended = anthropic.types.Message.model_validate(body([text("done")], "end_turn"))
    hook = step.run_stop_hook(step.Settings(workspace, stop_hook="sh check.sh"), ended)
    assert hook == step.HookResult(True, "check passed\n[exit code 0]")


def test_stop_hook_retries_are_capped(step):
    done = body([text("done")], "end_turn")
    state, transport, _ = generated(step, [done] * 3, stop_hook="echo still red; exit 1", hook_retries=2)
    assert [t for t, _ in state.log] == ["hook_retry", "hook_retry", "fail"] and len(transport.seen) == 3
    assert "still red" in transport.seen[1]["messages"][-1]["content"]


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


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_bad_hook_retry_count_is_one_line(step, bad, capsys):
    with pytest.raises(SystemExit) as stopped:
        step.main(["--stop-hook", "true", "--stop-hook-retries", bad])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"--stop-hook-retries: invalid count value: '{bad}'" in err
    assert "Traceback" not in err


def test_web_searches_cost_ten_dollars_a_thousand_beside_the_tokens(step):
    split = anthropic.types.Usage(
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=3_000_000,
        cache_creation={"ephemeral_5m_input_tokens": 1_000_000, "ephemeral_1h_input_tokens": 2_000_000},
        server_tool_use={"web_search_requests": 3, "web_fetch_requests": 0},
    )
    priced = anthropic.types.Message.model_validate(message([text("ok")]) | {"usage": split.to_dict()})
    budget = step.Budget()
    budget.spend(priced)  # what --max-cost is checked against
    assert budget.cost == budget.rows[-1].dollars == pytest.approx(1 * 3.75 + 2 * 6.00 + 3 * 0.01)
