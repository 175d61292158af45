"""The wire format: a recorded response as the bytes the SDK reads, streamed (SSE) or whole."""

from __future__ import annotations

import json
import math
import re
import time
from email.utils import parsedate_to_datetime

import httpx2

# A recorded response's headers are data from a stranger: only those a client reads may be recorded,
# and none of them ever frames the reply (content-length, transfer-encoding, connection are the server's).
READ_HEADERS = ("request-id", "retry-after", "retry-after-ms", "x-should-retry", "content-type")
READ_PREFIXES = ("anthropic-ratelimit-",)
MAX_WAIT = 60  # seconds: a recorded retry-after above it is refused, and replay never hands on a longer one
WAITS = {"retry-after": 1, "retry-after-ms": 1000}  # header -> its units per second


def header_problems(headers) -> list[str]:
    """What is wrong with a recorded response's headers, each naming the header (empty when none)."""
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        return [": must be an object of strings"]
    problems = []
    for name, value in headers.items():
        if not is_read_header(name):
            problems.append(
                f".{name[:40]!r}: not a header a client reads "
                f"({', '.join(READ_HEADERS)}, anthropic-ratelimit-*)"
            )
        elif not value.isprintable() or not value.isascii():
            problems.append(f".{name}: holds a control or non-ASCII character")
        elif name.lower() in WAITS and _wait(name.lower(), value) is None:
            problems.append(f".{name}: must be a number of seconds from 0 to {MAX_WAIT} ({value[:40]!r})")
    return problems


def is_read_header(name: str) -> bool:
    """Whether a response header is one a client reads, and so one a recording keeps."""
    lowered = name.lower()
    token = re.fullmatch(r"[a-z0-9-]+", lowered) is not None  # a header name, nothing a line could break
    return token and (lowered in READ_HEADERS or lowered.startswith(READ_PREFIXES))


def _wait(name: str, value: str) -> float | None:
    """A recorded wait in seconds, when it is a number from 0 to MAX_WAIT; None otherwise (dates too:
    a recorded date is a different wait on every replay, and `Fri, 31 Dec 9999` is forever)."""
    try:
        seconds = float(value) / WAITS[name]
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= MAX_WAIT else None


def client_headers(headers) -> dict:
    """The recorded headers a reply may carry: those a client reads, printable, no wait over MAX_WAIT.

    check refuses anything else; this is the same rule at the moment of replying, for a fixture that
    never went through check (a hand-built one in a test or a notebook)."""
    kept = {}
    for name, value in (headers or {}).items() if isinstance(headers, dict) else ():
        if not isinstance(name, str) or not isinstance(value, str) or not is_read_header(name):
            continue
        if not value.isprintable() or not value.isascii():
            continue
        if name.lower() in WAITS:
            value = _capped_wait(name.lower(), value)
        if value is not None:
            kept[name.lower()] = value
    return kept


def _capped_wait(name: str, value: str) -> str | None:
    seconds = _wait(name, value)
    if seconds is None:
        try:  # an HTTP date: the wait it means now, at most MAX_WAIT
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError, IndexError):
            try:
                seconds = float(value) / WAITS[name]
            except ValueError:
                return None
        if not math.isfinite(seconds):
            seconds = MAX_WAIT
    return f"{min(max(seconds, 0), MAX_WAIT) * WAITS[name]:g}"


