"""The classroom: each student's place in each fixture, their requests judged and answered (no HTTP here)."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbook.api import contract, threads
from workbook.api.compare import Match
from workbook.api.wire import client_headers, events_to_message, message_to_events, stop_reason
from workbook.classroom.columns import Labels, table_row
from workbook.replay.player import Differs, Ended, Player, Refused
from workbook.text import cut_at_word

LOOPBACK = "127.0.0.1"
FIXTURE_HEADER = "x-replay-fixture"
MODEL_PREFIX = "replay:"  # model "replay:s01_hello_agent" picks that fixture
REAL_KEY_PREFIX = "sk-ant-"  # a student who left their real key set: refuse it, never print it

NOT_REACTING = (
    "The replies are recordings: they do not read your tool output. If a tool of yours fails or prints "
    "something else, the next reply is still the recorded one, and may talk about output your tools "
    "never produced. Check your tools' output yourself."
)


ERROR_STATUS = {  # an error event inside a recorded stream, served to a client that did not stream
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}

HINTS = {  # words of a contract problem -> what a student can do about it
    "were found without `tool_result`": "each tool_use id needs one tool_result, in the next user message",
    "unexpected `tool_use_id`": "a tool_result answers a tool_use id from the assistant turn just before",
    "Found multiple `tool_result`": "answer each tool_use id exactly once",
    "must come first": "put the tool_result blocks first in the user message, before any text",
    "ids must be unique": "a tool_use keeps the id the model gave it: append the reply as it came",
    "non-empty content": "every message needs content",
    "first message must use": "the conversation starts with a user message",
    "Extra inputs are not permitted": "the API refuses a field it does not know: check its spelling",
    "Field required": "the API needs model, max_tokens and messages on every request",
    "the beta header": "send that anthropic-beta header, as the SDK does when given betas=[...]",
}


@dataclass
class Limits:
    """What one student, one connection or one request may take of the teacher's machine."""

    body_bytes: int = 32 * 1024 * 1024  # the API's own limit on a request; above it, 413 request_too_large
    students: int = 500  # distinct API keys kept; one more gets a 403 that says to ask the teacher
    key_chars: int = 64  # a name, not an essay: longer keys get a 401
    listed: int = 100  # rows of the class table on the front page and on Enter (/replay/status has all)
    connections: int = 1000  # open at once, each a thread; one more is closed at once
    idle: float = 120.0  # seconds a kept-alive connection may wait for its next request
    headers: float = 10.0  # seconds from a request's first byte to the end of its headers
    body: float = 10.0  # seconds for a body to arrive, plus one per body_rate bytes it holds
    body_rate: int = 256 * 1024  # bytes per second: a slow classroom Wi-Fi still gets 32 MB through
    write: float = 30.0  # seconds to take one reply, for a student who stopped reading
    linger: float = 2.0  # seconds to drain a refused body before closing, so the client reads the refusal
    # A student's last request is kept, so that their next is judged on what it adds (a long conversation
    # stays linear), while it costs at most `remembered` bytes of heap, and the class's together
    # `remembered_all`: memory as parsed (json_text.measured), not the body's length, which was 18 times less
    remembered: int = 16 * 1024 * 1024
    remembered_all: int = 128 * 1024 * 1024


class Mistake(Exception):
    """A request answered with an API-style error: the status, the error type, a teaching message."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        kind: str = "invalid_request_error",
        details: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.kind, self.details = status, kind, details  # details: {"error_code": ...}


@dataclass
class Cursor:
    """One student's place in one fixture (their player), and what the teacher's table shows about it."""

    player: Player
    requests: int = 0
    mistakes: int = 0
    sides: int = 0  # side requests (a title, a quota probe, count_tokens): answered, no turn used
    last: str = ""  # the last result, e.g. "200 tool_use" or "400 messages[2]: ..."
    remembered: int = 0  # bytes of the last request, while its player remembers it (Classroom.remember)

    @property
    def served(self) -> int:
        """Exchanges answered; the next request is turn served + 1."""
        return self.player.served

    @property
    def restarts(self) -> int:
        return self.player.restarts


@dataclass
class Reply:
    """What to send back: a JSON body or SSE events, or nothing at all (a recorded dropped connection)."""

    status: int
    headers: dict
    body: dict | None = None
    events: list | None = None
    drop: bool = False
    side: bool = False  # the answer to a side request (player.side_request, count_tokens): no turn used
    # `body` encoded as JSON (json_bytes), when it was made ahead: a recorded reply's, once per fixture
    data: bytes | None = field(default=None, repr=False, compare=False)


def json_bytes(body) -> bytes:
    """A reply's JSON body as sent: UTF-8, non-ASCII text as it is."""
    return json.dumps(body, ensure_ascii=False).encode()


