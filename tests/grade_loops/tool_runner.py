"""A loop the SDK runs: its beta tool runner, with context management on, and no retries of its own.

The runner keeps the conversation in a server-held thread; a replay cannot hold a thread with
context_management, refuses it as the API documents (thread_unsupported_request), and the runner
falls back to sending the whole history itself. The grader's tests check that this protocol step
is not held against it.
"""

import subprocess
import sys

import anthropic
from anthropic import beta_tool


@beta_tool
def bash(command: str) -> str:
    """Run a shell command in the current folder.

    Args:
        command: the command to run
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30)
    return (done.stdout + done.stderr) or "(no output)"


def main(task: str) -> None:
    client = anthropic.Anthropic(max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="claude-sonnet-5",
        max_tokens=4000,
        tools=[bash],
        messages=[{"role": "user", "content": task}],
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
    )
    for message in runner:
        last = message
    print("".join(block.text for block in last.content if block.type == "text"))


if __name__ == "__main__":
    main(sys.argv[1])
