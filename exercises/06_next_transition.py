"""Exercise 6, s06_recovery.py: next_transition()

A reply cut short is sent again, never run: name the transition after each call.

Write the body of next_transition() below: the piece s06 is about. The rest of the
program is s06_recovery.py itself, which runs with your next_transition() in its place.

Check it:     python -m workbook exercise        (or: python exercises/06_next_transition.py)
A hint:       python -m workbook exercise hint 6   (up to three, each more specific)
Start over:   python -m workbook exercise reset 6
The answer is s06_recovery.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from anthropic.types import Message

from s06_recovery import ESCALATED_MAX_TOKENS, MAX_CONTINUATIONS, Recovery


def next_transition(response: Message, state: Recovery) -> tuple[str, str]:
    """(transition, why): the loop's next move (next_turn, escalate, continue, done or fail), from how the
    call ended and what recovery has tried already."""
    # TODO: write next_transition()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 6: next_transition() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
