"""replay.py — the plumbing every step shares: build the client, load and check fixtures, replay.

Nothing here is lesson. A step script calls it the same way every time:

    args = replay.make_parser(__doc__, DEFAULT_FIXTURE).parse_args()
    run = replay.start(args, model=MODEL)       # live, replay or record, chosen from args + env
    agent_loop(run.client, [{"role": "user", "content": run.task}], workspace=run.workspace)

Replay is the real `anthropic.Anthropic` client with a mock HTTP transport underneath, so the SDK's
own request building, parsing, typed objects, retries and SSE streaming all run as they would live.
The transport serves the recorded responses in order and compares every request the loop sends
with the recorded one: a loop that breaks the conversation stops at the turn it broke, with a diff.
A loop with its own prompt and tools (the SDK's tool runner, a student's) replays with
`replay_client(..., match="shape")`; server-held threads are served in every mode (threads.py).

Command line (for fixture authors and teachers):
    python replay.py check fixtures/*.json     check fixtures against the format and the API's rules
    python replay.py rebuild FIXTURE           re-run a scripted fixture's script, keep its responses,
                                               store the requests the script sends now
    python replay.py serve FIXTURE [--port N]  classroom replay server (see replay_server.py)
    python replay.py grade [--json] -- CMD     grade any agent loop up the workbook's ladder (see grade.py)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import anthropic
import httpx2

from threads import Refusal, Threads

ROOT = Path(__file__).resolve().parent
WORKSPACES = ROOT / "fixtures" / "workspace"
REBUILD_ENV = "WORKBOOK_REBUILD"  # set by `replay.py rebuild`: replay leniently, then store requests
KEPT_RESPONSE_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-should-retry", "request-id")
FIXTURE_FIELDS = ("script", "scenario", "description", "provenance", "task", "workspace", "exchanges")


# -- errors: each one prints as one line that says what to do -------------------------------------


class WorkbookError(anthropic.AnthropicError):
    """An error meant for the reader: its message is one line saying what happened and what to do.

    It subclasses the SDK's base error so that, raised inside the transport, the SDK passes it
    through untouched instead of wrapping it as a connection error and retrying.
    """


class FixtureError(WorkbookError):
    """A fixture file that cannot be used: not JSON, a missing field, a body that is not a Message."""


class ReplayMismatch(WorkbookError):
    """The loop sent a request that differs from the recorded one, or that the API would reject."""


class ReplayExhausted(WorkbookError):
    """The loop asked for more turns than the fixture holds."""


# -- the Messages API's rules, checked on every request --------------------------------------------


def api_rule_problems(messages: list) -> list[str]:
    """What the real API would reject in this messages list (empty when it is valid)."""
    problems = []
    if not messages:
        return ["messages is empty"]
    if messages[0].get("role") != "user":
        problems.append("messages[0] must come from the user")
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            problems.append(f"messages[{i}]: role must be user or assistant, not {message.get('role')!r}")
        if i and message.get("role") == messages[i - 1].get("role"):
            problems.append(f"messages[{i}]: two {message.get('role')} messages in a row")
        if message.get("content") in ("", [], None):
            problems.append(f"messages[{i}]: content is empty")
    problems += _tool_pairing_problems(messages)
    return problems


def _tool_pairing_problems(messages: list) -> list[str]:
    """Every tool_use answered once, first thing in the next user message; no orphan tool_result."""
    problems = []
    for i, message in enumerate(messages):
        blocks = _blocks(message)
        asked = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        previous = _blocks(messages[i - 1]) if i else []
        open_ids = {b["id"] for b in previous if b.get("type") == "tool_use"}
        answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if message.get("role") == "assistant" and asked:
            if i + 1 == len(messages):
                problems.append(f"messages[{i}]: the conversation ends on tool_use without results")
            continue
        for tool_id in answered:
            if tool_id not in open_ids:
                problems.append(
                    f"messages[{i}]: tool_result {tool_id} answers no tool_use in messages[{i - 1}]"
                )
            elif answered.count(tool_id) > 1:
                problems.append(f"messages[{i}]: tool_use {tool_id} answered {answered.count(tool_id)} times")
        for tool_id in sorted(open_ids - set(answered)):
            problems.append(f"messages[{i}]: tool_use {tool_id} from messages[{i - 1}] has no tool_result")
        leading = [b.get("type") == "tool_result" for b in blocks[: len(answered)]]
        if answered and not all(leading):
            problems.append(f"messages[{i}]: tool_result blocks must come before any other content")
    return sorted(set(problems), key=problems.index)


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def check_api_rules(body: dict, where: str) -> None:
    """Raise ReplayMismatch naming the first rule this request body breaks."""
    problems = api_rule_problems(body.get("messages", []))
    if problems:
        raise ReplayMismatch(f"{where}: the API would reject this request — {problems[0]}")


# -- comparing a request with the recorded one -----------------------------------------------------


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


def request_diff(
    expected: dict, actual: dict, structure_only: bool = False, conversation_only: bool = False
) -> str | None:
    """A readable explanation of how `actual` differs from the recorded request, or None.

    conversation_only=True compares the conversation's shape alone (roles, block types, tool_use
    ids and names, tool_result pairing) and ignores text, system, max_tokens, stream and tools: the
    classroom server judges a loop a student wrote, with their own prompt and tools, this way.
    """
    structure_only = structure_only or conversation_only
    want, got = normalize_messages(expected["messages"]), normalize_messages(actual.get("messages", []))
    if len(want) != len(got):
        return _count_diff(want, got)
    for i, (w, g) in enumerate(zip(want, got)):
        if w["role"] != g["role"]:
            return f"messages[{i}] should come from the {w['role']}, got {g['role']}"
        if len(w["content"]) != len(g["content"]):
            return f"messages[{i}]: expected {len(w['content'])} content blocks, got {len(g['content'])}"
        for j, (wb, gb) in enumerate(zip(w["content"], g["content"])):
            problem = _block_diff(wb, gb, structure_only, conversation_only)
            if problem:
                return f"messages[{i}].content[{j}]: {problem}"
    if conversation_only:
        return None
    for key in ("system", "max_tokens", "stream"):
        if expected.get(key) != actual.get(key) and not (structure_only and key == "system"):
            return f"{key}: expected {_short(expected.get(key))}, got {_short(actual.get(key))}"
    if _tool_names(expected) != _tool_names(actual):
        return f"tools: expected {_tool_names(expected)}, got {_tool_names(actual)}"
    return None


def _count_diff(want: list, got: list) -> str:
    """Name the first recorded message the loop did not send, when it sent too few."""
    line = f"expected {len(want)} messages, got {len(got)}"
    if len(got) >= len(want):
        return line
    k = next((i for i, (w, g) in enumerate(zip(want, got)) if w["role"] != g["role"]), len(got))
    missing = want[k]
    kinds = ", ".join(sorted({b.get("type", "?") for b in missing["content"]}))
    hint = (
        "the assistant turn was not appended"
        if missing["role"] == "assistant"
        else "the tool results were not appended"
    )
    return f"{line} — missing messages[{k}] ({missing['role']}: {kinds}): {hint}"


def _block_diff(want: dict, got: dict, structure_only: bool, conversation_only: bool = False) -> str | None:
    """How one content block differs: type first, then ids, then (unless structure-only) text."""
    if want.get("type") != got.get("type"):
        return f"expected a {want.get('type')} block, got {got.get('type')}"
    keys = {"tool_use": ("id", "name"), "tool_result": ("tool_use_id", "is_error")}.get(want["type"], ())
    if conversation_only:  # a student's tools may fail where the recording's did not: is_error is theirs
        keys = tuple(k for k in keys if k != "is_error")
    if not structure_only:
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


# -- fixtures: load and check ----------------------------------------------------------------------


def load_fixture(path: str | Path) -> dict:
    """Read a fixture and check it; any problem raises FixtureError naming the file and the place."""
    path = Path(path)
    try:
        fixture = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise FixtureError(f"{path}: no such fixture — see `ls fixtures/` for the ones that exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        problem = _one_line(err)
        raise FixtureError(f"{path}: not a JSON fixture ({problem}) — fix the file or re-record it") from None
    for problem in fixture_problems(fixture):
        raise FixtureError(f"{path}: {problem}")
    return fixture


def fixture_problems(fixture) -> list[str]:
    """Everything wrong with a parsed fixture, each naming its place (e.g. `exchanges[2].response`)."""
    if not isinstance(fixture, dict):
        return ["the top level must be a JSON object"]
    problems = [f"missing field `{name}`" for name in FIXTURE_FIELDS if name not in fixture]
    if problems:
        return problems
    if fixture["provenance"] not in ("recorded", "scripted"):
        problems.append("provenance must be `recorded` or `scripted`")
    if not isinstance(fixture["exchanges"], list) or not fixture["exchanges"]:
        return problems + ["`exchanges` must be a non-empty list"]
    for n, exchange in enumerate(fixture["exchanges"]):
        problems += [f"exchanges[{n}]{p}" for p in _exchange_problems(exchange)]
    return problems


def _exchange_problems(exchange) -> list[str]:
    if not isinstance(exchange, dict) or not isinstance(exchange.get("request"), dict):
        return [": needs a `request` object"]
    request, response = exchange["request"], exchange.get("response")
    if not isinstance(request.get("messages"), list):
        return [".request.messages: must be a list"]
    problems = [f".request: {p}" for p in api_rule_problems(request["messages"])]
    if not isinstance(response, dict):
        return problems + [".response: must be an object"]
    if "error" in response:
        if response["error"] not in ("connect", "timeout"):
            problems.append(".response.error: must be `connect` or `timeout`")
    elif not isinstance(response.get("status"), int):
        problems.append(".response.status: must be an HTTP status number")
    elif response["status"] == 200 and "stream" in response:
        problems += [f".response.stream{p}" for p in _stream_problems(response["stream"])]
    elif response["status"] == 200:
        problems += [f".response.body: {p}" for p in _message_problems(response.get("body"))]
    elif not isinstance(response.get("body"), dict):
        problems.append(".response.body: an error response needs a JSON error body")
    return problems


def _message_problems(body) -> list[str]:
    """Whether a 200 body parses as the SDK's own `Message` type."""
    try:
        message = anthropic.types.Message.model_validate(body)
    except Exception as err:  # pydantic's ValidationError; its first line names the field
        return [f"not a valid Message ({_one_line(err)})"]
    return [] if message.type == "message" else ["`type` must be `message`"]


