"""s11: a fresh session — --handoff starts over from a saved run's task and what it did, read by the
harness from its tool calls and results, never from what the model said about them.

Behaviour tests run against every step from s11 on; live tests go over real HTTP to a stand-in for the API.
"""

import io
import json

from workbook import launch
from workbook.replay import fixtures

import pytest
from conftest import ROOT, STEPS, load_step
from rich.console import Console
from standin import StandIn, message, scripted, text

STEPS_FROM = [s for s in STEPS if s >= "s11"]
FIXTURES = ROOT / "fixtures"
SAVED = FIXTURES / "conversations" / "s05_interrupted.json"  # what a second Ctrl-C in ./slow_check.sh leaves
DRIFTED = FIXTURES / "conversations" / "s05_drifted.json"  # s04_write_flip_flop, replayed by s05 with --save


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module under test, its console made quiet: s11, and every later step."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


# -- --handoff: a fresh session from the task and what the drifted run did -------------------------


def test_a_handoff_replays_offline_from_one_message_strictly(script, step):
    code, out = script("--handoff", str(DRIFTED))
    assert code == 0 and "offline replay of fixtures/s05_handoff.json" in out, out
    assert "leniently" not in out and "fresh session: the 10 messages saved in" in out
    assert "run ended: the model ended its turn" in out


def test_the_default_replay_is_the_handoff_of_a_run_that_drifted(script, step):
    code, out = script()
    assert code == 0 and f"offline replay of {step.DEFAULT_FIXTURE}" in out, out
    assert step.DEFAULT_FIXTURE == "fixtures/s05_handoff.json"
    assert "fresh session: the 10 messages saved in" in out and "Files it changed: app/config.toml" in out
    assert "run ended: the model ended its turn (stop_reason end_turn)" in out
    assert "conversation saved:" in out


def test_the_handoff_message_is_the_task_what_the_run_did_and_the_instruction(step):
    recorded = fixtures.load_fixture(FIXTURES / "s05_handoff.json")
    [opening] = recorded["exchanges"][0]["request"]["messages"]  # one message: a fresh session
    text = opening["content"]
    assert text.startswith("A 3,000-character note must fit: raise the note limit in app/config.toml.\n\n")
    assert step.HANDOFF in text and text.endswith("\n\n" + recorded["task"])
    assert "Files it changed: app/config.toml (3 writes)" in text
    assert "- write_file app/config.toml: error: not run: this write redoes one you already undid" in text


def test_what_it_did_is_read_from_the_calls_and_results_not_from_the_models_words(step):
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
    notes = step.what_it_did(messages).splitlines()
    assert notes[0] == "Files it changed: a.py (1 write)"
    assert notes[1:3] == ["Commands it ran:", "  - bash pytest -q (exit code 1)"]
    assert notes[3:5] == ["Calls that failed or were refused:", "  - write_file ../x: error: outside"]
    assert notes[5] == "Its last words: All tests pass now."


def test_only_the_last_few_commands_are_listed_and_the_rest_counted(step):
    items = [f"bash echo {n} (exit code 0)" for n in range(step.LISTED + 3)]
    lines = step.listed(items).splitlines()
    assert lines[1] == "  (3 earlier ones not listed)" and lines[-1] == f"  - {items[-1]}"
    assert len(lines) == 2 + step.LISTED and step.listed([]) == " none"


def test_a_handoff_of_a_handoff_keeps_the_first_task(step, tmp_path):
    first = step.handed_off(offline_run(tmp_path, "then stop"), str(DRIFTED))[0]["content"]
    path = tmp_path / "again.json"
    path.write_text(json.dumps([{"role": "user", "content": first}, {"role": "assistant", "content": "ok"}]))
    again = step.handed_off(offline_run(tmp_path, "now"), str(path))[0]["content"]
    assert again.startswith("A 3,000-character note must fit") and again.count(step.HANDOFF) == 1


def offline_run(tmp_path, task: str):
    """A launch.Run with no fixture (as live), for handed_off()."""
    return launch.Run(None, "live", task, tmp_path, "m", "", script="s11_handoff")


def test_without_handoff_the_first_messages_are_s09s(step, tmp_path):
    args = type("Args", (), {"handoff": None, "resume": None})()
    assert step.first_messages(offline_run(tmp_path, "go"), args) == [{"role": "user", "content": "go"}]


def test_resume_and_handoff_together_are_one_line(script):
    code, out = script("--resume", str(SAVED), "--handoff", str(DRIFTED))
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1, out
    assert "--resume goes on from a saved conversation, --handoff starts afresh" in lines[0]


def test_a_bad_handoff_file_is_one_line(script, tmp_path):
    (tmp_path / "c.json").write_text("{not json")
    code, out = script("--handoff", str(tmp_path / "c.json"))
    lines = out.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "not a saved conversation" in lines[0], out


def test_the_trace_of_a_handoff_replays_as_a_fixture(script, tmp_path):
    """The trace's run line keeps the --handoff (named from the repo root), so it replays as it ran."""
    trace = tmp_path / "run.jsonl"
    code, out = script("--trace", str(trace))
    assert code == 0, out
    run = json.loads(trace.read_text().splitlines()[0])
    assert run["args"] == ["--handoff", "fixtures/conversations/s05_drifted.json"]
    code, out = script("--replay", str(trace))
    assert code == 0 and "fresh session: the 10 messages saved in" in out, out


# -- the script, as a reader runs it ---------------------------------------------------------------


def test_every_fixture_of_s11_is_the_handoff():
    own = [p.stem for p in FIXTURES.glob("*.json") if fixtures.load_fixture(p)["script"] == "s11_handoff"]
    assert own == ["s05_handoff"]


def test_help_names_handoff(step, capsys):
    with pytest.raises(SystemExit) as done:
        step.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and step.DEFAULT_FIXTURE in out
    for flag in ("--handoff", "--resume", "--save", "--trace"):
        assert flag in out


def test_earlier_steps_have_no_handoff_flag(capsys):
    for name in [s for s in STEPS if s < "s11"]:
        with pytest.raises(SystemExit):
            load_step(name).main(["--help"])
        assert "--handoff" not in capsys.readouterr().out, name


# -- live, over real HTTP -----------------------------------------------------------------------


@pytest.mark.parametrize("task", [None, "Set it to 3000 and stop."])
def test_live_a_handoff_sends_one_message_and_saves_a_fresh_conversation(step, tmp_path, monkeypatch, task):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, width=200))
    monkeypatch.setattr(step, "RUNS", tmp_path / "runs")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("WORKBOOK_NO_SLEEP", "1")
    monkeypatch.delenv("MODEL_ID", raising=False)
    saved = tmp_path / "conversation.json"
    with StandIn(scripted(message([text("Done.")]))) as api:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        argv = [task] if task else []
        code = step.main(
            [*argv, "--workspace", str(workspace), "--save", str(saved), "--handoff", str(DRIFTED)]
        )
    assert not api.rule_problems, out.getvalue()
    [opening] = api.requests[0]["body"]["messages"]
    assert code == 0 and opening["role"] == "user", out.getvalue()
    assert "Files it changed: app/config.toml" in opening["content"]
    assert opening["content"].endswith(task or "Carry on with the task.")
    saved = json.loads(saved.read_text())
    assert saved[0] == opening and len(saved) == 2  # the new session, not the old one
