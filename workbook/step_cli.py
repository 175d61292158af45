"""What a step's main() uses: the flags every step shares, starting the run, and where its files go."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from workbook import display
from workbook.display import error, printable, say
from workbook.environment import for_run
from workbook.errors import FixtureError, WorkbookError
from workbook.files import refuse_unwritable, sweep_temp_files
from workbook.launch import Run, start
from workbook.launch import make_parser as make_shared_parser
from workbook.paths import ROOT
from workbook.tracing import fixture_file

import anthropic
from rich.markup import escape

RUNS = ROOT / "runs"  # live runs keep their audit log, trace and conversation in runs/<time>-<step>/


class LessonHelp(argparse.RawDescriptionHelpFormatter):
    """--help with the step's docstring as its description, fitted to the terminal: prose re-wrapped;
    each Run: line split before its comment when too wide; a diagram shown as drawn (the steps draw
    theirs at most 78 columns wide, so it fits an 80-column terminal)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = textwrap.dedent(text).strip("\n").split("\n\n")
        return "\n\n".join("\n".join(fitted(p, width)) for p in paragraphs)


def fitted(paragraph: str, width: int) -> list[str]:
    """One paragraph of a docstring in lines of at most `width` columns."""
    lines = paragraph.splitlines()
    if paragraph.startswith("Run:"):
        return [part for line in lines for part in run_line_parts(line, width)]
    if not paragraph.startswith(" ") and "\n " not in paragraph:
        return textwrap.wrap(" ".join(paragraph.split()), width)
    # a diagram: re-wrapping would break it, so it is drawn to fit (tests/steps/test_output_width.py)
    return lines


def run_line_parts(line: str, width: int) -> list[str]:
    """A `Run:` line, `command    what it does`: as it is if it fits, else the comment on its own line."""
    lead, command, comment = re.match(r"(Run: +| *)(\S.*?)(?: {3,}(.*))?$", line.rstrip()).groups()
    if len(line) <= width:
        return [line]
    if not comment:
        return textwrap.wrap(command, width, initial_indent=lead, subsequent_indent=" " * len(lead))
    return [lead + command, *textwrap.wrap(comment, width, initial_indent=" " * 9, subsequent_indent=" " * 9)]


def make_parser(doc: str, default_fixture: str) -> argparse.ArgumentParser:
    """The flags every step shares (launch's), with a --help that fits the terminal."""
    parser = make_shared_parser(doc, default_fixture)
    parser.formatter_class = LessonHelp
    return parser


@dataclass
class Flags:
    """A step's command line: its parser and what the reader typed. s05 on, a replay parses the fixture's
    own flags (its checked `args`, e.g. --max-steps 3) under the reader's, so the reader's win."""

    parser: argparse.ArgumentParser
    argv: list[str] | None  # None: sys.argv[1:]

    def parse(self, fixture_args: list[str] = ()) -> argparse.Namespace:
        return self.parser.parse_args([*fixture_args, *(sys.argv[1:] if self.argv is None else self.argv)])


def run_step(args, model: str, script: str, run_task, flags=None, prepare=None, **client_options) -> int:
    """Start the run the flags ask for, print where it runs and its task, then `run_task(run, args)` ->
    exit code. With `flags` (s05 on), a replayed fixture's own flags apply too. `prepare(args)` runs
    first (s06: a trace to a fixture). What escapes the task ends the run in one line: a problem for the
    reader to fix (exit 1), or a Ctrl-C before s05 keeps the work (exit 130)."""
    run = None
    try:
        refuse_unwritable_flags(args)
        run = start(prepare(args) if prepare else args, model, script, **client_options)
        for line in banner_lines(run):
            say(line)
        display.console.print(f"[bold]task:[/] {escape(printable(run.task))}")
        return run_task(run, flags.parse(run.fixture_args) if flags else args)
    except WorkbookError as err:
        error("error", str(err))
        return 1
    except anthropic.APIError as err:
        error("error", str(err))
        return 1
    except KeyboardInterrupt:
        display.console.print(
            "[yellow]interrupted[/] — stopped before the next turn; s05 adds keeping the work"
        )
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            say(note)


