"""The player: one request answered from a recording, for the in-process replay and the classroom alike.

Each request meets, in order: the API's contract on the request as sent (its shape, its betas); a
thread, made whole again (workbook/api/threads.py); the contract's rules on the whole conversation;
the recording at the player's turn, compared by `match`. Then the player answers with the recorded
response, moves to the next turn and holds the thread. Anything else is raised: the API's own error
(`Refused`, threads.Refusal), a request that differs from the recording (`Differs`), or one that comes
after its end (`Ended`). How each reaches the loop (an httpx response, an exception, an HTTP reply
with a hint for a student) is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbook.api import contract
from workbook.api.compare import Match, request_diff
from workbook.api.threads import Threads
from workbook.api.wire import recorded_message


@dataclass
class Played:
    """A request answered: its turn (from 1), the recorded response, and how it was asked for."""

    turn: int
    response: dict
    stream: bool  # the request asked for a stream: the response is served as SSE whatever was recorded
    restarted: bool = False  # a first-turn request started the recording over (see Player.restartable)
    thread: str | None = None  # "create" or "continue" for a thread request


class NotPlayed(Exception):
    """A request the recording does not answer; `turn` is the turn it was meant for."""

    def __init__(self, turn: int, text: str):
        super().__init__(text)
        self.turn = turn


class Refused(NotPlayed):
    """What the API would refuse: its problems, and how the request differs from the recording, if it does."""

    def __init__(self, turn: int, problems: list, diff: str | None = None):
        super().__init__(turn, str(problems[0]))
        self.problems, self.diff = problems, diff


class Differs(NotPlayed):
    """A request the API would take, but not the one recorded at this turn: `diff` says how."""

    def __init__(self, turn: int, diff: str):
        super().__init__(turn, diff)
        self.diff = diff


class Ended(NotPlayed):
    """A request after the recording's last turn; `messages` are what it sent."""

    def __init__(self, turn: int, messages: list):
        super().__init__(turn, f"request {turn} comes after the recording's last turn")
        self.messages = messages


@dataclass
class Player:
    """One client's place in one recording.

    `match`: how a request is compared with the recorded one (an exchange's own `match` may loosen it);
    None compares nothing, and the recording is a script of responses (rebuilding a fixture, tests).
    `restartable`: a request holding only the recording's first messages starts it over mid-way (the
    classroom's students run their programs again), unless the recording expects that request next.
    `remembers`: each request is judged on what it adds to the last one (a long replay stays linear);
    False judges each whole and keeps nothing of it (the classroom: a stranger's last request, up to
    32 MB, must not stay in the teacher's memory for each of their names).
    """

    fixture: dict
    match: Match | None = Match.STRICT
    restartable: bool = False
    remembers: bool = True
    served: int = 0  # exchanges answered; the next request is turn served + 1
    restarts: int = 0  # times it started over: by a first-turn request (restartable), or by `restart`
    threads: Threads = field(default_factory=Threads)  # conversations held for thread requests
    requests: contract.Requests = field(default_factory=contract.Requests)  # each judged on what it adds

    @property
    def exchanges(self) -> list:
        return self.fixture["exchanges"]

    def play(self, body, betas: contract.Betas = contract.NO_BETAS) -> Played:
        """The recorded answer to one request (a parsed JSON body; `betas` from its headers)."""
        requests = self.requests if self.remembers else contract.Requests()
        problems = requests.sent_problems(body, betas)  # the request as sent: its shape, its betas
        if problems:
            raise Refused(self.served + 1, problems)
        body, thread = self.threads.expand(body)  # a thread's request, whole again (or threads.Refusal)
        problems = requests.rule_problems(body["messages"], betas)
        restarted = not problems and self.restartable and self.starts_over(body["messages"])
        if restarted:
            self.restart()
        turn = self.served + 1
        recorded = self.exchanges[self.served] if self.served < len(self.exchanges) else None
        diff = self.diff(recorded, body) if recorded else None
        if problems:
            raise Refused(turn, problems, diff)
        if recorded is None:
            raise Ended(turn, body["messages"])
        if diff:
            raise Differs(turn, diff)
        self.served = turn
        self.threads.hold(thread, body, recorded_message(recorded["response"]))
        kind = thread["type"] if thread else None
        return Played(turn, recorded["response"], body.get("stream") is True, restarted, kind)

    def replayed(self) -> Played:
        """The next recorded request, sent again exactly (the in-process replay knows it by its bytes):
        judged when its fixture loaded, and equal to itself, so it is answered with no more judging."""
        recorded = self.exchanges[self.served]
        self.served += 1
        return Played(self.served, recorded["response"], recorded["request"].get("stream") is True)

    def restart(self) -> None:
        """Back to turn 1 (the threads held stay: a continue names its own reply)."""
        self.served, self.restarts = 0, self.restarts + 1

    def diff(self, recorded: dict, body: dict) -> str | None:
        """How the request differs from the recorded one, by the looser of the two matches; None if not."""
        if self.match is None:
            return None
        return request_diff(recorded["request"], body, self.match.looser(recorded.get("match")))

    def starts_over(self, messages: list) -> bool:
        """A first-turn request mid-way starts over, unless the recording expects one next (a retry)."""
        first = len(self.exchanges[0]["request"]["messages"])
        if self.served == 0 or len(messages) != first:
            return False
        return (
            self.served >= len(self.exchanges)
            or len(self.exchanges[self.served]["request"]["messages"]) != first
        )
