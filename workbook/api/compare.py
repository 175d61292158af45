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
    # roles, the assistant's block types with tool_use ids and names, the tool_results by id.
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
    around them (system-reminder blocks, a note after the results) is its own, and so is the wording of
    the task (a student may give their loop any task: the replies are the recording's whatever it says).
    The turns' roles still pin the task down to the first user turn. `cache_control` and `metadata` are
    never compared (normalize_block drops the first; the second is not in the messages)."""
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
    return None


def _without_system(messages: list) -> list:
    return [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]


def _count_diff(want: list, got: list, expected: int, sent: int) -> str:
    """Name the first recorded turn the loop did not send, when it sent too few (turns are combined)."""
    line = f"expected {expected} messages, got {sent}"
    if (expected, sent) != (len(want), len(got)):
        line += f" (as the API combines consecutive same-role messages: {len(want)} turns, got {len(got)})"
    if len(got) >= len(want):
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
