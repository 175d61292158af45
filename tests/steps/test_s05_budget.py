"""s05: the loop stops when it should — each limit named, the repeat brake, streaming, a Ctrl-C that
keeps the work (and --resume), a trace that survives kill -9, the cost summary.

Behaviour tests run against every step from s05 on (later steps inherit it). The fixture replays and
the Ctrl-C tests run the script in a subprocess, as a reader would; live tests go over real HTTP to a
stand-in for the API.
"""

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workbook import conversation, errors, launch, prices, scratch, tracing
from workbook.api import contract, wire
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT, STEPS, load_step, offline_env
from processes import children_of
from rich.console import Console
from standin import Reply, StandIn, message, scripted, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s05"]
FIXTURES = ROOT / "fixtures"
STILL_OPEN = "error: interrupted by the user: stopped before it had a result"  # a call a Ctrl-C cut short
SAVED = FIXTURES / "conversations" / "s05_interrupted.json"  # what a second Ctrl-C in ./slow_check.sh leaves


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module under test, its console made quiet: s05, and every later step."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


def usage(input_tokens=0, output_tokens=0, written=None, read=None) -> anthropic.types.Usage:
    return anthropic.types.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
    )


def reply(used: anthropic.types.Usage) -> anthropic.types.Message:
    return anthropic.types.Message.model_validate(
        message([text("ok")], "tool_use") | {"usage": used.to_dict()}
    )


def fixture_file(name: str) -> str:
    """s05's fixtures by their short name; s04_repeated_call is s04's (the repeat brake's home), but its
    replies are streamed, so s05 replays it."""
    return "s04_repeated_call.json" if name == "repeated_call" else f"s05_{name}.json"


def fixture(name: str) -> dict:
    return fixtures.load_fixture(FIXTURES / fixture_file(name))


def replay_loop(step, name: str, strict: bool = True, tmp_path: Path | None = None, **limits):
    """Replay a fixture through the step's own agent_loop; (turns, budget, transport, messages)."""
    recorded = fixture(name)
    client, transport = replay.replay_client(recorded, fixture_file(name), strict, max_retries=0)
    budget = step.Budget(**limits)
    messages = [{"role": "user", "content": recorded["task"]}]
    workspace = scratch.copy_workspace(recorded["workspace"])
    trace = tracing.Trace(tmp_path / "trace.jsonl" if tmp_path else None)
    audit = workspace.parent / "audit.jsonl"
    settings = step.Settings(workspace, audit=audit, budget=budget, trace=trace)
    turns = step.agent_loop(client, messages, settings)
    return turns, budget, transport, messages


# -- what a run costs ------------------------------------------------------------------------------


def test_cost_is_input_and_output_at_the_models_price_per_million(step):
    assert prices.PRICES["claude-sonnet-5"] == (3.00, 15.00) and prices.PRICES_AS_OF  # dated
    assert step.cost(usage(1_000_000, 0)) == pytest.approx(3.00)
    assert step.cost(usage(0, 1_000_000)) == pytest.approx(15.00)
    assert step.cost(usage(1000, 100)) == pytest.approx(0.0045)  # 1000 x $3 + 100 x $15, per million


def test_one_hour_cache_writes_cost_double_and_web_searches_ten_dollars_a_thousand(step):
    split = anthropic.types.Usage(
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=3_000_000,
        cache_creation={"ephemeral_5m_input_tokens": 1_000_000, "ephemeral_1h_input_tokens": 2_000_000},
        server_tool_use={"web_search_requests": 3, "web_fetch_requests": 0},
    )
    assert step.cost(split) == pytest.approx(1 * 3.75 + 2 * 6.00 + 3 * 0.01)


def test_the_default_token_budget_is_the_articles_200000(step):
    assert step.MAX_TOKENS_TOTAL == 200_000 and step.Budget().max_tokens_total == 200_000


def test_cache_writes_cost_a_quarter_more_and_cache_reads_a_tenth(step):
    assert step.cost(usage(0, 0, written=1_000_000)) == pytest.approx(3.75)
    assert step.cost(usage(0, 0, read=1_000_000)) == pytest.approx(0.30)
    both = usage(1000, 500, written=2000, read=50_000)
    assert step.cost(both) == pytest.approx((1000 * 3 + 2000 * 3.75 + 50_000 * 0.3 + 500 * 15) / 1e6)
    assert step.tokens_in(both) == 53_000  # every input token counts toward the budgets, cached or not


def test_a_model_missing_from_the_price_table_is_priced_as_the_default(step):
    assert step.cost(usage(1000, 100), "some-other-model") == step.cost(usage(1000, 100))


def test_the_cost_warning_comes_once_when_the_threshold_is_passed(step):
    budget = step.Budget(max_cost=0.01)
    assert budget.spend(reply(usage(1000, 100))) is None  # $0.0045, 45%
    warning = budget.spend(reply(usage(1000, 100)))  # $0.0090, 90%
    assert warning == "about $0.0090 spent, 90% of --max-cost $0.01"
    assert budget.spend(reply(usage(10, 1))) is None and budget.exceeded() == ""


