"""The flags every step shares: nonsense values are refused by the parser, in one line."""

import os
import subprocess
import sys

from workbook.step_cli import recorded_permission

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


# -- the permission a recording's refusals were made under -------------------------------------------


def refused(words: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": words}]}


def asked(n: int) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": f"turn {n}"}]}


def requests(*histories: list) -> dict:
    return {"exchanges": [{"request": {"messages": history}} for history in histories]}


def test_a_refusal_is_found_in_the_request_that_first_sent_it_and_in_a_history_rewritten_later():
    task = {"role": "user", "content": "go"}
    denied = refused("not run: a command outside the list (--permission auto)")
    growing = [task, asked(1)]
    assert recorded_permission(requests(growing[:1], growing)) is None
    # Each request repeats the one before, sharing its messages (as a fixture's stored deltas rebuild it).
    first = [task, asked(1), denied]
    assert recorded_permission(requests(first[:2], first, [*first, asked(2)])) == "auto"
    # A later request that rewrites the history (compacted: shorter, and a summary in the place of the
    # turns) is read whole, not only past the length of the one before.
    summary = {"role": "user", "content": [{"type": "text", "text": "summary"}]}
    compacted = [summary, refused("denied: the user said no")]
    assert recorded_permission(requests(first[:2], [task, asked(1), asked(2)], compacted)) == "ask"
    # The same history rewritten in place, at the same length: read whole too.
    in_place = [task, refused("not run: not on the list (--permission deny)"), asked(2)]
    assert recorded_permission(requests([task, asked(1), asked(2)], in_place)) == "deny"


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
