"""Each exercise is built from its step (workbook/authoring/exercises.py), never written by hand: a file
that no longer matches what its step builds now is stale, and fails here, naming the step. Only the
body a student writes is theirs: a file with a student's body in it is not stale."""

from workbook.authoring import exercises as authoring
from workbook.classroom.exercise_data import EXERCISES

import pytest


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: authoring.file_name(e))
def test_the_exercise_file_is_what_its_step_builds_now(exercise):
    assert authoring.stale(exercise) is None, "rebuild: python -m workbook.authoring.exercises"


def test_a_file_is_stale_when_its_step_changed_around_the_piece(monkeypatch):
    exercise = EXERCISES[0]
    source = authoring.step_source(exercise)
    changed = source.replace("def agent_loop(client: anthropic.Anthropic,", "def agent_loop(client,")
    assert changed != source
    monkeypatch.setattr(authoring, "step_source", lambda e: changed)
    assert "stale" in authoring.stale(exercise)


def test_the_students_own_body_is_not_staleness(tmp_path, monkeypatch):
    exercise = EXERCISES[3]
    monkeypatch.setattr(authoring, "FOLDER", tmp_path)
    (tmp_path / authoring.file_name(exercise)).write_text(authoring.answered(exercise))
    assert authoring.stale(exercise) is None


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: authoring.file_name(e))
def test_every_classic_wrong_answer_is_still_made_from_the_step(exercise):
    for wrong in exercise.wrong:
        assert authoring.answered(exercise, wrong.edits) != authoring.answered(exercise)
