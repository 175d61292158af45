"""What a step's main() uses: the flags every step shares, starting the run, and where its files go."""

from __future__ import annotations

import argparse
import math
import os
import sys
from datetime import datetime
from pathlib import Path

import anthropic
from rich.markup import escape

from workbook.display import console, error, printable, say
from workbook.errors import WorkbookError
from workbook.files import refuse_unwritable
from workbook.launch import Run, start
from workbook.paths import ROOT
from workbook.tracing import fixture_file

RUNS = ROOT / "runs"  # live runs keep their audit log, trace and conversation in runs/<time>-<step>/


def run_step(args, model: str, script: str, body, prepare=None, **client_options) -> int:
    """Start the run the flags ask for, print where it runs and its task, then `body(run)` -> exit code.
    What escapes the body ends the run in one line: a problem for the reader to fix (exit 1), or a
    Ctrl-C before s05 keeps the work (exit 130). `prepare(args)` runs first (s06: a trace to a fixture)."""
    run = None
    try:
        refuse_unwritable_flags(args)
        run = start(prepare(args) if prepare else args, model, script, **client_options)
        say(run.banner)
        console.print(f"[bold]task:[/] {escape(printable(run.task))}")
        return body(run)
    except (WorkbookError, anthropic.APIError) as err:
        error("error", str(err))
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/] — stopped before the next turn; s05 adds keeping the work")
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            say(note)


def refuse_unwritable_flags(args) -> None:
    """--save, --trace and --record write only regular files, new or not, in folders that exist: a
    device, a FIFO, a folder or a missing folder is one line before anything runs (or is created)."""
    for flag in ("save", "trace", "record"):
        value = getattr(args, flag, None)
        if value and not (flag == "trace" and getattr(args, "replay", None) == value):
            refuse_unwritable(Path(value), f"--{flag}")


def resume_mode(args, fixture: str, instruction: str):
    """s05's --resume: offline it replays `fixture`; live with no new instruction, it sends `instruction`."""
    if args.resume and not args.replay and not os.environ.get("ANTHROPIC_API_KEY"):
        args.default_fixture = fixture
    elif args.resume and not args.replay and not args.task:
        args.task = instruction
    return args


def limit(text: str) -> int:
    """A limit that is a whole number of at least 1 (0 or -1 would stop a run before it starts)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def dollars(text: str) -> float:
    """A cost cap: a finite number above 0 (nan or inf would turn the cap off, -1 stop at once)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of dollars above 0")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more, for a flag; argparse turns the ValueError into one line."""
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def trace_as_fixture(args):
    """s06's --replay run.jsonl: a trace replays as a fixture, converted first."""
    if args.replay and args.replay.endswith(".jsonl"):
        args.replay = fixture_file(args.replay, "s06_recovery")
    return args


def run_line(run: Run, flags: list) -> dict:
    """The trace's `run` line (s06), before `start`: what a replay of the trace needs besides the
    requests — the task, the workspace, and the flags that change what the loop does."""
    fixture = run.fixture or {}
    where, provenance = fixture.get("workspace", ""), fixture.get("provenance", "recorded")
    return dict(task=run.task, workspace=where, provenance=provenance, args=flags)


def with_fixture_flags(parser, argv: list[str] | None, run: Run):
    """s05 on: in replay, the fixture's own flags (its checked `args`, e.g. --max-steps 3) apply; the
    reader's win. (A --stop-hook among them is a stranger's command: s06 puts it to s02's gate.)"""
    return parser.parse_args([*run.fixture_args, *(sys.argv[1:] if argv is None else argv)])


def streaming(args, run: Run) -> bool:
    """s05 on: stream, unless --no-stream, or a replayed fixture was recorded from a loop that did not."""
    recorded = [e["response"] for e in run.fixture["exchanges"]] if run.fixture else [{"stream": []}]
    return not args.no_stream and any("stream" in response for response in recorded)


def run_folder(run: Run, script: str) -> Path:
    """Where a run keeps its files: beside a replay's temp workspace (never in the repo), else runs/."""
    folder = (
        run.workspace.parent if run.mode == "replay" else RUNS / f"{datetime.now():%Y%m%d-%H%M%S}-{script}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def permission_for(flag: str | None, run: Run) -> str:
    """s02's --permission, or its default: ask a person at a terminal in a live run, else auto."""
    return flag or ("ask" if run.mode != "replay" and sys.stdin.isatty() else "auto")
