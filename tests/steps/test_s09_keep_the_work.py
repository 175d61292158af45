"""s09: the work is never lost — a first Ctrl-C lets the turn's tools finish, a second keeps what ended,
a Ctrl-C during a model call drops only its partial reply; --resume goes on from a saved conversation;
the trace survives kill -9. (--handoff, a fresh session instead, is s11's: test_s11_handoff.py.)

Behaviour tests run against every step from s09 on. The Ctrl-C tests run the script in a subprocess with
real signals, as a reader would; live tests go over real HTTP to a stand-in for the API.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workbook import conversation, errors, paths, processes, scratch, step_cli
from workbook.api import contract, wire
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import psutil
import pytest
from conftest import ROOT, STEPS, load_step, offline_env
from rich.console import Console
from standin import Reply, StandIn, message, scripted, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s09"]
FIXTURES = ROOT / "fixtures"
STILL_OPEN = "error: interrupted by the user: stopped before it had a result"  # a call a Ctrl-C cut short
SAVED = FIXTURES / "conversations" / "s05_interrupted.json"  # what a second Ctrl-C in ./slow_check.sh leaves


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module under test, its console made quiet: s09, and every later step."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


# -- Ctrl-C keeps the work; --resume goes on from it -----------------------------------------------


def start_script(*args, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    trace = tmp_path / "trace.jsonl"
    command = [
        sys.executable,
        "-m",
        "workbook.later.s10_trace",
        *args,
        "--trace",
        str(trace),
    ]  # the trace says how far it got
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


def runs_under(pid: int, needle: str) -> bool:
    """Whether a child of process `pid` is running a command line that holds `needle`."""
    return any(needle in processes.command_line(child) for child in processes.children(pid))


def still_running(process) -> bool:
    """Whether `process` (a psutil.Process) still runs: not ended, not a zombie, not its pid reused."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except processes.GONE:
        return False


def sleeps_below(pid: int, needle: str) -> list[int]:
    """The `sleep` processes under the child of `pid` running `needle`: its shell, the script the shell
    runs, what the script runs."""
    below = [child for child in processes.children(pid) if needle in processes.command_line(child)]
    return [
        p.pid
        for child in below
        for p in processes.below(child.pid)
        if processes.command_line(p).startswith("sleep ")
    ]


def end_the_wait_in(pid: int, needle: str, timeout: float = 120) -> None:
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


def wait_until_running(proc, needle: str, timeout: float = 120) -> None:
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


def workspace_of(pid: int, needle: str) -> Path:
    """The folder the command holding `needle`, a child of `pid`, runs in: the run's workspace."""
    [child] = [child for child in processes.children(pid) if needle in processes.command_line(child)]
    return Path(child.cwd())


def interrupt_during_the_slow_command(
    tmp_path, second: bool = False, fixture: str = "s05_interrupt"
) -> tuple[str, int, list]:
    """Replay `fixture`, Ctrl-C once ./slow_check.sh (a 5 s sleep, then its result) is running. Once
    the Ctrl-C is acknowledged: a second one, if asked; else the check's sleep is ended, and the check
    finishes as it would have (the first Ctrl-C must let it). (output, exit code, saved conversation)."""
    saved = tmp_path / "conversation.json"
    proc, _ = start_script("--replay", f"fixtures/{fixture}.json", "--save", str(saved), tmp_path=tmp_path)
    wait_until_running(proc, "slow_check.sh")
    if fixture == "s05_interrupt_keeps_what_ended":  # its first command ran, alone, before the check
        assert (workspace_of(proc.pid, "slow_check.sh") / "marker.txt").read_text() == "written\n"
    proc.send_signal(signal.SIGINT)
    before = read_until(proc, "Ctrl-C: this turn's tools run to their end")
    assert runs_under(proc.pid, "slow_check.sh"), "the command ended before the Ctrl-C was acknowledged"
    if second:
        proc.send_signal(signal.SIGINT)
    else:
        end_the_wait_in(proc.pid, "slow_check.sh")
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
            "-m",
            "workbook.later.s09_keep_the_work",
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


def test_a_first_ctrl_c_lets_the_turns_tools_run_to_their_end_then_saves_and_stops(signalled):
    out, code, saved = signalled["once"]
    assert code == 130 and "Traceback" not in out, out
    assert "run ended: interrupted by the user (Ctrl-C while tools ran: each ran to its end" in out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 3
    check, read = saved[-1]["content"]
    assert not check["is_error"] and check["content"] == "12 checks passed\n[exit code 0]"
    assert not read["is_error"] and "def " in read["content"]  # the call after it ran too


