"""Exercise 10, workbook/later/s10_trace.py: first_new()

A trace: each model_call line logs only the messages new since the line before.

Write the body of first_new() below: the piece s10 is about. The rest of the
program is workbook/later/s10_trace.py itself, which runs with your first_new() in its place.
It is a method of the step's Trace: `self` is the Trace the step made.

Check it:     python -m workbook exercise        (or: python exercises/10_first_new.py)
A hint:       python -m workbook exercise hint 10   (up to three, each more specific)
Start over:   python -m workbook exercise reset 10
The answer is workbook/later/s10_trace.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up


def first_new(self, messages: list) -> int:
    """Where `messages` stop being the ones logged last. A loop mostly appends: then every logged
    message is still there, and the new ones start after them. s08's collapse and compaction rewrite
    the history in place: then it is the first message that is not the one logged."""
    # TODO: write first_new()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 10: first_new() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
