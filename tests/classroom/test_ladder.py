"""The graded ladder (workbook/classroom/ladder.py) is the workbook's progression: each step climbs it up to
its own rung, a loop written outside the workbook (plain Python with the SDK, the SDK's tool runner) is
graded the same way, and the library's work is never credited to the student.

Each graded run is a program started by the grader, except where that costs a second of CPU for no
extra check. A workbook step runs its main() in this process, and a Python loop written outside the
workbook runs as __main__ in this process, against the same rung server, with the environment the
sandbox would give it (run_here). Some runs still go as the grader runs a student's program, in the
sandbox: every step starts through the same main() and launch code, so s03 (whose exit code the rung
judges) and the last step do, on their top rung; the plain SDK loop and the tool runner do, on their
first rung (the plain loop without the SDK's retries, the same code with one argument changed, runs
here on all of its rungs). test_grade.py tests the sandbox itself."""

import io
import runpy
import sys
import tempfile
import traceback
from pathlib import Path

from workbook import paths
from workbook.classroom import ladder, sandbox
from workbook.replay.no_wait import no_wait

import anthropic
import pytest
from conftest import STEPS, exit_code, main_in_process
from grading import (
    LOOPS,
    OPTIONS,
    PLAIN,
    PYTHON,
    graded,
    no_waiting,  # noqa: F401  (autouse: the steps print their waits, not sleep them)
    rungs_up_to,
)


def run_step_here(run: sandbox.Run, chosen, running) -> tuple[int | None, str]:
    """sandbox.run_program for a workbook step, in this process: the step's main() with the
    program's argv (the task), in the rung's workspace, with the environment the sandbox gives a
    program (the rung's server as the API, the run's stand-in key, the rung's folder as HOME and TMPDIR).
    The grader judges what its server saw, as for a program; the exit code is main's."""
    if run.argv[1] == "-m":  # a later step: python -m workbook.later.sNN_x
        step, task = run.argv[2].rpartition(".")[2], run.argv[3:]
    else:
        step, task = Path(run.argv[1]).stem, run.argv[2:]
    environment = sandbox.environment(run, run.server_url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(run.folder))
        return main_in_process(patch, run.folder / "runs", step, *task, cwd=run.workspace, **environment)


def run_loop_here(run: sandbox.Run, chosen, running) -> tuple[int | None, str]:
    """sandbox.run_program for a Python loop written outside the workbook, in this process: the
    file run as __main__ with the program's argv, in the rung's workspace, with the environment the
    sandbox gives a program. As the interpreter would: an uncaught exception prints its traceback and
    is exit code 1, a SystemExit is its code."""
    environment = sandbox.environment(run, run.server_url)
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        patch.chdir(run.workspace)
        patch.setattr(tempfile, "tempdir", str(run.folder))
        patch.setattr(sys, "argv", run.argv[1:])
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", out)
        try:
            runpy.run_path(run.argv[1], run_name="__main__")
            code = 0
        except SystemExit as stop:
            code = exit_code(stop, out)
        except Exception:
            traceback.print_exc(file=out)
            code = 1
    return code, out.getvalue()


def run_here(run: sandbox.Run, chosen, running) -> tuple[int | None, str]:
    """sandbox.run_program, in this process: a workbook step's main(), or another Python loop."""
    if run.argv[1] == "-m" or Path(run.argv[1]).stem in STEPS:
        return run_step_here(run, chosen, running)
    return run_loop_here(run, chosen, running)


def programs(runs: list, chosen: list[int], commands: dict) -> list[tuple[ladder.Rung, list[str]]]:
    """The (rung, command) pairs grade_runs takes, for the chosen runs (indices into `runs`)."""
    return [(runs[i][1], commands[runs[i][0]]) for i in chosen]


def grade_here(runs: list[tuple[ladder.Rung, list[str]]]) -> list[ladder.Result]:
    """ladder.grade_runs, one run after another in this thread (a step's main() sets signal handlers,
    which only the main thread may), each program run by run_here. The SDK's own pause before a retry
    (0.5 s and up: the rungs' retry-after is 0, so it takes its backoff) is not spent here, as a replay
    does not spend it (workbook/replay/no_wait.py): the grader judges the requests it saw, never when
    they came. The programs graded in the sandbox wait as they would for a student."""
    with ladder.Servers() as servers, pytest.MonkeyPatch.context() as patch:
        patch.setattr(sandbox, "run_program", run_here)
        patch.setattr(anthropic.Anthropic, "_calculate_retry_timeout", no_wait)
        results = []
        for rung, command in runs:
            rung_server = servers.of(rung)
            outcome = ladder.run_rung(rung_server, command, OPTIONS)
            results.append(ladder.judged(rung, rung_server, outcome, OPTIONS))
        return results


