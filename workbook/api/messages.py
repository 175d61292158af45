"""A conversation's messages as plain JSON: what every reader of a request or a reply needs.

plain(value)           SDK objects, at any depth, as the JSON the API would send
blocks(message)        a message's content as a list of blocks (a string is one text block)
result_text(block)     a tool_result's content as text
common_prefix(a, b)    how many messages two lists start with alike
"""

from __future__ import annotations


def plain(value):
    """SDK objects, in lists and dicts at any depth, as the plain JSON the API would send. Plain JSON
    is known first, so that a conversation with no SDK object in it never needs the SDK loaded."""
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float):
        return value
    import anthropic

    if isinstance(value, anthropic.BaseModel):
        return value.to_dict(mode="json")
    return value


def blocks(message: dict) -> list[dict]:
    """A message's content as a list of plain blocks, whether a string, dicts or the SDK's objects."""
    content = plain(message["content"])
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def result_text(block: dict) -> str:
    """A tool_result's content as text: a string as it is, else its blocks one per line (a block that
    is not text as [its type])."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n".join(
        p["text"] if isinstance(p.get("text"), str) else f"[{p.get('type')}]"
        for p in parts
        if isinstance(p, dict)
    )


def common_prefix(before: list, after: list) -> int:
    """How many messages `after` starts with that `before` holds, in order. A loop that only appends
    meets the first test (one C-level comparison); one that rewrote its history is scanned."""
    if after[: len(before)] == before:
        return len(before)
    kept = 0
    for a, b in zip(before, after):
        if a != b:
            break
        kept += 1
    return kept
