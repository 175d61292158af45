"""What each client script here shares: the recording's task and tools, and the tools themselves.

The scripts in this folder walk a recording with a client library a class might use (pydantic-ai,
litellm, LangChain, mini-swe-agent) against `python -m workbook serve`. They are not run by the test
suite: the libraries are not the workbook's requirements. To repeat them (docs/teaching.md, "Clients
tried against the classroom"):

    python3 -m venv /tmp/clients && /tmp/clients/bin/pip install -r tests/clients/python/requirements.txt
    python -m workbook serve fixtures/s01_hello_agent.json fixtures/s02_fix_divide_by_zero.json --port 8765 &
    ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=alice \
        /tmp/clients/bin/python tests/clients/python/pydantic_ai_walk.py s02_fix_divide_by_zero

Each script prints one line per tool call and the last reply's text, and exits 0 when the client's run
ended at the recording's end (the server's class table says the same: turn N/N done). Under the grader,
the task comes as the last argument instead of a fixture's name:

    python -m workbook grade --only s01,s02 -- /tmp/clients/bin/python tests/clients/python/litellm_walk.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def recording(name: str) -> dict:
    """The fixture's task, system prompt and tools, as its first recorded request sent them. Under
    `python -m workbook grade` the argument is the rung's task instead: the tools are then s02's (the
    workbook's six), the workspace the folder the grader runs the program in, the fixture the rung's own."""
    path = ROOT / "fixtures" / f"{name}.json"
    if not path.is_file():
        graded = recording("s02_fix_divide_by_zero")
        return graded | {"name": "graded", "task": name, "workspace": None, "model": "claude-sonnet-5"}
    fixture = json.loads(path.read_text())
    first = fixture["exchanges"][0]["request"]
    return {
        "name": name,
        "task": fixture["task"],
        "system": first.get("system", ""),
        "tools": first.get("tools", []),
        "workspace": fixture["workspace"],
        "model": f"replay:{name}",  # how the server is told which fixture (or the x-replay-fixture header)
    }


def workspace(rec: dict) -> Path:
    """A fresh copy of the fixture's workspace: the tools act there (graded: the folder it runs in)."""
    if rec["workspace"] is None:
        return Path.cwd()
    folder = Path(tempfile.mkdtemp(prefix="client-walk-")) / "work"
    shutil.copytree(ROOT / "fixtures" / "workspace" / rec["workspace"], folder)
    return folder


def run_tool(folder: Path, name: str, args: dict) -> tuple[str, bool]:
    """Run one of the recordings' tools in `folder`: (output, is_error)."""
    print(f"  tool {name} {json.dumps(args)[:70]}", file=sys.stderr)
    try:
        if name == "bash":
            done = subprocess.run(
                args["command"], shell=True, cwd=folder, capture_output=True, text=True, timeout=30
            )
            return (done.stdout + done.stderr) or f"(exit {done.returncode})", done.returncode != 0
        if name == "read_file":
            return (folder / args["path"]).read_text(), False
        if name == "write_file":
            (folder / args["path"]).write_text(args["content"])
            return "written", False
        if name == "edit_file":
            path = folder / args["path"]
            text = path.read_text()
            if text.count(args["old_text"]) != 1:
                return "old_text must occur exactly once", True
            path.write_text(text.replace(args["old_text"], args["new_text"]))
            return "edited", False
        if name == "list_files":
            return "\n".join(
                sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
            ), False
        if name == "grep":
            done = subprocess.run(
                ["grep", "-rn", args["pattern"], "."], cwd=folder, capture_output=True, text=True
            )
            return done.stdout or "(no match)", False
    except (KeyError, OSError, subprocess.SubprocessError) as problem:
        return f"error: {problem!r}", True
    return f"error: no tool {name}", True


def settings() -> tuple[str, str]:
    """The server and the student's name, as a student sets them."""
    return os.environ["ANTHROPIC_BASE_URL"], os.environ.get("ANTHROPIC_API_KEY", "student")