# -- the ladder is the workbook's progression ------------------------------------------------------


def plain_loop_without_sdk_retries(folder: Path) -> str:
    """plain_loop.py with the SDK's retries off, as s03 sets them: the same loop, retrying nothing."""
    source = (LOOPS / "plain_loop.py").read_text()
    assert source.count("anthropic.Anthropic()") == 1
    variant = folder / "plain_loop_no_retries.py"
    variant.write_text(source.replace("anthropic.Anthropic()", "anthropic.Anthropic(max_retries=0)"))
    return str(variant)


@pytest.fixture(scope="module")
def climbed(tmp_path_factory) -> dict[str, dict[str, ladder.Result]]:
    """Every program these tests grade, on its rungs: each step on every rung up to its own; s01 and
    s02 on s03's rungs too (the SDK's retries must not count as theirs); the plain SDK loop, with and
    without the SDK's retries; the SDK's tool runner. The runs started as programs (see the module's
    doc) go side by side (ladder.grade_runs); then the rest run here, in turn (run_here)."""
    no_retries = plain_loop_without_sdk_retries(tmp_path_factory.mktemp("loops"))
    commands = {step: paths.step_argv(step) for step in STEPS}  # a later step: python -m, from the root
    for step in STEPS:  # the pause-turn rung's server tool, declared as the API needs (s07 on)
        commands[step] += ["--web-search"] if step >= "s07" else []
    commands |= {"plain": [PYTHON, PLAIN], "plain-no-retries": [PYTHON, no_retries]}
    wanted = {step: rungs_up_to(max(step[:3], "s03")) for step in STEPS}
    commands["tool-runner"] = [PYTHON, str(LOOPS / "tool_runner.py")]
    wanted |= {"plain": ["loop", "tool-errors", "retries", "parallel"]}
    wanted["plain-no-retries"] = ["retries", "no-retry-400", "bad-key"]
    wanted["tool-runner"] = ["loop"]
    runs = [(who, rung) for who, names in wanted.items() for rung in ladder.RUNGS if rung.name in names]
    started = [step for step in STEPS if step[:3] in ("s03", STEPS[-1][:3])]  # see the module's doc
    as_programs = [
        i
        for i, (who, rung) in enumerate(runs)
        if (who in started and rung.name == wanted[who][-1])
        or (who in ("plain", "tool-runner") and rung.name == wanted[who][0])
    ]
    here = [i for i in range(len(runs)) if i not in as_programs]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKBOOK_NO_SLEEP", "1")  # the steps print their retry waits instead of sleeping them
        results = dict(zip(as_programs, ladder.grade_runs(programs(runs, as_programs, commands), OPTIONS)))
        results |= dict(zip(here, grade_here(programs(runs, here, commands))))
    graded_runs = {who: {} for who in wanted}
    for i, (who, rung) in enumerate(runs):
        graded_runs[who][rung.name] = results[i]
    return graded_runs


@pytest.mark.parametrize("step", STEPS)
def test_each_step_passes_every_rung_up_to_its_own(step, climbed):
    own = {name: r for name, r in climbed[step].items() if name in rungs_up_to(step[:3])}
    assert list(own) == rungs_up_to(step[:3])
    assert {name: r.reason for name, r in own.items() if not r.passed} == {}
    assert {r.passed_by for r in own.values()} == {"loop"}, "a step's own work, not the library's"


def sdk_retried(counts: str) -> str:
    """The reason a rung the SDK retried fails with; `counts`: the x-stainless-retry-count values sent."""
    return f"the SDK retried for you (x-stainless-retry-count: {counts}). Set max_retries=0 and retry in " + (
        "your loop (s03)"
    )


# The SDK retries twice at most (max_retries=2): faults in a row (the 529 that never clears, the three of
# `retries`) use both retries; the one fault before the 400 or the 401 takes one.
SDK_RETRIES = {"retries": "1, 2", "no-retry-400": "1", "bad-key": "1", "gives-up": "1, 2"}


