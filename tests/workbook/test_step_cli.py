"""The flags every step shares: nonsense values are refused by the parser, in one line."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from workbook import scratch
from workbook.step_cli import recorded_permission, resume_hint

import pytest
from conftest import ROOT, offline_env


@pytest.mark.parametrize("step", ["s05_budget", "s06_recovery"])
@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-cost", "nan"),
        ("--max-cost", "inf"),
        ("--max-cost", "-1"),
        ("--max-steps", "0"),
        ("--max-steps", "-1"),
    ],
)
def test_nonsense_limits_are_refused_by_the_parser_in_one_line(run_main, step, flag, value):
    code, out = run_main(step, flag, value)
    assert code == 2 and flag in out and len(out.strip().splitlines()) == 1, out


# -- the permission a recording was made under: its fixture says so in its args ----------------------


def test_the_permission_a_recording_needs_is_the_one_its_fixture_sets():
    assert recorded_permission(["--permission", "auto", "--max-steps", "3"]) == "auto"
    assert recorded_permission(["--max-steps=3", "--permission=ask"]) == "ask"
    assert recorded_permission(["--max-steps", "3"]) is None and recorded_permission([]) is None


# -- the resume hint: a command that works as printed, and how long its file stays ----------------------


def test_a_resume_hint_says_when_a_replays_copy_goes_and_a_kept_file_needs_no_such_word(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    conversation = json.dumps([{"role": "user", "content": "list the files"}])
    folder = Path(tempfile.mkdtemp(prefix="resume-hint-", dir=scratch.scratch_root()))  # a replay's, as kept
    try:
        replayed = folder / "conversation.json"
        replayed.write_text(conversation)
        said = resume_hint("s09_keep_the_work", replayed)
        assert said[2] == f"    {replayed} \\" and f"goes after {scratch.KEPT_RUNS} more runs" in said[4]
    finally:
        shutil.rmtree(folder)
    kept = tmp_path / "mine.json"  # --save, or a live run's runs/ folder: nothing tidies it away
    kept.write_text(conversation)
    assert not any("goes after" in line for line in resume_hint("s09_keep_the_work", kept))


# -- red team five: a tool reads no key from the step's /proc/PID/environ --------------------------

A_STEP_THAT_RUNS_A_TOOL = """
import ctypes, os, subprocess, sys
from workbook import step_cli

READ_PARENT = "import os; open(f'/proc/{os.getppid()}/environ', 'rb').read()"


def run_task(run, args):
    dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    tool = subprocess.run([sys.executable, "-c", READ_PARENT], capture_output=True, text=True)
    print("dumpable", dumpable, "tool", tool.returncode, "PermissionError" in tool.stderr)
    return 0


parser = step_cli.make_parser("a step", "fixtures/s01_hello_agent.json", "s01_agent_loop")
sys.exit(step_cli.run_step(parser, [], "claude-sonnet-5", run_task))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_DUMPABLE) is Linux's")
def test_a_step_is_not_dumpable_before_its_first_tool_runs():
    done = subprocess.run(
        [sys.executable, "-c", A_STEP_THAT_RUNS_A_TOOL],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=offline_env(),
    )
    said = done.stdout.split("dumpable", 1)[1].split()
    assert said[0] == "0", done.stdout + done.stderr  # the kernel gives /proc/PID/environ to root alone
    if os.geteuid() != 0:  # root reads any process's environ: the refusal shows only to anyone else
        assert said[1:] == ["tool", "1", "True"]


def test_a_provenance_note_of_megabytes_gives_the_banner_a_few_lines():
    from types import SimpleNamespace

    from workbook import step_cli

    note = "This exchange was abridged. " * 100_000  # 2.8 MB: it printed 25,000 lines
    run = SimpleNamespace(fixture={"provenance_note": note}, banner="offline replay of x (scripted)")
    lines = step_cli.banner_lines(run, width=80)
    assert len(lines) <= 3 and lines[1] == "note: This exchange was abridged."
