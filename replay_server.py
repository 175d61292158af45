"""replay_server.py — the classroom replay server: any student's loop, in any language, offline.

An Anthropic-compatible `POST /v1/messages` on the teacher's machine, answering from recorded
fixtures. A student points their own loop at it (the Python or TypeScript SDK, curl, a loop written
from scratch) with their name as the API key, and gets the recorded replies, turn by turn:

    ANTHROPIC_BASE_URL=http://127.0.0.1:8765  ANTHROPIC_API_KEY=alice  python my_loop.py

Each request is checked as the real API would check it (required fields, the anthropic-version
header, roles alternating, every tool_use answered by one tool_result), then compared with the
recorded request by the conversation's shape only: roles, block types, tool_use ids and the
tool_result pairing. A student's own system prompt, tools, max_tokens and text are theirs. A
mistake is answered the way the API answers it, a 400 `invalid_request_error`, with a message
that says which message and which tool_use id, and how the request differs from the recording.

The rules, in one place (docs/teaching.md explains them to a class):
  - one cursor per student (the API key they send) and per fixture;
  - a request holding only the first message starts that student over, unless the recording
    itself expects a first message next (a retry after a recorded 529); POST /replay/reset too;
  - the first fixture on the command line is the default; `model: "replay:NAME"` or the header
    `x-replay-fixture: NAME` picks another;
  - `stream: true` gets SSE and a plain request gets JSON, whichever way the fixture was recorded;
  - server-held threads (the SDK tool runner's default) work: a `continue` is checked as the whole
    conversation it stands for (threads.py); what replay cannot hold is refused so the SDK falls back;
  - recorded errors (429, 529 ...) are served as recorded, headers included; a recorded
    connection failure or timeout closes the connection without an answer.

A class at once (the limits are `Limits`, below): each student's checks run under that student's own
lock, so one student's big request never waits on, or holds up, another's; a body above the API's
32 MB is a 413 before it is read; slow clients time out; students and connections are capped; names
reach the teacher's terminal escaped.
The recorded replies are recordings: they do not read a student's tool output (the front page says so).

Run: python replay.py serve fixtures/s01_hello_agent.json [MORE.json ...] [--port 8765] [--host 0.0.0.0]
"""

from __future__ import annotations

import argparse
import gc
import html
import io
import json
import re
import socket
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import replay
import threads