def api_error(status: int, kind: str, message: str, details: dict | None = None) -> Reply:
    """An error in the API's own shape; `details` carries an error_code the SDK acts on."""
    error = {"type": kind, "message": message} | ({"details": details} if details else {})
    return Reply(status, {}, {"type": "error", "error": error})


class Classroom:
    """Answers each student's request from their own cursor, and logs one line per request."""

    def __init__(
        self,
        fixtures: dict[str, dict],
        out=None,
        max_students: int = Limits.students,
        limits: Limits | None = None,
    ):
        self.fixtures = fixtures  # name -> fixture, in command-line order; the first is the default
        self.cursors: dict[tuple[str, str], Cursor] = {}  # (student, fixture name) -> cursor
        self.desks: dict[str, threading.Lock] = {}  # student -> the lock their own requests take
        self.answered: set[str] = set()  # students a request of whose was answered: they hold a place
        self.lock = threading.Lock()  # guards the two dicts above and `remembered` only, never a check
        self.max_students = max_students
        self.limits = limits or Limits()
        self.remembered = 0  # bytes of the last requests the players remember, the class's together
        self.out = out or sys.stdout
        self.flush = self.out.flush  # after each line; the server may flush once per turn of its loop instead
        self.observer = (
            None  # grade.py's hook: observer(student, fixture, turn, body, reply, mistake, headers)
        )
        # each fixture's recorded replies as a client that does not stream gets them, made once: turn n's
        # is replies[name][n - 1] (its body encoded, its headers those a client reads)
        self.replies = {
            name: [as_json(e["response"]) for e in f["exchanges"]] for name, f in fixtures.items()
        }
        # names as the log and the table show them: cut to their columns, two names never shown alike
        self.student_labels, self.fixture_labels = Labels(STUDENT_COLUMN), Labels(FIXTURE_COLUMN)

    def answer(
        self, student: str, body, chosen: str | None, headers: dict | None = None, size: int | None = None
    ) -> Reply:
        """The reply to one request from one student; a mistake becomes a 400 and a log line.

        `headers` (lower-cased names): their anthropic-beta can change a rule (the contract's Betas); the
        observer sees them all: the grader reads the SDK's own, such as x-stainless-retry-count, to tell
        the student's retries from the library's. `size`: the body's bytes; a small request is
        remembered so that the student's next is judged on what it adds (None: judged whole, kept not)."""
        betas = contract.Betas.of(headers) if headers and "anthropic-beta" in headers else contract.NO_BETAS
        try:
            desk = self.desk(student)
        except Mistake as mistake:
            self.log(student, "-", "", f"{mistake.status} {mistake}")
            return api_error(mistake.status, mistake.kind, str(mistake))
        with desk:  # this student's requests one at a time, in order; other students never wait
            try:
                name = self.pick(body, chosen)
            except Mistake as mistake:
                self.log(student, "-", "", f"{mistake.status} {mistake}")
                self.unseat_if_never_answered(student)
                return api_error(mistake.status, mistake.kind, str(mistake), mistake.details)
            cursor = self.cursor(student, name)
            try:
                reply, note = self.serve(name, cursor, body, betas)
            except Mistake as mistake:
                self.remember(cursor, size)
                cursor.requests += 1
                cursor.mistakes += not is_thread_fallback(mistake)  # the SDK then falls back: not an error
                cursor.last = f"{mistake.status} {mistake}"
                self.log(student, name, self.turn(name, cursor.served + 1), cursor.last)
                self.observe(student, name, cursor.served + 1, body, None, mistake, headers)
                self.unseat_if_never_answered(student)
                return api_error(mistake.status, mistake.kind, str(mistake), mistake.details)
            self.answered.add(student)
            self.remember(cursor, size)
            cursor.sides += reply.side
            cursor.requests += not reply.side
            cursor.last = ("side request · " if reply.side else "") + describe(reply)
            self.log(student, name, self.turn(name, cursor.served), note + cursor.last)
            self.observe(student, name, cursor.served, body, reply, None, headers)
            return reply

    def desk(self, student: str) -> threading.Lock:
        """This student's own lock; a new student is refused once the class is full."""
        with self.lock:
            desk = self.desks.get(student)
            if desk is None:
                if len(self.desks) >= self.max_students:
                    raise Mistake(
                        f"this replay server already keeps {self.max_students} students, its most: "
                        "use the name you used before, or ask the teacher to restart it with a higher "
                        "--max-students",
                        403,
                        "permission_error",
                    )
                desk = self.desks[student] = threading.Lock()
            return desk

    def cursor(self, student: str, name: str) -> Cursor:
        """This student's place in this fixture, made at their first request to it."""
        with self.lock:
            cursor = self.cursors.get((student, name))
            if cursor is None:
                player = Player(
                    self.fixtures[name], Match.CONVERSATION, restartable=True, sides=True, strangers=True
                )
                cursor = self.cursors[(student, name)] = Cursor(player)
            return cursor

    def remember(self, cursor: Cursor, size: int | None) -> None:
        """Whether the student's player keeps the request it just judged (it did): only while what it
        costs on the heap (`size`) is small and the class's remembered requests together fit
        (Limits.remembered, remembered_all)."""
        with self.lock:
            self.remembered -= cursor.remembered
            keep = size is not None and size <= self.limits.remembered
            keep = keep and self.remembered + size <= self.limits.remembered_all
            cursor.remembered = size if keep else 0
            self.remembered += cursor.remembered
        if not keep:
            cursor.player.forget()

    def observe(
        self, student: str, name: str, turn: int, body, reply: Reply | None, mistake, headers
    ) -> None:
        """Tell the observer, if any, what one request got: the recorded reply of `turn`, or a mistake."""
        if self.observer:
            self.observer(student, name, turn, body, reply, mistake, headers or {})

    def pick(self, body, chosen: str | None) -> str:
        """The fixture a request asks for: the header, else model "replay:NAME", else the default."""
        model = body.get("model") if isinstance(body, dict) else None
        if not chosen and isinstance(model, str) and model.startswith(MODEL_PREFIX):
            chosen = model[len(MODEL_PREFIX) :]
        if not chosen:
            return next(iter(self.fixtures))
        name = Path(chosen.strip()).stem  # "fixtures/s01_hello_agent.json" works too
        if name not in self.fixtures:
            served = ", ".join(self.fixtures)
            raise Mistake(
                f"no fixture {chosen[:60]!r} on this replay server; it serves: {served}",
                404,
                "not_found_error",
            )
        return name

    def serve(self, name: str, cursor: Cursor, body, betas: contract.Betas) -> tuple[Reply, str]:
        """The student's player answers (workbook/replay/player.py); what it cannot answer is a Mistake."""
        try:
            played = cursor.player.play(body, betas)
        except threads.Refusal as refusal:
            raise Mistake(str(refusal), refusal.status, refusal.kind, refusal.details) from None
        except Refused as refused:
            compared = (
                f". Compared with the recording of turn {refused.turn}: {refused.diff}"
                if refused.diff
                else ""
            )
            raise Mistake(with_hint(refused.problems) + compared) from None
        except Ended as ended:
            raise Mistake(past_the_end(name, cursor.player.exchanges, ended.messages)) from None
        except Differs as differs:
            raise Mistake(
                f"{name}, turn {differs.turn}: your request differs from the recording: {differs.diff}"
            ) from None
        if played.side:
            return side_reply(played.response, played.stream), ""
        note = ("restart · " if played.restarted else "") + (
            f"thread {played.thread} · " if played.thread else ""
        )
        if played.stream:
            return recorded_reply(played.response, True), note
        made = self.replies[name][played.turn - 1]
        return Reply(made.status, made.headers, made.body, drop=made.drop, data=made.data), note

    def count_tokens(self, student: str, body, chosen: str | None, headers: dict | None = None) -> Reply:
        """POST /v1/messages/count_tokens: `{"input_tokens": N}`, N an estimate (a quarter of the
        characters of its system, messages and tools as JSON: no tokenizer here), and no turn used."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self.log(student, "-", "", "400 count_tokens: messages: Field required")
            return api_error(400, "invalid_request_error", "messages: Field required")
        try:
            desk = self.desk(student)
            with desk:
                name = self.pick(body, chosen)
                cursor = self.cursor(student, name)
                counted = json.dumps([body.get("system"), body["messages"], body.get("tools")], default=str)
                reply = Reply(200, {}, {"input_tokens": max(1, len(counted) // 4)}, side=True)
                cursor.sides += 1
                cursor.last = f"side request · count_tokens {reply.body['input_tokens']} (an estimate)"
                self.log(student, name, self.turn(name, cursor.served), cursor.last)
                self.observe(student, name, cursor.served, body, reply, None, headers)
                return reply
        except Mistake as mistake:
            self.log(student, "-", "", f"{mistake.status} {mistake}")
            return api_error(mistake.status, mistake.kind, str(mistake), mistake.details)

    def reset(self, student: str) -> list[str]:
        """Put every cursor of this student back at turn 1; the fixtures they had started."""
        with self.lock:
            desk = self.desks.get(student)
        names = []
        if desk is not None:
            with desk:
                with self.lock:
                    names = [name for (who, name) in self.cursors if who == student]
                for name in names:
                    cursor = self.cursors[(student, name)]
                    cursor.player.restart()
                    cursor.last = "reset"
        self.log(student, ", ".join(names) or "-", "", "reset")
        return names

    def unseat_if_never_answered(self, student: str) -> None:
        """A name whose every request was refused holds no place: 300 refused requests, each with a new
        name, filled an address's names for 10 minutes and locked its next student out (red team five).
        The teacher's log still has a line for each."""
        if student not in self.answered:
            self.forget(student)

    def forget(self, student: str) -> None:
        """Take a student off the roll, with their place in every fixture (the server makes room this
        way for a new name when the class is full and this one has been quiet the longest)."""
        with self.lock:
            self.desks.pop(student, None)
            self.answered.discard(student)
            for key in [key for key in self.cursors if key[0] == student]:
                self.remembered -= self.cursors.pop(key).remembered

    def turn(self, name: str, n: int) -> str:
        """Turn n of the fixture, or "done" for a request that comes after its last turn."""
        turns = len(self.fixtures[name]["exchanges"])
        return f"turn {n}/{turns}" if n <= turns else "done"

    def log(self, student: str, fixture: str, turn: str, result: str) -> None:
        """One short line per event for the teacher's terminal, escape codes shown, never obeyed: names cut
        to their columns with a mark (Labels), the result cut at a word."""
        with self.lock:  # the labels are shared by every student's thread
            student, fixture = self.student_labels(escaped(student)), self.fixture_labels(escaped(fixture))
        start = f"{clock()}  {student:<{STUDENT_COLUMN}} {fixture:<{FIXTURE_COLUMN}} {turn:<10} "
        line = start + cut_at_word(escaped(result), LOG_LINE - len(start))
        self.out.write(line + "\n")  # one write, so lines from two threads never interleave
        self.flush()

    def status(self) -> dict:
        """Every fixture and every student's cursor, as JSON for GET /replay/status."""
        with self.lock:
            cursors = sorted(self.cursors.items())
        fixtures = [{"name": n, "turns": len(f["exchanges"])} for n, f in self.fixtures.items()]
        students = [
            {
                "student": who,
                "fixture": name,
                "turn": c.served,
                "turns": len(self.fixtures[name]["exchanges"]),
            }
            | {"requests": c.requests, "mistakes": c.mistakes, "restarts": c.restarts, "side": c.sides}
            | {"last": c.last[:200]}
            for (who, name), c in cursors
        ]
        return {"default": next(iter(self.fixtures)), "fixtures": fixtures, "students": students}

    def table(self, most: int = Limits.listed) -> str:
        """The class on one screen: who is on which turn, who hit which error (the first `most` rows)."""
        rows = [("student", "fixture", "turn", "requests", "mistakes", "restarts", "last")]
        students = self.status()["students"]
        for s in students[:most]:
            turn = f"{s['turn']}/{s['turns']}" + (" done" if s["turn"] == s["turns"] else "")
            asked = str(s["requests"]) + (f"+{s['side']} side" if s["side"] else "")  # no turn used
            counts = (asked, str(s["mistakes"]), str(s["restarts"]))
            with self.lock:
                name = self.student_labels(escaped(s["student"]))
                fixture = self.fixture_labels(escaped(s["fixture"]))
            rows.append((name, fixture, turn, *counts, escaped(s["last"])))
        if len(rows) == 1:
            return "no student has sent a request yet"
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        lines = [table_row(row, widths) for row in rows]
        if len(students) > most:
            lines.append(f"... and {len(students) - most} more rows: GET /replay/status lists them all")
        return "\n".join(lines)


