"""Exercise 8, workbook/later/s08_full_context.py: collapse()

When the context is full: old tool results collapse to placeholders, every pair whole.

Write the body of collapse() below: the piece s08 is about. The rest of the
program is workbook/later/s08_full_context.py itself, which runs with your collapse() in its place.

Check it:     python -m workbook exercise        (or: python exercises/08_collapse.py)
A hint:       python -m workbook exercise hint 8   (up to three, each more specific)
Start over:   python -m workbook exercise reset 8
The answer is workbook/later/s08_full_context.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from workbook.api.messages import blocks, result_text
from workbook.later.s08_full_context import COLLAPSE_MIN_CHARS, KEEP_RECENT_RESULTS, old_results


def collapse(messages: list, keep: int = KEEP_RECENT_RESULTS) -> None:
    """Replace long old tool_result contents with a placeholder; ids, and so every pair, stay whole."""
    # TODO: write collapse()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 8: collapse() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
