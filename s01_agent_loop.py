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
     python s01_agent_loop.py "task"   live, ANTHROPIC_API_KEY; bash runs here
"""

import subprocess
import sys
from pathlib import Path

from workbook import capture, display, launch, scrub, step_cli
from workbook.replay import trust

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
    with capture.Output() as output:  # read as it comes, head and tail kept: `cat` of a huge file is safe
        with subprocess.Popen(
            command,
            shell=True,
            cwd=workspace,
            stdout=output.pipe,
            stderr=output.pipe,
            env=scrub.tool_environment(),  # no ANTHROPIC_* variable: a command that prints env leaks no key
            stdin=subprocess.DEVNULL,
        ) as done:
            output.started()
            try:
                done.wait(timeout)
            except subprocess.TimeoutExpired:
                done.kill()
                return f"error: the command timed out after {timeout} s and was stopped"
    return f"{output.text().strip() or '(no output)'}\n[exit code {done.returncode}]"


def run_tool(block, workspace: Path) -> str:
    """s01 has one tool; anything else the model asks for is answered with a short error."""
    command = block.input.get("command") if isinstance(block.input, dict) else None
    if block.name != "bash" or not isinstance(command, str):
        return f"error: the only tool is bash, called as {{'command': '...'}}; got {block.name} {block.input}"
    if trust.from_stranger(block, workspace):  # s01 has no gate to ask: a replay runs only trusted calls
        return "error: not run: this fixture is not on the trust list, and s01 has no permission gate"
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
