"""s01_agent_loop.py — The agent loop: the model asks, the harness acts.

A model cannot act: it only writes text. When that text is a `tool_use` block,
this harness runs the command, appends the output as a `tool_result` and asks
again, until it stops asking. The growing `messages` list is its memory.

    user task
        |
        v
    +--------------+  stop_reason != tool_use   +------+
    | call model   | -------------------------> | done |
    +--------------+                            +------+
        ^      | tool_use
        |      v
        |  +------------------+
        +--| run bash, answer |   every tool_use id gets one tool_result,
           | each tool_use id |   all in the next user message
           +------------------+

Run: python s01_agent_loop.py          offline replay of its fixture, no key
     python s01_agent_loop.py "task"   live, ANTHROPIC_API_KEY, never asks
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from workbook import display, launch, scrub, step_cli

import anthropic

MODEL = "claude-sonnet-5"
SYSTEM = "You are a coding agent. Use bash to solve tasks. Act, don't explain."
MAX_TOKENS = 8000
BASH_TIMEOUT = 30  # seconds; a command that hangs must not hang the loop
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command in the workspace. Returns stdout, stderr and the exit code.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command to run"}},
            "required": ["command"],
        },
    }
]
DEFAULT_FIXTURE = "fixtures/s01_hello_agent.json"


def run_bash(command: str, workspace: Path) -> str:
    """Run one shell command in the workspace; report its output and exit code as text."""
    with tempfile.TemporaryFile() as out:  # a file, not a pipe: `server &` cannot keep us waiting
        shell = subprocess.Popen(
            command,
            shell=True,
            cwd=workspace,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,  # a command that waits for input gets none, at once
            env=scrub.tool_environment(),  # no secret variable: a command that prints env leaks no key
            start_new_session=True,  # a process group of its own, so all it starts can be stopped
        )
        try:
            shell.wait(BASH_TIMEOUT)
        except subprocess.TimeoutExpired:
            return f"error: the command timed out after {BASH_TIMEOUT} s and was stopped"
        finally:  # done, timed out or Ctrl-C: whatever it started and left running goes too
            with contextlib.suppress(ProcessLookupError):  # its group is empty already
                os.killpg(shell.pid, signal.SIGKILL)
        out.seek(0)
        output = out.read().decode(errors="replace").strip() or "(no output)"
    return f"{output}\n[exit code {shell.returncode}]"


def run_tool(block, workspace: Path) -> str:
    """s01 has one tool; anything else the model asks for is answered with a short error."""
    command = block.input.get("command") if isinstance(block.input, dict) else None
    if block.name != "bash" or not isinstance(command, str):
        return f"error: the only tool is bash, called as {{'command': '...'}}; got {block.name} {block.input}"
    return run_bash(command, workspace)


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings:
    """What the loop is given besides the conversation: where the tools act, and which model answers."""

    workspace: Path
    model: str = MODEL

    @classmethod
    def for_run(cls, run: launch.Run) -> Self:
        """This run's settings: where it acts (a replay's temp copy, or --workspace), and its model."""
        return cls(run.workspace, run.model)


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        with display.waiting(len(turns) + 1):  # the turn's rule on screen, a spinner till the reply
            response = client.messages.create(
                model=settings.model, system=SYSTEM, tools=TOOLS, messages=messages, max_tokens=MAX_TOKENS
            )
        turns.append(response)
        display.show_turn(response)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return turns

        # 4. Run every tool_use and answer each id exactly once, all in one user message.
        results = []
        for block in response.content:
            if block.type == "tool_use":
                output = run_tool(block, settings.workspace)
                display.show_tool(block, output)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
        messages.append({"role": "user", "content": results})


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags every step shares)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s01_agent_loop")
    return step_cli.run_step(parser, argv, MODEL, run_task)


def run_task(run: launch.Run, args) -> int:
    """The task as the first message, the loop, then a table of its turns."""
    messages = [{"role": "user", "content": run.task}]
    turns = agent_loop(run.client, messages, Settings.for_run(run))
    display.show_summary(turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
