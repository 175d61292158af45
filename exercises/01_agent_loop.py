"""Exercise 1, s01_agent_loop.py: agent_loop()

The loop: call the model, append its reply, run each tool_use, answer it, repeat.

Write the body of agent_loop() below: the piece s01 is about. The rest of the
program is s01_agent_loop.py itself, which runs with your agent_loop() in its place.

Check it:     python -m workbook exercise        (or: python exercises/01_agent_loop.py)
A hint:       python -m workbook exercise hint 1   (up to three, each more specific)
Start over:   python -m workbook exercise reset 1
The answer is s01_agent_loop.py: read it once yours passes.

Built from the step by python -m workbook.authoring.exercises: never edit it by hand, but for
the body you write.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the steps, one folder up

from workbook import display

import anthropic

from s01_agent_loop import MAX_TOKENS, SYSTEM, TOOLS, Settings, run_tool


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    # TODO: write agent_loop()'s body. Check it: python -m workbook exercise
    #   The step's stages, in order (one comment each in its code):
    #   1. Send the whole history: the model has no memory of its own between calls.
    #   2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
    #   3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
    #      hold a tool_use whose input is incomplete, and it must never be executed.
    #   4. Run every tool_use and answer each id exactly once, all in one user message.
    raise NotImplementedError("exercise 1: agent_loop() is not written yet")


if __name__ == "__main__":
    from workbook.classroom import exercise

    sys.exit(exercise.check_here(__file__))