def banner_lines(run: Run, width: int | None = None) -> list[str]:
    """The run's banner in lines that fit the terminal: one per clause, a command on a line of its own,
    and, for a fixture whose note says it is abridged, the sentence that says so."""
    note = (run.fixture or {}).get("provenance_note", "")
    abridged = [s.strip() for s in note.split(". ") if "abridged" in s]
    lines = []
    for clause in run.banner.split("; ") + [f"note: {s.rstrip('.')}." for s in abridged]:
        said, colon, command = clause.partition(": python ")
        lines += [said + ":", "  python " + command] if colon else [clause]
    wrap = width or display.console.width  # the console in use (a notebook or a test may swap it)
    fit = dict(subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)  # paths stay whole
    return [part for line in lines for part in textwrap.wrap(line, wrap, **fit)]


@dataclass
class Settings:
    """What a step's loop takes from the shared flags, gathered in one place (they travel together)."""

    permission: str  # s02's gate: ask, auto, deny or all
    audit: Path  # s02's audit log; the run's other files (trace, conversation) go beside it
    retry: object = None  # s03's retry policy (None: s03's default, really waiting)
    read_latency: float = 0.0  # s04's simulated slow reads, in seconds

    @property
    def folder(self) -> Path:
        return self.audit.parent

    def for_the_loop(self) -> dict:
        """The settings as every loop from s04 on takes them, by keyword."""
        return dict(
            permission=self.permission, audit=self.audit, retry=self.retry, read_latency=self.read_latency
        )


def settings(args, run: Run, step: str, retry=None) -> Settings:
    """The settings a step's loop needs, from its flags (permission s02 on, read latency s04 on)."""
    latency = read_latency(args, run) if hasattr(args, "read_latency") else 0.0
    return Settings(permission_for(args.permission, run), audit_path(run, step), retry, latency)


def audit_path(run: Run, step: str) -> Path:
    """The audit log (s02 on), in the run's folder: beside a replay's temp workspace, else in runs/."""
    return run_folder(run, step) / "audit.jsonl"


def seconds(text) -> float:
    """A --read-latency value: seconds, from 0 to 60 (argparse reports a ValueError in one line)."""
    value = float(text)
    if not 0 <= value <= 60:
        raise ValueError(f"{text} is not between 0 and 60 seconds")
    return value


def read_latency(args, run: Run) -> float:
    """s04's --read-latency, else the fixture's own `read_latency` (so that its reads visibly overlap),
    else 0."""
    latency = args.read_latency
    if latency is None:
        try:
            latency = seconds((run.fixture or {}).get("read_latency", 0))
        except (TypeError, ValueError):
            raise FixtureError(f"{run.fixture_path}: read_latency must be 0 to 60 seconds") from None
    if latency:
        say(f"each read-only call is slowed by {latency} s (simulated latency)")
    return latency


def refuse_unwritable_flags(args) -> None:
    """--save, --trace and --record write only regular files, new or not, in folders that exist: a
    device, a FIFO, a folder or a missing folder is one line before anything runs (or is created).
    A `.NAME.*.tmp` that a killed save of that file left beside it is swept now, at the start."""
    for flag in ("save", "trace", "record"):
        value = getattr(args, flag, None)
        if value and not (flag == "trace" and getattr(args, "replay", None) == value):
            refuse_unwritable(Path(value), f"--{flag}")
            sweep_temp_files(Path(value))


def resume_mode(args, fixture: str, instruction: str):
    """s05's --resume: offline it replays `fixture`; live with no new instruction, it sends `instruction`."""
    if args.resume and not args.replay and not os.environ.get("ANTHROPIC_API_KEY"):
        args.default_fixture = fixture
    elif args.resume and not args.replay and not args.task:
        args.task = instruction
    return args


def resume_hint(script: str, saved: Path, fixture: str) -> list[str]:
    """How to go on from a saved conversation, as commands that work as printed: offline (no key) a
    replay of `fixture`'s recorded answers; with a new instruction, live, which needs a key."""
    resume = [f"  python {script}.py --resume \\", f"    {saved}"]
    live = [*resume[:-1], f"    {saved} \\", '    "new instruction"']
    if os.environ.get("ANTHROPIC_API_KEY"):
        return ["continue it (live, with your key):", *live]
    return [
        f"continue it offline (replays {fixture}'s answers):",
        *resume,
        "or live with a new instruction (set ANTHROPIC_API_KEY first):",
        *live,
    ]


