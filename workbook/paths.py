"""Where the workbook's files are: the repo, the fixtures' workspaces and conversations, the steps."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repo: workbook/ sits at its top


WORKSPACES = ROOT / "fixtures" / "workspace"


STEPS = (
    "s01_agent_loop",
    "s02_tools",
    "s03_errors",
    "s04_parallel",
    "s05_budget",
    "s06_recovery",
    "s07_really_done",
    "s08_full_context",
    "s09_keep_the_work",
    "s10_trace",
    "s11_handoff",
)


SIX = STEPS[:6]  # the steps at the root, read in order; the later ones live in workbook/later/
LATER = ROOT / "workbook" / "later"


def step_file(step: str) -> Path:
    """A step's file: the six at the root, the later ones in workbook/later/."""
    return (ROOT if step in SIX else LATER) / f"{step}.py"


def step_path(step: str) -> str:
    """A step's file as a reader finds it from the repository's root: workbook/later/s07_really_done.py."""
    return step_file(step).relative_to(ROOT).as_posix()


def step_module(step: str) -> str:
    """The name a step is imported by: s06_recovery, workbook.later.s07_really_done."""
    return step if step in SIX else f"workbook.later.{step}"


def step_argv(step: str) -> list[str]:
    """The command that runs a step; a later one needs the repository's root as its working folder."""
    if step in SIX:
        return [sys.executable, str(step_file(step))]
    return [sys.executable, "-m", step_module(step)]


def step_command(step: str) -> str:
    """How a reader runs a step from the repository's root: python s06_recovery.py, or with -m."""
    return f"python {step}.py" if step in SIX else f"python -m {step_module(step)}"


UNGATED = ("s01_agent_loop",)  # steps with no permission gate: they replay only trusted fixtures' commands


CONVERSATIONS = ROOT / "fixtures" / "conversations"  # saved conversations a fixture may resume