DEFAULT_PORT = 8765
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
HINTS = {  # an API rule broken -> what to do about it (matched on replay.api_rule_problems' wording)
    "has no tool_result": "every tool_use id needs exactly one tool_result, all in the next user message",
    "answers no tool_use": "a tool_result's tool_use_id must be an id from the assistant message just before",
    "in a row": "roles alternate: append the assistant's reply, then one user message with all the results",
    "ends on tool_use": "run the tools and send their results before asking again",
    "answered": "answer each tool_use id exactly once",
    "must come before": "put the tool_result blocks first in the user message, before any text",
    "content is empty": "every message needs content",
    "must come from the user": "the conversation starts with a user message",
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
    """One student's place in one fixture, and what the teacher's table shows about it."""

    served: int = 0  # exchanges answered; the next request is turn served + 1
    requests: int = 0
    mistakes: int = 0
    restarts: int = 0
    last: str = ""  # the last result, e.g. "200 tool_use" or "400 messages[2]: ..."
    threads: threads.Threads = field(default_factory=threads.Threads)  # conversations held for this student


@dataclass
class Reply:
    """What to send back: a JSON body or SSE events, or nothing at all (a recorded dropped connection)."""

    status: int
    headers: dict
    body: dict | None = None
    events: list | None = None
    drop: bool = False


def api_error(status: int, kind: str, message: str, details: dict | None = None) -> Reply:
    """An error in the API's own shape; `details` carries an error_code the SDK acts on."""
    error = {"type": kind, "message": message} | ({"details": details} if details else {})
    return Reply(status, {}, {"type": "error", "error": error})


# -- the classroom: fixtures, cursors, the teacher's log (no HTTP here) ----------------------------


class Classroom:
    """Answers each student's request from their own cursor, and logs one line per request."""

    def __init__(self, fixtures: dict[str, dict], out=None, max_students: int = Limits.students):
        self.fixtures = fixtures  # name -> fixture, in command-line order; the first is the default
        self.cursors: dict[tuple[str, str], Cursor] = {}  # (student, fixture name) -> cursor
        self.desks: dict[str, threading.Lock] = {}  # student -> the lock their own requests take
        self.lock = threading.Lock()  # guards the two dicts above only, never a check
        self.max_students = max_students
        self.out = out or sys.stdout
        self.observer = None  # grade.py's hook: observer(student, fixture, turn, body, reply, mistake)

    def answer(self, student: str, body, chosen: str | None) -> Reply:
        """The reply to one request from one student; a mistake becomes a 400 and a log line."""
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
                return api_error(mistake.status, mistake.kind, str(mistake), mistake.details)
            cursor = self.cursor(student, name)
            cursor.requests += 1
            try:
                reply, note = self.serve(name, cursor, body)
            except Mistake as mistake:
                cursor.mistakes += 1
                cursor.last = f"{mistake.status} {mistake}"
                self.log(student, name, self.turn(name, cursor.served + 1), cursor.last)
                self.observe(student, name, cursor.served + 1, body, None, mistake)
                return api_error(mistake.status, mistake.kind, str(mistake), mistake.details)
            cursor.last = describe(reply)
            self.log(student, name, self.turn(name, cursor.served), note + cursor.last)
            self.observe(student, name, cursor.served, body, reply, None)
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
            return self.cursors.setdefault((student, name), Cursor())

    def observe(self, student: str, name: str, turn: int, body, reply: Reply | None, mistake) -> None:
        """Tell the observer, if any, what one request got: the recorded reply of `turn`, or a mistake."""
        if self.observer:
            self.observer(student, name, turn, body, reply, mistake)

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

    def serve(self, name: str, cursor: Cursor, body) -> tuple[Reply, str]:
        """Check the request, move the cursor, and return the recorded reply (and a log note)."""
        check_request(body)
        try:  # a thread request becomes the whole conversation again, then is checked like any other
            body, thread = cursor.threads.expand(body)
        except threads.Refusal as refusal:
            raise Mistake(str(refusal), refusal.status, refusal.kind, refusal.details) from None
        exchanges, note = self.fixtures[name]["exchanges"], ""
        broken = rule_problem(body["messages"])  # what the API itself would reject
        if not broken and self.starts_over(name, cursor, body["messages"]):
            cursor.served, note = 0, "restart · "
            cursor.restarts += 1
        if thread:  # the teacher's log shows which turns came as a thread
            note += f"thread {thread['type']} · "
        turn, recorded = cursor.served + 1, None
        if cursor.served < len(exchanges):
            recorded = exchanges[cursor.served]
        diff = recorded and replay.request_diff(recorded["request"], body, conversation_only=True)
        if broken:
            raise Mistake(broken + (f". Compared with the recording of turn {turn}: {diff}" if diff else ""))
        if recorded is None:
            raise Mistake(past_the_end(name, exchanges, body["messages"]))
        if diff:
            raise Mistake(f"{name}, turn {turn}: your request differs from the recording: {diff}")
        cursor.served += 1
        cursor.threads.hold(thread, body, replay.recorded_message(recorded["response"]))
        return recorded_reply(recorded["response"], body.get("stream") is True), note

    def starts_over(self, name: str, cursor: Cursor, messages: list) -> bool:
        """A first-turn request mid-run restarts the student, unless the recording expects one next."""
        exchanges = self.fixtures[name]["exchanges"]
        first = len(exchanges[0]["request"]["messages"])
        if cursor.served == 0 or len(messages) != first:
            return False
        return (
            cursor.served >= len(exchanges) or len(exchanges[cursor.served]["request"]["messages"]) != first
        )

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
                    cursor.served, cursor.last = 0, "reset"
                    cursor.restarts += 1
        self.log(student, ", ".join(names) or "-", "", "reset")
        return names

    def turn(self, name: str, n: int) -> str:
        return f"turn {n}/{len(self.fixtures[name]['exchanges'])}"

    def log(self, student: str, fixture: str, turn: str, result: str) -> None:
        """One short line per event for the teacher's terminal, escape codes shown, never obeyed."""
        student, fixture = printable(student)[:12], printable(fixture)[:24]
        line = f"{datetime.now():%H:%M:%S}  {student:<12} {fixture:<24} {turn:<10} {printable(result)}"
        self.out.write(line[:150] + "\n")  # one write, so lines from two threads never interleave
        self.out.flush()

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
            | {"requests": c.requests, "mistakes": c.mistakes, "restarts": c.restarts, "last": c.last[:200]}
            for (who, name), c in cursors
        ]
        return {"default": next(iter(self.fixtures)), "fixtures": fixtures, "students": students}

    def table(self, most: int = Limits.listed) -> str:
        """The class on one screen: who is on which turn, who hit which error (the first `most` rows)."""
        rows = [("student", "fixture", "turn", "requests", "mistakes", "restarts", "last")]
        students = self.status()["students"]
        for s in students[:most]:
            turn = f"{s['turn']}/{s['turns']}" + (" done" if s["turn"] == s["turns"] else "")
            counts = (str(s["requests"]), str(s["mistakes"]), str(s["restarts"]))
            name, last = printable(s["student"])[:32], printable(s["last"])[:70]
            rows.append((name, s["fixture"], turn, *counts, last))
        if len(rows) == 1:
            return "no student has sent a request yet"
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows]
        if len(students) > most:
            lines.append(f"... and {len(students) - most} more rows: GET /replay/status lists them all")
        return "\n".join(lines)


