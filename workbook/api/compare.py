"""Comparing a request a loop sent with the recorded one, and saying how they differ."""

from __future__ import annotations

import enum
import json

from workbook.api.contract import combined_messages


class Match(enum.StrEnum):
    """How closely a request must follow its recording: one vocabulary for fixtures (their `match`
    field), the in-process replay, the classroom server and the grader. Each is looser than the one
    before it; where two apply (a replay's and an exchange's), the looser wins."""

    STRICT = "strict"  # the whole request: every block with its text, system, max_tokens, stream, tools
    STRUCTURE = "structure"  # what a live recording can promise: as strict, but no block's text and no system
    # A loop or a client of one's own: what the lesson is about (see conversation_form): the turns and their
    # roles, the assistant's block types with tool_use ids and names, the tool_results by id, the task.
    CONVERSATION = "conversation"

    @classmethod
    def _missing_(cls, value):
        return cls.CONVERSATION if value == "shape" else None  # the name notebooks knew it by

    def looser(self, other: Match | str | None) -> Match:
        """The looser of this match and `other` (None: this one)."""
        order = list(Match)
        return max(self, Match(other or self), key=order.index)


NAMES = tuple(m.value for m in Match)  # what a fixture's `match` may say


def normalize_block(block) -> dict:
    """The parts of a content block that the comparison looks at; absent and null fields dropped."""
    if isinstance(block, str):
        return {"type": "text", "text": block}
    block = {k: v for k, v in block.items() if v is not None and k != "cache_control"}
    if block.get("type") == "tool_result":
        block.setdefault("is_error", False)
        content = block.get("content", "")
        if isinstance(content, list) and all(c.get("type") == "text" for c in content):
            block["content"] = "".join(c["text"] for c in content)
    return block


def normalize_messages(messages: list) -> list[dict]:
    """Messages with string content turned into one text block, so both spellings compare equal."""
    out = []
    for m in messages:
        content = m.get("content")
        blocks = [content] if isinstance(content, str) else content or []
        out.append({"role": m.get("role"), "content": [normalize_block(b) for b in blocks]})
    return out


