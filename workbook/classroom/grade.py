"""grade.py — the graded ladder: any loop, in any language, walked up the workbook's recordings.

    python -m workbook grade [--json] [--only RUNG] [--timeout S] [--sandbox auto|required|off]
                             [--allow-sdk-retries] -- CMD [ARGS...]

Each rung is one recording (fixtures/grade_*.json) that tests one step's mechanism from outside
the program. For each rung the grader serves the recording on a classroom replay server
(workbook/classroom/server.py) on a free loopback port, in a child process under a memory limit
(workbook/classroom/rung_server.py: the program's requests are never parsed in the grader's), copies
the rung's workspace into a fresh temp folder, and runs `CMD ARGS... "<the rung's task>"` there: the
task also in AGENT_TASK, ANTHROPIC_BASE_URL pointing at that server, ANTHROPIC_API_KEY a stand-in,
stdin closed, a timeout, and nothing else from the teacher's environment. With bubblewrap installed the
program runs in a sandbox (workbook/classroom/sandbox.py); either way nothing it started outlives its rung.

A rung passes when the program walked the whole recording (or, for a rung about stopping, stopped
within its bounds), no request broke the API's rules, the assistant's replies went back verbatim,
and the rung's own checks hold. Matching is by shape, as in the classroom: a student's tools,
prompts and model name are their own. The rung grades the student's loop, not the library's: a
request the SDK retried by itself fails it (unless --allow-sdk-retries), and a result a library
feature helped to is marked "passed by the library". The ladder is the workbook's progression:
step sN passes every rung of s01...sN. Each row of the report says how the program ran: in bwrap, or
not and why. Exit 0 only when every rung graded passes; 2 for bad input.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workbook import display, errors, flags, paths, scratch, scrub
from workbook.classroom import reasons, sandbox
from workbook.classroom.rung_server import RungServer
from workbook.replay import fixtures

DEFAULT_TIMEOUT = 60.0  # seconds per rung; retry waits in the rungs are tiny (retry-after 0, 20 ms)
LONGEST_TIMEOUT = 3600.0  # an hour a rung: anything longer is a typo, not a plan
WORKERS = max(2, os.cpu_count() or 2)  # programs run side by side: each mostly waits on its replies
RUNNING: set[subprocess.Popen] = set()  # the programs being graded right now: Ctrl-C ends them all


class GradeError(errors.WorkbookError):
    """Bad input to the grader itself (no command, an unknown rung): one line, exit 2."""


@dataclass(frozen=True)
class Rung:
    """One recording, what it checks in one line, and how its run must end."""

    name: str
    step: str
    fixture: str  # a file under fixtures/, without .json
    checks: str
    least: int | None = None  # fewest requests to pass (default: all); more than recorded never passes
    exit: str = "zero"  # how the program must exit: "zero", "nonzero" or "any"
    must_fail: dict = field(default_factory=dict)  # tool_use id -> why its tool_result needs is_error
    must_output: dict = field(default_factory=dict)  # tool_use id -> what its tool_result holds when it ran
    stream: bool = False  # the recording streams: each request must ask for it (stream: true)


RUNGS = [
    Rung(
        "loop",
        "s01",
        "grade_s01_loop",
        "every tool_use answered, each reply appended verbatim, stop at end_turn",
    ),
    Rung(
        "tool-errors",
        "s02",
        "grade_s02_tool_errors",
        "an unknown tool and a bad input come back as is_error tool_results, and the loop goes on",
        must_fail={
            "toolu_01GradeS02Unknown": "asks for word_count, a tool that does not exist",
            "toolu_01GradeS02BadInput": "calls bash without its required `command`",
        },
    ),
    Rung(
        "retries",
        "s03",
        "grade_s03_retries",
        "a 529, a 429 (retry-after) and a dropped connection are each retried",
    ),
    # Each fatal error comes after one that must be retried: a loop that never retries (or leaves it
    # to the SDK) cannot pass by default, and a loop that retries everything sends the 400/401 again.
    Rung(
        "no-retry-400",
        "s03",
        "grade_s03_overloaded_then_400",
        "a 529 is retried, then a 400 is never sent again: the program stops, non-zero",
        exit="nonzero",
    ),
    Rung(
        "bad-key",
        "s03",
        "grade_s03_rate_limited_then_bad_key",
        "a 429 is retried, then a refused key (401) stops the program with a non-zero exit",
        exit="nonzero",
    ),
    Rung(
        "gives-up",
        "s03",
        "grade_s03_gives_up",
        "a 529 that never clears is retried, then given up within 8 attempts, with a non-zero exit",
        least=2,
        exit="nonzero",
    ),
    Rung(
        "parallel",
        "s04",
        "grade_s04_parallel",
        "4 tool_use blocks in one turn: 4 tool_results, one per id, all in the next user message",
    ),
    Rung(
        "repeat-brake",
        "s05",  # s05's RepeatBrake: knowing when to stop
        "grade_s05_repeat_brake",
        "the same call asked for without end: the loop stops by itself within 8 turns",
        least=2,
        exit="any",
    ),
    Rung(
        "streamed-input",
        "s06",
        "grade_s06_streamed_tool_input",
        "a streamed tool_use, its input in input_json_delta pieces, is put together whole and run",
        must_output={"toolu_01GradeS05Count": "notes.txt:1"},
        stream=True,
    ),
    Rung(
        "cut-tool-use",
        "s06",
        "grade_s06_cut_tool_use",
        "a tool_use cut off by max_tokens is never run: the same request goes again with a larger max_tokens",
    ),
    Rung(
        "pause-turn",
        "s07",
        "grade_s06_pause_turn_web_search",
        "the web_search server tool declared; a pause_turn reply sent back unchanged, no new user message",
    ),
]


@dataclass(frozen=True)
class Options:
    """How to grade: seconds per rung, the sandbox, and whether the SDK's own retries are accepted."""

    timeout: float = DEFAULT_TIMEOUT
    sandbox: sandbox.Sandbox = sandbox.Sandbox()
    allow_sdk_retries: bool = False