STUDENT_COLUMN, FIXTURE_COLUMN = 12, 24  # the log's and the table's name columns
LOG_LINE = 150  # the most a log line holds: a terminal wraps it, but one line stays one event


_clock = [0, ""]  # the second, and the time of day it reads as: formatted once a second, not once a line


def clock() -> str:
    """The time of day for the log, HH:MM:SS."""
    now = int(time.time())
    if now != _clock[0]:
        _clock[:] = [now, time.strftime("%H:%M:%S", time.localtime(now))]
    return _clock[1]


def is_thread_fallback(mistake: Mistake) -> bool:
    """A thread replay cannot hold, refused as the API documents: the client then sends the whole
    conversation itself. Part of the protocol, so neither the class table nor the grader counts it."""
    return (mistake.details or {}).get("error_code") == "thread_unsupported_request"


def past_the_end(name: str, exchanges: list, messages: list) -> str:
    """Why no recorded reply is left, and how to start over: a new question, or a loop that kept asking."""
    last = stop_reason(exchanges[-1]["response"])
    over = f"{name} holds {len(exchanges)} turns and all were answered"
    ended_on = recorded_failure(exchanges[-1]["response"])
    start_over = (
        "To start over, run your program again (a request holding only the first message starts you "
        "at turn 1), or POST /replay/reset with your API key; another API key (name) starts fresh too."
    )
    if ended_on:
        return (
            f"{over}: the recording ended on {ended_on}, and your program sent another request after it. "
            f"A program stops on an error it cannot fix, with a clear message (s03). {start_over}"
        )
    if (
        messages
        and messages[-1].get("role") == "user"
        and not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in _content(messages[-1]))
    ):
        return (
            f"{over}: your loop stopped as it should (stop_reason {last}), and then a new question "
            "came after the recording's last reply. The recording holds no reply to it: a new "
            f"conversation began. {start_over}"
        )
    return (
        f"{over}: your loop asked again after the last reply (stop_reason {last}). A loop stops when "
        f"stop_reason is not tool_use. {start_over}"
    )


