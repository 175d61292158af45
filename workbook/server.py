"""server — the classroom replay server: any student's loop, in any language, offline.

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
    conversation it stands for (workbook/threads.py); what replay cannot hold is refused so the SDK
    falls back;
  - recorded errors (429, 529 ...) are served as recorded, headers included; a recorded
    connection failure or timeout closes the connection without an answer.

A class at once (the limits are `Limits`, below): each student's checks run under that student's own
lock, so one student's big request never waits on, or holds up, another's; a body above the API's
32 MB is a 413 before it is read; slow clients time out; students and connections are capped; names
reach the teacher's terminal escaped.
The recorded replies are recordings: they do not read a student's tool output (the front page says so).

Run: python -m workbook serve fixtures/s01_hello_agent.json [MORE.json ...] [--port 8765] [--host 0.0.0.0]
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from workbook.classroom import (
    FIXTURE_HEADER,
    LOOPBACK,
    NOT_REACTING,
    REAL_KEY_PREFIX,
    Classroom,
    Limits,
    Reply,
    api_error,
    printable,
)
from workbook.errors import FixtureError, WorkbookError
from workbook.fixtures import load_fixture
from workbook.wire import sse_bytes

DEFAULT_PORT = 8765


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
        headers = {name.lower(): value for name, value in self.headers.items()}  # for the grader's eyes
        return self.server.classroom.answer(student, body, self.headers.get(FIXTURE_HEADER), headers)

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
            chunk = sse_bytes([event])
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
    """Each fixture by name (its file's stem), checked; a problem raises FixtureError."""
    fixtures = {}
    for path in paths:
        name = Path(path).stem
        if name in fixtures:
            raise FixtureError(f"two fixtures are named {name}: serve only one of them")
        fixtures[name] = load_fixture(path)
    return fixtures


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
        prog="python -m workbook serve",
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
    except WorkbookError as err:
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
