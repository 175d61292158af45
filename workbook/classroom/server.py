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
    conversation it stands for (workbook/api/threads.py); what replay cannot hold is refused so the SDK
    falls back;
  - recorded errors (429, 529 ...) are served as recorded, headers included; a recorded
    connection failure or timeout closes the connection without an answer.

A class at once (the limits are `Limits` and `AddressCaps`, below): one event loop holds every
connection, so a thousand idle students cost sockets, not threads. A small request is judged on the
loop itself (a few tens of microseconds); a big one, or one whose student is still being answered, goes
to a worker thread, so one student's 17 MB request never holds up the others. A request that is byte for
byte the SDK's writing of the recording's next one (what the workbook's own steps send) is answered
without being parsed or judged again (Classroom.answer_sent): it was checked when the fixture loaded.
A body above the API's 32 MB is a 413 before it is read; slow clients time out; students and
connections are capped, in all and per client address; server-held threads are capped in bytes
(workbook/api/threads.py); names reach the teacher's terminal escaped, and a real API key never reaches
it at all.
The recorded replies are recordings: they do not read a student's tool output (the front page says so).

Run: python -m workbook serve fixtures/s01_hello_agent.json [MORE.json ...] [--port 8765] [--host 0.0.0.0]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import html
import json
import socket
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from workbook.api.threads import PER_STUDENT_BYTES, TOTAL_BYTES
from workbook.classroom.connection import Connection, Page, Request
from workbook.classroom.students import (
    FIXTURE_HEADER,
    LOOPBACK,
    MODEL_PREFIX,
    NOT_REACTING,
    REAL_KEY_PREFIX,
    Classroom,
    Limits,
    Reply,
    api_error,
    printable,
)
from workbook.errors import FixtureError, WorkbookError
from workbook.replay.fixtures import load_fixture

DEFAULT_PORT = 8765
OFF_LOOP_BYTES = 64 * 1024  # a body at least this big is parsed and judged on a worker thread
WORKERS = 4  # worker threads for big bodies: a few students may send one at once


@dataclass
class AddressCaps:
    """What one client address (one machine) may hold, so that one machine cannot fill the class."""

    connections: int = 64  # open at once; the SDK keeps a few, a whole lab behind one NAT more
    names: int = 16  # new students (API keys) it brings to the class; names it used before stay its own


def utf8(header: str) -> str:
    """A header value as the client wrote it: http.server reads headers as latin-1, curl sends UTF-8."""
    if header.isascii():
        return header
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


def not_found(path: str) -> Reply:
    return api_error(
        404,
        "not_found_error",
        f"{path or '/'} is not served here: the replay server answers POST /v1/messages",
    )


class ReplayServer:
    """The classroom on one asyncio event loop, listening from the moment it is made (port 0 picks a
    free port: see `url`). `serve_forever()` runs the loop in the calling thread until `shutdown()`,
    called from another thread, as with the standard library's servers."""

    def __init__(
        self,
        fixtures: dict[str, dict],
        host: str = LOOPBACK,
        port: int = DEFAULT_PORT,
        out=None,
        limits: Limits | None = None,
        caps: AddressCaps | None = None,
    ):
        self.limits, self.caps = limits or Limits(), caps or AddressCaps()
        self.classroom = Classroom(fixtures, out, self.limits.students)
        for name in fixtures:  # the fast path's bytes, written now rather than at a class's first request
            self.classroom.recordings(name)
        # the listen backlog: a class connecting at once (a backlog of 5 drops most of them)
        self.socket = socket.create_server((host, port), backlog=1024)
        self.server_address = self.socket.getsockname()
        self.open_connections = 0
        self.open_from: dict[str, int] = {}  # client address -> connections open
        self.names_from: dict[str, set[str]] = {}  # client address -> the students it brought
        self.workers = ThreadPoolExecutor(WORKERS, thread_name_prefix="replay-judge")
        self.connection_class = Connection
        self.ready, self.stopped = threading.Event(), threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None
        self.loop_thread, self.flush_due = 0, False

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Serve until shutdown() (poll_interval: accepted for the standard servers' callers, not needed)."""
        try:
            asyncio.run(self.serve())
        finally:
            self.stopped.set()

    async def serve(self) -> None:
        self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
        self.loop_thread, self.classroom.flush = threading.get_ident(), self.flush_log_soon
        listening = await self.loop.create_server(self.new_connection, sock=self.socket)
        self.ready.set()
        async with listening:
            await self.stop.wait()

    def flush_log_soon(self) -> None:
        """The teacher's log flushed once per turn of the event loop, after every line that turn wrote
        (a line a worker thread writes is flushed at once: it is not the loop's to schedule)."""
        if threading.get_ident() != self.loop_thread:
            self.classroom.out.flush()
        elif not self.flush_due:
            self.flush_due = True
            self.loop.call_soon(self.flush_log)

    def flush_log(self) -> None:
        self.flush_due = False
        self.classroom.out.flush()

    def new_connection(self) -> Connection:
        return self.connection_class(self)

    def shutdown(self) -> None:
        """Stop serve_forever() from another thread, and wait for it to end."""
        if self.ready.wait(10) and not self.stopped.is_set():
            self.loop.call_soon_threadsafe(self.stop.set)
            self.stopped.wait(10)

    def server_close(self) -> None:
        self.socket.close()
        self.workers.shutdown(wait=False)

    def opened(self, address: str) -> bool:
        """A new connection from `address`, counted; False (and a log line) when the class or this
        client address has its most open already: it is closed at once."""
        full = self.too_many_connections(address)
        if full:
            self.classroom.log("?", "-", "", f"{address}: closed, {full}")
            return False
        self.open_connections += 1
        self.open_from[address] = self.open_from.get(address, 0) + 1
        return True

    def closed(self, address: str) -> None:
        self.open_connections -= 1
        self.open_from[address] -= 1
        if not self.open_from[address]:
            del self.open_from[address]

    def too_many_connections(self, address: str) -> str | None:
        if self.open_connections >= self.limits.connections:
            return f"{self.limits.connections} open already"
        if self.open_from.get(address, 0) >= self.caps.connections:
            return f"{self.caps.connections} open already from this address (its most)"
        return None

    def respond(self, request: Request, address: str) -> Reply | Page | asyncio.Future:
        """What a request gets: judged here on the loop when small; when big, or when its student is
        still being answered (their desk is taken: waiting here would stop all), on a worker thread,
        and then what comes back is the future of its answer."""
        path, classroom = request.path, self.classroom
        if request.method == "GET":
            if path == "/replay/status":
                return Reply(200, {}, classroom.status())
            return self.front_page(request) if path == "" else not_found(path)
        if request.method != "POST":
            return api_error(
                405, "invalid_request_error", f"{request.method} is not served here: POST or GET"
            )
        if path not in ("/v1/messages", "/replay/reset"):
            return not_found(path)
        student = self.student(request)
        if isinstance(student, Reply):
            return student
        refused = self.admit(student, address)
        if refused:
            return refused
        judge = self.messages if path == "/v1/messages" else self.reset
        desk = classroom.desks.get(student)
        known = desk is not None
        if len(request.body) >= OFF_LOOP_BYTES or (known and desk.locked()):
            judged = self.loop.run_in_executor(self.workers, judge, request, student)
            if not known:
                judged.add_done_callback(lambda _: self.remember(student, address))
            return judged
        reply = judge(request, student)
        if not known:
            self.remember(student, address)
        return reply

    def remember(self, student: str, address: str) -> None:
        """A student new to the class counts among the names their client address brought."""
        if student in self.classroom.desks:
            self.names_from.setdefault(address, set()).add(student)

    def admit(self, student: str, address: str) -> Reply | None:
        """A 403 for a new name from an address that has brought its most already; else None."""
        if student in self.classroom.desks:
            return None
        brought = self.names_from.get(address, ())
        if student in brought or len(brought) < self.caps.names:
            return None
        self.classroom.log("?", "-", "", f"{address}: 403 a new name over this address's {self.caps.names}")
        return api_error(
            403,
            "permission_error",
            f"this machine has brought {self.caps.names} names to the class already, its most: use a "
            "name you used before, or ask the teacher to restart with a higher --max-names-per-address",
        )

    def messages(self, request: Request, student: str) -> Reply:
        """Whether the API would even read the request, then the classroom's answer (no 500 escapes)."""
        try:
            return self.judge(request, student)
        except Exception as err:  # a bug here must not look like the student's mistake
            self.classroom.log(student, "-", "", f"500 server error: {err!r}")
            return api_error(500, "api_error", f"the replay server failed ({err!r}); tell the teacher")

    def judge(self, request: Request, student: str) -> Reply:
        if not request.headers.get("anthropic-version"):
            self.classroom.log(student, "-", "", "400 no anthropic-version header")
            return api_error(
                400,
                "invalid_request_error",
                "anthropic-version: header is required — send `anthropic-version: 2023-06-01`",
            )
        chosen = request.headers.get(FIXTURE_HEADER)
        if chosen is None or REAL_KEY_PREFIX not in utf8(chosen):  # the recording's own bytes: no parse
            served = self.classroom.answer_sent(student, request.body, chosen, request.headers)
            if served is not None:
                return served
        try:
            body = parse_json(request.body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            self.classroom.log(student, "-", "", "400 body is not JSON")
            return api_error(400, "invalid_request_error", f"the request body is not valid JSON ({err})")
        if looks_like_a_key(chosen, body):  # never logged, never echoed
            self.classroom.log(student, "-", "", "404 a fixture name that looks like an API key (not shown)")
            return api_error(
                404,
                "not_found_error",
                "that fixture name looks like a real Anthropic API key, so it is neither shown nor kept: "
                f"name a fixture this server serves ({', '.join(self.classroom.fixtures)})",
            )
        return self.classroom.answer(student, body, chosen, headers=request.headers)

    def reset(self, request: Request, student: str) -> Reply:
        return Reply(200, {}, {"reset": student, "fixtures": self.classroom.reset(student)})

    def student(self, request: Request) -> str | Reply:
        """The API key the client sent (x-api-key or a bearer token): the student's name, or a 401."""
        key = request.headers.get("x-api-key", "")
        auth = request.headers.get("authorization", "")
        if not key and auth.lower().startswith("bearer "):
            key = auth[len("bearer ") :]
        key, most = utf8(key).strip(), self.limits.key_chars
        if not key:
            problem, logged = "x-api-key header is required", "401 no API key"
        elif key.startswith(REAL_KEY_PREFIX):  # never printed: an API key never reaches a log
            problem, logged = "that looks like a real Anthropic API key", "401 a real API key (not shown)"
        elif len(key) > most:
            problem, logged = f"the API key is {len(key)} characters long", f"401 an API key over {most}"
        else:
            return key
        self.classroom.log("?", "-", "", logged)
        return api_error(
            401,
            "authentication_error",
            f"{problem} — on the replay server, send your name as the API key, at most {most} characters "
            "(e.g. ANTHROPIC_API_KEY=alice)",
        )

    def front_page(self, request: Request) -> Page:
        """How to connect, then the class table: HTML for a browser (every name escaped), text for curl."""
        host = printable(utf8(request.headers.get("host", "")) or self.url.split("//")[1])[:100]
        names = ", ".join(self.classroom.fixtures)
        text = (
            "Agent Loop Workbook: classroom replay server\n\n"
            f"  ANTHROPIC_BASE_URL=http://{host}  ANTHROPIC_API_KEY=<your name>\n\n"
            f'fixtures: {names} (the first is the default; model "replay:NAME" or header '
            f"{FIXTURE_HEADER}: NAME picks another)\n"
            "start over: send the first message alone, or POST /replay/reset with your key\n\n"
            + textwrap.fill(NOT_REACTING, 100)
            + "\n\n"
            + self.classroom.table(self.limits.listed)
            + "\n"
        )
        if "text/html" not in request.headers.get("accept", ""):
            return Page("text/plain; charset=utf-8", text.encode())
        title = "Agent Loop Workbook: classroom replay server"
        page = f"<!doctype html><meta charset=utf-8><title>{title}</title><pre>{html.escape(text)}</pre>\n"
        return Page("text/html; charset=utf-8", page.encode())

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{lan_address() if host == '0.0.0.0' else host}:{port}"


def looks_like_a_key(chosen: str | None, body) -> bool:
    """Whether the fixture asked for (header, or model "replay:NAME") holds a real API key."""
    model = body.get("model") if isinstance(body, dict) else None
    named = [chosen or "", model[len(MODEL_PREFIX) :] if isinstance(model, str) else ""]
    return any(REAL_KEY_PREFIX in utf8(name) for name in named)


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
            f"limits:   {caps(server)}",
        ]
    )


def caps(server: ReplayServer) -> str:
    """The caps that keep one student or one machine from holding the class, in one line."""
    limits, per = server.limits, server.caps
    return (
        f"{limits.students} students, {limits.connections} connections; per client address "
        f"{per.connections} connections and {per.names} new names; threads held "
        f"{PER_STUDENT_BYTES // 2**20} MB a student, {TOTAL_BYTES // 2**20} MB in all (oldest dropped first)"
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
        formatter_class=functools.partial(argparse.HelpFormatter, width=78),  # fits 80 columns, any terminal
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
        metavar="N",
        type=positive,
        default=Limits.students,
        help=f"distinct API keys (names) kept; one more is refused (default {Limits.students})",
    )
    parser.add_argument(
        "--max-connections-per-address",
        metavar="N",
        type=positive,
        default=AddressCaps.connections,
        help=f"connections one client address may hold open (default {AddressCaps.connections})",
    )
    parser.add_argument(
        "--max-names-per-address",
        metavar="N",
        type=positive,
        default=AddressCaps.names,
        help=f"new names (API keys) one client address may bring (default {AddressCaps.names})",
    )
    args = parser.parse_args(argv)
    try:
        limits = Limits(students=args.max_students)
        per = AddressCaps(args.max_connections_per_address, args.max_names_per_address)
        server = ReplayServer(load_fixtures(args.fixtures), args.host, args.port, limits=limits, caps=per)
    except WorkbookError as err:
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
