"""The floor a step's replay is measured against: the replay loop a reader would write without the workbook.

`python bench/bare_replay.py fixtures/F.json` copies the fixture's workspace to a temp folder, builds the
real SDK client over `httpx.MockTransport` answering the recorded responses in order (an SSE stream as
the bytes the API sends), and runs the plain loop: call (with the model, limit, system prompt and tools of
the recording's first request), run each tool_use for real (bash with `subprocess.run`, the file tools
with pathlib and `re`), send the results, until the recording ends. It
checks nothing and draws nothing: what a step pays beyond it is the lesson's checks and the terminal.
A recorded error answer is retried at once, as the SDK would after its backoff.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anthropic
import httpx2 as httpx

ROOT = Path(__file__).resolve().parent.parent


def sse(events: list[dict]) -> bytes:
    """A recorded stream as the bytes the API sends: `event:` and `data:` lines, a blank line each."""
    return "".join(f"event: {e['event']}\ndata: {json.dumps(e['data'])}\n\n" for e in events).encode()


def answers(exchanges: list[dict]):
    """An httpx handler that answers each request with the next recorded response."""
    recorded = iter(exchanges)

    def handler(request: httpx.Request) -> httpx.Response:
        response = next(recorded)["response"]
        headers = dict(response.get("headers") or {})
        if "stream" in response:
            return httpx.Response(response["status"], headers=headers, content=sse(response["stream"]))
        return httpx.Response(response["status"], headers=headers, json=response["body"])

    return handler


def run_tool(name: str, data: dict, workspace: Path) -> str:
    """The workbook's tools, as a reader would write them."""
    if name == "bash":
        done = subprocess.run(
            data["command"], shell=True, cwd=workspace, capture_output=True, text=True, timeout=30
        )
        return f"{done.stdout}{done.stderr}\n[exit code {done.returncode}]"
    path = workspace / data.get("path", ".")
    if name == "read_file":
        return path.read_text()
    if name == "write_file":
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"wrote {path.write_text(data['content'])} characters"
    if name == "edit_file":
        path.write_text(path.read_text().replace(data["old_text"], data["new_text"], 1))
        return "edited"
    files = sorted(p for p in workspace.glob(data.get("glob", "**/*")) if p.is_file())
    if name == "grep":
        pattern = re.compile(data["pattern"])
        lines = (
            (f, n, line) for f in files for n, line in enumerate(f.read_text(errors="replace").splitlines())
        )
        return "\n".join(
            f"{f.relative_to(workspace)}:{n + 1}: {line}" for f, n, line in lines if pattern.search(line)
        )
    return "\n".join(str(f.relative_to(workspace)) for f in files)


def answer(block, workspace: Path) -> str:
    """A tool's output, or its error as text: the model reads both."""
    try:
        return run_tool(block.name, block.input, workspace)
    except Exception as err:  # a reader's loop reports what failed and goes on
        return f"error: {err}"


def run(fixture_path: str) -> int:
    fixture = json.loads(Path(fixture_path).read_text())
    exchanges = fixture["exchanges"]
    workspace = Path(tempfile.mkdtemp()) / "workspace"
    shutil.copytree(ROOT / "fixtures" / "workspace" / fixture["workspace"], workspace, symlinks=True)
    http = anthropic.DefaultHttpxClient(transport=httpx.MockTransport(answers(exchanges)))
    client = anthropic.Anthropic(api_key="bench", http_client=http, max_retries=0)
    messages = [{"role": "user", "content": fixture["task"]}]
    # Besides the conversation, a reader's loop sends its model, its limit, its system prompt and the tools
    # it runs (the API answers no tool_use to a request that declares none): here as the recording's first
    # request holds them, so each request is the size of the step's.
    first = exchanges[0].get("request", {}) if exchanges else {}
    request = {key: first[key] for key in ("model", "max_tokens", "system", "tools") if key in first}
    request = {"model": "claude-sonnet-5", "max_tokens": 8000} | request | {"messages": messages}
    try:
        for exchange in exchanges:
            try:
                if "stream" in exchange["response"]:
                    with client.messages.stream(**request) as stream:
                        response = stream.get_final_message()
                else:
                    response = client.messages.create(**request)
            except anthropic.APIError:
                continue  # a recorded error: the next exchange is the retry's answer
            messages.append({"role": "assistant", "content": response.content})
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": answer(b, workspace)}
                for b in response.content
                if b.type == "tool_use"
            ]
            messages.append({"role": "user", "content": results or "go on"})
    finally:
        shutil.rmtree(workspace.parent)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1]))