def recorded_failure(response: dict) -> str | None:
    """A recorded response that is no reply, in words ("a 401 authentication_error: invalid x-api-key");
    None for a reply."""
    if "error" in response:
        return "a dropped connection"
    if response.get("status") == 200:
        return None
    error = (response.get("body") or {}).get("error") or {}
    said = f": {printable(str(error['message']))[:120]}" if error.get("message") else ""
    return f"a {response.get('status')} {error.get('type', 'error')}{said}"


def _content(message) -> list:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def escaped(text: str) -> str:
    """Text safe for a terminal, every character still shown: control and format characters (escape
    codes, bidi overrides) written as escapes (`\\x1b`); workbook/display.py's `printable` drops them."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


printable = escaped  # the name server.py imports


def with_hint(problems: list) -> str:
    """The contract's first problem in the API's words, then what a student can do about it."""
    first = str(problems[0])
    hint = next((h for key, h in HINTS.items() if key in first), "")
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return first + (f" — {hint}" if hint else "") + more


def recorded_reply(response: dict, stream: bool) -> Reply:
    """The recorded response, as SSE if the student streams and as JSON if not.

    Of its recorded headers, only those a client reads are kept (request-id, retry-after...): never one
    that frames the reply (content-length, transfer-encoding: the server's own), never a control
    character, never a wait over a minute (wire.client_headers)."""
    if "error" in response:  # a recorded connection failure or timeout: close without answering
        return Reply(0, {}, drop=True)
    headers = client_headers(response.get("headers"))
    headers.pop("content-type", None)  # the server says what it sends
    if response["status"] != 200:
        return Reply(response["status"], headers, response["body"])
    if "stream" in response:
        if stream:
            return Reply(200, headers, events=response["stream"])
        message = events_to_message(response["stream"])
        if message.get("type") == "error":
            return Reply(ERROR_STATUS.get(message["error"].get("type"), 500), headers, message)
        return Reply(200, headers, message)
    body = response["body"]
    return Reply(200, headers, events=message_to_events(body)) if stream else Reply(200, headers, body)


def as_json(response: dict) -> Reply:
    """A recorded response as a client that does not stream gets it (recorded_reply), its body encoded."""
    reply = recorded_reply(response, False)
    if reply.body is not None:
        reply.data = json_bytes(reply.body)
    return reply


def side_reply(message: dict, stream: bool) -> Reply:
    """A side request's answer (player.side_message), as SSE if it streams."""
    if stream:
        return Reply(200, {}, events=message_to_events(message), side=True)
    return Reply(200, {}, message, side=True)


def describe(reply: Reply) -> str:
    """A reply in a few words for the log: status and stop_reason, or the recorded error."""
    if reply.drop:
        return "recorded connection failure: closed without an answer"
    body = reply.body or events_to_message(reply.events)
    if body.get("type") == "error":
        return f"{reply.status} {body['error'].get('type')} (recorded)"
    kind = "stream" if reply.events is not None else "json"
    return f"{reply.status} {body.get('stop_reason')} ({kind})"
