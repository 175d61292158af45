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
  - recorded errors (429, 529 ...) are served as recorded, headers included; a recorded
    connection failure or timeout closes the connection without an answer.

Run: python replay.py serve fixtures/s01_hello_agent.json [MORE.json ...] [--port 8765] [--host 0.0.0.0]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import replay

DEFAULT_PORT = 8765
LOOPBACK = "127.0.0.1"
FIXTURE_HEADER = "x-replay-fixture"
MODEL_PREFIX = "replay:"  # model "replay:s01_hello_agent" picks that fixture
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


class Mistake(Exception):
    """A request answered with an API-style error: the status, the error type, a teaching message."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


@dataclass
class Cursor:
    """One student's place in one fixture, and what the teacher's table shows about it."""

    served: int = 0  # exchanges answered; the next request is turn served + 1
    requests: int = 0
    mistakes: int = 0
    restarts: int = 0
    last: str = ""  # the last result, e.g. "200 tool_use" or "400 messages[2]: ..."


@dataclass
class Reply:
    """What to send back: a JSON body or SSE events, or nothing at all (a recorded dropped connection)."""

    status: int
    headers: dict
    body: dict | None = None
    events: list | None = None
    drop: bool = False


def api_error(status: int, kind: str, message: str) -> Reply:
    """An error in the API's own shape."""
    return Reply(status, {}, {"type": "error", "error": {"type": kind, "message": message}})


# -- the classroom: fixtures, cursors, the teacher's log (no HTTP here) ----------------------------


class Classroom:
    """Answers each student's request from their own cursor, and logs one line per request."""

    def __init__(self, fixtures: dict[str, dict], out=None):
        self.fixtures = fixtures  # name -> fixture, in command-line order; the first is the default
        self.cursors: dict[tuple[str, str], Cursor] = {}  # (student, fixture name) -> cursor
        self.lock = threading.Lock()
        self.out = out or sys.stdout
        self.observer = None  # grade.py's hook: observer(student, fixture, turn, body, reply, mistake)

    def answer(self, student: str, body, chosen: str | None) -> Reply:
        """The reply to one request from one student; a mistake becomes a 400 and a log line."""
        with self.lock:
            try:
                name = self.pick(body, chosen)
            except Mistake as mistake:
                self.log(student, "-", "", f"{mistake.status} {mistake}")
                return api_error(mistake.status, mistake.kind, str(mistake))
            cursor = self.cursors.setdefault((student, name), Cursor())
            cursor.requests += 1
            try:
                reply, note = self.serve(name, cursor, body)
            except Mistake as mistake:
                cursor.mistakes += 1
                cursor.last = f"{mistake.status} {mistake}"
                self.log(student, name, self.turn(name, cursor.served + 1), cursor.last)
                self.observe(student, name, cursor.served + 1, body, None, mistake)
                return api_error(mistake.status, mistake.kind, str(mistake))
            cursor.last = describe(reply)
            self.log(student, name, self.turn(name, cursor.served), note + cursor.last)
            self.observe(student, name, cursor.served, body, reply, None)
            return reply

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
                f"no fixture {chosen!r} on this replay server; it serves: {served}", 404, "not_found_error"
            )
        return name

    def serve(self, name: str, cursor: Cursor, body) -> tuple[Reply, str]:
        """Check the request, move the cursor, and return the recorded reply (and a log note)."""
        check_request(body)
        exchanges, note = self.fixtures[name]["exchanges"], ""
        broken = rule_problem(body["messages"])  # what the API itself would reject
        if not broken and self.starts_over(name, cursor, body["messages"]):
            cursor.served, note = 0, "restart · "
            cursor.restarts += 1
        turn, recorded = cursor.served + 1, None
        if cursor.served < len(exchanges):
            recorded = exchanges[cursor.served]
        diff = recorded and replay.request_diff(recorded["request"], body, conversation_only=True)
        if broken:
            raise Mistake(broken + (f". Compared with the recording of turn {turn}: {diff}" if diff else ""))
        if recorded is None:
            last = stop_reason(exchanges[-1]["response"])
            raise Mistake(
                f"{name} holds {len(exchanges)} turns and all were answered: your loop asked again after "
                f"the last reply (stop_reason {last}). A loop stops when stop_reason is not tool_use. "
                "To run again, send the first message alone (or POST /replay/reset)."
            )
        if diff:
            raise Mistake(f"{name}, turn {turn}: your request differs from the recording: {diff}")
        cursor.served += 1
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
        """One short line per event for the teacher's terminal."""
        line = f"{datetime.now():%H:%M:%S}  {student[:12]:<12} {fixture[:24]:<24} {turn:<10} {result}"
        self.out.write(line[:150] + "\n")  # one write, so lines from two threads never interleave
        self.out.flush()

    def status(self) -> dict:
        """Every fixture and every student's cursor, as JSON for GET /replay/status."""
        with self.lock:
            fixtures = [{"name": n, "turns": len(f["exchanges"])} for n, f in self.fixtures.items()]
            students = [
                {
                    "student": who,
                    "fixture": name,
                    "turn": c.served,
                    "turns": len(self.fixtures[name]["exchanges"]),
                }
                | {"requests": c.requests, "mistakes": c.mistakes, "restarts": c.restarts, "last": c.last}
                for (who, name), c in sorted(self.cursors.items())
            ]
        return {"default": next(iter(self.fixtures)), "fixtures": fixtures, "students": students}

    def table(self) -> str:
        """The class on one screen: who is on which turn, who hit which error."""
        rows = [("student", "fixture", "turn", "requests", "mistakes", "restarts", "last")]
        for s in self.status()["students"]:
            turn = f"{s['turn']}/{s['turns']}" + (" done" if s["turn"] == s["turns"] else "")
            counts = (str(s["requests"]), str(s["mistakes"]), str(s["restarts"]))
            rows.append((s["student"], s["fixture"], turn, *counts, s["last"][:70]))
        if len(rows) == 1:
            return "no student has sent a request yet"
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)


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


