"""Exercise 4, s04_parallel.py: plan()

Reads together, writes one at a time, in the order asked.

Write the body of plan() below: the piece s04 is about. The rest of the
program is s04_parallel.py itself, which runs with your plan() in its place.

Check it:     python -m workbook exercise        (or: python exercises/04_plan.py)
A hint:       python -m workbook exercise hint 4   (up to three, each more specific)
Start over:   python -m workbook exercise reset 4
The answer is s04_parallel.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from s04_parallel import reads_only


def plan(blocks: list) -> list[list[int]]:
    """The calls' indexes, grouped in order: a run of reads is one group; any other call is alone."""
    # TODO: write plan()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 4: plan() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
