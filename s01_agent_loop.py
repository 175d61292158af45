"""s01_agent_loop.py — The agent loop: the model asks, the harness acts, the results go back.

A model cannot act: it only writes text. When that text is a `tool_use` block, this harness runs
the command for it, appends the output as a `tool_result`, and asks again, until the model stops
asking. The model remembers nothing between calls: the growing `messages` list is its memory.

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

Run: python s01_agent_loop.py            offline replay of its fixture, no key needed
     python s01_agent_loop.py "task"     live, with ANTHROPIC_API_KEY (bash runs in this folder)
"""

import subprocess
import sys
from pathlib import Path

from workbook import display, launch, scrub, step_cli  # isort: split

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


# -- the tool ---------------------------------------------------------------------------------------


def run_bash(command: str, workspace: Path, timeout: int = BASH_TIMEOUT) -> str:
    """Run one shell command in the workspace; report its output and exit code as text."""
    try:  # no ANTHROPIC_* variable in its environment: a command that prints env cannot leak the key
        done = subprocess.run(
            command,
            shell=True,
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=scrub.tool_environment(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"error: the command timed out after {timeout} s and was stopped"
    output = (done.stdout + done.stderr).strip() or "(no output)"
    return f"{output}\n[exit code {done.returncode}]"


def run_tool(block, workspace: Path) -> str:
    """s01 has one tool; anything else the model asks for is answered with a short error."""
    command = block.input.get("command") if isinstance(block.input, dict) else None
    if block.name != "bash" or not isinstance(command, str):
        return f"error: the only tool is bash, called as {{'command': '...'}}; got {block.name} {block.input}"
    return run_bash(command, workspace)


# -- the loop --------------------------------------------------------------------------------------


def agent_loop(client: anthropic.Anthropic, messages: list, workspace: Path, model: str = MODEL) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        with display.waiting(len(turns) + 1):
            response = client.messages.create(
                model=model, system=SYSTEM, tools=TOOLS, messages=messages, max_tokens=MAX_TOKENS
            )
        turns.append(response)
        display.show_turn(len(turns), response)

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
                output = run_tool(block, workspace)
                display.show_tool(block, output)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
        messages.append({"role": "user", "content": results})


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    args = step_cli.make_parser(__doc__, DEFAULT_FIXTURE).parse_args(argv)
    return step_cli.run_step(args, MODEL, "s01_agent_loop", run_task)


def run_task(run: launch.Run, args) -> int:
    """The task as the first message, the loop, then the summary (s01 has no flags of its own)."""
    turns = agent_loop(run.client, [{"role": "user", "content": run.task}], run.workspace, run.model)
    display.show_summary(turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