# -- each step's own flags (a step's main adds those of every step before it) -------------------------


def add_permission_flag(parser, choices: tuple) -> None:
    """s02's --permission: who decides whether a write or a command may run."""
    parser.add_argument(
        "--permission",
        choices=choices,
        help="ask: before writes and bash (default live at a terminal); auto: writes, read-only commands "
        "and a trusted fixture's run unasked, other commands ask (no terminal: refused); deny: reads "
        "only; all: everything unasked (only in a folder you can lose)",
    )


def add_latency_flag(parser) -> None:
    """s04's --read-latency: slow every read down, to watch reads overlap."""
    parser.add_argument(
        "--read-latency",
        type=seconds,
        metavar="SECONDS",
        help="make every read-only call this much slower, like a network drive, to watch reads overlap "
        "(default: the fixture's read_latency in replay, else 0)",
    )


def add_budget_flags(parser, budget) -> None:
    """s05's flags: the limits (their defaults from `budget`, a fresh Budget), --resume, where the
    conversation and the trace go, and --no-stream. 0, -1 or nan as a limit: refused in one line."""
    add = parser.add_argument
    add(
        "--max-steps",
        type=limit,
        default=budget.max_steps,
        metavar="N",
        help="model calls (default %(default)s)",
    )
    add(
        "--max-tokens-total", type=limit, default=budget.max_tokens_total, metavar="N", help="tokens in + out"
    )
    add(
        "--max-input-tokens",
        type=limit,
        default=budget.max_input_tokens,
        metavar="N",
        help="input, one request",
    )
    add(
        "--max-cost",
        type=dollars,
        default=budget.max_cost,
        metavar="DOLLARS",
        help="estimated (warned at 80%%)",
    )
    add("--resume", metavar="FILE", help="go on from a saved conversation; a task is the new instruction")
    add("--save", metavar="FILE", help="where to save the conversation (default: beside the audit log)")
    add("--trace", metavar="FILE", help="where to write the trace (default: beside the audit log)")
    add("--no-stream", action="store_true", help="wait for each reply whole, as s01-s04 do")


def add_recovery_flags(parser, hook_retries: int) -> None:
    """s06's flags: the stop hook and the server-side search tool."""
    add = parser.add_argument
    add("--stop-hook", metavar="CMD", help="a shell command that must pass before the loop may stop")
    add("--stop-hook-retries", type=count, default=hook_retries, metavar="N", help="default %(default)s")
    add("--web-search", action="store_true", help="offer the API's server-side web search tool")


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


def run_line(run: Run, args) -> dict:
    """s06's trace `run` line, before `start`: what a replay of the trace needs besides the requests —
    the task, the workspace, and the flags that change what the loop does (the stop hook, web search)."""
    fixture = run.fixture or {}
    where, provenance = fixture.get("workspace", ""), fixture.get("provenance", "recorded")
    flags = ["--web-search"] if args.web_search else []
    if args.stop_hook:
        flags += ["--stop-hook", args.stop_hook, "--stop-hook-retries", str(args.stop_hook_retries)]
    return dict(task=run.task, workspace=where, provenance=provenance, args=flags, environment=for_run(run))


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


def gate_fixture_hook(run: Run, args, gate, bash) -> None:
    """s06: a replayed fixture's own --stop-hook is a stranger's command: it meets s02's gate (`gate`,
    as for a `bash` call) before the run starts, and a refusal stops the run in one line."""
    hook = args.stop_hook
    if hook and {hook, f"--stop-hook={hook}"} & set(run.fixture_args):
        permission = permission_for(args.permission, run)
        if refusal := gate(bash, {"command": hook}, permission, run.trusted)[1]:
            raise WorkbookError(f"the fixture's --stop-hook {hook!r}: {refusal}")


def permission_for(flag: str | None, run: Run) -> str:
    """s02's --permission, or its default: ask a person at a terminal in a live run, else auto."""
    return flag or ("ask" if run.mode != "replay" and sys.stdin.isatty() else "auto")
