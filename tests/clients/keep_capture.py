"""keep_capture.py — one request from a capture_proxy.py log, scrubbed, kept as test data.

    python tests/clients/keep_capture.py LOG.jsonl N OUT.json --workspace DIR --home DIR \\
        --client "Claude Code 2.1.197" --how "claude --model opus -p TASK" --fixture s01_hello_agent \\
        --kind conversation --turn 1 --refused "..." --rule "..."

N counts the log's requests from 1. What is kept in OUT.json (tests/classroom/clients/*.json):
  - the method, the path and the headers a rule can depend on (anthropic-beta, anthropic-version, the
    SDK's x-stainless-* names of itself); session ids, the key, the machine's runtime are left out;
  - the body, with the run's folders written as a student's (/home/student/<workspace>), the
    metadata's device and session ids zeroed, and long prose cut (a system prompt, a reminder,
    a tool's description keeps its start and says how much was cut): the
    comparison and the contract never read that prose, and the kept files stay small;
  - what the capture shows: which rule of the workbook refuses the request today (`refused`, the
    server's own words) and what the rule should be (`rule`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date
from pathlib import Path

KEPT_HEADERS = ("anthropic-beta", "anthropic-version", "content-type", "user-agent", "x-app",
                "x-stainless-helper", "x-stainless-lang", "x-stainless-package-version",
                "x-stainless-retry-count")  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
CUT = 600  # characters of prose kept whole
ZERO_DEVICE = "0" * 64
ZERO_SESSION = "00000000-0000-4000-8000-000000000000"


def cut(text: str, keep: int = CUT) -> str:
    if len(text) <= keep:
        return text
    return text[: keep // 2] + f"… [{len(text) - keep // 2} characters cut]"


def scrub_text(text: str, places: dict[str, str]) -> str:
    for old, new in places.items():
        text = text.replace(old, new)
    return text


def scrubbed(value, places: dict[str, str], key: str = ""):
    """The value with the run's folders replaced, and long prose (system texts, descriptions) cut."""
    if isinstance(value, dict):
        out = {k: scrubbed(v, places, k) for k, v in value.items()}
        if isinstance(out.get("user_id"), str) and out["user_id"].startswith("{"):
            out["user_id"] = zeroed_user_id(out["user_id"])
        return out
    if isinstance(value, list):
        return [scrubbed(v, places, key) for v in value]
    if isinstance(value, str):
        text = scrub_text(value, places)
        if key == "description":
            return cut(text, 100)
        if key in ("text", "content"):
            return cut(text)
        return text
    return value


def zeroed_user_id(user_id: str) -> str:
    """Claude Code's metadata.user_id is JSON in a string: its device and session ids, zeroed."""
    try:
        parts = json.loads(user_id)
    except ValueError:
        return "<user_id>"
    zeroed = {"device_id": ZERO_DEVICE, "session_id": ZERO_SESSION}
    parts = {k: zeroed.get(k, v) for k, v in parts.items()}
    return json.dumps(parts, separators=(",", ":"))


def folder_places(workspace: str, home: str, name: str) -> dict[str, str]:
    """The run's folders -> a student's: the path itself and Claude Code's dashed form of it."""
    student_ws, student_home = f"/home/student/{name}", "/home/student"
    dashed = lambda p: re.sub(r"[^A-Za-z0-9]", "-", p)  # noqa: E731
    return {
        workspace: student_ws,
        dashed(workspace): dashed(student_ws),
        home: student_home,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("n", type=int)
    parser.add_argument("out")
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--home", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--how", required=True)
    parser.add_argument("--fixture", required=True)
    parser.add_argument("--kind", required=True)
    parser.add_argument("--turn", type=int)
    parser.add_argument("--refused", default="")
    parser.add_argument("--rule", default="")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in Path(args.log).read_text().splitlines() if line.strip()]
    posts = [r for r in records if r["method"] == "POST"]
    record = posts[args.n - 1]
    name = json.loads((ROOT / "fixtures" / f"{args.fixture}.json").read_text())["workspace"]
    places = folder_places(args.workspace, args.home, name)
    source = "captured by tests/clients/capture_proxy.py, before `python -m workbook serve`"
    kept = {
        "client": args.client,
        "how": args.how,
        "fixture": args.fixture,
        "kind": args.kind,
        "source": f"{source}, {date.today()}",
        "turn": args.turn,
        "refused": args.refused,
        "rule": args.rule,
        "method": record["method"],
        "path": record["path"],
        "headers": {k: v for k, v in record["headers"].items() if k in KEPT_HEADERS},
        "body": scrubbed(record["body"], places),
    }
    Path(args.out).write_text(json.dumps(kept, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
