"""Replay in process: the real SDK client over an httpx transport that plays a fixture (replay/player.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from workbook.api import contract
from workbook.api.compare import Match
from workbook.api.threads import Refusal
from workbook.api.wire import http_response
from workbook.errors import WorkbookError
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


@dataclass
class ReplayTransport:
    """An httpx transport over a Player: each request the SDK sends is played (workbook/replay/player.py).

    The API's refusals come back as its own error responses, which the SDK raises as it would live; a
    request that differs from the recording raises ReplayMismatch, one past its end ReplayExhausted.
    Every request is judged the same way, whatever its bytes."""

    player: Player
    name: str = "fixture"
    # The requests' bytes as the loop sent them (bytes: the garbage collector never scans them). Every
    # one with keep_all, for notebooks and `rebuild`; only the last otherwise, so a long run's memory
    # stays flat (each request holds the whole history).
    sent: list[bytes] = field(default_factory=list)
    keep_all: bool = True

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

    def http_client(self) -> httpx2.Client:
        return anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(self))


def replay_client(
    fixture: dict,
    name: str = "fixture",
    strict: bool = True,
    match: Match | str = Match.STRICT,
    keep_all: bool = True,
    **client_options,
):
    """The real SDK client, talking to a ReplayTransport instead of the network.

    `match` is how each request is compared with the recorded one (workbook/api/compare.py's Match);
    strict=False compares nothing, keeping only the API's contract (the fixture is then a script of
    responses). keep_all=False keeps only the last request (`transport.seen`), for a long run's memory.
    The transport is what a replay's person at the gate is made from (trust.recorded_person): it says
    which recorded exchange a tool call answers.
    """
    try:
        match = Match(match)
    except ValueError:
        raise WorkbookError(f"match={match!r}: use one of {', '.join(Match)}") from None
    player = Player(fixture, match if strict else None)
    transport = ReplayTransport(player, name, keep_all=keep_all)
    client = never_waits(
        anthropic.Anthropic(api_key="replay", http_client=transport.http_client(), **client_options)
    )
    return client, transport
