"""What the grader's two test modules share: the loops written outside the workbook that they grade,
the grader's own options, and grade.main's JSON rows read back."""

import json
import shutil
import sys

from workbook.classroom import grade, ladder, sandbox

import pytest
from conftest import ROOT
from system_tools import needs

LOOPS = ROOT / "tests" / "grade_loops"
NODE = shutil.which("node")
BWRAP = sandbox.find_bwrap()[0]
needs_node = needs("node")
needs_bwrap = needs("bwrap")
PYTHON = sys.executable
PLAIN = str(LOOPS / "plain_loop.py")
# What `grade` itself uses by default where bubblewrap is installed; without it (a Mac), `grade` refuses,
# and these tests of the grading itself run the suite's own loops with --sandbox off
OPTIONS = ladder.Options(sandbox=sandbox.choose("auto" if BWRAP else "off"))
SANDBOX_FLAGS = [] if BWRAP else ["--sandbox", "off"]  # the same, for grade.main


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    """The steps (s03 on) print their retry waits instead of sleeping them; the grader passes env on."""
    monkeypatch.setenv("WORKBOOK_NO_SLEEP", "1")


def graded(capsys, *argv: str) -> tuple[int, dict]:
    """grade.main(--json, argv) in-process: the exit code and each rung's row by name."""
    code = grade.main(["--json", *([] if "--sandbox" in argv else SANDBOX_FLAGS), *argv])
    rows = json.loads(capsys.readouterr().out)["rungs"]
    assert all(
        set(row) == {"name", "step", "passed", "passed_by", "library", "reason", "sandbox"} for row in rows
    )
    return code, {row["name"]: row for row in rows}


def failures(rows: dict) -> dict:
    return {name: row["reason"] for name, row in rows.items() if not row["passed"]}


def rungs_up_to(step: str) -> list[str]:
    return [r.name for r in ladder.RUNGS if r.step <= step]
