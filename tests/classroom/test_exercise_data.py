"""workbook/classroom/exercise_data.py: the exercises, read from exercises.toml into Exercise and Wrong."""

import re
import tomllib

from workbook import paths
from workbook.classroom.exercise_data import BY_NUMBER, EXERCISES, TABLE, Exercise, Wrong, load_exercise

import pytest


def test_the_table_holds_one_exercise_a_step_in_number_order():
    assert [e.number for e in EXERCISES] == list(range(1, len(paths.STEPS) + 1))
    assert [e.step for e in EXERCISES] == list(paths.STEPS)
    assert all(BY_NUMBER[e.number] is e for e in EXERCISES)


def test_arrays_come_back_as_tuples_and_wrong_answers_as_wrong():
    for exercise in EXERCISES:
        assert all(
            isinstance(getattr(exercise, name), tuple) for name in ("rungs", "args", "replays", "wrong")
        )
        for wrong in exercise.wrong:
            assert isinstance(wrong, Wrong) and isinstance(wrong.edits, tuple)
            assert all(isinstance(pair, tuple) and len(pair) == 2 for pair in wrong.edits)
            re.compile(wrong.says)  # a pattern the checker matches a reason against


def test_a_field_left_out_of_the_table_takes_its_default():
    raw = {entry["number"]: entry for entry in tomllib.loads(TABLE.read_text(encoding="utf-8"))["exercise"]}
    for number, exercise in BY_NUMBER.items():
        for name in ("table", "owner", "args", "replays"):
            if name not in raw[number]:
                assert getattr(exercise, name) == Exercise.__dataclass_fields__[name].default


def test_an_entry_is_built_with_tuples_and_a_misspelt_field_is_refused_not_ignored():
    entry = {"number": 99, "step": "s01_agent_loop", "piece": "agent_loop", "about": {"en": "x"}}
    wrong = {"what": {"en": "w"}, "edits": [["a", "b"]], "says": "r", "hint": {"en": "h"}}
    built = load_exercise(entry | {"rungs": ["loop"], "wrong": [wrong]})
    assert built.rungs == ("loop",) and built.wrong == (Wrong({"en": "w"}, (("a", "b"),), "r", {"en": "h"}),)
    with pytest.raises(TypeError, match="hint"):
        load_exercise(entry | {"hint": "a typo for hints"})
