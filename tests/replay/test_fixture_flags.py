"""A fixture's `args` set behaviour flags only, checked against the step that runs them."""

import json

from workbook.replay import fixture_flags

import pytest
from fixture_files import BUDGET, KEEP, fixture, refused


@pytest.mark.parametrize(
    "args, why",
    [
        (["--save", "/tmp/x"], "names a file"),
        (["--trace", "x.jsonl"], "names a file"),
        (["--record", "mine.json"], "names a file"),
        (["--workspace", "/"], "names a file"),
        (["--replay", "other.json"], "names a file"),
        (["--save=/tmp/x"], "names a file"),
        (["--sav", "/tmp/x"], "not a flag a fixture may set"),  # argparse would take it for --save
        (["--resume", "/etc/passwd"], "fixtures/conversations/"),
        (["--resume", "fixtures/conversations/../../README.md"], "fixtures/conversations/"),
        (["do something else"], "not a flag a fixture may set"),  # would become the task
        ([3], "list of strings"),
        ("--max-steps 3", "list of strings"),
        (["--max-steps", "0"], "at least 1"),
        (["--max-steps", "-1"], "may not start with '-'"),
        (["--max-cost", "nan"], "positive number"),
        (["--max-cost", "inf"], "positive number"),
        (["--permission", "all"], "ask, auto or deny"),
        (["--max-steps"], "needs a value"),
    ],
)
def test_fixture_args_set_behaviour_flags_only(tmp_path, args, why):
    refused(tmp_path, fixture(KEEP if "--resume" in args else BUDGET, args=args), "`args`", why)


def test_a_resumed_conversation_must_be_one(tmp_path, monkeypatch):
    monkeypatch.setattr(fixture_flags, "CONVERSATIONS", tmp_path)
    monkeypatch.setattr(fixture_flags, "ROOT", tmp_path.parent)
    (tmp_path / "bad.json").write_text(json.dumps({"messages": "not a list"}))
    problems = fixture_flags.args_problems(["--resume", f"{tmp_path.name}/bad.json"], "s09_keep_the_work")
    assert problems and "not a saved conversation" in problems[0]


def test_fixture_args_are_checked_against_the_step_that_runs_them(tmp_path):
    refused(tmp_path, fixture(args=["--max-steps", "3"]), "not a flag of s01_agent_loop")


def test_the_projects_own_args_still_pass():
    assert fixture_flags.args_problems(["--max-steps", "3"], "s05_budget") == []
    assert (
        fixture_flags.args_problems(
            ["--resume", "fixtures/conversations/s05_interrupted.json"], "s09_keep_the_work"
        )
        == []
    )
    assert (
        fixture_flags.args_problems(["--stop-hook", "sh check.sh", "--web-search"], "s07_really_done") == []
    )