def _stream_problems(events) -> list[str]:
    if not isinstance(events, list) or not events:
        return [": must be a non-empty list of {event, data}"]
    problems = []
    for n, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict) or "event" not in event:
            problems.append(f"[{n}]: must be {{event, data}} with a JSON object as data")
    return problems


def _one_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines[:3])[:200]


# -- the replay transport --------------------------------------------------------------------------


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
    headers = dict(response.get("headers", {}))
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


MATCHES = ("strict", "shape")  # how a request is compared with the recorded one


@dataclass
class ReplayTransport:
    """Serves a fixture's responses in order; checks each request against the API and the recording.

    match="strict" compares the whole request with the recording (messages, text, system, tools);
    match="shape" only the conversation's shape, as the classroom server does (roles, block types,
    tool_use ids and the tool_result pairing), so any loop with its own prompt and tools (the SDK's
    tool runner, a student's) replays too. strict=False (lenient) keeps the API-rule check but skips
    the comparison: the fixture is then only a script of responses (used to rebuild fixtures and by
    the property tests). Server-held threads (threads.py) are served in every mode.
    """

    fixture: dict
    name: str = "fixture"
    strict: bool = True
    cursor: int = 0
    # Each request's bytes as the loop sent them: bytes are never scanned by the garbage collector,
    # where a parsed copy of every request (each holding the whole history) made long runs quadratic.
    sent: list[bytes] = field(default_factory=list)
    checked: bool = False  # the fixture came through load_fixture: its recorded requests keep the rules
    match: str = "strict"
    threads: Threads = field(default_factory=Threads)  # conversations held for thread requests

    @property
    def seen(self) -> list[dict]:
        """The request bodies in the order the loop sent them, parsed anew on each access."""
        return [json.loads(raw or b"{}") for raw in self.sent]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request.content)
        body = json.loads(request.content or b"{}")
        try:
            body, thread = self.threads.expand(body)  # a thread's request, whole again
        except Refusal as refusal:
            return httpx2.Response(refusal.status, json=refusal.body())
        exchanges = self.fixture["exchanges"]
        turn = self.cursor + 1
        if self.cursor >= len(exchanges):
            raise ReplayExhausted(
                f"{self.name}: the loop sent request {turn} but the fixture holds only {len(exchanges)} — "
                "the loop did not stop when the recording did"
            )
        recorded = exchanges[self.cursor]
        # Identical to a recording already checked: nothing to compare, no cost.
        if not (self.strict and self.checked and self.match == "strict" and body == recorded["request"]):
            self.check(body, recorded, turn)
        self.cursor += 1
        if thread:
            self.threads.hold(thread, body, recorded_message(recorded["response"]))
        return http_response(recorded["response"], bool(body.get("stream")))

    def check(self, body: dict, recorded: dict, turn: int) -> None:
        """The recording's own diff first, since it says what the loop did wrong; then the API's rules."""
        if self.strict:
            structure = recorded.get("match") == "structure"
            diff = request_diff(recorded["request"], body, structure, conversation_only=self.match == "shape")
            if diff:
                raise ReplayMismatch(f"{self.name}, turn {turn}: {diff}")
        check_api_rules(body, f"{self.name}, turn {turn}")

    def http_client(self) -> httpx2.Client:
        return anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(self))