@dataclass
class Result:
    """One row of the report."""

    rung: Rung
    passed: bool
    reason: str
    library: list[str] = field(default_factory=list)  # library features the run relied on, in words
    sandbox: str = ""  # how the program ran: "bwrap", or "none: " and why (sandbox_words)

    @property
    def passed_by(self) -> str | None:
        """Who did the work a passing rung checks: "loop", or "library" when a library feature helped."""
        if not self.passed:
            return None
        return "library" if self.library else "loop"

    def row(self) -> dict:
        return {
            "name": self.rung.name,
            "step": self.rung.step,
            "passed": self.passed,
            "passed_by": self.passed_by,
            "library": self.library,
            "reason": self.reason,
            "sandbox": self.sandbox,
        }


def sandbox_words(chosen: sandbox.Sandbox) -> str:
    """How the programs run, in the report's words: "bwrap", or "none" and why not bwrap."""
    return "bwrap" if chosen.kind == "bwrap" else f"{chosen.kind}: {chosen.why}"


# -- the rungs' servers: one per rung, each program a student of its own -----------------------------


class Servers:
    """The rungs' servers, each started the first time a run needs it and closed together at the end."""

    def __init__(self):
        self.started: dict[str, RungServer] = {}
        self.lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for rung_server in self.started.values():
            rung_server.close()

    def of(self, rung: Rung) -> RungServer:
        """The rung's server: started now if it is not running (or a program's request ended it)."""
        with self.lock:
            running = self.started.get(rung.fixture)
            if running is None or running.proc.poll() is not None:
                fixture = fixtures.load_fixture(paths.ROOT / "fixtures" / f"{rung.fixture}.json")
                self.started[rung.fixture] = RungServer(rung.fixture, fixture)
            return self.started[rung.fixture]


# -- running and judging ---------------------------------------------------------------------------


def run_rung(rung_server: RungServer, command: list[str], options: Options) -> reasons.Outcome:
    """Run the program once against the rung's server, in a fresh copy of the rung's workspace."""
    student = f"g{secrets.token_hex(5)}"  # unguessable, so no other program moves this cursor; 11
    # characters, so the server's log (which shows 12) names it whole
    seen = rung_server.runs[student] = []
    fixture = rung_server.fixture
    workspace = scratch.copy_workspace(fixture["workspace"])
    run = sandbox.Run(
        [*command, fixture["task"]],
        workspace.parent,
        workspace,
        rung_server.url,
        student,
        options.timeout,
    )
    try:
        code, output = sandbox.run_program(run, options.sandbox, RUNNING)
        rung_server.settle()  # every request it sent has reached `seen`
    finally:
        shutil.rmtree(workspace.parent, ignore_errors=True)
        del rung_server.runs[student]
    return reasons.Outcome(seen, code, output, rung_server.log.of(student))


def judged(rung: Rung, rung_server: RungServer, outcome: reasons.Outcome, options: Options) -> Result:
    """The rung's row. A reason may quote the program's last line: no secret of the grader's, and no
    key-shaped string, is ever quoted (scrub.redact_keys)."""
    verdict = reasons.judge(rung, rung_server.fixture, outcome, options.allow_sdk_retries)
    ran = sandbox_words(options.sandbox)
    if verdict.problem:
        return Result(rung, False, scrub.redact_keys(verdict.problem), verdict.library, ran)
    reason = reasons.passed_reason(rung, outcome)
    if verdict.library:
        reason = f"passed by the library: {'; '.join(verdict.library)}; {reason}"
    return Result(rung, True, scrub.redact_keys(reason), verdict.library, ran)


def grade_runs(runs: list[tuple[Rung, list[str]]], options: Options = Options()) -> list[Result]:
    """Grade each (rung, command), side by side as the cores allow (only in bubblewrap, which keeps the
    programs apart; else one at a time), one shared server per rung."""

    def grade_one(run: tuple[Rung, list[str]]) -> Result:
        rung, command = run
        rung_server = servers.of(rung)
        return judged(rung, rung_server, run_rung(rung_server, command, options), options)

    with Servers() as servers:
        pool = ThreadPoolExecutor(max_workers=WORKERS if options.sandbox.side_by_side else 1)
        try:
            return list(pool.map(grade_one, runs))
        except KeyboardInterrupt:
            for proc in list(RUNNING):
                sandbox.stop(proc)  # its keeper ends it and all it started
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


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
            raise GradeError(f"no rung {word!r}: give a step (s01-s06) or one of {names}")
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
        chosen = sandbox.choose(args.sandbox)
        if args.exercises:
            from workbook.classroom import exercise

            if chosen.kind == "none":
                sandbox.hide_from_programs()
            return exercise.show_class(Path(args.exercises), chosen)
        rungs, command = pick_rungs(args.only), resolve(command)
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
