"""The exercises (python -m workbook exercise): each starting file fails with its first hint, the step's
own piece passes, and every classic wrong answer fails with its own hint — all through the grader's
judge, as a student's check runs.

Each exercise's program runs here, in this process, as the grader would run it in a sandbox (the
rung's server as the API, the rung's workspace as the current folder): sandbox.run_program is
replaced by run_here, as tests/classroom/test_ladder.py does for the steps. The grader's servers
and judge are the real ones. One run in the sandbox (test_a_check_runs_the_program_as_the_grader_does)
shows the file runs as a program too."""

import io
import sys
import tempfile
from pathlib import Path

from workbook import paths
from workbook.authoring import exercises as authoring
from workbook.classroom import exercise, grade, ladder, sandbox
from workbook.classroom.exercise_data import EXERCISES, LANGS
from workbook.replay.no_wait import no_wait

import anthropic
import pytest
from conftest import ROOT, exit_code
from grading import needs_bwrap, no_waiting  # noqa: F401  (autouse: the steps print their waits)

OFF = sandbox.Sandbox()  # run_here runs the programs one at a time, in this process


def run_here(run: sandbox.Run, chosen, running) -> tuple[int | None, str]:
    """sandbox.run_program for an exercise's program, in this process: graded_main with the
    program's arguments, in the rung's workspace, with the environment the sandbox would give it."""
    assert run.argv[1:3] == ["-c", exercise.RUN_CODE]
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in sandbox.environment(run, run.server_url).items():
            patch.setenv(name, value)
        patch.chdir(run.workspace)
        patch.setattr(tempfile, "tempdir", str(run.folder))
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", out)
        try:
            code = exercise.graded_main(run.argv[3:])
        except SystemExit as stop:
            code = exit_code(stop, out)
        except Exception:
            import traceback

            traceback.print_exc(file=out)
            code = 1
    return code, out.getvalue()


@pytest.fixture(scope="module")
def servers():
    """The rungs' servers, shared by this module's checks, as one grading run shares them."""
    with ladder.Servers() as started:
        yield started


@pytest.fixture
def checked(monkeypatch, tmp_path, servers):
    """check(text, exercise) -> Verdict: the text written as the exercise's file, checked."""
    monkeypatch.setattr(sandbox, "run_program", run_here)
    monkeypatch.setattr(anthropic.Anthropic, "_calculate_retry_timeout", no_wait)

    def check(text: str, ex, lang: str = "en") -> exercise.Verdict:
        file = tmp_path / authoring.file_name(ex)
        file.write_text(text)
        return exercise.check(file, ex, lang, OFF, servers)

    return check


NUMBERS = [e.number for e in EXERCISES]
WRONG = [(e.number, i) for e in EXERCISES for i in range(len(e.wrong))]


def by_number(n: int):
    return next(e for e in EXERCISES if e.number == n)


@pytest.mark.parametrize("n", NUMBERS)
def test_the_starting_file_fails_with_its_first_hint(checked, n):
    ex = by_number(n)
    result = checked(authoring.build(ex), ex)
    assert not result.passed and result.not_written, result.reason
    assert result.hint == ex.hints["en"][0]


@pytest.mark.parametrize("n", NUMBERS)
def test_the_steps_own_piece_passes(checked, n):
    ex = by_number(n)
    result = checked(authoring.answered(ex), ex)
    assert result.passed, result.reason


@pytest.mark.parametrize(("n", "i"), WRONG)
def test_each_classic_wrong_answer_fails_with_its_own_hint(checked, n, i):
    ex = by_number(n)
    wrong = ex.wrong[i]
    result = checked(authoring.answered(ex, wrong.edits), ex, "zh-CN")
    assert not result.passed
    assert (result.wrong, result.hint) == (wrong.what["zh-CN"], wrong.hint["zh-CN"]), result.reason


def test_every_step_has_an_exercise_on_its_idea_and_every_exercise_three_hints_in_each_language():
    assert [e.step for e in EXERCISES] == list(paths.STEPS)
    for ex in EXERCISES:
        assert set(ex.about) == set(LANGS) and all(len(ex.hints[lang]) == 3 for lang in LANGS)
        assert all(set(w.what) == set(w.hint) == set(LANGS) for w in ex.wrong) and len(ex.wrong) >= 2


@needs_bwrap
def test_a_check_runs_the_program_as_the_grader_does(tmp_path):
    """The real thing: the starting file of exercise 1, as a program, in bubblewrap, on its rung."""
    ex = EXERCISES[0]
    file = tmp_path / authoring.file_name(ex)
    file.write_text(authoring.build(ex))
    result = exercise.check(file, ex, "en", sandbox.choose("required"))
    assert result.not_written and "NotImplementedError" in result.reason
    assert f"{file.name}:" in result.reason  # where, in the student's own file


