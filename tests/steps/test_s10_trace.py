"""s10: the trace — every request and response rebuilt from it exactly, a collapsed run's too; it replays
to the same transitions as a fixture, a live run's and a resumed run's alike; a fatal error is its last
line; a trace that is not JSON, or of a run a Ctrl-C stopped, is refused in one line.

Each test runs against every step from s10 on.
"""

import io
import json
from pathlib import Path

from workbook import scratch
from workbook.replay import fixtures
from workbook.replay import transport as replay

import pytest
from conftest import STEPS, load_step
from recovery_runs import (
    FIXTURES,
    PATHS,
    flags_of,
    keeps,
    replay_path,
    replay_streamed,
    run_loop,
    streamed,
)
from rich.console import Console
from standin import StandIn, message, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s10"]  # every step that keeps a trace


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module, its console silenced."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


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


def test_main_writes_a_trace_and_replays_it(step, tmp_path):
    trace = tmp_path / "run.jsonl"
    assert step.main(["--replay", "fixtures/s06_stop_hook.json", "--trace", str(trace)]) == 0
    shown = io.StringIO()
    step.console = Console(file=shown, width=200)
    assert step.main(["--replay", str(trace), "--permission", "all"]) == 0  # a trace is on no trust list
    arrows = [line.split()[1] for line in shown.getvalue().splitlines() if line.startswith("→")]
    assert arrows == PATHS["stop_hook"]


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


def test_a_trace_that_is_not_json_is_one_line(step, tmp_path):
    (tmp_path / "bad.jsonl").write_text("not json\n")
    shown = io.StringIO()
    step.console = Console(file=shown, width=300)
    assert step.main(["--replay", str(tmp_path / "bad.jsonl")]) == 1
    assert "error:" in shown.getvalue() and "not a JSON-lines trace" in shown.getvalue()


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


def test_a_fatal_error_is_the_last_layer_named_in_the_trace(script, tmp_path):
    code, out = script("--replay", "fixtures/s03_bad_key.json", "--trace", str(tmp_path / "t.jsonl"))
    assert code == 1 and "check ANTHROPIC_API_KEY" in out
    lines = traced(tmp_path / "t.jsonl")
    assert [line["event"] for line in lines] == ["start", "model_call", "stop"]
    assert lines[1]["error"]["status"] == 401 and lines[2]["reason"].startswith(
        "fatal error: the API refused"
    )


def test_the_trace_of_a_resumed_run_replays_as_a_fixture(script, tmp_path):
    """The trace's run line keeps the --resume (named from the repo root, as a fixture names one), so
    the trace of a resumed run (s09's default replay) replays as it ran."""
    trace = tmp_path / "run.jsonl"
    code, out = script("--replay", "fixtures/s05_resume.json", "--trace", str(trace))
    assert code == 0, out
    run = json.loads(trace.read_text().splitlines()[0])
    assert run["args"] == ["--resume", "fixtures/conversations/s05_interrupted.json"]
    code, out = script("--replay", str(trace))
    assert code == 0 and "run ended: the model ended its turn" in out, out


def test_the_trace_of_a_run_a_ctrl_c_stopped_is_refused_in_one_line_saying_what_to_do(script, tmp_path):
    s01, s02 = load_step("s01_agent_loop"), load_step("s02_tools")
    reply = message([text("working on it")], "end_turn")
    lines = [
        {"event": "run", "task": "go", "workspace": "", "provenance": "recorded", "args": []},
        {
            "event": "start",
            "model": s01.MODEL,
            "max_tokens": s01.MAX_TOKENS,
            "system": "s",
            "tools": s02.TOOLS,
        },
        {
            "event": "model_call",
            "request": {"new_from": 0, "new_messages": [{"role": "user", "content": "go"}]},
            "response": reply,
        },
        {"event": "stop", "reason": "interrupted by the user (Ctrl-C during a model call)"},
    ]
    trace = tmp_path / "stopped.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out = script("--replay", str(trace))
    assert code == 1 and "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert "stopped by a Ctrl-C, which a replay cannot press" in out and "--resume" in out
    lines[-1]["reason"] = "the model ended its turn (stop_reason end_turn)"  # the same trace, not stopped
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert script("--replay", str(trace))[0] == 0
