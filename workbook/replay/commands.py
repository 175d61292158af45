"""The fixture author's commands: `check`, `trust` and `rebuild`, one file at a time, one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workbook.errors import FixtureError, WorkbookError, one_line
from workbook.files import read_bytes, read_json, write_atomic, write_json
from workbook.launch import REBUILD_ENV, absolute_args, display_name
from workbook.paths import ROOT, STEPS
from workbook.replay import trust as trust_list
from workbook.replay.fixtures import checked_fixture, load_fixture, load_with_bytes, parsed_fixture
from workbook.replay.trust import fixture_digest, is_trusted, recorded_commands
from workbook.scratch import new_run_folder, remove_tree
from workbook.scrub import tool_environment


def trust(path: str | Path) -> str:
    """Add a fixture, as it is now, to the trust list; an older entry for the same path is replaced."""
    raw = read_bytes(path, "fixture")
    fixture = checked_fixture(path, parsed_fixture(path, raw))
    name, digest = display_name(Path(path)), fixture_digest(raw)
    entry, lines = f"{digest}  {name}", _trust_lines()
    same = [i for i, line in enumerate(lines) if not line.startswith("#") and line.partition("  ")[2] == name]
    lines = [entry if i == same[0] else line for i, line in enumerate(lines)] if same else [*lines, entry]
    write_atomic(
        trust_list.TRUST_FILE, "\n".join(lines) + "\n"
    )  # an entry changes in place: the diff shows which
    commands = len(recorded_commands(fixture))
    return f"trusted {name} ({digest[:12]}): in replay its tool calls ({commands} shell commands) run unasked"


def _trust_lines() -> list[str]:
    try:
        return [
            line for line in trust_list.TRUST_FILE.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
    except FileNotFoundError:
        return [
            "# Fixtures whose recorded commands replay runs unasked: "
            "`python -m workbook trust FILE` adds one."
        ]


def rebuild(path: str) -> int:
    """Re-run a scripted fixture's script against its responses and store the requests it sends.

    Only a trusted fixture (its commands run for real) naming one of the six steps; the result is
    checked before it replaces the fixture, and a fixture that was trusted stays trusted.
    """
    fixture, raw = load_with_bytes(path)
    if fixture["provenance"] != "scripted":
        raise FixtureError(f"{path}: only scripted fixtures can be rebuilt; re-record a recorded one")
    if not is_trusted(raw):
        raise FixtureError(
            f"{path}: rebuild runs its commands — read it, then `python -m workbook trust {path}`"
        )
    script = ROOT / f"{STEPS[STEPS.index(fixture['script'])]}.py"
    folder = new_run_folder()
    try:
        output = folder / "rebuilt.json"
        env = tool_environment() | {REBUILD_ENV: str(output)}
        command = [
            sys.executable,
            str(script),
            "--replay",
            str(Path(path).resolve()),
            *absolute_args(fixture),
        ]
        code = subprocess.call(command, env=env)
        if code or not output.exists():
            raise FixtureError(f"{path}: the replay failed (exit {code}), so the fixture was left as it was")
        rebuilt = read_json(output)
        checked_fixture(path, rebuilt)
        write_json(path, rebuilt)
        trust(path)
        return 0
    finally:
        remove_tree(folder)


def run_on(command: str, path: str) -> int:
    """One file through one command: `ok` or one error line naming it."""
    try:
        if command == "rebuild":
            return rebuild(path)
        if command == "trust":
            print(trust(path))
            return 0
        load_fixture(path)
        print(f"ok  {path}")
        return 0
    except WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {path}: {one_line(err)}", file=sys.stderr)
        return 1
