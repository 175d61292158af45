"""Replay in process: the real SDK client over an httpx transport that plays a fixture (replay/player.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from workbook.api import contract
from workbook.api.compare import Match
from workbook.api.threads import Refusal
from workbook.api.wire import http_response
from workbook.errors import WorkbookError
from workbook.replay import trust
from workbook.replay.no_wait import never_waits  # a replay never sleeps before a retry
from workbook.replay.player import Differs, Ended, Player, Refused

import anthropic
import httpx2


class ReplayMismatch(WorkbookError, anthropic.AnthropicError):
    """The loop sent a request that differs from the recorded one, or that the API would reject.

    Raised inside the SDK's call, so it is the SDK's error too: the SDK hands its own errors on as they
    are, where anything else a transport raises becomes a connection error, retried."""


class ReplayExhausted(WorkbookError, anthropic.AnthropicError):
    """The loop asked for more turns than the fixture holds (raised inside the SDK's call, as above)."""


def sdk_json(value) -> bytes:
    """A value as the SDK writes a request body: compact, UTF-8, no NaN (anthropic's openapi_dumps)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class RecordedBytes:
    """The recording's requests as the SDK writes them, each built from the one before: a loop resends
    its whole history, so only the messages a turn adds are written, and the rest is bytes kept."""

    def __init__(self):
        self.messages: list = []  # the recorded messages written last
        self.joined = b""  # those messages as the SDK writes them, comma-separated
        self.fields: dict = {}  # key -> (the value written last, `"key":value` as bytes)

    def of(self, request: dict) -> bytes:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return sdk_json(request)
        known = len(self.messages)
        if len(messages) < known or messages[:known] != self.messages:  # the history was rewritten
            known, self.joined = 0, b""
        new = [sdk_json(m) for m in messages[known:]]
        self.joined, self.messages = b",".join([self.joined, *new] if known else new), messages
        fields = [
            b'"messages":[' + self.joined + b"]" if k == "messages" else self._field(k, v)
            for k, v in request.items()
        ]
        return b"{" + b",".join(fields) + b"}"

    def _field(self, key: str, value) -> bytes:
        written = self.fields.get(key)
        if written is None or written[0] is not value:
            written = self.fields[key] = (value, sdk_json(key) + b":" + sdk_json(value))
        return written[1]


@dataclass
class ReplayTransport:
    """An httpx transport over a Player: each request the SDK sends is played (workbook/replay/player.py).

    The API's refusals come back as its own error responses, which the SDK raises as it would live; a
    request that differs from the recording raises ReplayMismatch, one past its end ReplayExhausted.

    One shortcut, because a long replay's user waits for it (docs/benchmarks.md, "the recording's own
    bytes"): in a strict replay of a fixture that was checked when it loaded, a request that is byte for
    byte the SDK's writing of the recorded one is that request, already judged: it is answered unparsed.
    """

    player: Player
    name: str = "fixture"
    # The requests' bytes as the loop sent them (bytes: the garbage collector never scans them). Every
    # one with keep_all, for notebooks and `rebuild`; only the last otherwise, so a long run's memory
    # stays flat (each request holds the whole history).
    sent: list[bytes] = field(default_factory=list)
    keep_all: bool = True
    checked: bool = False  # the fixture came through load_fixture: every recorded request was judged
    recorded: RecordedBytes = field(default_factory=RecordedBytes)

    @property
    def fixture(self) -> dict:
        return self.player.fixture

    @property
    def cursor(self) -> int:
        """The exchanges served so far (the permission gate reads which one a tool call answers)."""
        return self.player.served

    @property
    def threads(self):
        """The conversations the player holds for thread requests (workbook/api/threads.py)."""
        return self.player.threads

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
        try:
            if self.as_recorded(raw):
                played = self.player.replayed()
            else:
                played = self.player.play(json.loads(raw or b"{}"), contract.Betas.of(request.headers))
        except Refusal as refusal:  # a thread replay cannot serve: the API's own error, which the SDK handles
            return httpx2.Response(refusal.status, json=refusal.body())
        except Refused as refused:  # the API's 400, with the recording's hint after its own words
            hint = f"replay of {self.name}, turn {refused.turn}"
            hint += f"; the recording differs: {refused.diff}" if refused.diff else ""
            return httpx2.Response(400, json=contract.refusal_body(refused.problems[0], hint))
        except Differs as differs:
            raise ReplayMismatch(f"{self.name}, turn {differs.turn}: {differs.diff}") from None
        except Ended as ended:
            raise ReplayExhausted(
                f"{self.name}: the loop sent request {ended.turn} but the fixture holds only "
                f"{len(self.fixture['exchanges'])} — the loop did not stop when the recording did"
            ) from None
        if played.side:  # the replay's own answer (a compaction): a Message, recorded nowhere
            return http_response({"status": 200, "body": played.response}, played.stream)
        return http_response(played.response, played.stream)

    def as_recorded(self, raw: bytes) -> bool:
        """Whether `raw` is the next recorded request as the SDK writes it, in a strict replay of a checked
        fixture. Not one that names a thread or holds a system message: their betas are the sender's."""
        player = self.player
        if not (self.checked and player.match is Match.STRICT and player.served < len(player.exchanges)):
            return False
        if b'"thread"' in raw or b'"role":"system"' in raw:
            return False
        return raw == self.recorded.of(player.exchanges[player.served]["request"])

    def http_client(self) -> httpx2.Client:
        return anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(self))


def replay_client(
    fixture: dict,
    name: str = "fixture",
    strict: bool = True,
    checked: bool = False,
    match: Match | str = Match.STRICT,
    keep_all: bool = True,
    **client_options,
):
    """The real SDK client, talking to a ReplayTransport instead of the network.

    `match` is how each request is compared with the recorded one (workbook/api/compare.py's Match);
    strict=False compares nothing, keeping only the API's contract (the fixture is then a script of
    responses). keep_all=False keeps only the last request (`transport.seen`), for a long run's memory.
    checked=True says the fixture came from load_fixture, so a request that is its recording byte for
    byte is answered without being judged again (ReplayTransport).
    """
    try:
        match = Match(match)
    except ValueError:
        raise WorkbookError(f"match={match!r}: use one of {', '.join(Match)}") from None
    player = Player(fixture, match if strict else None)
    transport = ReplayTransport(player, name, keep_all=keep_all, checked=checked)
    trust.follow(transport)  # the permission gate asks it which recorded exchange a tool call answers
    client = never_waits(
        anthropic.Anthropic(api_key="replay", http_client=transport.http_client(), **client_options)
    )
    return client, transport