# -- checking a request as the API would ----------------------------------------------------------


def check_request(body) -> None:
    """The fields the API requires, with the types it requires; raise a Mistake naming the first gap."""
    if not isinstance(body, dict):
        raise Mistake("the request body must be a JSON object with model, max_tokens and messages")
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            raise Mistake(
                f"{key}: Field required — the API needs model, max_tokens and messages on every request"
            )
    if not isinstance(body["model"], str) or not body["model"]:
        raise Mistake("model: must be a non-empty string, e.g. claude-sonnet-5")
    if (
        not isinstance(body["max_tokens"], int)
        or isinstance(body["max_tokens"], bool)
        or body["max_tokens"] < 1
    ):
        raise Mistake(f"max_tokens: must be a positive integer, got {json.dumps(body['max_tokens'])}")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise Mistake(f"stream: must be true or false, got {json.dumps(body['stream'])}")
    if not isinstance(body["messages"], list):
        raise Mistake("messages: must be a list of {role, content} objects")
    for i, message in enumerate(body["messages"]):
        check_message(i, message)


def check_message(i: int, message) -> None:
    """One message: an object with a role and content; each block an object with the fields it needs."""
    if not isinstance(message, dict) or "role" not in message or "content" not in message:
        raise Mistake(f"messages[{i}]: each message must be an object with role and content")
    content = message["content"]
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise Mistake(f"messages[{i}].content: must be a string or a list of content blocks")
    needs = {"tool_use": ("id", "name"), "tool_result": ("tool_use_id",), "text": ("text",)}
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise Mistake(f"messages[{i}].content[{j}]: a content block must be an object with a type")
        for key in needs.get(block["type"], ()):
            if not isinstance(block.get(key), str):
                raise Mistake(f"messages[{i}].content[{j}]: a {block['type']} block needs {key} (a string)")


