"""Exercise 3, s03_errors.py: call_model()

One retry layer: what may pass is sent again after a wait; a 4xx never.

Write the body of call_model() below: the piece s03 is about. The rest of the
program is s03_errors.py itself, which runs with your call_model() in its place.

Check it:     python -m workbook exercise        (or: python exercises/03_call_model.py)
A hint:       python -m workbook exercise hint 3   (up to three, each more specific)
Start over:   python -m workbook exercise reset 3
The answer is s03_errors.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from collections.abc import Callable

from workbook import display

import anthropic

from s03_errors import MAX_SERVER_WAIT, GaveUp, Retry, given_up, status_of


def call_model(
    send: Callable[..., anthropic.types.Message], retry: Retry, **request
) -> anthropic.types.Message:
    """send(**request), where send calls the model (client.messages.create), sent again after a wait
    each time it fails in a way that may pass, every retry shown; what cannot pass is raised.

    Only model calls are retried (asking again changes nothing). A failed tool call is reported, never
    re-run: it may have deleted something before it failed, and a rerun would delete it twice."""
    # TODO: write call_model()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 3: call_model() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