def replay_client(
    fixture: dict,
    name: str = "fixture",
    strict: bool = True,
    checked: bool = False,
    match: str = "strict",
    **client_options,
):
    """The real SDK client, talking to a ReplayTransport instead of the network.

    checked=True says the fixture came from load_fixture, so a request identical to its recording
    needs no further check (the per-turn cost then stays flat however long the history grows).
    match="shape" compares only the conversation's shape (see ReplayTransport); the default is strict.
    """
    if match not in MATCHES:
        raise WorkbookError(f"match={match!r}: use one of {', '.join(MATCHES)}")
    transport = ReplayTransport(fixture, name, strict, checked=checked, match=match)
    client = anthropic.Anthropic(api_key="replay", http_client=transport.http_client(), **client_options)
    return client, transport


# -- record mode: the real network, with every exchange kept -------------------------------------


class _TeeStream(httpx2.SyncByteStream):
    """Passes a streamed body through unchanged while keeping a copy for the fixture."""

    def __init__(self, stream, on_done):
        self.stream, self.on_done, self.chunks = stream, on_done, []

    def __iter__(self):
        for chunk in self.stream:
            self.chunks.append(chunk)
            yield chunk

    def close(self):
        self.stream.close()
        self.on_done(b"".join(self.chunks))


class RecordingTransport(httpx2.BaseTransport):
    """Sends requests to the real API and keeps each request body and response for the fixture.

    Only the request body is kept: never the request headers, so the API key cannot leak.
    """

    def __init__(self, inner: httpx2.BaseTransport | None = None):
        self.inner = inner or httpx2.HTTPTransport()
        self.exchanges: list[dict] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = {"request": json.loads(request.read() or b"{}")}
        self.exchanges.append(exchange)
        try:
            response = self.inner.handle_request(request)
        except httpx2.TimeoutException:
            exchange["response"] = {"error": "timeout"}
            raise
        except httpx2.TransportError:
            exchange["response"] = {"error": "connect"}
            raise
        headers = {k: v for k, v in response.headers.items() if k.lower() in KEPT_RESPONSE_HEADERS}
        exchange["response"] = {"status": response.status_code, "headers": headers}
        tee = _TeeStream(response.stream, lambda raw: exchange["response"].update(_parse_body(raw, headers)))
        return httpx2.Response(response.status_code, headers=response.headers, stream=tee)