def past_the_end(name: str, exchanges: list, messages: list) -> str:
    """Why no recorded reply is left, and how to start over: a new question, or a loop that kept asking."""
    last = stop_reason(exchanges[-1]["response"])
    over = f"{name} holds {len(exchanges)} turns and all were answered"
    start_over = (
        "To start over, run your program again (a request holding only the first message starts you "
        "at turn 1), or POST /replay/reset with your API key; another API key (name) starts fresh too."
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


def _content(message) -> list:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def printable(text: str) -> str:
    """Text safe for a terminal: control and format characters (escape codes, bidi overrides) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def rule_problem(messages: list) -> str | None:
    """The first conversation rule broken (roles, tool_use/tool_result pairing), and what to do about it."""
    problems = replay.api_rule_problems(messages)
    if not problems:
        return None
    hint = next((h for key, h in HINTS.items() if key in problems[0]), "")
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return problems[0] + (f" — {hint}" if hint else "") + more


# -- turning a recorded response into a reply ------------------------------------------------------


def recorded_reply(response: dict, stream: bool) -> Reply:
    """The recorded response, as SSE if the student streams and as JSON if not, headers kept."""
    if "error" in response:  # a recorded connection failure or timeout: close without answering
        return Reply(0, {}, drop=True)
    headers = {k: v for k, v in response.get("headers", {}).items() if k.lower() != "content-type"}
    if response["status"] != 200:
        return Reply(response["status"], headers, response["body"])
    if "stream" in response:
        if stream:
            return Reply(200, headers, events=response["stream"])
        message = replay.events_to_message(response["stream"])
        if message.get("type") == "error":
            return Reply(ERROR_STATUS.get(message["error"].get("type"), 500), headers, message)
        return Reply(200, headers, message)
    body = response["body"]
    return Reply(200, headers, events=replay.message_to_events(body)) if stream else Reply(200, headers, body)


def stop_reason(response: dict) -> str | None:
    """The stop_reason of a recorded response, streamed or not (None for an error)."""
    if response.get("status") != 200:
        return None
    if "stream" in response:
        return replay.events_to_message(response["stream"]).get("stop_reason")
    return response["body"].get("stop_reason")


def describe(reply: Reply) -> str:
    """A reply in a few words for the log: status and stop_reason, or the recorded error."""
    if reply.drop:
        return "recorded connection failure: closed without an answer"
    body = reply.body or replay.events_to_message(reply.events)
    if body.get("type") == "error":
        return f"{reply.status} {body['error'].get('type')} (recorded)"
    kind = "stream" if reply.events is not None else "json"
    return f"{reply.status} {body.get('stop_reason')} ({kind})"


# -- HTTP ------------------------------------------------------------------------------------------


class Refusal(Exception):
    """A request answered before its body is read (too large, a bad length): answer, then close."""

    def __init__(self, reply: Reply):
        super().__init__(reply.body["error"]["message"])
        self.reply = reply


class TimedReader(io.RawIOBase):
    """A socket's incoming bytes, each read bounded by a deadline the handler sets.

    A socket timeout alone bounds each wait, so a client sending a byte every few seconds (slowloris)
    would hold its thread forever; a deadline bounds the whole of the headers, or of the body.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.deadline = time.monotonic()

    def within(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the client took too long to send its request")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class Handler(BaseHTTPRequestHandler):
    """POST /v1/messages, POST /replay/reset, GET /replay/status, GET / (how to connect + the table)."""

    protocol_version = "HTTP/1.1"  # keep-alive, and chunked SSE
    server_version = "workbook-replay/1"
    server: ReplayServer
    # Speed: headers and body gather in one buffer and leave in one write (http.server flushes after
    # each request), and Nagle is off for the SSE events flushed one by one. Two small writes with
    # Nagle on wait for the client's delayed ACK: 40 ms a request.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        self.rfile.close()  # replaced by one whose reads keep to the deadlines of `Limits`
        self.reader = TimedReader(self.connection)
        self.rfile = io.BufferedReader(self.reader, 64 * 1024)

    def handle_one_request(self):
        """Wait (bounded) for the next request on this connection; from its first byte, time its headers."""
        self.reader.within(self.server.limits.idle)
        try:
            arrived = self.rfile.peek(1)
        except (TimeoutError, ConnectionError):
            arrived = b""
        if not arrived:  # the student hung up, or stayed idle too long: close quietly
            self.close_connection = True
            return
        self.reader.within(self.server.limits.headers)
        super().handle_one_request()  # a TimeoutError in there is logged (log_error) and closes

    def do_POST(self):
        try:
            raw = self.read_body()
            path = urlsplit(self.path).path.rstrip("/")
            if path == "/v1/messages":
                self.send(self.messages(raw))
            elif path == "/replay/reset":
                self.send(self.reset())
            else:
                self.send(not_found(path))
        except Refusal as refusal:
            self.refuse(refusal.reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except TimeoutError:
            raise  # handle_one_request logs it and closes the connection
        except Exception as err:  # a bug here must not look like the student's mistake, nor kill the server
            self.server.classroom.log("?", "-", "", f"500 server error: {err!r}")
            self.send(api_error(500, "api_error", f"the replay server failed ({err!r}); tell the teacher"))

    def do_GET(self):
        path = urlsplit(self.path).path.rstrip("/")
        classroom = self.server.classroom
        if path == "/replay/status":
            self.send(Reply(200, {}, classroom.status()))
        elif path == "":
            self.send_page(self.front_page())
        else:
            self.send(not_found(path))

    def messages(self, raw: bytes) -> Reply:
        """Who is asking, whether the API would even read the request, then the classroom's answer."""
        student = self.student()
        if isinstance(student, Reply):
            return student
        if not self.headers.get("anthropic-version"):
            self.server.classroom.log(student, "-", "", "400 no anthropic-version header")
            return api_error(
                400,
                "invalid_request_error",
                "anthropic-version: header is required — send `anthropic-version: 2023-06-01`",
            )
        try:
            body = parse_json(raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            self.server.classroom.log(student, "-", "", "400 body is not JSON")
            return api_error(400, "invalid_request_error", f"the request body is not valid JSON ({err})")
        return self.server.classroom.answer(student, body, self.headers.get(FIXTURE_HEADER))

    def reset(self) -> Reply:
        student = self.student()
        if isinstance(student, Reply):
            return student
        return Reply(200, {}, {"reset": student, "fixtures": self.server.classroom.reset(student)})

    def student(self) -> str | Reply:
        """The API key the client sent (x-api-key or a bearer token): the student's name, or a 401."""
        key = self.headers.get("x-api-key", "")
        auth = self.headers.get("authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[len("bearer ") :]
        key, most = utf8(key).strip(), self.server.limits.key_chars
        if not key:
            problem, logged = "x-api-key header is required", "401 no API key"
        elif key.startswith(REAL_KEY_PREFIX):  # never printed: an API key never reaches a log
            problem, logged = "that looks like a real Anthropic API key", "401 a real API key (not shown)"
        elif len(key) > most:
            problem, logged = f"the API key is {len(key)} characters long", f"401 an API key over {most}"
        else:
            return key
        self.server.classroom.log("?", "-", "", logged)
        return api_error(
            401,
            "authentication_error",
            f"{problem} — on the replay server, send your name as the API key, at most {most} characters "
            "(e.g. ANTHROPIC_API_KEY=alice)",
        )

    def read_body(self) -> bytes:
        """The request body, sent with a Content-Length or chunked; a Refusal if too large or malformed."""
        limits = self.server.limits
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self.reader.within(limits.body + limits.body_bytes / limits.body_rate)
        if not chunked:
            length = self.body_length()
            self.reader.within(limits.body + length / limits.body_rate)
            return self.rfile.read(length)
        if self.headers.get("content-length"):
            raise Refusal(bad_request("send a content-length or transfer-encoding: chunked, not both"))
        chunks, total = [], 0
        while size := self.chunk_size():
            total += size
            if total > limits.body_bytes:
                raise Refusal(too_large(limits.body_bytes, f"the chunks so far add up to {total:,} bytes"))
            chunks.append(self.rfile.read(size))
            self.rfile.readline(64)
        while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):  # trailers, then the blank line
            pass
        return b"".join(chunks)

    def body_length(self) -> int:
        """The content-length header as a number of bytes: a Refusal (400, 413) when it is not one we take."""
        values = {v.strip() for v in self.headers.get_all("content-length") or []}
        if len(values) > 1:
            raise Refusal(bad_request(f"content-length: sent {len(values)} times with different values"))
        value = values.pop() if values else "0"
        if not re.fullmatch(r"[0-9]+", value):
            raise Refusal(bad_request(f"content-length: must be a whole number of bytes, got {value[:20]!r}"))
        if len(value) > 12 or int(value) > self.server.limits.body_bytes:
            claim = f"{int(value[:12]):,}" + ("…" if len(value) > 12 else "")
            raise Refusal(too_large(self.server.limits.body_bytes, f"this one says content-length: {claim}"))
        return int(value)

    def chunk_size(self) -> int:
        line = self.rfile.readline(64)
        try:
            return int(line.split(b";")[0].strip() or b"x", 16)
        except ValueError:
            raise Refusal(
                bad_request(f"a chunk's size must be a hexadecimal number, got {line[:20]!r}")
            ) from None

    def handle_expect_100(self) -> bool:
        """A client that waits for 100 Continue before sending a body too large hears 413 at once instead."""
        try:
            self.body_length()
        except Refusal as refusal:
            self.refuse(refusal.reply)
            return False
        return super().handle_expect_100()

    def refuse(self, reply: Reply) -> None:
        """Answer a request whose body was not read, then close the connection.

        The client may still be sending that body: read and drop it for a bounded time, or closing
        with unread bytes would reset the connection before the client reads the answer.
        """
        message = reply.body["error"]["message"]
        self.server.classroom.log("?", "-", "", f"{self.client_address[0]}: {reply.status} {message}")
        self.send(Reply(reply.status, reply.headers | {"connection": "close"}, reply.body))
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.reader.within(self.server.limits.linger)
            while self.rfile.read1(64 * 1024):
                pass
        except OSError:  # a reset or the linger's end: either way, done with this client
            pass

    def send(self, reply: Reply) -> None:
        """Write a reply: JSON with a length, or SSE one chunk per event; or close, for a recorded drop."""
        if reply.drop:
            self.close_connection = True
            return
        self.connection.settimeout(self.server.limits.write)
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        if reply.events is None:
            data = json.dumps(reply.body, ensure_ascii=False).encode()
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for event in reply.events:
            chunk = replay.sse_bytes([event])
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def send_page(self, text: str) -> None:
        """The front page: HTML for a browser (every name escaped), plain text for curl."""
        if "text/html" in self.headers.get("accept", ""):
            title = "Agent Loop Workbook: classroom replay server"
            page = (
                f"<!doctype html><meta charset=utf-8><title>{title}</title><pre>{html.escape(text)}</pre>\n"
            )
            data, kind = page.encode(), "text/html; charset=utf-8"
        else:
            data, kind = text.encode(), "text/plain; charset=utf-8"
        self.connection.settimeout(self.server.limits.write)
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("x-content-type-options", "nosniff")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def front_page(self) -> str:
        """What a browser pointed at the server shows: how to connect, then the class table."""
        host = printable(self.headers.get("host") or self.server.url.split("//")[1])[:100]
        names = ", ".join(self.server.classroom.fixtures)
        return (
            "Agent Loop Workbook: classroom replay server\n\n"
            f"  ANTHROPIC_BASE_URL=http://{host}  ANTHROPIC_API_KEY=<your name>\n\n"
            f'fixtures: {names} (the first is the default; model "replay:NAME" or header '
            f"{FIXTURE_HEADER}: NAME picks another)\n"
            "start over: send the first message alone, or POST /replay/reset with your key\n\n"
            + textwrap.fill(NOT_REACTING, 100)
            + "\n\n"
            + self.server.classroom.table(self.server.limits.listed)
            + "\n"
        )

    def log_error(self, format, *args):  # http.server's own errors (timeouts, bad request lines): one line
        self.server.classroom.log("?", "-", "", f"{self.client_address[0]}: {format % args}")

    def log_message(self, format, *args):  # the teacher's log replaces http.server's own
        pass


def utf8(header: str) -> str:
    """A header value as the client wrote it: http.server reads headers as latin-1, curl sends UTF-8."""
    try:
        return header.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return header


def parse_json(raw: bytes):
    """The body as JSON. json.loads holds the interpreter for the whole parse (about 150 ms for a
    17 MB body of small blocks here), and every other student's thread waits; a hook written in
    Python, called for each object, lets the interpreter switch threads as it goes."""
    if len(raw) < 256 * 1024:
        return json.loads(raw)
    return json.loads(raw, object_pairs_hook=object_in_python)


def object_in_python(pairs: list) -> dict:
    return dict(pairs)


def bad_request(message: str) -> Reply:
    return api_error(400, "invalid_request_error", message)


def too_large(limit: int, detail: str) -> Reply:
    """The API's answer to a request over its limit (32 MB), with what to do about it."""
    most = f"{limit // 2**20} MB" if limit % 2**20 == 0 else f"{limit:,} bytes"
    return api_error(
        413,
        "request_too_large",
        f"Request exceeds the maximum allowed number of bytes: the most is {most} ({detail}). "
        "Send less: shorten long tool output before it goes into a tool_result.",
    )


def not_found(path: str) -> Reply:
    return api_error(
        404,
        "not_found_error",
        f"{path or '/'} is not served here: the replay server answers POST /v1/messages",
    )


class ReplayServer(ThreadingHTTPServer):
    """A threading HTTP server holding one Classroom; port 0 picks a free port (see `url`)."""

    daemon_threads = True
    block_on_close = False  # a student's idle keep-alive connection must not hold up the shutdown
    request_queue_size = 1024  # the listen backlog: a class connecting at once (the default 5 drops most)

    def __init__(
        self,
        fixtures: dict[str, dict],
        host: str = LOOPBACK,
        port: int = DEFAULT_PORT,
        out=None,
        limits: Limits | None = None,
    ):
        self.limits = limits or Limits()
        self.classroom = Classroom(fixtures, out, self.limits.students)
        self.open_connections, self.counting = 0, threading.Lock()
        super().__init__((host, port), Handler)

    def process_request(self, request, client_address) -> None:
        """A thread for the connection, unless `limits.connections` are open already: then close it."""
        with self.counting:
            full = self.open_connections >= self.limits.connections
            self.open_connections += not full
        if full:
            self.classroom.log(
                "?", "-", "", f"{client_address[0]}: closed, {self.limits.connections} open already"
            )
            request.close()
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        super().shutdown_request(request)
        with self.counting:
            self.open_connections -= 1

    def handle_error(self, request, client_address) -> None:
        """A student who hangs up mid-request is not news; anything else is one line in the log."""
        err = sys.exc_info()[1]
        if not isinstance(err, ConnectionError):
            self.classroom.log("?", "-", "", f"server error with {client_address[0]}: {err!r}")

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{lan_address() if host == '0.0.0.0' else host}:{port}"


def lan_address() -> str:
    """This machine's address on the local network, for students to type; the hostname if unknown."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))  # a UDP connect sends nothing: it only picks a route
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


def load_fixtures(paths: list[str]) -> dict[str, dict]:
    """Each fixture by name (its file's stem), checked; a problem raises replay.FixtureError."""
    fixtures = {}
    for path in paths:
        name = Path(path).stem
        if name in fixtures:
            raise replay.FixtureError(f"two fixtures are named {name}: serve only one of them")
        fixtures[name] = replay.load_fixture(path)
    return fixtures


# -- command line ----------------------------------------------------------------------------------


def banner(server: ReplayServer, host: str) -> str:
    """What the teacher's terminal shows first; its first line holds the URL (a test reads it)."""
    if host == LOOPBACK:
        reach = "loopback only: this machine alone; --host 0.0.0.0 opens it to the classroom"
    else:
        reach = f"OPEN to the network on {host}: anyone who can reach this machine can use it"
    fixtures = [f"{name} ({len(f['exchanges'])} turns)" for name, f in server.classroom.fixtures.items()]
    return "\n".join(
        [
            f"replay server listening on {server.url}  ({reach})",
            f"fixtures: {', '.join(fixtures)}; the first is the default",
            f"students: ANTHROPIC_BASE_URL={server.url}  ANTHROPIC_API_KEY=<their name>",
            f'          another fixture: model "replay:NAME" or header {FIXTURE_HEADER}: NAME',
            f"teacher:  {server.url}/ or {server.url}/replay/status for the class table; "
            + ("Enter prints it here; " if interactive() else "")
            + "Ctrl-C stops",
        ]
    )


def interactive() -> bool:
    return bool(sys.stdin and sys.stdin.isatty())


def print_table_on_enter(classroom: Classroom) -> None:
    """In a terminal, each Enter the teacher presses prints the class table."""
    for _ in sys.stdin:
        print(classroom.table(), file=classroom.out, flush=True)


def port(text: str) -> int:
    """A TCP port from the command line: 0 to 65535, where 0 lets the system pick a free one."""
    number = int(text)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{number} is not a port: use 1-65535, or 0 for any free one")
    return number


def positive(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number}: give a whole number, 1 or more")
    return number


def main(argv: list[str]) -> int:
    """Serve the fixtures until Ctrl-C; a bad fixture or a busy port is a one-line error."""
    parser = argparse.ArgumentParser(
        prog="python replay.py serve",
        description="Serve recorded fixtures as an Anthropic-compatible API, one cursor per student.",
        epilog="Students: ANTHROPIC_BASE_URL=http://HOST:PORT ANTHROPIC_API_KEY=<name>; see docs/teaching.md",
    )
    parser.add_argument(
        "fixtures", nargs="+", metavar="FIXTURE", help="fixtures to serve; the first is the default"
    )
    parser.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"0 picks a free port (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--host", default=LOOPBACK, help="0.0.0.0 opens it to the classroom LAN (default: loopback)"
    )
    parser.add_argument(
        "--max-students",
        type=positive,
        default=Limits.students,
        help=f"distinct API keys (names) kept; one more is refused (default {Limits.students})",
    )
    args = parser.parse_args(argv)
    try:
        limits = Limits(students=args.max_students)
        server = ReplayServer(load_fixtures(args.fixtures), args.host, args.port, limits=limits)
    except replay.WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        fix = "check --host, or try another --port (0 picks a free one)"
        print(f"error: cannot listen on {args.host}:{args.port} ({err.strerror}) — {fix}", file=sys.stderr)
        return 1
    print(banner(server, args.host), flush=True)
    # Everything loaded so far (the SDK, the fixtures: a few hundred thousand objects) lives until
    # exit: move it out of the collector's sight. A full collection, which holds up every student's
    # thread, then walks only what requests made; during a 17 MB request, ten times less pause.
    gc.freeze()
    if interactive():
        threading.Thread(target=print_table_on_enter, args=(server.classroom,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped", flush=True)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