@pytest.mark.parametrize(
    "limits, spent, reason",
    [
        ({"max_steps": 2}, [usage(10, 1)] * 2, "max steps: 2 model calls made (--max-steps 2)"),
        ({"max_tokens_total": 100}, [usage(60, 10)] * 2, "token budget: 140 tokens in and out"),
        ({"max_input_tokens": 500}, [usage(100, 1, read=400)], "input limit: the last request sent 500"),
        ({"max_cost": 0.005}, [usage(1000, 100)] * 2, "cost limit: about $0.0090 spent (--max-cost $0.005)"),
    ],
)
def test_each_limit_stops_the_run_with_its_flag_in_the_reason(step, limits, spent, reason):
    budget = step.Budget(**limits)
    for used in spent[:-1]:
        budget.spend(reply(used))
        assert budget.exceeded() == ""
    budget.spend(reply(spent[-1]))
    assert budget.exceeded().startswith(reason)
    flag = "--" + next(iter(limits)).replace("_", "-")
    assert flag in budget.exceeded()


# -- each limit stops the replayed run at the right turn -------------------------------------------


def test_max_steps_stops_after_the_last_allowed_call_with_its_tools_answered(step):
    turns, budget, transport, messages = replay_loop(step, "max_steps", max_steps=3)
    assert len(turns) == 3 == transport.cursor
    assert budget.reason == "max steps: 3 model calls made (--max-steps 3)"
    assert messages[-1]["role"] == "user" and contract.api_rule_problems(step.plain(messages)) == []


@pytest.mark.parametrize(
    "limits, calls, reason",
    [  # the token_budget fixture's turns use (in, out): (439, 52) (1010, 59) (1639, 62) (2187, 67)
        ({"max_tokens_total": 5000}, 4, "token budget: 5,515 tokens in and out (--max-tokens-total 5,000)"),
        ({"max_tokens_total": 3261}, 3, "token budget: 3,261 tokens"),
        ({"max_tokens_total": 3262}, 4, "token budget: 5,515 tokens"),
        ({"max_input_tokens": 1500}, 3, "input limit: the last request sent 1,639 input tokens"),
        ({"max_cost": 0.01}, 3, "cost limit: about $0.0119 spent (--max-cost $0.01)"),
        ({"max_steps": 1}, 1, "max steps: 1 model calls made"),
    ],
)
def test_each_limit_stops_the_growing_run_at_the_turn_it_is_reached(step, limits, calls, reason):
    turns, budget, transport, messages = replay_loop(step, "token_budget", strict=False, **limits)
    assert len(turns) == calls == transport.cursor
    assert budget.reason.startswith(reason)
    assert contract.api_rule_problems(step.plain(messages)) == []


def test_the_token_budget_fixture_warns_about_cost_before_the_token_budget_stops_it(step):
    turns, budget, transport, _ = replay_loop(step, "token_budget", max_tokens_total=5000, max_cost=0.024)
    assert len(turns) == 4 and budget.warned and budget.reason.startswith("token budget")
    assert [row[1] for row in budget.rows] == [439, 1010, 1639, 2187]  # input grows: history is resent
    assert budget.cost == pytest.approx(0.0194, abs=5e-5) and budget.cost < 0.024


# -- the repeat brake ------------------------------------------------------------------------------


def block(name="read_file", tool_input=None, tool_id="toolu_x"):
    tool_input = {"path": "a.txt"} if tool_input is None else tool_input
    return anthropic.types.ToolUseBlock(type="tool_use", id=tool_id, name=name, input=tool_input)


def result(content="same", is_error=False):
    return {"type": "tool_result", "tool_use_id": "toolu_x", "content": content, "is_error": is_error}


def run_turns(brake, turns):
    """Each turn: a list of (block, result content); returns what the brake said for every call
    (None: it ran) and gives it the results of the calls it let run."""
    said = []
    for calls in turns:
        held = brake.hold_back([b for b, _ in calls])
        brake.remember([result(content, b.id in held) for b, content in calls])
        said += [held.get(b.id) for b, _ in calls]
    return said


def test_two_identical_calls_both_run_and_the_third_is_refused(step):
    brake = step.RepeatBrake()
    said = run_turns(brake, [[(block(), "same")], [(block(), "same")], [(block(), "same")]])
    assert said[:2] == [None, None]
    assert "not run" in said[2] and "Change approach" in said[2] and not brake.stop


def test_asking_again_after_the_refusal_stops_the_run(step):
    brake = step.RepeatBrake()
    said = run_turns(brake, [[(block(), "same")]] * 4)
    assert said[3].startswith("error: not run") and brake.stop.startswith("repeated call: read_file")