def message_body(
    content: list,
    stop_reason: str = "end_turn",
    message_id: str = "msg_replay",
    model: str = "claude-sonnet-5",
    usage: tuple[int, int] = (0, 0),
) -> dict:
    """A Messages API response body: a Message as JSON, its usage (input, output tokens)."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def sse_bytes(events: list[dict]) -> bytes:
    """Server-sent events in the wire format the API streams."""
    return b"".join(
        f"event: {e['event']}\ndata: {json.dumps(e['data'], ensure_ascii=False)}\n\n".encode() for e in events
    )


def message_to_events(message: dict) -> list[dict]:
    """A Message body as the SSE events the API streams for it: start, blocks in deltas, delta, stop."""
    usage = dict(message.get("usage") or {})
    start = {k: v for k, v in message.items() if k not in ("stop_details", "container")}
    start |= {"content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = usage | {"output_tokens": min(1, usage.get("output_tokens", 0))}
    events = [{"event": "message_start", "data": {"type": "message_start", "message": start}}]
    for index, block in enumerate(message.get("content", [])):
        events += _block_events(index, block)
    keys = ["stop_reason", "stop_sequence"] + [k for k in ("stop_details", "container") if k in message]
    delta = {k: message.get(k) for k in keys}
    last = {
        "type": "message_delta",
        "delta": delta,
        "usage": {"output_tokens": usage.get("output_tokens", 0)},
    }
    events += [{"event": "message_delta", "data": last}]
    return events + [{"event": "message_stop", "data": {"type": "message_stop"}}]


def _block_events(index: int, block: dict) -> list[dict]:
    """One content block as content_block_start, its deltas (text, tool input, thinking), stop."""
    kind, deltas = block.get("type"), []
    start = dict(block)
    if kind == "text":
        start["text"] = ""
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block.get("text", ""))]
    elif kind in ("tool_use", "server_tool_use"):
        start["input"] = {}
        raw = json.dumps(block.get("input", {}), ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in _pieces(raw)]
    elif kind == "thinking":
        start |= {"thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": piece} for piece in _pieces(block.get("thinking", ""))
        ]
        deltas += [{"type": "signature_delta", "signature": block.get("signature", "")}]
    elif kind == "compaction":  # the summary and its opaque part come whole, in one delta
        start |= {"content": None, "encrypted_content": None}
        delta = {k: block.get(k) for k in ("content", "encrypted_content")}
        deltas = [{"type": "compaction_delta", **delta}]
    events = [{"event": "content_block_start", "data": {"type": "content_block_start", "index": index}}]
    events[0]["data"]["content_block"] = start
    for delta in deltas:
        data = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append({"event": "content_block_delta", "data": data})
    return events + [{"event": "content_block_stop", "data": {"type": "content_block_stop", "index": index}}]


def _pieces(text: str, size: int = 24) -> list[str]:
    """Text cut into small deltas, the way a stream delivers it a few tokens at a time."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def events_to_message(events: list[dict]) -> dict:
    """The Message a stream of SSE events adds up to; an `error` event gives that error body instead."""
    message, tool_json = None, {}  # tool_json: block index -> partial_json received so far
    for event in events:
        data = event["data"]
        kind = data.get("type", event.get("event"))
        if kind == "error":
            return data
        if kind == "message_start":
            message = json.loads(json.dumps(data["message"])) | {"content": []}
        elif kind == "content_block_start":
            message["content"].append(json.loads(json.dumps(data["content_block"])))
        elif kind == "content_block_delta":
            _apply_delta(message["content"][data["index"]], data["delta"], tool_json, data["index"])
        elif kind == "message_delta":
            message |= data.get("delta", {})
            message["usage"] |= {k: v for k, v in data.get("usage", {}).items() if v is not None}
    if message is None:
        raise ValueError("the stream has no message_start event")
    for index, raw in tool_json.items():
        message["content"][index]["input"] = json.loads(raw) if raw else {}
    return message


def _apply_delta(block: dict, delta: dict, tool_json: dict, index: int) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + delta["text"]
    elif kind == "input_json_delta":
        tool_json[index] = tool_json.get(index, "") + delta["partial_json"]
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + delta["thinking"]
    elif kind == "signature_delta":
        block["signature"] = delta["signature"]
    elif kind == "compaction_delta":
        block |= {k: delta.get(k) for k in ("content", "encrypted_content")}
    elif kind == "citations_delta":
        block["citations"] = (block.get("citations") or []) + [delta["citation"]]


def http_response(response: dict, stream: bool | None = None) -> httpx2.Response:
    """Turn a recorded response into the httpx2 response the SDK will parse.

    `stream` is what the request asked for: a success recorded in the other form is converted (a
    JSON Message to its SSE events, or events to the Message), so one script of responses serves a
    streaming and a non-streaming loop alike. Strict replay has already rejected a `stream` mismatch.
    """
    if response.get("error") == "connect":
        raise httpx2.ConnectError("replayed connection failure")
    if response.get("error") == "timeout":
        raise httpx2.ReadTimeout("replayed read timeout")
    headers = client_headers(response.get("headers"))
    if stream is not None and response.get("status") == 200 and stream != ("stream" in response):
        converted = {"stream": message_to_events(response["body"])} if stream else {}
        response = converted or {"body": events_to_message(response["stream"])}
        response["status"] = 200
        headers.pop("content-type", None)
    if "stream" in response:
        headers.setdefault("content-type", "text/event-stream")
        return httpx2.Response(response["status"], headers=headers, content=sse_bytes(response["stream"]))
    headers.setdefault("content-type", "application/json")
    return httpx2.Response(response["status"], headers=headers, content=json.dumps(response["body"]).encode())


def recorded_message(response: dict) -> dict | None:
    """The Message a recorded response delivers, streamed or not; None for an error or a dropped link."""
    if response.get("status") != 200:
        return None
    message = events_to_message(response["stream"]) if "stream" in response else response.get("body")
    return message if isinstance(message, dict) and message.get("type") == "message" else None


def stop_reason(response: dict) -> str | None:
    """The stop_reason of a recorded response, streamed or not (None for an error or a dropped link)."""
    return (recorded_message(response) or {}).get("stop_reason")
