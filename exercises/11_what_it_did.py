"""Exercise 11, workbook/later/s11_handoff.py: what_it_did()

A fresh session: what the old one did, read from its calls and results, not its words.

Write the body of what_it_did() below: the piece s11 is about. The rest of the
program is workbook/later/s11_handoff.py itself, which runs with your what_it_did() in its place.

Check it:     python -m workbook exercise        (or: python exercises/11_what_it_did.py)
A hint:       python -m workbook exercise hint 11   (up to three, each more specific)
Start over:   python -m workbook exercise reset 11
The answer is workbook/later/s11_handoff.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from workbook.api.messages import blocks, result_text
from workbook.later.s09_keep_the_work import clipped
from workbook.later.s11_handoff import WRITES, call_label, last_words, listed


def what_it_did(messages: list) -> str:
    """A saved conversation as a few lines of fact, read by the harness from its tool calls and their
    results, never from what the model said about them (that is what drifted): the files it changed,
    the commands it ran and how each ended, the calls that failed or were refused; and, marked as
    the model's own, its last words."""
    # TODO: write what_it_did()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 11: what_it_did() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
