"""ladder.py — the grader's rungs, and how one program runs on a rung and is judged: what
`python -m workbook grade` (grade.py) walks a command up, and what an exercise's check (exercise.py)
walks a step with a student's piece in it up.

Each rung is one recording (fixtures/grade_*.json) that tests one step's mechanism from outside
the program. For each rung the grader serves the recording on a classroom replay server
(workbook/classroom/server.py) on a free loopback port, in a child process under a memory limit
(workbook/classroom/rung_server.py: the program's requests are never parsed in the grader's), copies
the rung's workspace into a fresh temp folder, and runs `CMD ARGS... "<the rung's task>"` there: the
task also in AGENT_TASK, ANTHROPIC_BASE_URL pointing at that server, ANTHROPIC_API_KEY a stand-in,
stdin closed, a timeout, and nothing else from the teacher's environment. With bubblewrap installed the
program runs in a sandbox (workbook/classroom/sandbox.py); either way nothing it started outlives its rung.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from workbook import paths, scratch, scrub
from workbook.classroom import reasons, sandbox
from workbook.classroom.rung_server import RungServer
from workbook.replay import fixtures

DEFAULT_TIMEOUT = 60.0  # seconds per rung; retry waits in the rungs are tiny (retry-after 0, 20 ms)
WORKERS = max(2, os.cpu_count() or 2)  # programs run side by side: each mostly waits on its replies
RUNNING: set[subprocess.Popen] = set()  # the programs being graded right now: Ctrl-C ends them all


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
