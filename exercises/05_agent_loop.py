"""Exercise 5, s05_budget.py: agent_loop()

Knowing when to stop: every limit checked before paying for the next call.

Write the body of agent_loop() below: the piece s05 is about. The rest of the
program is s05_budget.py itself, which runs with your agent_loop() in its place.

Check it:     python -m workbook exercise        (or: python exercises/05_agent_loop.py)
A hint:       python -m workbook exercise hint 5   (up to three, each more specific)
Start over:   python -m workbook exercise reset 5
The answer is s05_budget.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from workbook import display

import anthropic

from s01_agent_loop import MAX_TOKENS
from s02_tools import TOOLS
from s03_errors import call_model
from s05_budget import RepeatBrake, Settings, run_tools, stopped


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or a
    limit or the repeat brake stops it (settings.budget.reason says which)."""
    # TODO: write agent_loop()'s body. Check it: python -m workbook exercise
    #   The step's stages, in order (one comment each in its code):
    #   0. (new in s05) Before paying for another call, check every limit: the first one reached
    #      ends the run, and the conversation is whole (it ends on the last turn's tool results).
    #   1. Send the whole history: the model has no memory of its own between calls.
    #      call_model() retries what may pass and raises what cannot (s03).
    #   2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
    #   3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
    #      hold a tool_use whose input is incomplete, and it must never be executed.
    #   4. Run the tool calls as s04 does, each id answered once, in order, in one user message.
    #      (new in s05) The brake answers the calls it holds back; asked again, it stops the run.
    raise NotImplementedError("exercise 5: agent_loop() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
