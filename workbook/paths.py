"""Where the workbook's files are: the repo, the fixtures' workspaces and conversations, the steps."""

from __future__ import annotations

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


UNGATED = ("s01_agent_loop",)  # steps with no permission gate: they replay only trusted fixtures' commands


CONVERSATIONS = ROOT / "fixtures" / "conversations"  # saved conversations a fixture may resume
