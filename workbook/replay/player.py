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

import json
from dataclasses import dataclass, field

from workbook.api import compaction, contract, server_tools, wire
from workbook.api.compare import Match, request_diff
from workbook.api.threads import Refusal, Threads
from workbook.api.wire import recorded_message


@dataclass
class Played:
    """A request answered: its turn (from 1), the recorded response, and how it was asked for."""

    turn: int
    response: dict
    stream: bool  # the request asked for a stream: the response is served as SSE whatever was recorded
    restarted: bool = False  # a first-turn request started the recording over (see Player.restartable)
    thread: str | None = None  # "create" or "continue" for a thread request
    # a side request (see side_request, and a compaction): `response` is the Message the replay made for
    # it (side_message, compaction.answer), and no recorded turn was used
    side: bool = False


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


SIDE_WORDS = "(a side request: answered by the replay server, no recorded turn used)"


def side_request(body: dict, recorded: dict | None) -> str | None:
    """Why a request is beside the lesson's conversation (a client's own errand), or None.

    A quota probe asks for at most one token (`max_tokens` <= 1: no turn of a loop stops there); a title
    or summary request asks for structured output (`output_config.format`) where the recording did not.
    Not "declares no tools": a student who forgets `tools=` still gets the recorded turn and its hint."""
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, int) and max_tokens <= 1:
        return "a probe (max_tokens <= 1)"
    want = (recorded or {}).get("request", {})
    asked, recorded_format = (
        (b.get("output_config") or {}).get("format") if isinstance(b.get("output_config"), dict) else None
        for b in (body, want)
    )
    if asked and not recorded_format:
        return "structured output the recording did not ask for (a title?)"
    return None


def side_message(body: dict) -> dict:
    """The answer to a side request: a short end_turn Message saying what it is (no recorded turn used)."""
    model = body.get("model") if isinstance(body.get("model"), str) else "replay"
    return wire.message_body(
        [{"type": "text", "text": SIDE_WORDS}], "end_turn", "msg_replay_side_request", model
    )


def undeclared_server_tool(recorded: dict, body: dict) -> tuple[list[contract.Problem], str] | None:
    """The API's refusal, with the recording's hint, when the recorded answer holds a server tool's use or
    result (web_search, code_execution...) and this request did not declare that tool; else None.

    The request alone is one the API takes: what it cannot have is this answer, since the API runs a
    server tool only for a request that declares it (workbook/api/server_tools.py). So the rule lives
    here, where a request meets its recording, and not in the contract, which judges a request by itself."""
    missing = server_tools.undeclared(body, recorded["response"])
    if not missing:
        return None
    name = missing[0]
    problem = contract.Problem(
        "tools",
        f"the recorded reply uses the server tool `{name}`, but this request does not declare it; the API "
        "runs a server tool only when the request's `tools` declares it",
    )
    tools = recorded["request"].get("tools") or []
    declared = next((t for t in tools if isinstance(t, dict) and t.get("name") == name and "type" in t), None)
    example = json.dumps(declared) if declared else f'{{"type": "{name}_<version>", "name": "{name}"}}'
    return [problem], f"the recording's request declares it in `tools`: {example}; declare it too"


