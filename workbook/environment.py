"""Where a run happens, for the system prompt (s02): the working folder, the OS, today's date, the git
branch and status, and the workspace's own instructions file.

A live run gathers these facts from the machine. A replay sends what the fixture recorded (its
`environment` field), so the date and the paths in the system prompt are the recording's, and the
replay stays the same on every machine and every day. The instructions file is read from the
workspace, which a replay copies from the fixture, so it is deterministic too.
"""

from __future__ import annotations

import platform
import subprocess
from datetime import date
from pathlib import Path
from typing import Protocol

from workbook.scrub import tool_environment

LABELS = {"working_folder": "Working folder", "os": "OS", "date": "Today's date", "git": "Git"}
FACTS = tuple(LABELS)  # what a fixture's `environment` holds, each a string (git: or null)
INSTRUCTION_FILES = (
    "AGENTS.md",
    "CLAUDE.md",
)  # the first one the workspace has is sent (Codex's, Claude Code's)
MAX_INSTRUCTIONS = 4_000  # characters of it: a long file is cut, and the cut said
GIT_TIMEOUT = 5  # seconds: a git that hangs (a network mount) must not hold up the run


def gather(folder: Path, today: date | None = None) -> dict:
    """The facts about this machine and folder that the model cannot see for itself."""
    return {
        "working_folder": str(folder),
        "os": f"{platform.system()} {platform.release()}",
        "date": (today or date.today()).isoformat(),
        "git": git_state(folder),
    }


def git_state(folder: Path) -> str | None:
    """'branch main, clean' or 'branch main, 3 files changed'; None outside a repository or without git."""
    try:
        branch = _git(folder, "branch", "--show-current")  # works before the first commit too
        status = _git(folder, "status", "--porcelain") if branch is not None else None
    except (OSError, subprocess.TimeoutExpired):
        return None
    if branch is None or status is None:
        return None
    changed = len(status.splitlines())
    where = f"branch {branch.strip()}" if branch.strip() else "detached HEAD"
    return f"{where}, " + (f"{changed} files changed" if changed else "clean")


# A workspace's own git config may name a program for `git status` to run (core.fsmonitor; a submodule's
# config, its own): none runs, and git gets a tool's environment (workbook/scrub.py), so no key either.
SAFE_GIT = ["-c", "core.fsmonitor=false", "-c", "diff.ignoreSubmodules=all", "--no-optional-locks"]


def _git(folder: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", *SAFE_GIT, "-C", str(folder), *args],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
        env=tool_environment(),
    )
    return done.stdout if done.returncode == 0 else None


def instructions(workspace: Path) -> tuple[str, str] | None:
    """(file name, text) of the workspace's instructions file, cut to MAX_INSTRUCTIONS; None if none."""
    for name in INSTRUCTION_FILES:
        path = workspace / name
        if path.is_file():
            text = path.read_text(errors="replace").strip()
            if len(text) > MAX_INSTRUCTIONS:
                text = (
                    text[:MAX_INSTRUCTIONS]
                    + f"\n[… cut: {name} is longer than {MAX_INSTRUCTIONS} characters]"
                )
            return name, text
    return None


class Run(Protocol):
    """What `for_run` reads of a run (workbook/launch.py's Run, which imports what imports this module)."""

    environment: dict | None
    mode: str
    workspace: Path
    fixture: dict | None


def for_run(run: Run) -> dict | None:
    """The run's environment, gathered once: a replay's is the fixture's (None if it recorded none),
    a live or recorded run's is this machine's (a recording keeps it, so its replay sends the same)."""
    if run.environment is None and not run.replayed:
        run.environment = gather(run.workspace)
    elif run.environment is None:
        run.environment = (run.fixture or {}).get("environment")
    return run.environment


def environment_problems(value) -> list[str]:
    """What is wrong with a fixture's `environment` field (empty when it is absent or well formed)."""
    if value is None:
        return []
    if not isinstance(value, dict) or set(value) != set(FACTS):
        return [f"`environment` must be an object with exactly {', '.join(FACTS)}"]
    wrong = [k for k in FACTS if not isinstance(value[k], str) and not (k == "git" and value[k] is None)]
    return [f"`environment.{k}` must be a string" for k in wrong]