def test_the_command_lists_every_exercise_in_both_languages(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(exercise, "PROGRESS", tmp_path / "progress.txt")
    for lang in LANGS:
        assert exercise.main(["list", "--lang", lang]) == 0
        out = capsys.readouterr().out
        assert all(ex.about[lang] in out for ex in EXERCISES)
        assert f"0/{len(EXERCISES)}" in out


def test_hints_come_one_at_a_time_each_more_specific_and_are_kept_in_a_plain_file(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr(exercise, "PROGRESS", tmp_path / "progress.txt")
    ex = EXERCISES[5]
    for n in range(3):
        exercise.main(["hint", str(ex.number), "--lang", "en"])
        assert f"hint {n + 1}/3: {ex.hints['en'][n]}" in capsys.readouterr().out
    assert "06  s06_recovery.next_transition" in (tmp_path / "progress.txt").read_text()
    assert "hints seen: 3" in (tmp_path / "progress.txt").read_text()
    assert exercise.read_progress(tmp_path / "progress.txt")[6] == {"solved": False, "hints": 3}


def test_reset_restores_the_starting_file_and_keeps_the_students(tmp_path, monkeypatch):
    monkeypatch.setattr(exercise, "PROGRESS", tmp_path / "progress.txt")
    monkeypatch.setattr(authoring, "FOLDER", tmp_path)
    ex = EXERCISES[3]
    (tmp_path / authoring.file_name(ex)).write_text("mine")
    exercise.main(["reset", str(ex.number), "--lang", "zh-CN"])
    assert (tmp_path / authoring.file_name(ex)).read_text() == authoring.build(ex)
    assert (tmp_path / (authoring.file_name(ex) + ".bak")).read_text() == "mine"


@pytest.mark.parametrize(
    ("env", "lang"), [({"LANG": "zh_CN.UTF-8"}, "zh-CN"), ({"LANG": "en_GB.UTF-8"}, "en")]
)
def test_the_language_defaults_from_the_locale(monkeypatch, env, lang):
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert exercise.default_lang() == lang


def test_a_grader_rung_named_by_an_exercise_exists():
    names = {r.name for r in ladder.RUNGS}
    assert all(set(ex.rungs) <= names for ex in EXERCISES)
    assert all((ROOT / "fixtures" / f"{name}.json").exists() for ex in EXERCISES for name in ex.replays)


def test_the_chinese_texts_use_the_glossarys_names():
    import runpy

    banned = runpy.run_path(str(ROOT / "tests" / "authoring" / "test_glossary.py"))["banned"]

    texts = [
        text
        for ex in EXERCISES
        for text in [ex.about["zh-CN"], *ex.hints["zh-CN"], *(w.hint["zh-CN"] for w in ex.wrong)]
    ]
    texts += list(exercise.WORDS["zh-CN"].values())
    found = [(variant, text) for text in texts for variant in banned() if variant in text]
    assert not found


def test_an_exercise_file_is_a_plain_path_away(tmp_path):
    """exercise_of refuses a file not named as an exercise is."""
    with pytest.raises(Exception, match="not an exercise file"):
        exercise.exercise_of(Path(tmp_path / "my_loop.py"))


def test_a_teacher_sees_who_solved_which_without_collecting_files(capsys, tmp_path, monkeypatch):
    """grade --exercises FOLDER: one folder a student, each file checked as the student's check does."""
    monkeypatch.setattr(sandbox, "run_program", run_here)
    (tmp_path / "alice").mkdir()
    (tmp_path / "bob").mkdir()
    plan = by_number(4)
    (tmp_path / "alice" / authoring.file_name(plan)).write_text(authoring.answered(plan))
    (tmp_path / "bob" / authoring.file_name(plan)).write_text(authoring.answered(plan, plan.wrong[1].edits))
    assert grade.main(["--exercises", str(tmp_path), "--sandbox", "off"]) == 0
    out = capsys.readouterr().out.splitlines()
    others = ["-"] * (len(EXERCISES) - 4)
    assert out[1].split() == ["alice", "-", "-", "-", "x", *others, f"1/{len(EXERCISES)}"]
    assert out[2].split() == ["bob", "-", "-", "-", "o", *others, f"0/{len(EXERCISES)}"]
    assert out[-1].startswith(
        "bob 04: plan([read_file, write_file, read_file, grep]) returned [[0, 1], [2, 3]]"
    )
