"""workbook/classroom/exercise_tables.py: the unit checks an exercise runs after the grader's rungs —
a table of cases the step's own piece meets, and the first row a wrong piece gets wrong, in words. The
exercises themselves, checked end to end, are in test_exercise.py."""

from workbook.classroom import exercise, exercise_tables
from workbook.classroom.exercise_data import EXERCISES

import pytest


def by_number(n: int):
    return next(e for e in EXERCISES if e.number == n)


@pytest.mark.parametrize("n", [e.number for e in EXERCISES if e.table])
def test_the_steps_own_piece_meets_every_row_of_its_unit_checks(n):
    ex = by_number(n)
    step = exercise.step_of(ex)
    own = getattr(exercise.holder(ex, step), ex.piece)
    assert exercise_tables.first_mistake(ex.table, own, step) is None


def test_every_unit_check_belongs_to_an_exercise():
    assert sorted(exercise_tables.TABLES) == sorted(e.table for e in EXERCISES if e.table)


def test_a_truth_table_names_the_row_a_wrong_piece_gets_wrong():
    import s06_recovery as s06

    said = exercise_tables.first_mistake("s06_next_transition", lambda *args: ("done", "no"), s06)
    assert said.startswith("the model asked for tools (stop_reason tool_use, a fresh state)")
    assert "returned 'done'; the step's is 'next_turn'" in said


def test_s07s_truth_table_hands_next_transition_the_stop_hooks_result():
    from workbook.later import s07_really_done as s07

    ignored = exercise_tables.first_mistake(
        "s07_next_transition", lambda r, s, hook: s07.next_transition(r, s, None), s07
    )
    assert ignored.startswith(
        "ended, the stop hook failed (stop_reason end_turn, a fresh state, the stop hook"
    )
    assert "returned 'done'; the step's is 'hook_retry'" in ignored
    always = exercise_tables.first_mistake(
        "s07_next_transition",
        lambda r, s, hook: ("hook_retry", "") if hook else s07.next_transition(r, s, hook),
        s07,
    )
    assert always.startswith(
        "ended, the stop hook passed (stop_reason end_turn, a fresh state, the stop hook passed)"
    )
