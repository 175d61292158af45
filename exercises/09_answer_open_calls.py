"""Exercise 9, workbook/later/s09_keep_the_work.py: answer_open_calls()

Never losing the work: after a stop, every open tool_use is answered, so the run goes on.

Write the body of answer_open_calls() below: the piece s09 is about. The rest of the
program is workbook/later/s09_keep_the_work.py itself, which runs with your answer_open_calls() in its place.

Check it:     python -m workbook exercise        (or: python exercises/09_answer_open_calls.py)
A hint:       python -m workbook exercise hint 9   (up to three, each more specific)
Start over:   python -m workbook exercise reset 9
The answer is workbook/later/s09_keep_the_work.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from workbook import conversation
from workbook.conversation import tool_result
from workbook.later.s09_keep_the_work import STILL_OPEN


def answer_open_calls(messages: list) -> bool:
    """After a stop mid-turn, give every tool_use of the last assistant message an is_error result, so
    that the conversation obeys the API's rules again; whether there were any to answer."""
    # TODO: write answer_open_calls()'s body. Check it: python -m workbook exercise
    raise NotImplementedError("exercise 9: answer_open_calls() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