def _parse_body(raw: bytes, headers: dict) -> dict:
    """A recorded body as fixture JSON: SSE becomes a list of events, JSON stays JSON."""
    if "text/event-stream" in headers.get("content-type", ""):
        events = []
        for chunk in raw.decode("utf-8").split("\n\n"):
            fields = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
            if "data" in fields:
                events.append({"event": fields.get("event", "message"), "data": json.loads(fields["data"])})
        return {"stream": events}
    try:
        return {"body": json.loads(raw or b"null")}
    except json.JSONDecodeError:
        return {
            "body": {"type": "error", "error": {"type": "unparsed", "message": raw.decode(errors="replace")}}
        }


# -- what a step script calls ----------------------------------------------------------------------


def make_parser(doc: str, default_fixture: str) -> argparse.ArgumentParser:
    """The flags every step shares; a step adds its own to the parser this returns."""
    parser = argparse.ArgumentParser(
        description=doc,
        epilog=f"With no ANTHROPIC_API_KEY, replays {default_fixture} offline.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("task", nargs="?", help="the task for a live run (needs ANTHROPIC_API_KEY)")
    parser.add_argument("--replay", metavar="FIXTURE", help="replay a recorded fixture, offline")
    parser.add_argument("--record", metavar="FIXTURE", help="run live and save the exchange as a fixture")
    parser.add_argument("--model", help="model id (default: $MODEL_ID, else the step's MODEL)")
    parser.add_argument(
        "--workspace", help="folder the tools act in for a live run (default: current folder)"
    )
    parser.set_defaults(default_fixture=default_fixture)
    return parser


@dataclass
class Run:
    """Everything a step needs to start: the client, the task, where tools act, and how we got here."""

    client: anthropic.Anthropic
    mode: str  # "live", "replay" or "record"
    task: str
    workspace: Path
    model: str
    banner: str
    fixture_path: Path | None = None
    transport: ReplayTransport | RecordingTransport | None = None
    fixture: dict | None = None  # the loaded fixture, in replay
    script: str = ""  # the step's name, kept in a recording

    def finish(self) -> str | None:
        """Save what record mode captured (or what a rebuild observed); say where, if anywhere."""
        if self.mode == "record":
            return save_recording(self)
        if os.environ.get(REBUILD_ENV) and self.mode == "replay":
            return save_rebuild(self)
        return None


def start(args: argparse.Namespace, model: str, script: str, **client_options) -> Run:
    """Pick the mode from the flags and the environment, and build the client for it."""
    model = args.model or os.environ.get("MODEL_ID") or model
    key = os.environ.get("ANTHROPIC_API_KEY")
    if args.record:
        if not key:
            raise WorkbookError("--record needs ANTHROPIC_API_KEY: set it, or use --replay to run offline")
        return _start_record(args, model, script, key, client_options)
    if args.replay or not key:
        if args.task and not args.replay:
            raise WorkbookError("a live task needs ANTHROPIC_API_KEY — set it, or run with no task to replay")
        return _start_replay(Path(args.replay or ROOT / args.default_fixture), model, client_options)
    if not args.task:
        raise WorkbookError(
            'ANTHROPIC_API_KEY is set: give a task, e.g. `python s01_agent_loop.py "list the files"`'
        )
    workspace = Path(args.workspace or os.getcwd()).resolve()
    client = anthropic.Anthropic(api_key=key, **client_options)
    where = os.environ.get("ANTHROPIC_BASE_URL", "api.anthropic.com")
    banner = f"live: {model} at {where}; tools act in {workspace}"
    return Run(client, "live", args.task, workspace, model, banner)


def _start_replay(path: Path, model: str, client_options: dict) -> Run:
    fixture = load_fixture(path)
    lenient = bool(os.environ.get(REBUILD_ENV))
    client, transport = replay_client(fixture, _display_name(path), not lenient, True, **client_options)
    # The SDK's and the fixture's objects live as long as the process: freezing them spares every
    # later garbage collection (and the one at exit) from scanning them again. Measured in
    # docs/benchmarks.md: a whole replay drops to about the cost of `import anthropic` alone.
    gc.freeze()
    workspace = copy_workspace(fixture["workspace"])
    banner = f"offline replay of {_display_name(path)} ({fixture['provenance']}); no API key used"
    return Run(client, "replay", fixture["task"], workspace, model, banner, path, transport, fixture)


def _start_record(args, model: str, script: str, key: str, client_options: dict) -> Run:
    transport = RecordingTransport()
    http = anthropic.DefaultHttpxClient(transport=transport)
    client = anthropic.Anthropic(api_key=key, http_client=http, **client_options)
    workspace = Path(args.workspace or os.getcwd()).resolve()
    banner = f"recording a live run of {model} to {args.record}; tools act in {workspace}"
    return Run(
        client,
        "record",
        args.task or "",
        workspace,
        model,
        banner,
        Path(args.record),
        transport,
        script=script,
    )


def _display_name(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def copy_workspace(name: str) -> Path:
    """A fresh temp copy of fixtures/workspace/<name>: replayed tools never touch the reader's files."""
    target = Path(tempfile.mkdtemp(prefix="workbook-")) / "workspace"
    source = WORKSPACES / name
    if name and not source.is_dir():
        raise FixtureError(f"workspace `{name}` not found under fixtures/workspace/")
    if name:
        shutil.copytree(source, target, symlinks=True)
    else:
        target.mkdir()
    return target


def save_recording(run: Run) -> str:
    """Write a live run as a fixture with provenance `recorded` (the API key is never stored)."""
    fixture = {
        "script": run.script,
        "scenario": run.fixture_path.stem,
        "description": f"A live run of {run.script}: {run.task}",
        "provenance": "recorded",
        "recorded": {
            "date": datetime.now(UTC).date().isoformat(),
            "model": run.model,
            "sdk": f"anthropic {anthropic.__version__}",
            "endpoint": os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
        },
        "task": run.task,
        "workspace": "",
        "match": "structure",  # live tool output (dates, sizes) differs between machines
        "exchanges": [e for e in run.transport.exchanges if "response" in e],
    }
    for exchange in fixture["exchanges"]:
        exchange["match"] = "structure"
    run.fixture_path.parent.mkdir(parents=True, exist_ok=True)
    run.fixture_path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n")
    return f"recorded {len(fixture['exchanges'])} exchanges to {run.fixture_path}"


def save_rebuild(run: Run) -> str:
    """Store the requests this run sent as the fixture's recorded requests (scripted fixtures only)."""
    seen, exchanges = run.transport.seen, run.fixture["exchanges"]
    if len(seen) != len(exchanges):
        raise FixtureError(
            f"{run.fixture_path}: the run sent {len(seen)} requests for {len(exchanges)} responses"
        )
    for exchange, body in zip(exchanges, seen):
        exchange["request"] = body
    run.fixture_path.write_text(json.dumps(run.fixture, indent=2, ensure_ascii=False) + "\n")
    return f"rebuilt {len(seen)} requests in {run.fixture_path}"


# -- command line ----------------------------------------------------------------------------------


def rebuild(path: str) -> int:
    """Re-run a scripted fixture's script against its responses and store the requests it sends."""
    fixture = load_fixture(path)
    if fixture["provenance"] != "scripted":
        raise FixtureError(f"{path}: only scripted fixtures can be rebuilt; re-record a recorded one")
    script = ROOT / f"{fixture['script']}.py"
    env = dict(os.environ, **{REBUILD_ENV: "1"})
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.call(
        [sys.executable, str(script), "--replay", str(path), *fixture.get("args", [])], env=env
    )


def main(argv: list[str]) -> int:
    """`check`, `rebuild`, `serve` or `grade` (see the module docstring)."""
    if not argv or argv[0] not in ("check", "rebuild", "serve", "grade"):
        print("usage:" + __doc__.split("teachers):")[1].rstrip())
        return 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "serve":
            import replay_server

            return replay_server.main(rest)
        if command == "grade":
            import grade

            return grade.main(rest)
        if command == "rebuild":
            return max(rebuild(path) for path in rest)
        for path in rest:
            load_fixture(path)
            print(f"ok  {path}")
        return 0
    except WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
