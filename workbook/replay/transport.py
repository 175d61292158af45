"""Replay: the real SDK client over a transport that serves a fixture's responses and checks each request."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from workbook.api import contract
from workbook.api.compare import request_diff
from workbook.api.threads import Refusal, Threads
from workbook.api.wire import http_response, recorded_message
from workbook.errors import ReplayExhausted, ReplayMismatch, WorkbookError
from workbook.replay import trust
from workbook.replay.no_wait import never_waits  # a replay never sleeps before a retry

import anthropic
import httpx2

MATCHES = ("strict", "shape")  # how a request is compared with the recorded one


def sdk_json(value) -> bytes:
    """A value as the SDK writes a request body: compact, UTF-8, no NaN (anthropic's openapi_dumps)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class RecordedBytes:
    """Recorded requests as the SDK would send them, built turn by turn from the one before.

    A loop resends the whole history each turn, so a recorded request is the previous one plus what
    is new: the messages already written are kept as one run of bytes, and only the new ones are
    written and added to it. The other fields (system, tools: the same objects turn after turn in a
    fixture) are written once each. The work per turn is a C-level comparison of the history and a
    copy of bytes, never a parse, and no JSON but the new messages'.
    """

    def __init__(self):
        self.messages: list = []  # the recorded messages written last
        self.joined = b""  # those messages as the SDK writes them, comma-separated
        self.fields: dict = {}  # key -> (the value written last, `"key":value` as bytes)

    def of(self, request: dict) -> bytes:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return sdk_json(request)
        self._catch_up(messages)
        fields = [
            sdk_json(key) + b":[" + self.joined + b"]" if key == "messages" else self._field(key, value)
            for key, value in request.items()
        ]
        return b"{" + b",".join(fields) + b"}"

    def _catch_up(self, messages: list) -> None:
        known = len(self.messages)
        if len(messages) < known or messages[:known] != self.messages:  # the history was rewritten
            known, self.joined = 0, b""
        new = [sdk_json(m) for m in messages[known:]]
        self.joined = b",".join([self.joined, *new] if known else new)
        self.messages = messages

    def _field(self, key: str, value) -> bytes:
        written = self.fields.get(key)
        if written is None or written[0] is not value:
            written = self.fields[key] = (value, sdk_json(key) + b":" + sdk_json(value))
        return written[1]


@dataclass
class ReplayTransport:
    """Serves a fixture's responses in order; checks each request against the API and the recording.

    match="strict" compares the whole request with the recording (messages, text, system, tools);
    match="shape" only the conversation's shape, as the classroom server does (roles, block types,
    tool_use ids and the tool_result pairing), so any loop with its own prompt and tools (the SDK's
    tool runner, a student's) replays too. strict=False (lenient) keeps the API-rule check but skips
    the comparison: the fixture is then only a script of responses (used to rebuild fixtures and by
    the property tests). Server-held threads (workbook/api/threads.py) are served in every mode.
    """

    fixture: dict
    name: str = "fixture"
    strict: bool = True
    cursor: int = 0
    # The requests' bytes as the loop sent them (bytes: the garbage collector never scans them). Every
    # one with keep_all, for notebooks and `rebuild`; only the last otherwise, so a long run's memory
    # stays flat (keeping each request, each holding the whole history, grew with the square of the turns).
    sent: list[bytes] = field(default_factory=list)
    checked: bool = False  # the fixture came through load_fixture: its recorded requests keep the rules
    match: str = "strict"
    threads: Threads = field(default_factory=Threads)  # conversations held for thread requests
    keep_all: bool = True
    expected: RecordedBytes = field(default_factory=RecordedBytes)  # the recording's bytes, turn by turn

    @property
    def seen(self) -> list[dict]:
        """The request bodies kept (see `sent`), in the order the loop sent them, parsed on each access."""
        return [json.loads(raw or b"{}") for raw in self.sent]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        raw = request.content
        if self.keep_all:
            self.sent.append(raw)
        else:
            self.sent[:] = [raw]
        exchanges = self.fixture["exchanges"]
        if self.cursor < len(exchanges) and self.same_bytes(raw, exchanges[self.cursor]):
            recorded = exchanges[self.cursor]  # byte for byte the checked recording: nothing to parse
            self.cursor += 1
            return http_response(recorded["response"], bool(recorded["request"].get("stream")))
        return self.parsed(json.loads(raw or b"{}"), request)

    def same_bytes(self, raw: bytes, recorded: dict) -> bool:
        """Whether the loop sent exactly the recording's bytes, the way the SDK writes them. Only for a
        strict replay of a checked fixture, where a request equal to its recording needs no check. A
        recording compared by structure (`match: structure`, every --record) is served the same way
        when the bytes are equal: equal bytes are equal in structure too."""
        if not (self.strict and self.checked and self.match == "strict"):
            return False
        return raw == self.expected.of(recorded["request"])

    def parsed(self, body, request: httpx2.Request | None = None) -> httpx2.Response:
        """A request that is not the recording's bytes: parsed, then checked and compared (`request`, as
        sent, carries the headers that change a rule)."""
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
        # Identical to a recording already checked (in another key order, say): nothing to compare.
        if not (self.strict and self.checked and self.match == "strict" and body == recorded["request"]):
            refused = self.check(body, recorded, turn, request)
            if refused is not None:  # the API's own 400: the SDK raises it as it would live
                return refused
        self.cursor += 1
        if thread:
            self.threads.hold(thread, body, recorded_message(recorded["response"]))
        return http_response(recorded["response"], bool(body.get("stream")))

    def check(self, body: dict, recorded: dict, turn: int, request: httpx2.Request | None = None):
        """The API's contract first, as the API would answer: a 400 naming the field, with the recording's
        hint after it. Then (strict) the recording: a ReplayMismatch saying what the loop did differently.

        `body` is the request as the API reads it (a thread's held turns already put back); `request`,
        when given, is what was sent, for the headers that change a rule (anthropic-beta)."""
        betas = contract.Betas.of(request.headers) if request is not None else contract.NO_BETAS
        diff = None
        if self.strict:
            structure = recorded.get("match") == "structure"
            diff = request_diff(recorded["request"], body, structure, conversation_only=self.match == "shape")
        problems = contract.request_problems(body, betas) or _thread_problems(request, betas)
        if problems:
            hint = f"replay of {self.name}, turn {turn}" + (
                f"; the recording differs: {diff}" if diff else ""
            )
            return httpx2.Response(400, json=contract.refusal_body(problems[0], hint))
        if diff:
            raise ReplayMismatch(f"{self.name}, turn {turn}: {diff}")
        return None

    def http_client(self) -> httpx2.Client:
        return anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(self))