def combined_form(messages: list) -> list[dict]:
    """The conversation as the API reads it, so that equal conversations compare equal: what a request
    is compared with its recording on.

    Consecutive same-role messages are one turn (the API combines them); a turn's leading tool_results
    are put in tool_use_id order (the API pairs them by id)."""
    out = []
    for turn in normalize_messages(combined_messages(messages)):
        blocks = turn["content"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results and blocks[: len(results)] == results:
            blocks[: len(results)] = sorted(results, key=lambda b: str(b.get("tool_use_id")))
        out.append(turn)
    return out


def conversation_form(messages: list) -> list[dict]:
    """The conversation as the lesson reads it (Match.CONVERSATION): what a client adds around it left out.

    `role: "system"` messages are dropped (the API takes them mid-conversation; they are the client's
    instructions, not a turn), and a user turn keeps only its tool_result blocks: the text a client puts
    around them (system-reminder blocks, a note after the results) is its own. The task is compared apart
    (task_diff): the recorded task's text must stand, word for word, in one of the first user turn's text
    blocks. `cache_control`
    and `metadata` are never compared (normalize_block drops the first; the second is not in the messages)."""
    turns = combined_form(_without_system(messages))
    for turn in turns:
        if turn["role"] == "user":
            turn["content"] = [b for b in turn["content"] if b.get("type") == "tool_result"]
    return turns


def request_diff(expected: dict, actual: dict, match: Match | str = Match.STRICT) -> str | None:
    """A readable explanation of how `actual` differs from the recorded request, or None (see Match)."""
    match = Match(match)
    if expected["messages"] != actual.get("messages"):  # equal messages are equal by every match
        problem = _messages_diff(expected["messages"], actual.get("messages", []), match)
        if problem:
            return problem
    if match is Match.CONVERSATION:
        return None
    for key in ("system", "max_tokens", "stream"):
        if expected.get(key) != actual.get(key) and not (match is Match.STRUCTURE and key == "system"):
            return f"{key}: expected {_short(expected.get(key))}, got {_short(actual.get(key))}"
    if _tool_names(expected) != _tool_names(actual):
        return f"tools: expected {_tool_names(expected)}, got {_tool_names(actual)}"
    return None


def _messages_diff(expected: list, actual: list, match: Match) -> str | None:
    if match is Match.CONVERSATION:
        expected, actual = (_without_system(m) for m in (expected, actual))
        want, got = conversation_form(expected), conversation_form(actual)
    else:
        want, got = combined_form(expected), combined_form(actual)
    if len(want) != len(got):
        return _count_diff(want, got, len(expected), len(actual))
    for i, (w, g) in enumerate(zip(want, got)):
        if w["role"] != g["role"]:
            return f"messages[{i}] should come from the {w['role']}, got {g['role']}"
        if len(w["content"]) != len(g["content"]):
            return f"messages[{i}]: expected {len(w['content'])} content blocks, got {len(g['content'])}"
        for j, (wb, gb) in enumerate(zip(w["content"], g["content"])):
            problem = _block_diff(wb, gb, match)
            if problem:
                return f"messages[{i}].content[{j}]: {problem}"
    return task_diff(expected, actual) if match is Match.CONVERSATION else None


def task_diff(expected: list, actual: list) -> str | None:
    """How the first user turn misses the recorded task (Match.CONVERSATION), or None.

    The recorded task is the text of the recording's first user turn (its text blocks: a string content
    is one). Each must stand word for word in one of the sent first user turn's text blocks: a client may
    wrap it in its own words (mini-swe-agent sends "Please solve this issue: <task>\n\nYou can execute
    bash commands…"), and any other text block there (a client's reminders) is the client's own. The
    replies answer that task: a request with another one would be taught replies that do not fit it."""
    want, got = (first_user_texts(m) for m in (expected, actual))
    for task in want:
        if task and not any(task in text for text in got):
            return (
                f"messages[0]: your first user turn does not carry the recorded task; send {quoted(task)} "
                "as the task (a text block of its own, as the recording does)"
            )
    return None


def recorded_task(fixture: dict) -> str:
    """The task a recording's replies answer (its first request's first user text), on one line."""
    return " / ".join(first_user_texts(fixture["exchanges"][0]["request"]["messages"]))


def first_user_texts(messages: list) -> list[str]:
    """The trimmed text blocks of the first user turn (a string content is one block)."""
    first = next((t for t in combined_form(messages) if t["role"] == "user"), None)
    blocks = first["content"] if first else []
    return [b["text"].strip() for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]


def quoted(text: str, limit: int = 100) -> str:
    """Text quoted on one printable line: control and other unprintable characters escaped, long text cut."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return f'"{shown}"' if len(shown) <= limit else f'"{shown[: limit - 1]}…" ({len(text)} characters)'


def _without_system(messages: list) -> list:
    return [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]


def _count_diff(want: list, got: list, expected: int, sent: int) -> str:
    """Name the first recorded turn the loop did not send, when it sent too few (turns are combined)."""
    line = f"expected {expected} messages, got {sent}"
    if (expected, sent) != (len(want), len(got)):
        line += f" (as the API combines consecutive same-role messages: {len(want)} turns, got {len(got)})"
    if len(got) > len(want):
        split = first_turn_of_other_blocks(want, got)
        return line + (f" — {split}" if split else "")
    if len(got) == len(want):
        return line
    k = next((i for i, (w, g) in enumerate(zip(want, got)) if w["role"] != g["role"]), len(got))
    missing = want[k]
    kinds = ", ".join(sorted({b.get("type", "?") for b in missing["content"]})) or "text"
    hint = (
        "the assistant turn was not appended"
        if missing["role"] == "assistant"
        else "the tool results were not appended"
    )
    return f"{line} — missing messages[{k}] ({missing['role']}: {kinds}): {hint}"


def first_turn_of_other_blocks(want: list, got: list) -> str | None:
    """The first turn, in the same role, whose blocks are not the recorded ones: where a client that splits
    one assistant turn into several (one tool_use each, each answered apart) first parted from it."""
    for k, (w, g) in enumerate(zip(want, got)):
        if w["role"] != g["role"]:
            return None
        if block_types(w) != block_types(g):
            return f"messages[{k}]: expected {block_types(w)}; got {block_types(g)}"
    return None


def block_types(turn: dict) -> str:
    """A turn's blocks by type, in order: "text, tool_use, tool_use"."""
    return ", ".join(str(block.get("type", "?")) for block in turn["content"]) or "no blocks"


def _block_diff(want: dict, got: dict, match: Match) -> str | None:
    """How one content block differs: type first, then ids, then (strict) everything else."""
    if want.get("type") != got.get("type"):
        return f"expected a {want.get('type')} block, got {got.get('type')}"
    keys = {"tool_use": ("id", "name"), "tool_result": ("tool_use_id", "is_error")}.get(want["type"], ())
    if (
        match is Match.CONVERSATION
    ):  # a student's tools may fail where the recording's did not: is_error is theirs
        keys = tuple(k for k in keys if k != "is_error")
    if match is Match.STRICT:
        keys = sorted(set(want) | set(got))
    for key in keys:
        if want.get(key) != got.get(key):
            return f"{key} expected {_short(want.get(key))}, got {_short(got.get(key))}"
    return None


def _tool_names(body: dict) -> list[str]:
    return [t.get("name") for t in body.get("tools", [])]


def _short(value, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 20] + f"… ({len(text)} chars)"
