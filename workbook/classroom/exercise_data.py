"""exercise_data.py — the exercises, one entry a step: which piece of the step the student writes, how it is
checked, its hints, and the classic wrong answers, each with the hint that fits it. The table lives in
exercises.toml beside this module, as data a teacher reads and edits; this module holds its two shapes
(Exercise, Wrong) and reads it into EXERCISES and BY_NUMBER.

An entry holds no code of the step's. Its piece is named by function: the authoring tool
(workbook/authoring/exercises.py) cuts it out of the step to write exercises/NN_<piece>.py, and the
checker (workbook/classroom/exercise.py) runs the step with the student's piece in its place, up the
grader's rungs, then through any unit check the idea needs. A classic wrong answer is made from the
step's own piece by a few edits (old text -> new text), so the tests can show each fails with its own
hint, whatever the step looks like today.

Every text comes in English and in Chinese ("zh-CN"); the Chinese follows docs/glossary.zh-CN.md.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

LANGS = ("en", "zh-CN")
TABLE = Path(__file__).with_name("exercises.toml")


@dataclass(frozen=True)
class Wrong:
    """A classic wrong answer: how it is made from the step's piece, and how its failure is told apart."""

    what: dict  # lang -> what the wrong answer does, in a few words
    edits: tuple  # (old, new) pairs, applied in turn to the step's piece (each `old` must be there)
    says: str  # a regular expression the first mistake's reason matches when it is this wrong answer
    hint: dict  # lang -> the hint for it


@dataclass(frozen=True)
class Exercise:
    """One exercise: the step's piece the student writes, and how it is checked."""

    number: int
    step: str  # the step's module, e.g. "s06_recovery"
    piece: str  # the step's function the student writes (cut out by name: no marker in the step)
    about: dict  # lang -> the step's idea, one line
    rungs: tuple = ()  # the grader's rungs (workbook/classroom/ladder.py) the step runs up, piece swapped
    args: tuple = ()  # flags the step is started with on the rungs
    replays: tuple = ()  # the step's own fixtures, replayed with the piece swapped (its --replay)
    table: str | None = (
        None  # its unit checks, by name: a truth table, or small conversations (exercise_tables)
    )
    hints: dict | None = None  # lang -> three hints, each more specific
    wrong: tuple = ()
    owner: str | None = None  # the step's class the piece is a method of ("Trace"), or None: a function

    @property
    def qualified(self) -> str:
        """The piece as the step names it: `collapse`, or `Trace.first_new` for a method."""
        return f"{self.owner}.{self.piece}" if self.owner else self.piece


def load_wrong(entry: dict) -> Wrong:
    """A [[exercise.wrong]] table as a Wrong: its edits as (old, new) tuples."""
    edits = tuple(tuple(pair) for pair in entry["edits"])
    return Wrong(entry["what"], edits, entry["says"], entry["hint"])


def load_exercise(entry: dict) -> Exercise:
    """An [[exercise]] table as an Exercise: its arrays as tuples, its wrong answers as Wrong."""
    arrays = {name: tuple(entry[name]) for name in ("rungs", "args", "replays") if name in entry}
    wrongs = tuple(load_wrong(each) for each in entry.get("wrong", ()))
    return Exercise(**(entry | arrays | {"wrong": wrongs}))


EXERCISES = [load_exercise(entry) for entry in tomllib.loads(TABLE.read_text(encoding="utf-8"))["exercise"]]

BY_NUMBER = {exercise.number: exercise for exercise in EXERCISES}