def test_refusals_take_their_places_among_the_results_in_tool_use_order(step, tmp_path):
    brake = step.RepeatBrake()
    run_turns(brake, [[(block(tool_id="a"), "x")], [(block(tool_id="b"), "x")]])
    calls = [block(tool_id="c"), block("list_files", {}, "d"), block("grep", {"pattern": "x"}, "e")]
    held = brake.hold_back(calls)
    answers = {block_id: (error, True) for block_id, error in held.items()}  # as the loop gives them
    results, _ = step.run_tools(calls, step.Settings(tmp_path), answers)
    assert list(held) == ["c"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [("c", True), ("d", False), ("e", False)]


def test_the_same_call_with_a_new_result_each_time_is_not_a_repeat(step):
    brake = step.RepeatBrake()  # e.g. polling a log that grows
    said = run_turns(brake, [[(block(), f"{n} lines")] for n in range(5)])
    assert said == [None] * 5 and not brake.stop


def test_another_call_in_between_breaks_the_run_of_repeats(step):
    brake = step.RepeatBrake()
    other = block("list_files", {})
    said = run_turns(brake, [[(block(), "x")], [(block(), "x")], [(other, "a.txt")], [(block(), "x")]])
    assert said == [None] * 4


def test_three_identical_calls_in_one_turn_the_third_is_refused(step):
    brake = step.RepeatBrake()
    held = brake.hold_back([block(tool_id="a"), block(tool_id="b"), block(tool_id="c")])
    assert list(held) == ["c"] and held["c"].startswith("error: not run")


def test_different_input_is_a_different_call(step):
    brake = step.RepeatBrake()
    said = run_turns(brake, [[(block(tool_input={"path": f"{n}.txt"}), "x")] for n in range(4)])
    assert said == [None] * 4


def test_the_repeated_call_fixture_reads_twice_refuses_the_third_and_stops_on_the_fourth(step):
    turns, budget, transport, messages = replay_loop(step, "repeated_call")
    assert len(turns) == 4 == transport.cursor
    results = [m["content"][0] for m in messages if m["role"] == "user" and isinstance(m["content"], list)]
    assert [r["is_error"] for r in results] == [False, False, True, True]
    config = (FIXTURES / "workspace" / "notes_app" / "app" / "config.toml").read_text()
    assert results[0]["content"] == results[1]["content"] == config
    assert "Change approach" in results[2]["content"]
    assert budget.reason.startswith('repeated call: read_file {"path": "app/config.toml"} asked for again')


# -- streaming -------------------------------------------------------------------------------------


REPLAYED_BY_S05 = sorted(  # s05's fixtures, and s04's repeat-brake run (every reply in them is streamed)
    p.stem for p in FIXTURES.glob("s0*.json") if fixtures.load_fixture(p)["script"] == "s05_budget"
)


@pytest.mark.parametrize("name", REPLAYED_BY_S05)
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
    recorded = fixture("streamed")
    for stream in (True, False):
        client, transport = replay.replay_client(recorded, "s05_streamed.json", strict=False)
        workspace = scratch.copy_workspace("notes_app")
        step.agent_loop(client, [{"role": "user", "content": "go"}], step.Settings(workspace, stream=stream))
        assert [body.get("stream") for body in transport.seen] == [True if stream else None] * 3


def test_text_shows_as_it_arrives_and_each_tool_call_once_with_its_result(step, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, width=200, force_terminal=False))
    replay_loop(step, "streamed")
    text_ = out.getvalue()
    asked = text_.index("grep config\\[ … (8 chars)")  # the pattern; the glob app/*.py counted
    assert text_.index("model: The server indexes config by section.") < asked
    assert asked < text_.index("app/server.py:10:")  # the call, then its result under it
    assert text_.count("grep config\\[") == 1 and "asks for" not in text_  # shown once
    assert "waiting for the model" not in text_


def test_a_non_streamed_recording_replays_through_the_script_unstreamed(script):
    code, out = script("--replay", "fixtures/s03_fix_failing_test.json")
    assert code == 0 and "stopped: the model ended its turn (stop_reason end_turn)" in out, out


# -- the trace -------------------------------------------------------------------------------------


def traced(path: Path) -> list[dict]:
    """The trace's lines of the kinds s05 writes (a later step may add kinds of its own)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line["event"] in ("start", "model_call", "tools", "stop")]


def rebuilt_requests(lines: list[dict]) -> list[dict]:
    """Every request body the run sent, rebuilt from the trace alone (what s06 does)."""
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
    turns, budget, transport, _ = replay_loop(step, "streamed", tmp_path=tmp_path)
    lines = traced(tmp_path / "trace.jsonl")
    events = [line["event"] for line in lines]
    assert events == ["start", "model_call", "tools", "model_call", "tools", "model_call", "stop"]
    assert rebuilt_requests(lines) == transport.seen
    responses = [line["response"] for line in lines if line["event"] == "model_call"]
    assert responses == [turn.to_dict(mode="json") for turn in turns]
    assert lines[-1] == lines[-1] | {"reason": budget.reason, "steps": 3, "tokens": budget.tokens}
    assert [line["next"] for line in lines if line["event"] == "tools"] == ["continue", "continue"]


# -- Ctrl-C keeps the work; --resume goes on from it -----------------------------------------------


def start_script(*args, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    trace = tmp_path / "trace.jsonl"
    command = [sys.executable, "s05_budget.py", *args, "--trace", str(trace)]
    env = offline_env(PYTHONUNBUFFERED="1")  # each line as it is printed: tests wait on them
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return proc, trace


def wait_for_line(proc, trace: Path, event: str, timeout: float = 120) -> None:
    """Until the trace has a line for `event` (the run has reached that point), or fail."""
    deadline = time.monotonic() + timeout
    while not (trace.exists() and f'"event": "{event}"' in trace.read_text()):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"no {event} line in the trace"
        time.sleep(0.05)


def runs_under(pid: int, needle: bytes) -> bool:
    """Whether a child of process `pid` is running a command line that holds `needle`."""
    return any(needle in command for _, command in children_of(pid))


def sleeps_below(pid: int, needle: bytes) -> list[int]:
    """The `sleep` processes under the child of `pid` running `needle`: its shell, the script the shell
    runs, what the script runs."""
    below = [child for child, command in children_of(pid) if needle in command]
    sleeps = []
    while below:
        process = below.pop()
        for child, command in children_of(process):
            (sleeps if command.startswith(b"sleep\0") else below).append(child)
    return sleeps


def end_the_wait_in(pid: int, needle: bytes, timeout: float = 120) -> None:
    """Let the command holding `needle`, a child of `pid`, run on to its end now: once its `sleep` has
    started (an event, not a guess), it is ended, so the script goes on as if the time had passed. The
    test then waits on the run, not on a clock."""
    deadline = time.monotonic() + timeout
    while not (sleeps := sleeps_below(pid, needle)):
        if not runs_under(pid, needle):
            return  # its sleep ran out first (a very slow machine): nothing left to end
        assert time.monotonic() < deadline, f"{needle!r} never started its sleep"
        time.sleep(0.02)
    for child in sleeps:  # SIGPIPE: the one end a shell reports without a word ("Killed", "Terminated")
        os.kill(child, signal.SIGPIPE)


def wait_until_running(proc, needle: bytes, timeout: float = 120) -> None:
    """Until the run's tools have started the command holding `needle`, or fail (an event, not a guess)."""
    deadline = time.monotonic() + timeout
    while not runs_under(proc.pid, needle):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{needle!r} never started"
        time.sleep(0.02)