def test_a_second_ctrl_c_cuts_the_tools_short_and_still_saves(signalled):
    out, code, saved = signalled["twice"]
    assert code == 130 and "Traceback" not in out, out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 3
    assert all(a["is_error"] and "interrupted by the user" in a["content"] for a in saved[-1]["content"])
    assert "12 checks passed" not in json.dumps(saved)
    assert saved == json.loads(SAVED.read_text())  # the conversation s05_resume.json was recorded from


def test_a_second_ctrl_c_keeps_the_real_result_of_a_call_that_had_ended(signalled):
    """marker.txt was written (the run checked it while ./slow_check.sh ran): its call keeps its result,
    and only the check, still open, is answered as interrupted."""
    out, code, saved = signalled["twice, after a write"]
    assert code == 130 and "Traceback" not in out, out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 3
    marker, check = saved[-1]["content"]
    assert not marker["is_error"] and marker["content"] == "(no output)\n[exit code 0]"
    assert check["is_error"] and check["content"] == STILL_OPEN
    assert "run ended: interrupted by the user (a second Ctrl-C while tools ran: the 1 of 2 calls" in out


@pytest.mark.parametrize("step", STEPS_FROM)
def test_live_two_ctrl_cs_keep_the_result_of_every_call_that_had_ended(step, tmp_path):
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
            [*paths.step_argv(step), "leave a marker, then wait", *flags],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_until_running(proc, "wait.fifo")
        waiting = [c for c in processes.children(proc.pid) if "wait.fifo" in processes.command_line(c)]
        waiting += [p for c in waiting for p in processes.below(c.pid)]  # the cat, if its shell forked it
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
    # The run has ended and been reaped, so nothing is its child any more: the processes seen waiting on
    # the FIFO are looked up themselves (is_running: the same process, not a later one given its pid).
    assert waiting and not [p for p in waiting if still_running(p)], waiting


def test_ctrl_c_during_a_model_call_drops_the_partial_reply(signalled):
    out, code, saved = signalled["model call"]
    assert code == 130 and "Traceback" not in out, out
    assert "interrupted by the user (during a model call: its partial reply was dropped)" in out
    assert saved == [{"role": "user", "content": "say hi"}]


def test_the_trace_is_valid_json_lines_after_kill_9(signalled):
    lines = [json.loads(line) for line in signalled["kill -9"].splitlines()]  # each line whole
    assert [line["event"] for line in lines][:3] == ["run", "start", "model_call"]
    recorded = fixtures.load_fixture(FIXTURES / "s05_interrupt.json")
    first = wire.events_to_message(recorded["exchanges"][0]["response"]["stream"])
    traced = anthropic.types.Message.model_validate(lines[2]["response"])
    expected = anthropic.types.Message.model_validate(first)
    assert traced.to_dict(exclude_none=True) == expected.to_dict(exclude_none=True)


def test_resume_from_the_command_line_after_a_real_ctrl_c(signalled, script, step, tmp_path):
    out, code, saved = signalled["twice"]
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(saved))
    code, out = script("--resume", str(path))
    assert code == 0 and "offline replay of fixtures/s05_resume.json" in out, out
    assert "run ended: the model ended its turn" in out


def test_resume_continues_the_saved_conversation_with_the_new_instruction(step):
    recorded = fixtures.load_fixture(FIXTURES / "s05_resume.json")
    client, transport = replay.replay_client(recorded, "s05_resume.json", max_retries=0)  # strict
    messages = step.continued(step.load_conversation(SAVED), recorded["task"])
    budget = step.Budget()
    settings = step.Settings(scratch.copy_workspace("notes_app"), budget=budget)
    turns = step.agent_loop(client, messages, settings)
    assert transport.seen[0]["messages"][-1]["content"][-1] == {"type": "text", "text": recorded["task"]}
    assert len(turns) == 2 and budget.reason.startswith("the model ended its turn")


RESUMES = {  # each recording of a --resume, and the conversation it went on from
    "s05_resume": SAVED,
    "s06_resume": FIXTURES / "conversations" / "s06_summarized_logs.json",
}


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_an_offline_resume_replays_the_recording_made_from_that_very_conversation(name, tmp_path):
    copy = tmp_path / "conversation.json"  # wherever it was saved: its content is what counts
    copy.write_text(RESUMES[name].read_text())
    assert step_cli.recording_from("resume", copy) == f"fixtures/{name}.json"