@dataclass
class Player:
    """One client's place in one recording.

    `match`: how a request is compared with the recorded one (an exchange's own `match` may loosen it);
    None compares nothing, and the recording is a script of responses (rebuilding a fixture, tests).
    `restartable`: a request holding only the recording's first messages starts it over mid-way (the
    classroom's students run their programs again), unless the recording expects that request next.
    `remembers`: each request is judged on what it adds to the last one (a long replay stays linear);
    False judges each whole and keeps nothing of it. `forget` lets go of the last one (the classroom
    keeps a stranger's last request only while it is small: workbook/classroom/students.py).
    `strangers`: requests parsed afresh from a stranger's JSON, where equal is not the same (1 == 1.0
    == true, and the SDK's types take only one of them): a remembered request's shape is then judged
    whole (each message by the SDK's validator), and only the rules on what it adds (the rules read
    strings and structure alone, which equal messages share).
    `sides`: a client's side request (side_request: a title, a quota probe) is answered by side_message
    and uses no turn (the classroom and the grader: real clients send them); False plays it as a turn.
    """

    fixture: dict
    match: Match | None = Match.STRICT
    restartable: bool = False
    remembers: bool = True
    sides: bool = False
    strangers: bool = False
    served: int = 0  # exchanges answered; the next request is turn served + 1
    restarts: int = 0  # times it started over: by a first-turn request (restartable), or by `restart`
    threads: Threads = field(default_factory=Threads)  # conversations held for thread requests
    requests: contract.Requests = field(default_factory=contract.Requests)  # each judged on what it adds

    @property
    def exchanges(self) -> list:
        return self.fixture["exchanges"]

    def play(self, body, betas: contract.Betas = contract.NO_BETAS) -> Played:
        """The recorded answer to one request (a parsed JSON body; `betas` from its headers)."""
        requests = self.judge_with(body)
        problems = requests.sent_problems(body, betas)  # the request as sent: its shape, its betas
        if problems:
            raise Refused(self.served + 1, problems)
        if self.sides and body.get("thread") is None:
            recorded = self.exchanges[self.served] if self.served < len(self.exchanges) else None
            if side_request(body, recorded) and not requests.rule_problems(body["messages"], betas):
                return Played(self.served, side_message(body), body.get("stream") is True, side=True)
        body, thread = self.threads.expand(body)  # a thread's request, whole again (or threads.Refusal)
        try:
            return self.answered(body, thread, requests, betas)
        except (NotPlayed, Refusal):
            # A continue refused once its thread was opened lets the thread go: sent again, it is a 404
            # thread_not_found that costs a lookup (the SDK then sends the whole conversation), never the
            # same expansion again and again (red team five: 3-5 s each, for a 170-byte request)
            self.threads.let_go(thread)
            raise

    def answered(self, body: dict, thread: dict | None, requests: contract.Requests, betas) -> Played:
        """`play`, once a thread's request is whole again."""
        if compaction.is_request(body) and not self.recorded_compaction():
            return self.compacted(body, thread, requests, betas)
        body = self.uncompacted(body, betas)  # a compaction block of ours, back as what it stands for
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
        refusal = undeclared_server_tool(recorded, body)
        if refusal:
            raise Refused(turn, *refusal)
        self.served = turn
        self.threads.hold(thread, body, recorded_message(recorded["response"]))
        kind = thread["type"] if thread else None
        return Played(turn, recorded["response"], body.get("stream") is True, restarted, kind)

    def recorded_compaction(self) -> bool:
        """Whether the recording itself asks for a compaction at this turn (a live run recorded one)."""
        recorded = self.exchanges[self.served]["request"] if self.served < len(self.exchanges) else {}
        return compaction.is_request(recorded)

    def compacted(self, body: dict, thread: dict | None, requests: contract.Requests, betas) -> Played:
        """A compaction request: a side request (workbook/api/compaction.py) answered as the API answers
        it, on the conversation the API would compact, so no recorded turn is used."""
        body = self.uncompacted(body, betas)
        problems = requests.rule_problems(body["messages"], betas)
        if problems:
            raise Refused(self.served + 1, problems)
        message = compaction.answer(body, body["messages"])
        self.threads.hold(thread, body, message)
        kind = thread["type"] if thread else None
        return Played(self.served, message, body.get("stream") is True, thread=kind, side=True)

    def uncompacted(self, body: dict, betas: contract.Betas) -> dict:
        """The request with a compaction block this replay made put back as the messages it stands for,
        those judged as sent (a stranger may have written them); unchanged when it holds none."""
        messages = compaction.expand(body["messages"])
        if messages is body["messages"]:
            return body
        if isinstance(messages, contract.Problem):
            raise Refused(self.served + 1, [messages])
        body = body | {"messages": messages}
        problems = contract.sent_problems(body, betas)
        if problems:
            raise Refused(self.served + 1, problems)
        return body

    def judge_with(self, body) -> contract.Requests:
        """What judges `body`: the requests remembered, or none (it is judged whole; see `strangers`)."""
        if not self.remembers:
            return contract.Requests()
        if self.strangers and not self.each_fits(body):
            self.forget()  # a beta request's messages, or messages the API refuses: judged whole
        return self.requests

    @staticmethod
    def each_fits(body) -> bool:
        """Whether every message of `body` is a message of the SDK's MessageCreateParams: what a
        remembered request equal to the last is taken to be, without judging it again."""
        messages = body.get("messages") if isinstance(body, dict) else None
        return isinstance(messages, list) and all(contract.message_fits("request", m) for m in messages)

    def forget(self) -> None:
        """Keep nothing of the requests judged so far: the next is judged whole."""
        self.requests = contract.Requests()

    def restart(self) -> None:
        """Back to turn 1 (the threads held stay: a continue names its own reply)."""
        self.served, self.restarts = 0, self.restarts + 1

    def diff(self, recorded: dict, body: dict) -> str | None:
        """How the request differs from the recorded one, by the looser of the two matches; None if not."""
        if self.match is None:
            return None
        match = self.match if recorded.get("match") is None else self.match.looser(recorded["match"])
        return request_diff(recorded["request"], body, match)

    def starts_over(self, messages: list) -> bool:
        """A first-turn request mid-way starts over, unless the recording expects one next (a retry)."""
        first = len(self.exchanges[0]["request"]["messages"])
        if self.served == 0 or len(messages) != first:
            return False
        return (
            self.served >= len(self.exchanges)
            or len(self.exchanges[self.served]["request"]["messages"]) != first
        )
