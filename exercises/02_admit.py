"""Exercise 2, s02_tools.py: admit()

Tools as data: an unknown tool or a bad input is refused before anything runs.

Write the body of admit() below: the piece s02 is about. The rest of the
program is s02_tools.py itself, which runs with your admit() in its place.

Check it:     python -m workbook exercise        (or: python exercises/02_admit.py)
A hint:       python -m workbook exercise hint 2   (up to three, each more specific)
Start over:   python -m workbook exercise reset 2
The answer is s02_tools.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

import json

import fastjsonschema

from s02_tools import REGISTRY, Person, gate


def admit(block, permission: str, ask: Person | None) -> tuple[str, str | None]:
    """Everything checked before a tool runs: (decision for the audit log, refusal or None)."""
    # TODO: write admit()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 2: admit() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