def _thread_problems(request: httpx2.Request | None, betas: contract.Betas) -> list:
    """A `thread` is gone once expanded: whether it came with the beta it needs is read from what was sent."""
    if request is None or b'"thread"' not in request.content or contract.THREADS_BETA in betas.names:
        return []
    return contract.sent_problems(json.loads(request.content), betas)[:1]


def replay_client(
    fixture: dict,
    name: str = "fixture",
    strict: bool = True,
    checked: bool = False,
    match: str = "strict",
    keep_all: bool = True,
    **client_options,
):
    """The real SDK client, talking to a ReplayTransport instead of the network.

    checked=True says the fixture came from load_fixture, so a request identical to its recording
    needs no further check (the per-turn cost then stays flat however long the history grows).
    match="shape" compares only the conversation's shape (see ReplayTransport); the default is strict.
    keep_all=False keeps only the last request (`transport.seen`), for a long run's memory.
    """
    if match not in MATCHES:
        raise WorkbookError(f"match={match!r}: use one of {', '.join(MATCHES)}")
    transport = ReplayTransport(fixture, name, strict, checked=checked, match=match, keep_all=keep_all)
    trust.follow(transport)  # the permission gate asks it which recorded exchange a tool call answers
    client = never_waits(
        anthropic.Anthropic(api_key="replay", http_client=transport.http_client(), **client_options)
    )
    return client, transport
