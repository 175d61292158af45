"""The fixture author's commands: `check`, `trust` and `rebuild`, one file at a time, one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workbook.errors import FixtureError, WorkbookError, one_line
from workbook.files import read_bytes, read_json, write_atomic
from workbook.launch import REBUILD_ENV, absolute_args, display_name
from workbook.paths import ROOT, STEPS, step_argv
from workbook.replay import trust as trust_list
from workbook.replay.fixtures import checked_fixture, load_fixture, load_with_bytes, parsed_fixture
from workbook.replay.trust import fixture_digest, is_trusted, recorded_commands, workspace_line
from workbook.scratch import new_run_folder, remove_tree
from workbook.scrub import dumps, tool_environment


def trust(path: str | Path) -> str:
    """Add a fixture, as it is now, to the trust list, with the workspace folder its commands run in;
    an older entry for the same path (or the same workspace) is replaced."""
    raw = read_bytes(path, "fixture")
    return trust_bytes(path, raw, checked_fixture(path, parsed_fixture(path, raw)))


def trust_bytes(path: str | Path, raw: bytes, fixture: dict) -> str:
    """Trust these bytes (read once, by the caller) as the fixture at `path`, and its workspace as it is."""
    name, digest = display_name(Path(path)), fixture_digest(raw)
    lines = _entered(_trust_lines(), f"{digest}  {name}")
    workspace = fixture["workspace"]
    if workspace:
        lines = _entered(lines, workspace_line(workspace))
    write_atomic(trust_list.TRUST_FILE, "\n".join(lines) + "\n")
    commands = len(recorded_commands(fixture))
    where = f", in fixtures/workspace/{workspace}/ as it is now" if workspace else ""
    return (
        f"trusted {name} ({digest[:12]}): in replay its tool calls ({commands} shell commands) run unasked"
        + where
    )


def _entered(lines: list[str], entry: str) -> list[str]:
    """The trust list with `entry` in it: in place of the entry for the same path (so a diff shows which
    changed), else at the end."""
    name = entry.partition("  ")[2]
    same = [i for i, line in enumerate(lines) if not line.startswith("#") and line.partition("  ")[2] == name]
    return [entry if i == same[0] else line for i, line in enumerate(lines)] if same else [*lines, entry]


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
    checked before it replaces the fixture, and a fixture that was trusted stays trusted. The replay
    plays the very bytes whose trust was checked (a copy in this run's private folder: the file may
    change meanwhile), and the bytes written are the ones trusted.
    """
    fixture, raw = load_with_bytes(path)
    if fixture["provenance"] != "scripted":
        raise FixtureError(f"{path}: only scripted fixtures can be rebuilt; re-record a recorded one")
    if not is_trusted(raw, fixture):
        raise FixtureError(
            f"{path}: rebuild runs its commands (and its workspace's files) — read them, then "
            f"`python -m workbook trust {path}`"
        )
    step = STEPS[STEPS.index(fixture["script"])]
    folder = new_run_folder()
    try:
        checked, output = folder / Path(path).name, folder / "rebuilt.json"
        write_atomic(checked, raw)  # what was checked is what is replayed
        env = tool_environment() | {REBUILD_ENV: str(output)}
        command = [*step_argv(step), "--replay", str(checked), *absolute_args(fixture)]
        code = subprocess.call(command, env=env, cwd=ROOT)
        if code or not output.exists():
            raise FixtureError(f"{path}: the replay failed (exit {code}), so the fixture was left as it was")
        rebuilt = checked_fixture(path, read_json(output))
        text = dumps(rebuilt, indent=2, ensure_ascii=False) + "\n"  # as files.write_json writes it
        write_atomic(path, text)
        trust_bytes(path, text.encode("utf-8"), rebuilt)
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
