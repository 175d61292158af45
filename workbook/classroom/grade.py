"""grade.py — the graded ladder: any loop, in any language, walked up the workbook's recordings.

    python -m workbook grade [--json] [--only RUNG] [--timeout S] [--sandbox auto|required|off]
                             [--allow-sdk-retries] -- CMD [ARGS...]

A rung passes when the program walked the whole recording (or, for a rung about stopping, stopped
within its bounds), no request broke the API's rules, the assistant's replies went back verbatim,
and the rung's own checks hold. Matching is by shape, as in the classroom: a student's tools,
prompts and model name are their own. The rung grades the student's loop, not the library's: a
request the SDK retried by itself fails it (unless --allow-sdk-retries), and a result a library
feature helped to is marked "passed by the library". The ladder is the workbook's progression:
step sN passes every rung of s01...sN. Each row of the report says how the program ran: in bwrap, or
not and why. Exit 0 only when every rung graded passes; 2 for bad input.

This is the command line over the ladder (ladder.py: the rungs, a program run on one and judged):
which rungs, which command, which sandbox, and the report, a table or JSON. `--exercises FOLDER`
shows instead which exercises each student of a class solved (exercise.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

from workbook import display, errors, flags
from workbook.classroom import sandbox
from workbook.classroom.ladder import DEFAULT_TIMEOUT, RUNGS, Options, Result, Rung, grade_runs

LONGEST_TIMEOUT = 3600.0  # an hour a rung: anything longer is a typo, not a plan


class GradeError(errors.WorkbookError):
    """Bad input to the grader itself (no command, an unknown rung): one line, exit 2."""


# -- command line ----------------------------------------------------------------------------------

USAGE = (  # on three lines, as every help text fits 80 columns
    "%(prog)s [--json] [--only RUNG] [--timeout S]\n"
    "         [--sandbox auto|required|off] [--allow-sdk-retries]\n"
    "         -- CMD [ARGS...]"
)


def pick_rungs(only: list[str]) -> list[Rung]:
    """The rungs asked for: by name (loop), by step (s03: all of its rungs), comma lists allowed."""
    wanted = [word.strip() for words in only for word in words.split(",") if word.strip()]
    for word in wanted:
        if not any(word in (r.name, r.step) for r in RUNGS):
            names = ", ".join(r.name for r in RUNGS)
            steps = f"{RUNGS[0].step}-{RUNGS[-1].step}"  # the steps that have rungs
            raise GradeError(f"no rung {word!r}: give a step ({steps}) or one of {names}")
    return [r for r in RUNGS if not wanted or r.name in wanted or r.step in wanted]


def resolve(command: list[str]) -> list[str]:
    """The command with its program found and its file arguments made absolute: it runs in a temp folder."""
    if not command:
        raise GradeError(
            "no command to grade: put it after --, e.g. `python -m workbook grade -- python my_loop.py`"
        )
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        found = os.path.abspath(program) if Path(program).is_file() else None  # not resolve(): a venv's
        # python is a symlink, and following it would leave the venv (and its packages) behind
    else:
        found = shutil.which(program) or (program if Path(program).is_file() else None)
    if not found:
        raise GradeError(f"{program}: command not found — give a program on PATH or a path to one")
    if not os.access(found, os.X_OK):
        raise GradeError(
            f"{program}: not executable — `chmod +x {program}`, or name its interpreter: "
            f"python -m workbook grade -- python {program}"
        )
    args = [os.path.abspath(a) if names_a_file(a) else a for a in command[1:]]
    return [found, *args]


def names_a_file(arg: str) -> bool:
    """An argument that is a path to something that exists (a long `-c` program is not, nor too long)."""
    try:
        return bool(arg) and not arg.startswith("-") and Path(arg).exists()
    except (OSError, ValueError):
        return False


class Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as GradeError (one line) instead of printed with the usage."""

    def error(self, message):  # one line, not argparse's usage block
        raise GradeError(f"{message} — usage: python -m workbook grade [OPTIONS] -- CMD [ARGS...]")


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The grader's own flags (before --) and the command to grade (after it)."""
    split = argv.index("--") if "--" in argv else len(argv)
    rungs = "\n".join(
        textwrap.fill(r.checks, 79, initial_indent=f"  {r.step} {r.name:<13} ", subsequent_indent=" " * 20)
        for r in RUNGS
    )
    parser = Parser(
        prog="python -m workbook grade",
        usage=USAGE,
        description=textwrap.fill(" ".join(__doc__.split("\n\n")[2].split()), 79),
        epilog=f"rungs (--only takes a rung or a step):\n{rungs}\n\nTeachers: docs/teaching.md, Grading.",
        formatter_class=functools.partial(argparse.RawDescriptionHelpFormatter, width=78),  # fits 80 columns
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--only", action="append", default=[], metavar="RUNG", help="a rung or a step (s03)")
    parser.add_argument(
        "--timeout",
        type=flags.seconds(LONGEST_TIMEOUT, "a timeout", zero=False),
        default=DEFAULT_TIMEOUT,
        help="seconds per rung (default 60)",
    )
    parser.add_argument(
        "--sandbox",
        choices=sandbox.SANDBOX_MODES,
        default="auto",
        help="run each program in bubblewrap: auto or required (refuse without it), off (your rights)",
    )
    parser.add_argument(
        "--allow-sdk-retries",
        action="store_true",
        help='accept the SDK\'s own retries; the JSON shows such a rung as passed_by "library"',
    )
    parser.add_argument(
        "--exercises",
        metavar="FOLDER",
        help="for a class: who solved which exercise (FOLDER: a folder a student, with their exercise files)",
    )
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def show(results: list[Result], command: list[str], chosen: sandbox.Sandbox | None = None) -> None:
    """The report as a table: rung, step, what it checks, pass or FAIL, why, and the sandbox the program
    ran in; under it, how the programs ran (the sandbox, or why none). Every cell is plain text
    (rich.text.Text) with no control sequence (display.printable): a student's words in a reason never
    drive the terminal or its markup."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def plain(text: str) -> Text:
        return Text(display.printable(text))

    table = Table(title=plain(f"grading: {' '.join(command)}"), show_lines=True)
    if chosen is not None:
        table.caption = plain(f"programs ran in: {chosen.how}")
    for column in ("step", "rung", "checks", "result", "reason", "sandbox"):
        table.add_column(column, overflow="fold")
    for r in results:
        verdict = Text("pass", "green") if r.passed else Text("FAIL", "red")
        if r.passed_by == "library":
            verdict = Text("pass (library)", "yellow")
        table.add_row(
            r.rung.step, r.rung.name, plain(r.rung.checks), verdict, plain(r.reason), plain(r.sandbox)
        )
    console = Console(highlight=False)
    console.print(table)
    passed = sum(r.passed for r in results)
    console.print(Text(f"{passed} of {len(results)} rungs passed"))


def main(argv: list[str]) -> int:
    """Grade the command on the rungs asked for; print the table (or JSON) once every program has
    ended; 0 only if all pass, 1 if one fails, 2 for bad input."""
    try:
        args, command = parse(argv)
        if args.exercises:
            from workbook.classroom import exercise

            chosen = sandbox.choose(args.sandbox)
            if chosen.kind == "none":
                sandbox.hide_from_programs()
            return exercise.show_class(Path(args.exercises), chosen)
        rungs, command = pick_rungs(args.only), resolve(command)  # bad input first: it is the reader's
        chosen = sandbox.choose(args.sandbox)
    except errors.WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if chosen.notice:
        print(chosen.notice, file=sys.stderr)
    if chosen.kind == "none":
        sandbox.hide_from_programs()
    options = Options(args.timeout, chosen, args.allow_sdk_retries)
    try:
        results = grade_runs([(rung, command) for rung in rungs], options)
    except KeyboardInterrupt:
        print("interrupted: the programs being graded were stopped", file=sys.stderr)
        return 130
    if args.json:
        print(
            json.dumps({"rungs": [r.row() for r in results], "sandbox": chosen.report()}, ensure_ascii=False)
        )
    else:
        show(results, command, chosen)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
