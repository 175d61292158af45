"""compaction — a client's compaction request, answered by a replay as the API answers it.

With the beta `compact-2026-09-04`, a request carrying `compaction: {"type": "summarize"}` asks for no
turn: the API answers with a Message holding one `compaction` block (stop_reason "compaction"), and
a later request sends that block first in `messages`, in place of the messages it summarizes. The
SDK's tool runner sends one after `compact_before_next_turn()` (anthropic 2.17,
`lib/tools/_beta_runner.py`), then carries on from the block.

A recording holds no summary, and a compaction is no turn of the lesson. So replay answers one by
itself: the block's `content` says what it is, and its `encrypted_content` (which the API documents
as opaque, to be sent back verbatim) carries the compacted messages themselves. A later request that
sends the block back is judged with those messages in its place: the history the client really kept,
as the model would read it. The block's `signature` is a checksum of the two, so a block changed on
the way back is refused, as the API refuses a block whose signature does not match.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import zlib

from workbook.api import wire
from workbook.api.contract import COMPACTION_BETA, Problem

BETA = COMPACTION_BETA  # the anthropic-beta value a compaction request needs
MARK = "replay-compaction-1:"  # how a block this replay made begins its encrypted_content
MOST_BYTES = 32 * 2**20  # the most a block's messages may unpack to: the API's own limit on a request


def is_request(body: dict) -> bool:
    """Whether a request asks for a compaction rather than a turn."""
    return body.get("compaction") is not None


def answer(body: dict, messages: list) -> dict:
    """The Message the API answers a compaction request with: one `compaction` block, standing for
    `messages` (the whole conversation the request sent), and no turn sampled after it."""
    packed = MARK + base64.b64encode(zlib.compress(json.dumps(messages).encode())).decode("ascii")
    summary = (
        f"(replay) The {len(messages)} messages before this point, kept whole: a recording holds no "
        "summary, so the replay server puts them back when this block is sent again."
    )
    block = {"type": "compaction", "content": summary, "encrypted_content": packed}
    block["signature"] = checksum(summary, packed)
    model = body.get("model") if isinstance(body.get("model"), str) else "replay"
    return wire.message_body([block], "compaction", "msg_replay_compaction", model)


def checksum(content, packed) -> str:
    return hashlib.sha256(json.dumps([content, packed]).encode()).hexdigest()


def expand(messages: list) -> list | Problem:
    """The conversation with a compaction block this replay made, sent first as the API documents, put
    back as the messages it stands for; unchanged when there is none; a Problem when a block of ours came
    back changed. Only the first message is looked at: a long conversation costs nothing more."""
    found = first_block(messages)
    if found is None:
        return messages
    i, j, block = found
    packed = block.get("encrypted_content")
    kept = unpack(packed) if checksum(block.get("content"), packed) == block.get("signature") else None
    if kept is None:
        return Problem(
            f"messages.{i}.content.{j}",
            "this compaction block is not as the API sent it: send it back unchanged (its signature "
            "covers its content and encrypted_content)",
        )
    after = messages[i]["content"][j + 1 :]
    rest = [{"role": "assistant", "content": after}] if after else []
    return kept + rest + messages[i + 1 :]


def first_block(messages: list) -> tuple[int, int, dict] | None:
    """(0, block, the block) of the last compaction block of ours in the first message, or None."""
    content = messages[0].get("content") if messages and isinstance(messages[0], dict) else None
    blocks = content if isinstance(content, list) else []
    for j in range(len(blocks) - 1, -1, -1):
        block = blocks[j]
        if isinstance(block, dict) and block.get("type") == "compaction" and ours(block):
            return 0, j, block
    return None


def ours(block: dict) -> bool:
    packed = block.get("encrypted_content")
    return isinstance(packed, str) and packed.startswith(MARK)


def unpack(packed: str) -> list | None:
    """The messages a block of ours carries; None when they do not unpack to a list of messages
    (bounded: a small block may not unpack to more than a request may hold)."""
    try:
        data = base64.b64decode(packed[len(MARK) :], validate=True)
        inflate = zlib.decompressobj()
        text = inflate.decompress(data, MOST_BYTES)
        if inflate.unconsumed_tail:
            return None
        messages = json.loads(text)
    except (binascii.Error, zlib.error, ValueError, RecursionError):
        return None
    return messages if isinstance(messages, list) and all(isinstance(m, dict) for m in messages) else None