@pytest.mark.parametrize("step", STEPS[:2])
def test_s01_and_s02_leave_retrying_to_the_sdk_and_fail_every_s03_rung_saying_so(step, climbed):
    """Each s03 recording holds an error to retry, before the 400 or 401 it must stop on too: a loop
    that leaves retrying to the SDK passes none of them by default."""
    assert climbed[step]["loop"].passed
    s03 = {name: result for name, result in climbed[step].items() if result.rung.step == "s03"}
    assert list(s03) == ["retries", "no-retry-400", "bad-key", "gives-up"]
    assert {name: (result.passed, result.reason) for name, result in s03.items()} == {
        name: (False, sdk_retried(counts)) for name, counts in SDK_RETRIES.items()
    }


def test_the_last_step_is_graded_on_every_rung_and_every_step_to_s07_has_a_rung():
    """s09's idea, keeping the work through a Ctrl-C or a resume, and s11's, a handoff to a fresh
    session, happen around a program's run (a signal, a saved file, a second run), and s10's trace is a
    file the program writes: none is in the requests a recording can judge. s08's, making room in a full
    context, is judged by what the loop's own shrunk history holds, which no recording of ours can
    foresee (docs/teaching.md, Grading)."""
    last = STEPS[-1][:3]
    assert rungs_up_to(last) == [r.name for r in ladder.RUNGS]
    assert {r.step for r in ladder.RUNGS} == {s[:3] for s in STEPS} - {"s08", "s09", "s10", "s11"}


# -- loops written outside the workbook ------------------------------------------------------------


def test_a_plain_python_loop_with_the_sdk_passes_its_own_rungs_but_not_the_sdks_retries(climbed):
    plain = climbed["plain"]
    assert {name: r.passed_by for name, r in plain.items()} == {
        "loop": "loop",
        "tool-errors": "loop",
        "retries": None,
        "parallel": "loop",
    }
    assert plain["retries"].reason == sdk_retried("1, 2")
    assert plain["retries"].library == ["the SDK retried for you (x-stainless-retry-count: 1, 2)"]


def test_the_same_loop_without_the_sdks_retries_stops_on_the_529(climbed):
    reason = climbed["plain-no-retries"]["retries"].reason
    assert reason.startswith("turn 1 of 5: your program stopped on the 529 (overloaded_error) (exit 1")
    assert reason.endswith("retry it, waiting as retry-after asks")


def test_a_loop_that_never_retries_fails_the_400_and_key_rungs_on_the_error_before_them(climbed):
    """It would stop on the 400 and the 401 all the same, but first comes an error it must retry."""
    plain = climbed["plain-no-retries"]
    assert not plain["no-retry-400"].passed and not plain["bad-key"].passed
    assert plain["no-retry-400"].reason.startswith(
        "turn 1 of 3: your program stopped on the 529 (overloaded_error) (exit 1"
    )
    assert plain["bad-key"].reason.startswith(
        "turn 1 of 2: your program stopped on the 429 (rate_limit_error) (exit 1"
    )
    for rung in ("no-retry-400", "bad-key"):
        assert plain[rung].reason.endswith("retry it, waiting as retry-after asks")


def test_a_teacher_may_accept_the_sdks_retries_and_the_json_says_the_library_passed(capsys):
    code, rows = graded(capsys, "--only", "retries", "--allow-sdk-retries", "--", PYTHON, PLAIN)
    assert code == 0 and rows["retries"]["passed"] and rows["retries"]["passed_by"] == "library"
    assert rows["retries"]["reason"].startswith(
        "passed by the library: the SDK retried for you (x-stainless-retry-count: 1, 2); walked the whole"
    )


def test_the_sdks_tool_runner_falls_back_from_a_thread_and_passes_the_loop_rung_as_the_librarys(climbed):
    """The runner sends context_management in a thread; the replay refuses it as documented
    (thread_unsupported_request), and the runner's fallback is no mistake of the student's."""
    loop = climbed["tool-runner"]["loop"]
    assert loop.passed and loop.passed_by == "library"
    assert loop.library == ["the SDK's tool runner ran the loop (x-stainless-helper: BetaToolRunner)"]
    assert loop.reason.endswith("walked the whole recording: 3 turns (exit 0)")
