"""A plain agent loop, as a student might write it: the anthropic SDK, one bash tool, nothing more.

The grader's tests run it as a correct loop from outside the workbook (it shares no code with the
steps). The SDK reads ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, and retries 429, 5xx and lost
connections by itself (2 retries), honouring retry-after.
"""

import subprocess
import sys

import anthropic

TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command in the current folder.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]


def run_tool(block) -> tuple[str, bool]:
    """Output and whether it failed; a call the loop cannot run is an error the model reads."""
    if block.name != "bash":
        return f"error: there is no tool {block.name!r}; use bash", True
    if not isinstance(block.input.get("command"), str):
        return "error: bash needs a `command` string", True
    done = subprocess.run(block.input["command"], shell=True, capture_output=True, text=True, timeout=30)
    return (done.stdout + done.stderr) or "(no output)", done.returncode != 0


def main(task: str) -> None:
    client = anthropic.Anthropic()
    messages = [{"role": "user", "content": task}]
    while True:
        response = client.messages.create(
            model="claude-sonnet-5", max_tokens=4000, tools=TOOLS, messages=messages
        )
        messages.append({"role": "assistant", "content": response.content})
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
    print("".join(block.text for block in response.content if block.type == "text"))


if __name__ == "__main__":
    main(sys.argv[1])