@pytest.mark.parametrize("name", sorted(RESUMES))
def test_resume_of_the_saved_conversation_replays_its_recording_strictly(script, name):
    code, out = script("--resume", str(RESUMES[name]))
    assert code == 0 and f"offline replay of fixtures/{name}.json" in out, out
    assert "run ended: the model ended its turn" in out


def test_the_hint_offers_an_offline_resume_only_from_a_recording_of_this_conversation(signalled, script):
    out, _code, _saved = signalled["twice"]
    assert "or offline, as fixtures/s05_resume.json recorded it:" in out
    assert "--resume fixtures/conversations/s05_interrupted.json" in out  # the committed copy
    code, out = script()  # the default replay's conversation: no recording goes on from it
    assert code == 0 and "continue it live with a new instruction" in out and "or offline" not in out


def test_an_offline_resume_of_a_conversation_no_recording_went_on_from_is_one_line(script, tmp_path):
    saved = json.loads(SAVED.read_text())[:1]  # as if Ctrl-C had come during the first model call
    path = tmp_path / "early.json"
    path.write_text(json.dumps(saved))
    code, out = script("--resume", str(path))
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1, out
    assert "no recording goes on from" in lines[0] and "ANTHROPIC_API_KEY" in lines[0]


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


# -- the script, as a reader runs it ---------------------------------------------------------------


REPLAYS = {  # fixture -> how the run ends
    "s05_resume": "run ended: the model ended its turn (stop_reason end_turn)",
    "s06_resume": "run ended: the model ended its turn (stop_reason end_turn)",
}
INTERRUPTED_RUNS = ["s05_interrupt", "s05_interrupt_keeps_what_ended"]  # replayed above, with real Ctrl-Cs


def test_every_fixture_of_s09_has_a_replay_test():
    own = [
        p.stem for p in FIXTURES.glob("*.json") if fixtures.load_fixture(p)["script"] == "s09_keep_the_work"
    ]
    assert sorted([*REPLAYS, *INTERRUPTED_RUNS]) == sorted(own)


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_each_fixture_replays_with_its_own_flags_and_ends_for_its_reason(script, name):
    code, out = script("--replay", f"fixtures/{name}.json")
    assert code == 0 and "Traceback" not in out, out
    assert REPLAYS[name] in out
    assert "cost (est.)" in out and "conversation saved:" in out


def test_the_resume_fixture_replays_a_saved_conversation_resumed(script, step):
    code, out = script("--replay", "fixtures/s05_resume.json")  # s09's default replay
    assert code == 0 and "offline replay of fixtures/s05_resume.json" in out
    assert "resuming 3 saved messages" in out and "conversation saved:" in out


def test_help_names_resume_and_save(step, capsys):
    with pytest.raises(SystemExit) as done:
        step.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and step.DEFAULT_FIXTURE in out
    for flag in ("--resume", "--save"):
        assert flag in out


def test_a_refusal_is_marked_in_the_saved_conversation_and_said_on_resume(script, tmp_path):
    code, out = script("--replay", "fixtures/s06_refusal.json", "--save", str(tmp_path / "c.json"))
    assert code == 0, out
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved[-1]["refused"]["category"] == "cyber"
    messages, note = conversation.resumable(saved)
    assert "refused" not in messages[-1] and "the model refused (cyber:" in note


# -- live, over real HTTP -----------------------------------------------------------------------


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


def test_live_resume_without_an_instruction_asks_the_model_to_continue(live, tmp_path):
    code, requests, out, saved = live(
        scripted(message([text("Carrying on.")])), "--resume", str(SAVED), task=None
    )
    last = requests[0]["body"]["messages"][-1]["content"]
    assert code == 0 and last[-1] == {"type": "text", "text": "Continue where you left off."}
    assert [block["type"] for block in last] == ["tool_result", "tool_result", "text"]


def test_a_fatal_error_mid_turn_saves_a_conversation_that_resumes(script, tmp_path):
    """The workspace vanishes while a turn's calls wait for results (s03's HarnessError): the run stops,
    and the conversation it saves answers that turn's calls, so --resume can go on from it."""
    saved = tmp_path / "conversation.json"
    code, out = script("--replay", "fixtures/s03_workspace_gone.json", "--save", str(saved))
    assert code == 1 and "is gone" in out, out
    messages = conversation.load_conversation(saved)  # refuses a tool_use left without its result
    last = messages[-1]
    assert last["role"] == "user" and all(block["is_error"] for block in last["content"])