def read_until(proc, words: str, timeout: float = 120) -> str:
    """The program's output up to the line holding `words` (it has reached that point), or fail."""
    seen, deadline = [], time.monotonic() + timeout
    while not seen or words not in seen[-1]:
        assert time.monotonic() < deadline, f"{words!r} never printed: {''.join(seen)}"
        line = proc.stdout.readline()
        assert line, f"the run ended before printing {words!r}: {''.join(seen)}"
        seen.append(line)
    return "".join(seen)


def workspace_of(pid: int, needle: bytes) -> Path:
    """The folder the command holding `needle`, a child of `pid`, runs in: the run's workspace."""
    [child] = [child for child, command in children_of(pid) if needle in command]
    return Path(os.readlink(f"/proc/{child}/cwd"))


def interrupt_during_the_slow_command(
    tmp_path, second: bool = False, fixture: str = "s05_interrupt"
) -> tuple[str, int, list]:
    """Replay `fixture`, Ctrl-C once ./slow_check.sh (a 5 s sleep, then its result) is running. Once
    the Ctrl-C is acknowledged: a second one, if asked; else the check's sleep is ended, and the check
    finishes as it would have (the first Ctrl-C must let it). (output, exit code, saved conversation)."""
    saved = tmp_path / "conversation.json"
    proc, _ = start_script("--replay", f"fixtures/{fixture}.json", "--save", str(saved), tmp_path=tmp_path)
    wait_until_running(proc, b"slow_check.sh")
    if fixture == "s05_interrupt_keeps_what_ended":  # its first command ran, alone, before the check
        assert (workspace_of(proc.pid, b"slow_check.sh") / "marker.txt").read_text() == "written\n"
    proc.send_signal(signal.SIGINT)
    before = read_until(proc, "Ctrl-C: this turn's tools run to their end")
    assert runs_under(proc.pid, b"slow_check.sh"), "the command ended before the Ctrl-C was acknowledged"
    if second:
        proc.send_signal(signal.SIGINT)
    else:
        end_the_wait_in(proc.pid, b"slow_check.sh")
    out = before + proc.communicate(timeout=120)[0]
    return out, proc.returncode, json.loads(saved.read_text())


def kill_after_the_first_call(tmp_path) -> str:
    """Replay s05_interrupt and kill -9 it once the first model call is traced; the trace's text."""
    proc, trace = start_script("--replay", "fixtures/s05_interrupt.json", tmp_path=tmp_path)
    wait_for_line(proc, trace, "model_call")
    proc.kill()
    proc.communicate(timeout=120)
    return trace.read_text()


def interrupt_during_a_model_call(tmp_path) -> tuple[str, int, list]:
    """Live against a stand-in that takes 30 s to answer; Ctrl-C once the request has arrived."""
    slow = Reply(body=message([text("too late")]), delay=600)  # never comes: the Ctrl-C ends the wait
    saved = tmp_path / "c.json"
    with StandIn(scripted(slow)) as api:
        env = offline_env(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=api.url)
        command = [
            sys.executable,
            "s05_budget.py",
            "say hi",
            "--workspace",
            str(tmp_path),
            "--save",
            str(saved),
        ]
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + 120  # a safety net only
        while not api.requests:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=120)[0]
    return out, proc.returncode, json.loads(saved.read_text())


