"""Exercise 7, workbook/later/s07_really_done.py: next_transition()

Really done? a pause goes on, a refusal ends, the stop hook must pass.

Write the body of next_transition() below: the piece s07 is about. The rest of the
program is workbook/later/s07_really_done.py itself, which runs with your next_transition() in its place.

Check it:     python -m workbook exercise        (or: python exercises/07_next_transition.py)
A hint:       python -m workbook exercise hint 7   (up to three, each more specific)
Start over:   python -m workbook exercise reset 7
The answer is workbook/later/s07_really_done.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from workbook import conversation
from workbook.later.s07_really_done import MAX_PAUSES, HookResult, Recovery

from anthropic.types import Message

import s06_recovery as s06


def next_transition(response: Message, state: Recovery, hook: HookResult | None) -> tuple[str, str]:
    """(transition, why). `hook` is the stop hook's result, if it ran."""
    # TODO: write next_transition()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 7: next_transition() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