class Handler(BaseHTTPRequestHandler):
    """POST /v1/messages, POST /replay/reset, GET /replay/status, GET / (how to connect + the table)."""

    protocol_version = "HTTP/1.1"  # keep-alive, and chunked SSE
    server_version = "workbook-replay/1"
    server: ReplayServer

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
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as err:  # a bug here must not look like the student's mistake, nor kill the server
            self.server.classroom.log("?", "-", "", f"500 server error: {err!r}")
            self.send(api_error(500, "api_error", f"the replay server failed ({err!r}); tell the teacher"))

    def do_GET(self):
        path = urlsplit(self.path).path.rstrip("/")
        classroom = self.server.classroom
        if path == "/replay/status":
            self.send(Reply(200, {}, classroom.status()))
        elif path == "":
            self.send_text(self.front_page())
        else:
            self.send(not_found(path))

    def messages(self, raw: bytes) -> Reply:
        """Who is asking, whether the API would even read the request, then the classroom's answer."""
        student = self.student()
        if not student:
            self.server.classroom.log("?", "-", "", "401 no API key")
            return api_error(
                401,
                "authentication_error",
                "x-api-key header is required — on the replay server, send your name as the API key "
                "(e.g. ANTHROPIC_API_KEY=alice)",
            )
        if not self.headers.get("anthropic-version"):
            self.server.classroom.log(student, "-", "", "400 no anthropic-version header")
            return api_error(
                400,
                "invalid_request_error",
                "anthropic-version: header is required — send `anthropic-version: 2023-06-01`",
            )
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            self.server.classroom.log(student, "-", "", "400 body is not JSON")
            return api_error(400, "invalid_request_error", f"the request body is not valid JSON ({err})")
        return self.server.classroom.answer(student, body, self.headers.get(FIXTURE_HEADER))

    def reset(self) -> Reply:
        student = self.student()
        if not student:
            return api_error(
                401, "authentication_error", "send your API key (your name) to say whom to reset"
            )
        return Reply(200, {}, {"reset": student, "fixtures": self.server.classroom.reset(student)})

    def student(self) -> str | None:
        """The API key the client sent, as x-api-key or as a bearer token: the student's name."""
        key = self.headers.get("x-api-key", "")
        auth = self.headers.get("authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[len("bearer ") :]
        return key.strip() or None

    def read_body(self) -> bytes:
        """The request body, sent with a Content-Length or chunked."""
        if "chunked" not in self.headers.get("transfer-encoding", "").lower():
            return self.rfile.read(int(self.headers.get("content-length") or 0))
        chunks = []
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers, then the blank line
            pass
        return b"".join(chunks)

    def send(self, reply: Reply) -> None:
        """Write a reply: JSON with a length, or SSE one chunk per event; or close, for a recorded drop."""
        if reply.drop:
            self.close_connection = True
            return
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

    def send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def front_page(self) -> str:
        """What a browser pointed at the server shows: how to connect, then the class table."""
        url = f"http://{self.headers.get('host') or self.server.url.split('//')[1]}"
        names = ", ".join(self.server.classroom.fixtures)
        return (
            "Agent Loop Workbook: classroom replay server\n\n"
            f"  ANTHROPIC_BASE_URL={url}  ANTHROPIC_API_KEY=<your name>\n\n"
            f'fixtures: {names} (the first is the default; model "replay:NAME" or header '
            f"{FIXTURE_HEADER}: NAME picks another)\n"
            "start over: send the first message alone, or POST /replay/reset with your key\n\n"
            + self.server.classroom.table()
            + "\n"
        )

    def log_message(self, format, *args):  # the teacher's log replaces http.server's own
        pass


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

    def __init__(self, fixtures: dict[str, dict], host: str = LOOPBACK, port: int = DEFAULT_PORT, out=None):
        self.classroom = Classroom(fixtures, out)
        super().__init__((host, port), Handler)

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
    args = parser.parse_args(argv)
    try:
        server = ReplayServer(load_fixtures(args.fixtures), args.host, args.port)
    except replay.WorkbookError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        fix = "check --host, or try another --port (0 picks a free one)"
        print(f"error: cannot listen on {args.host}:{args.port} ({err.strerror}) — {fix}", file=sys.stderr)
        return 1
    print(banner(server, args.host), flush=True)
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