@pytest.fixture(scope="module")
def signalled(tmp_path_factory):
    """The runs that need a real process of their own (signals, kill -9), started together."""
    jobs = {
        "once": interrupt_during_the_slow_command,
        "twice": lambda tmp: interrupt_during_the_slow_command(tmp, second=True),
        "twice, after a write": lambda tmp: interrupt_during_the_slow_command(
            tmp, second=True, fixture="s05_interrupt_keeps_what_ended"
        ),
        "kill -9": kill_after_the_first_call,
        "model call": interrupt_during_a_model_call,
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        started = {name: pool.submit(job, tmp_path_factory.mktemp("run")) for name, job in jobs.items()}
        return {name: future.result() for name, future in started.items()}


S05_ONLY = pytest.mark.skipif("s05_budget" not in STEPS, reason="runs s05_budget.py itself")


@S05_ONLY
def test_a_first_ctrl_c_lets_the_turns_tools_run_to_their_end_then_saves_and_stops(signalled):
    out, code, saved = signalled["once"]
    assert code == 130 and "Traceback" not in out, out
    assert "stopped: interrupted by the user (Ctrl-C while tools ran: each ran to its end" in out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 3
    check, read = saved[-1]["content"]
    assert not check["is_error"] and check["content"] == "12 checks passed\n[exit code 0]"
    assert not read["is_error"] and "def " in read["content"]  # the call after it ran too


@S05_ONLY
def test_a_second_ctrl_c_cuts_the_tools_short_and_still_saves(signalled):
    out, code, saved = signalled["twice"]
    assert code == 130 and "Traceback" not in out, out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 3
    assert all(a["is_error"] and "interrupted by the user" in a["content"] for a in saved[-1]["content"])
    assert "12 checks passed" not in json.dumps(saved)
    assert saved == json.loads(SAVED.read_text())  # the conversation s05_resume.json was recorded from


@S05_ONLY
def test_a_second_ctrl_c_keeps_the_real_result_of_a_call_that_had_ended(signalled):
    """marker.txt was written (the run checked it while ./slow_check.sh ran): its call keeps its result,
    and only the check, still open, is answered as interrupted."""
    out, code, saved = signalled["twice, after a write"]
    assert code == 130 and "Traceback" not in out, out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 3
    marker, check = saved[-1]["content"]
    assert not marker["is_error"] and marker["content"] == "(no output)\n[exit code 0]"
    assert check["is_error"] and check["content"] == STILL_OPEN
    assert "stopped: interrupted by the user (a second Ctrl-C while tools ran: the 1 of 2 calls" in out


@pytest.mark.parametrize("script", [f"{s}.py" for s in STEPS_FROM])
def test_live_two_ctrl_cs_keep_the_result_of_every_call_that_had_ended(script, tmp_path):
    """Live over real HTTP: the first command writes marker.txt, the second waits on a FIFO nobody writes
    (an event, not a clock: it runs until the Ctrl-Cs end it). The saved conversation tells the truth."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.mkfifo(workspace / "wait.fifo")
    write = tool_use("toolu_a", "bash", {"command": "echo written > marker.txt"})
    first = message([write, tool_use("toolu_b", "bash", {"command": "cat wait.fifo"})], "tool_use")
    saved = tmp_path / "conversation.json"
    with StandIn(scripted(first)) as api:
        env = offline_env(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=api.url, PYTHONUNBUFFERED="1")
        flags = ["--workspace", str(workspace), "--save", str(saved), "--permission", "all"]
        proc = subprocess.Popen(
            [sys.executable, script, "leave a marker, then wait", *flags],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until_running(proc, b"wait.fifo")
        proc.send_signal(signal.SIGINT)
        out = read_until(proc, "Ctrl-C: this turn's tools run to their end")
        proc.send_signal(signal.SIGINT)
        out += proc.communicate(timeout=120)[0]
    assert proc.returncode == 130 and "Traceback" not in out, out
    assert (workspace / "marker.txt").read_text() == "written\n" and len(api.requests) == 1
    conversation = json.loads(saved.read_text())
    assert contract.api_rule_problems(conversation) == []
    assert conversation[-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_a",
            "content": "(no output)\n[exit code 0]",
            "is_error": False,
        },
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": STILL_OPEN, "is_error": True},
    ]
    assert not runs_under(proc.pid, b"wait.fifo")


@S05_ONLY
def test_ctrl_c_during_a_model_call_drops_the_partial_reply(signalled):
    out, code, saved = signalled["model call"]
    assert code == 130 and "Traceback" not in out, out
    assert "interrupted by the user (during a model call: its partial reply was dropped)" in out
    assert saved == [{"role": "user", "content": "say hi"}]


@S05_ONLY
def test_the_trace_is_valid_json_lines_after_kill_9(signalled):
    lines = [json.loads(line) for line in signalled["kill -9"].splitlines()]  # each line whole
    assert [line["event"] for line in lines] == ["start", "model_call"]
    first = wire.events_to_message(fixture("interrupt")["exchanges"][0]["response"]["stream"])
    traced = anthropic.types.Message.model_validate(lines[1]["response"])
    expected = anthropic.types.Message.model_validate(first)
    assert traced.to_dict(exclude_none=True) == expected.to_dict(exclude_none=True)


@S05_ONLY
def test_resume_from_the_command_line_after_a_real_ctrl_c(signalled, script, step, tmp_path):
    out, code, saved = signalled["twice"]
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(saved))
    code, out = script("--resume", str(path))
    resume_fixture, own = RESUMES[step.__name__]
    assert code == 0 and f"offline replay of fixtures/{resume_fixture}" in out, out
    assert ("leniently" in out) != (own == SAVED)  # strict on the conversation it was recorded from
    assert "stopped: the model ended its turn" in out


def test_resume_continues_the_saved_conversation_with_the_new_instruction(step):
    recorded = fixture("resume")
    client, transport = replay.replay_client(recorded, "s05_resume.json", max_retries=0)  # strict
    messages = step.continued(step.load_conversation(SAVED), recorded["task"])
    budget = step.Budget()
    settings = step.Settings(scratch.copy_workspace("notes_app"), budget=budget)
    turns = step.agent_loop(client, messages, settings)
    assert transport.seen[0]["messages"][-1]["content"][-1] == {"type": "text", "text": recorded["task"]}
    assert len(turns) == 2 and budget.reason.startswith("the model ended its turn")


RESUMES = {  # step -> the fixture its offline --resume replays, and the conversation that was recorded from
    "s05_budget": ("s05_resume.json", SAVED),
    "s06_recovery": ("s06_resume.json", FIXTURES / "conversations" / "s06_summarized_logs.json"),
}


def test_each_step_resumes_offline_from_a_conversation_of_its_own(step):
    resume_fixture, own = RESUMES[step.__name__]
    recorded = fixtures.load_fixture(FIXTURES / resume_fixture)
    assert recorded["script"] == step.__name__ and str(own.relative_to(ROOT)) in recorded["args"]


def test_resume_of_the_saved_conversation_replays_the_resume_fixture_strictly(script, step):
    resume_fixture, own = RESUMES[step.__name__]
    code, out = script("--resume", str(own))
    assert code == 0 and f"offline replay of fixtures/{resume_fixture}" in out, out
    assert "leniently" not in out and "stopped: the model ended its turn" in out


def test_the_default_replays_saved_conversation_resumes_strictly_from_the_hint(script, step):
    code, out = script()
    hint = out[out.index("continue it offline") :]
    resume_fixture, _ = RESUMES[step.__name__]
    assert f"(replays fixtures/{resume_fixture}'s answers)" in hint
    saved = re.search(r"--resume \\\n\s+(\S+conversation\.json)", hint).group(1)
    if step.__name__ == "s06_recovery":  # s06's default run is the one its resume fixture continues
        code, out = script("--resume", saved)
        assert code == 0 and "leniently" not in out, out


def test_resume_of_a_conversation_saved_at_another_moment_replays_leniently(script, tmp_path):
    saved = json.loads(SAVED.read_text())[:1]  # as if Ctrl-C had come during the first model call
    path = tmp_path / "early.json"
    path.write_text(json.dumps(saved))
    code, out = script("--resume", str(path))
    assert code == 0 and "replaying leniently" in out and "stopped: the model ended its turn" in out, out


def test_a_resumed_conversation_that_ended_on_an_answer_needs_an_instruction(step):
    finished = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    ]
    assert step.continued(finished, "and now?")[-1] == {"role": "user", "content": "and now?"}
    with pytest.raises(errors.WorkbookError, match="give a new instruction"):
        step.continued(finished, "")


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "no such file"),
        ("{not json", "not a saved conversation"),
        ('{"messages": 1}', "cannot continue this conversation"),
        ('[{"role": "assistant", "content": "hi"}]', 'first message must use the "user" role'),
    ],
)
def test_a_bad_resume_file_is_one_line_saying_what_is_wrong(script, tmp_path, content, problem):
    path = tmp_path / "c.json"
    if content is not None:
        path.write_text(content)
    code, out = script("--resume", str(path))
    assert code == 1 and problem in out and "Traceback" not in out
    assert len([line for line in out.splitlines() if line.startswith("error:")]) == 1


# -- --handoff: a fresh session from the task and what the drifted run did -------------------------

DRIFTED = FIXTURES / "conversations" / "s05_drifted.json"  # s04_write_flip_flop, replayed by s05 with --save


def test_a_handoff_replays_offline_from_one_message_strictly(script, step):
    code, out = script("--handoff", str(DRIFTED))
    assert code == 0 and "offline replay of fixtures/s05_handoff.json" in out, out
    assert "leniently" not in out and "fresh session: the 10 messages saved in" in out
    assert "stopped: the model ended its turn" in out


def test_the_handoff_message_is_the_task_what_the_run_did_and_the_instruction(step):
    recorded = fixtures.load_fixture(FIXTURES / "s05_handoff.json")
    [opening] = recorded["exchanges"][0]["request"]["messages"]  # one message: a fresh session
    text = opening["content"]
    assert text.startswith("A 3,000-character note must fit: raise the note limit in app/config.toml.\n\n")
    assert step.HANDOFF in text and text.endswith("\n\n" + recorded["task"])
    assert "Files it changed: app/config.toml (3 writes)" in text
    assert "- write_file app/config.toml: error: not run: this write redoes one you already undid" in text


def test_what_it_did_is_read_from_the_calls_and_results_not_from_the_models_words():
    messages = [
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "All tests pass now."},  # a claim: the results say otherwise
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "pytest -q"}},
                {"type": "tool_use", "id": "t2", "name": "edit_file", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "t3", "name": "write_file", "input": {"path": "../x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "1 failed\n[exit code 1]"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "edited a.py", "is_error": False},
                {"type": "tool_result", "tool_use_id": "t3", "content": "error: outside", "is_error": True},
            ],
        },
    ]
    notes = conversation.what_it_did(messages).splitlines()
    assert notes[0] == "Files it changed: a.py (1 write)"
    assert notes[1:3] == ["Commands it ran:", "  - bash pytest -q (exit code 1)"]
    assert notes[3:5] == ["Calls that failed or were refused:", "  - write_file ../x: error: outside"]
    assert notes[5] == "Its last words: All tests pass now."


def test_a_handoff_of_a_handoff_keeps_the_first_task(step, monkeypatch, tmp_path):
    first = step.handed_off(offline_run(tmp_path, "then stop"), str(DRIFTED))[0]["content"]
    path = tmp_path / "again.json"
    path.write_text(json.dumps([{"role": "user", "content": first}, {"role": "assistant", "content": "ok"}]))
    again = step.handed_off(offline_run(tmp_path, "now"), str(path))[0]["content"]
    assert again.startswith("A 3,000-character note must fit") and again.count(step.HANDOFF) == 1


def offline_run(tmp_path, task: str):
    """A launch.Run with no fixture (as live), for handed_off()."""
    return launch.Run(None, "live", task, tmp_path, "m", "", script="s05_budget")


def test_resume_and_handoff_together_are_one_line(script):
    code, out = script("--resume", str(SAVED), "--handoff", str(DRIFTED))
    assert code == 1 and "--resume goes on from a saved conversation, --handoff starts afresh" in out
    assert "Traceback" not in out


def test_a_bad_handoff_file_is_one_line(script, tmp_path):
    (tmp_path / "c.json").write_text("{not json")
    code, out = script("--handoff", str(tmp_path / "c.json"))
    assert code == 1 and "not a saved conversation" in out and "Traceback" not in out


@pytest.mark.parametrize("task", [None, "Set it to 3000 and stop."])
def test_live_a_handoff_sends_one_message_and_saves_a_fresh_conversation(live, task):
    code, requests, out, saved = live(
        scripted(message([text("Done.")])), "--handoff", str(DRIFTED), task=task
    )
    [opening] = requests[0]["body"]["messages"]
    assert (
        code == 0 and opening["role"] == "user" and "Files it changed: app/config.toml" in opening["content"]
    )
    assert opening["content"].endswith(task or "Carry on with the task.")
    assert saved[0] == opening and len(saved) == 2  # the new session, not the old one


# -- the script, as a reader runs it ---------------------------------------------------------------


@pytest.fixture
def script(step, monkeypatch):
    """Run the step's main() offline, in this process: (exit code, what it printed)."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MODEL_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)

    def run(*argv):
        out = io.StringIO()
        monkeypatch.setattr(step, "console", Console(file=out, width=200))
        return step.main(list(argv)), out.getvalue()

    return run


REPLAYS = {  # fixture -> how the run ends
    "s05_streamed": "stopped: the model ended its turn (stop_reason end_turn)",
    "s05_max_steps": "stopped: max steps: 3 model calls made (--max-steps 3)",
    "s05_token_budget": "stopped: token budget: 5,515 tokens in and out (--max-tokens-total 5,000)",
    "s04_repeated_call": "stopped: repeated call: read_file",
    "s05_resume": "stopped: the model ended its turn (stop_reason end_turn)",
    "s05_handoff": "stopped: the model ended its turn (stop_reason end_turn)",
}
INTERRUPTED_RUNS = ["s05_interrupt", "s05_interrupt_keeps_what_ended"]  # replayed above, with real Ctrl-Cs


def test_every_fixture_s05_replays_has_a_replay_test():
    assert sorted([*REPLAYS, *INTERRUPTED_RUNS]) == REPLAYED_BY_S05
    assert "s04_repeated_call" in REPLAYED_BY_S05


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_each_fixture_replays_with_its_own_flags_and_ends_for_its_reason(script, name):
    code, out = script("--replay", f"fixtures/{name}.json")
    assert code == 0 and "Traceback" not in out, out
    assert REPLAYS[name] in out
    assert "cost (est.)" in out and "conversation saved:" in out


def test_the_token_budget_replay_shows_the_cost_warning_and_the_summary_total(script):
    code, out = script("--replay", "fixtures/s05_token_budget.json")
    assert "cost warning: about $0.0194 spent, 81% of --max-cost $0.024" in out
    assert re.search(r"total\s*│\s*│\s*5,275\s*│\s*240\s*│\s*\$0\.0194", out)


def test_the_default_replay_is_the_streamed_fixture(step, script):
    code, out = script()
    assert code == 0 and f"offline replay of {step.DEFAULT_FIXTURE}" in out


def test_a_reader_who_lifts_the_limit_sees_the_recording_run_out(script):
    code, out = script("--replay", "fixtures/s05_max_steps.json", "--max-steps", "10")
    assert code == 1 and "the loop did not stop when the recording did" in out


def test_help_names_every_limit_and_the_resume_flag(step, capsys):
    with pytest.raises(SystemExit) as done:
        step.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and step.DEFAULT_FIXTURE in out
    for flag in (
        "--max-steps",
        "--max-tokens-total",
        "--max-input-tokens",
        "--max-cost",
        "--resume",
        "--trace",
    ):
        assert flag in out


def test_a_fatal_error_is_the_last_layer_named_in_the_trace(script, tmp_path):
    code, out = script("--replay", "fixtures/s03_bad_key.json", "--trace", str(tmp_path / "t.jsonl"))
    assert code == 1 and "check ANTHROPIC_API_KEY" in out
    lines = traced(tmp_path / "t.jsonl")
    assert [line["event"] for line in lines] == ["start", "model_call", "stop"]
    assert lines[1]["error"]["status"] == 401 and lines[2]["reason"].startswith(
        "fatal error: the API refused"
    )


# -- live, over real HTTP: a model that repeats itself and runs long is stopped --------------------


@pytest.fixture
def live(step, tmp_path, monkeypatch):
    """Run `step.main` live against a stand-in with this brain; (exit code, requests, output, saved)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, width=200))
    monkeypatch.setattr(step, "RUNS", tmp_path / "runs")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("WORKBOOK_NO_SLEEP", "1")
    monkeypatch.delenv("MODEL_ID", raising=False)

    def run(brain, *flags, task="do it"):
        saved = tmp_path / "conversation.json"
        with StandIn(brain) as api:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
            argv = [task] if task else []
            code = step.main([*argv, "--workspace", str(workspace), "--save", str(saved), *flags])
        assert not api.rule_problems
        assert all(r["body"].get("stream") is True for r in api.requests)
        return code, api.requests, out.getvalue(), json.loads(saved.read_text())

    return run


def test_live_a_model_that_repeats_itself_is_refused_then_stopped(live):
    def same_read(body, n):
        return message([tool_use(f"toolu_{n}", "read_file", {"path": "notes.txt"})], "tool_use")

    code, requests, out, saved = live(same_read)
    assert code == 0 and len(requests) == 4
    results = [m["content"][0] for m in saved if m["role"] == "user" and isinstance(m["content"], list)]
    assert [r["is_error"] for r in results] == [False, False, True, True]
    assert 'stopped: repeated call: read_file {"path": "notes.txt"}' in out


def test_live_a_model_that_runs_long_is_stopped_by_max_steps(live):
    def wanders(body, n):
        return message([tool_use(f"toolu_{n}", "grep", {"pattern": f"line {n}"})], "tool_use")

    code, requests, out, saved = live(wanders, "--max-steps", "5")
    assert code == 0 and len(requests) == 5
    assert "stopped: max steps: 5 model calls made (--max-steps 5)" in out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 11


def test_live_a_growing_conversation_is_stopped_by_the_token_budget_with_cache_tokens_counted(live):
    def grows(body, n):
        reply = message([tool_use(f"toolu_{n}", "list_files", {"glob": f"{n}/*"})], "tool_use", 1000, 100)
        reply["usage"] |= {"cache_read_input_tokens": 20_000 * (n + 1), "cache_creation_input_tokens": 5000}
        return reply

    code, requests, out, _ = live(grows, "--max-tokens-total", "100000")
    # in + out per call: 26,100, 46,100, 66,100 -> 138,300 after three: the fourth is never sent
    assert code == 0 and len(requests) == 3
    assert "stopped: token budget: 138,300 tokens in and out (--max-tokens-total 100,000)" in out


def test_live_one_huge_request_is_stopped_by_the_input_limit(live):
    sizes = (900, 5000, 10)
    replies = [
        message([tool_use(f"t{n}", "list_files", {})], "tool_use", size, 10) for n, size in enumerate(sizes)
    ]
    code, requests, out, _ = live(scripted(*replies), "--max-input-tokens", "4000")
    assert code == 0 and len(requests) == 2
    assert "stopped: input limit: the last request sent 5,000 input tokens" in out


def test_live_the_cost_cap_warns_then_stops(live):
    def pricey(body, n):  # 100k in, 2k out: $0.33 a call
        return message([tool_use(f"toolu_{n}", "list_files", {"glob": f"{n}"})], "tool_use", 100_000, 2000)

    code, requests, out, _ = live(pricey, "--max-cost", "1", "--max-tokens-total", "1000000")
    assert code == 0 and len(requests) == 4  # $0.99 after three calls is under $1; $1.32 after four
    assert (
        out.count("cost warning:") == 1 and "cost warning: about $0.9900 spent, 99% of --max-cost $1" in out
    )
    assert "stopped: cost limit: about $1.3200 spent (--max-cost $1)" in out


def test_live_resume_without_an_instruction_asks_the_model_to_continue(live, tmp_path):
    code, requests, out, saved = live(
        scripted(message([text("Carrying on.")])), "--resume", str(SAVED), task=None
    )
    last = requests[0]["body"]["messages"][-1]["content"]
    assert code == 0 and last[-1] == {"type": "text", "text": "Continue where you left off."}
    assert [block["type"] for block in last] == ["tool_result", "tool_result", "text"]


def test_live_a_recorded_stream_replays_offline_streamed(live, step, tmp_path, monkeypatch):
    recording = tmp_path / "recorded.json"
    first = message([text("Looking."), tool_use("toolu_1", "list_files", {})], "tool_use")
    brain = scripted(first, message([text("Two lines.")]))
    code, requests, out, _ = live(brain, "--record", str(recording))
    fixture = fixtures.load_fixture(recording)
    assert code == 0 and all("stream" in e["response"] for e in fixture["exchanges"])  # SSE kept as events
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, width=200))
    assert step.main(["--replay", str(recording)]) == 0, out.getvalue()
    assert "model: Two lines." in out.getvalue() and "stopped: the model ended its turn" in out.getvalue()


def test_the_help_names_the_budgets_own_defaults(step, capsys):
    """The limit flags leave a limit not given to Budget's default; --help names those defaults."""
    with pytest.raises(SystemExit):
        step.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    budget = step.Budget()
    assert f"model calls (default {budget.max_steps})" in out
    assert f"tokens in + out (default {budget.max_tokens_total:,})" in out
    assert f"input, one request (default {budget.max_input_tokens:,})" in out
    assert f"warned at 80% (default {budget.max_cost:.2f})" in out
