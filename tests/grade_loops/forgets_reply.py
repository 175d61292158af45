"""The classic bug: the loop sends the tool results back but never appends the assistant's reply.

Everything else is plain_loop.py's. The API (and the replay server) refuses turn 2: two user
messages in a row, and tool_results that answer no tool_use.
"""

import sys

import anthropic
from plain_loop import TOOLS, run_tool


def main(task: str) -> None:
    client = anthropic.Anthropic()
    messages = [{"role": "user", "content": task}]
    while True:
        response = client.messages.create(
            model="claude-sonnet-5", max_tokens=4000, tools=TOOLS, messages=messages
        )
        # the bug: messages.append({"role": "assistant", "content": response.content}) is missing
        if response.stop_reason != "tool_use":
            break
        results = []
        for block in response.content:
            if block.type == "tool_use":
                output, failed = run_tool(block)
                results.append(
                    {"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": failed}
                )
        messages.append({"role": "user", "content": results})


if __name__ == "__main__":
    main(sys.argv[1])
