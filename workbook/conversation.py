"""The conversation as data: tool_result blocks, plain JSON, saved and loaded for --resume, and read
back as a few lines of fact for --handoff."""

from __future__ import annotations

import json
from pathlib import Path

from workbook.api.contract import api_rule_problems, messages_problems
from workbook.api.messages import plain
from workbook.errors import WorkbookError
from workbook.files import read_json, write_json
from workbook.paths import ROOT


def tool_result(tool_use_id: str, content: str, is_error: bool = False) -> dict:
    """One tool_result block, as the next user message carries it."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def save_conversation(messages: list, path: Path) -> Path:
    """The messages list as plain JSON, to read after a stop (and, from s09 on, to resume): written
    whole or not at all (a temp file renamed over the old one), the API key scrubbed."""
    return write_json(path, plain(messages))


def repo_path(name: str) -> Path:
    """A file the reader named: as given, or else from the repo root (where the fixtures live)."""
    path = Path(name)
    return path if path.exists() or not (ROOT / name).exists() else ROOT / name


def load_conversation(path: Path) -> list:
    """A saved conversation, checked against the API's rules; any problem is one line saying what to do
    (a folder or a pipe is refused unread, and so is a file of the wrong shape at any depth)."""
    messages = read_json(path, "saved conversation", "give the path a run printed after its stop")
    problems = messages_problems(messages) or api_rule_problems(messages)
    if problems:
        raise WorkbookError(f"{path}: cannot continue this conversation — {problems[0].lstrip('.')}")
    return messages


def context_chars(messages: list) -> int:
    """The size of the conversation in characters of JSON (roughly 4 per token)."""
    return json_chars([m["content"] for m in messages])


def json_chars(value) -> int:
    """The size of a value (a request's system prompt and tools, say) in characters of JSON."""
    return len(json.dumps(plain(value), ensure_ascii=False))


REFUSED = "refused"  # s09 marks a refused assistant turn with this key (its stop_details); never sent


def refusal_note(messages: list) -> str | None:
    """What --resume says when the saved conversation ends on a refused turn, or None."""
    mark = messages[-1].get(REFUSED) if messages and isinstance(messages[-1], dict) else None
    if mark is None:
        return None
    return f"it ends on a turn the model refused{refusal_reason(mark)}; your instruction follows the refusal"


def refusal_reason(details: dict | None) -> str:
    """A refusal's stop_details in a few words: ` (category: explanation)`, or "" when the API gave none."""
    if not details:
        return ""
    return f" ({details.get('category') or 'no category'}: {details.get('explanation') or 'no explanation'})"


def resumable(messages: list) -> tuple[list, str | None]:
    """A saved conversation as the API takes it (s09's refusal mark removed: the API refuses unknown
    keys), and what --resume should say about a refused turn it ends on (None if it does not)."""
    return [{k: v for k, v in m.items() if k != REFUSED} for m in messages], refusal_note(messages)
