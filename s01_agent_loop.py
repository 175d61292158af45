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

import anthropic
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import replay

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

console = Console(highlight=False)


# -- tool handlers ---------------------------------------------------------------------------------


def run_bash(command: str, workspace: Path, timeout: int = BASH_TIMEOUT) -> str:
    """Run one shell command in the workspace; report its output and exit code as text."""
    try:
        done = subprocess.run(
            command, shell=True, cwd=workspace, capture_output=True, text=True, timeout=timeout
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


# -- what the reader sees --------------------------------------------------------------------------


def show_turn(turn: int, response: anthropic.types.Message) -> None:
    """One turn: the model's text, then the stop reason and the tokens it cost."""
    console.rule(f"turn {turn}")
    for block in response.content:
        if block.type == "text":
            console.print(f"[bold]model:[/] {escape(block.text)}")
    tokens = f"tokens in {response.usage.input_tokens} / out {response.usage.output_tokens}"
    console.print(f"[dim]stop_reason={response.stop_reason}  {tokens}[/]")


def show_tool(block, output: str, limit: int = 400) -> None:
    """A tool call as it would look in a terminal, its output shortened to stay readable."""
    command = block.input.get("command") if isinstance(block.input, dict) else None
    console.print(escape(f"$ {command}" if command else f"{block.name} {block.input}"), style="cyan")
    shown = output if len(output) <= limit else output[:limit] + f"… ({len(output) - limit} more chars)"
    console.print(shown, markup=False)


def show_summary(turns: list) -> None:
    """A table of every turn: how it ended and what it cost."""
    table = Table(title="summary")
    for column in ("turn", "stop_reason", "tokens in", "tokens out"):
        table.add_column(column)
    for n, response in enumerate(turns, 1):
        table.add_row(
            str(n), response.stop_reason, str(response.usage.input_tokens), str(response.usage.output_tokens)
        )
    table.add_row(
        "total",
        "",
        str(sum(r.usage.input_tokens for r in turns)),
        str(sum(r.usage.output_tokens for r in turns)),
    )
    console.print(table)


# -- the loop --------------------------------------------------------------------------------------


def agent_loop(client: anthropic.Anthropic, messages: list, workspace: Path, model: str = MODEL) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        with console.status("waiting for the model…"):
            response = client.messages.create(
                model=model, system=SYSTEM, tools=TOOLS, messages=messages, max_tokens=MAX_TOKENS
            )
        turns.append(response)
        show_turn(len(turns), response)

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
                show_tool(block, output)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
        messages.append({"role": "user", "content": results})


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    args = replay.make_parser(__doc__, DEFAULT_FIXTURE).parse_args(argv)
    run = None
    try:
        run = replay.start(args, MODEL, "s01_agent_loop")
        console.print(f"[dim]{run.banner}[/]")
        console.print(f"[bold]task:[/] {escape(run.task)}")
        turns = agent_loop(run.client, [{"role": "user", "content": run.task}], run.workspace, run.model)
        show_summary(turns)
        return 0
    except (replay.WorkbookError, anthropic.APIError) as err:
        console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/] — stopped before the next turn; s05 adds keeping the work")
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            console.print(f"[dim]{note}[/]")


if __name__ == "__main__":
    sys.exit(main())
