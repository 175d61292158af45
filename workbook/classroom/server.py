"""server — the classroom replay server: any student's loop, in any language, offline.

An Anthropic-compatible `POST /v1/messages` on the teacher's machine, answering from recorded
fixtures. A student points their own loop at it (the Python or TypeScript SDK, curl, a loop written
from scratch) with their name as the API key, and gets the recorded replies, turn by turn:

    ANTHROPIC_BASE_URL=http://127.0.0.1:8765  ANTHROPIC_API_KEY=alice  python my_loop.py

Whether a request is right, and what it gets, is workbook/classroom/students.py's to judge; this module
is the HTTP around it, and the HTTP is a library's: uvicorn, with its C parser (httptools), runs the
connections, and starlette routes each request to a handler here. What the workbook adds is small:
  - workbook/classroom/protocol.py: uvicorn's connection plus the deadlines and caps it leaves out;
  - workbook/classroom/caps.py: the connections and names each address and the class may hold, and
    how a full class makes room;
  - here: the routes. A body is read into one buffer up to the API's 32 MB (413 past it, the rest
    dropped unread), counted against its address's share until it is answered; one request per
    student is judged at a time, in order, on a worker thread (starlette's thread pool), so that the
    event loop only reads and writes and a costly request (a big body, a long thread to expand) never
    holds up another student's; names reach the teacher's terminal escaped, and a real API key never
    reaches it at all.
docs/teaching.md says which guarantee the library gives and which the workbook adds.

Run: python -m workbook serve fixtures/s01_hello_agent.json [MORE.json ...] [--port 8765] [--host 0.0.0.0]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import html
import logging
import secrets
import socket
import sys
import textwrap
import threading
from pathlib import Path

from workbook.api import json_text
from workbook.api.compare import recorded_task
from workbook.api.wire import sse_bytes
from workbook.classroom.banner import banner, interactive
from workbook.classroom.caps import (
    QUIET,
    AddressCaps,
    Admission,
    Holding,
    open_files,
    within_open_files,
)
from workbook.classroom.protocol import Connection
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
    json_bytes,
    printable,
)
from workbook.errors import FixtureError, WorkbookError
from workbook.replay.fixtures import load_fixture

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

DEFAULT_PORT = 8765
NOT_RESENT = ("content-type", "content-length", "transfer-encoding", "connection")  # the server's own


def utf8(header: str) -> str:
    """A header value as the client wrote it: HTTP headers are read as latin-1, curl sends UTF-8."""
    if header.isascii():
        return header
    try:
        return header.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return header


parse_json = json_text.loads  # the server's parse, by the name bench/server_load.py measures it


def header_dict(request: Request) -> dict[str, str]:
    """The request's headers by lower-cased name, a repeated one joined by ", " (as HTTP reads it)."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in request.scope["headers"]:  # uvicorn's: names lower-cased, as bytes
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        headers[name] = value if name not in headers else f"{headers[name]}, {value}"
    return headers


def as_response(reply: Reply) -> Response:
    """A reply as HTTP: JSON with a length, or SSE (chunked, an event at a time); the recorded headers
    a client reads go along, never one that frames the reply."""
    headers = {k: str(v) for k, v in reply.headers.items() if k.lower() not in NOT_RESENT}
    if reply.events is None:
        data = reply.data if reply.data is not None else json_bytes(reply.body)
        return Response(data, reply.status, headers, "application/json")
    headers["cache-control"] = "no-cache"
    return StreamingResponse(events(reply.events), reply.status, headers, "text/event-stream; charset=utf-8")


async def events(recorded: list):
    for event in recorded:
        yield sse_bytes([event])


NO_TABLE = (
    "the class table is the teacher's (its link is in the server's banner); "
    "GET /replay/status with your key shows your own row"
)


def too_large(limit: int, detail: str) -> Reply:
    """The API's answer to a request over its limit (32 MB), with what to do about it."""
    most = f"{limit // 2**20} MB" if limit % 2**20 == 0 else f"{limit:,} bytes"
    return api_error(
        413,
        "request_too_large",
        f"Request exceeds the maximum allowed number of bytes: the most is {most} ({detail}). "
        "Send less: shorten long tool output before it goes into a tool_result.",
    )


class ReplayServer:
    """The classroom, listening from the moment it is made (port 0 picks a free port: see `url`).
    `serve_forever()` runs it in the calling thread until `shutdown()`, called from another thread, as
    with the standard library's servers."""

    def __init__(
        self,
        fixtures: dict[str, dict],
        host: str = LOOPBACK,
        port: int = DEFAULT_PORT,
        out=None,
        limits: Limits | None = None,
        caps: AddressCaps | None = None,
    ):
        self.files = open_files()
        self.limits, self.caps = within_open_files(limits or Limits(), caps or AddressCaps(), self.files.room)
        self.teacher_token = secrets.token_urlsafe(12)  # the class table's key: students see their own row
        self.troubles: dict[str, int] = {}  # what asyncio would print as a traceback, by kind: how often
        self.classroom = Classroom(fixtures, out, self.limits.students, self.limits)
        # the listen backlog: a class connecting at once (a backlog of 5 drops most of them)
        self.socket = socket.create_server((host, port), backlog=1024)
        self.server_address = self.socket.getsockname()
        self.admission = Admission(self.classroom, self.limits, self.caps)
        self.app = self.routes()
        self.ready, self.stopped = threading.Event(), threading.Event()
        self.uvicorn: uvicorn.Server | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread, self.flush_due = 0, False

    def routes(self) -> Starlette:
        routes = [
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/replay/reset", self.reset, methods=["POST"]),
            Route("/replay/status", self.status, methods=["GET"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/", self.front_page, methods=["GET"]),
        ]
        routes += [Route(r.path + "/", r.endpoint, methods=r.methods) for r in routes[:4]]  # a trailing /
        handlers = {HTTPException: self.not_served, Exception: self.failed}
        return Starlette(routes=routes, exception_handlers=handlers)

    def config(self) -> uvicorn.Config:
        """uvicorn as the classroom needs it: its own limits set, its logging left to the teacher's log."""
        limits = self.limits
        return uvicorn.Config(
            self.app,
            http=functools.partial(Connection, admission=self.admission),
            ws="none",
            lifespan="off",
            interface="asgi3",
            proxy_headers=False,  # an X-Forwarded-For header never changes whose address a request is
            server_header=False,
            backlog=self.files.burst,  # what asyncio accepts at one go: within the open-file limit
            timeout_keep_alive=limits.idle,  # a kept-alive connection, idle this long, is closed
            timeout_graceful_shutdown=3,
            # a request while this many connections (or requests) are open is a 503: `opened` keeps them
            # at half of it, so this is a backstop
            limit_concurrency=2 * limits.connections,
            log_config=None,
            log_level=logging.CRITICAL,  # what goes wrong is logged by the workbook, escaped, in one line
        )

    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Serve until shutdown() (poll_interval: accepted for the standard servers' callers, not needed)."""
        try:
            asyncio.run(self.serve())
        finally:
            self.stopped.set()

    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop.set_exception_handler(self.trouble)
        self.loop_thread, self.classroom.flush = threading.get_ident(), self.flush_log_soon
        self.uvicorn = uvicorn.Server(self.config())
        self.ready.set()
        await self.uvicorn.serve(sockets=[self.socket])

    def trouble(self, loop, context: dict) -> None:
        """What asyncio would print as a traceback (accept() out of descriptors, a callback's error):
        one line for each kind, said again at its 10th, 100th, 1,000th ... time, never a traceback."""
        error = context.get("exception")
        words = f"{type(error).__name__}: {error}" if error else ""
        kind = " ".join(f"{context.get('message', 'event loop trouble')} ({words})".split())[:160]
        count = self.troubles[kind] = self.troubles.get(kind, 0) + 1
        if count == 10 ** (len(str(count)) - 1):  # 1, 10, 100, ...
            self.classroom.log("?", "-", "", f"{count:,} so far: {kind}")

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

    def shutdown(self) -> None:
        """Stop serve_forever() from another thread, and wait for it to end: at once, without waiting
        for connections to finish (Ctrl-C in the teacher's terminal lets them, for 3 s at most)."""
        if self.ready.wait(10) and not self.stopped.is_set():
            self.uvicorn.should_exit = self.uvicorn.force_exit = True
            self.stopped.wait(10)

    def server_close(self) -> None:
        self.socket.close()

    # -- the routes -------------------------------------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        return await self.asked(request, self.judge)

    async def count_tokens(self, request: Request) -> Response:
        """A client's token count (Claude Code's context measure): an estimate, no recorded turn used."""
        return await self.asked(request, self.judge_count)

    def judge_count(self, body: bytearray, headers: dict, student: str) -> Reply:
        return self.judge(body, headers, student, count=True)

    async def reset(self, request: Request) -> Response:
        return await self.asked(request, self.start_over)

    async def asked(self, request: Request, judge) -> Response:
        """A student's request: who they are, their seat, the body read, their turn, then the answer."""
        headers = header_dict(request)
        address = request.client.host if request.client else "?"
        student = self.student(headers)
        if isinstance(student, Reply):
            return as_response(student)
        seat = self.admission.seat(student, address)
        if isinstance(seat, Reply):
            return as_response(seat)
        holding = Holding(self.admission.held, address)
        try:
            body = await self.read_body(request, headers, holding)
            if isinstance(body, Reply):
                return as_response(body)
            async with seat.turn:  # this student's requests one at a time, in order; others never wait
                reply = await run_in_threadpool(judge, body, headers, student)  # never on the loop
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is there to read it
        finally:
            holding.give_back()
            self.admission.stand_up(student, seat)
        if reply.drop:  # a recorded connection failure: close without a word, once it is closed
            request.scope["workbook.connection"].drop()
            while (await request.receive())["type"] != "http.disconnect":
                pass
            return Response()
        return as_response(reply)

    async def read_body(self, request: Request, headers: dict, holding: Holding) -> bytearray | Reply:
        """The body, read into one buffer no bigger than the API's limit, its bytes held of its
        address's share; or the error that refuses it (413 before it is read, when its length says so)."""
        most, encoding = self.limits.body_bytes, headers.get("transfer-encoding")
        if encoding is not None and encoding.strip().lower() != "chunked":
            problem = f"transfer-encoding: only chunked is taken, got {printable(encoding[:40])!r}"
            return api_error(400, "invalid_request_error", problem)
        length = int(headers.get("content-length", "0")) if encoding is None else 0
        if length > most:
            refusal = too_large(most, f"this one says content-length: {length:,}")
            self.classroom.log("?", "-", "", f"{holding.address}: 413 {refusal.body['error']['message']}")
            return refusal
        body, refused = bytearray(), holding.take(length)
        if refused is None:
            async for piece in request.stream():
                if len(body) + len(piece) > most:  # only a chunked body gets here: its chunks add up
                    self.classroom.log("?", "-", "", f"{holding.address}: 413 chunks over {most:,} bytes")
                    return too_large(most, f"the chunks so far add up to over {most:,} bytes")
                refused = holding.take(len(piece)) if encoding is not None else None
                if refused:
                    break
                body += piece
        if refused:
            said = f"{refused.status} {refused.body['error']['message']}"
            self.classroom.log("?", "-", "", f"{holding.address}: {said}")
            return refused
        return body

    def judge(self, body: bytearray, headers: dict, student: str, count: bool = False) -> Reply:
        """Whether the API would even read the request, then the classroom's answer (no 500 escapes);
        `count`: a POST /v1/messages/count_tokens."""
        try:
            return self.answer(body, headers, student, count)
        except Exception as err:  # a bug here must not look like the student's mistake
            self.classroom.log(student, "-", "", f"500 server error: {err!r}")
            return api_error(500, "api_error", f"the replay server failed ({err!r}); tell the teacher")

    def answer(self, raw: bytearray, headers: dict, student: str, count: bool = False) -> Reply:
        if not headers.get("anthropic-version"):
            self.classroom.log(student, "-", "", "400 no anthropic-version header")
            return api_error(
                400,
                "invalid_request_error",
                "anthropic-version: header is required — send `anthropic-version: 2023-06-01`",
            )
        try:
            body, heap = json_text.loads_measured(raw)  # heap: its cost once parsed, for the caps on memory
        # ValueError: not JSON, not UTF-8, or a number longer than Python reads (4,300 digits)
        except (ValueError, RecursionError) as err:
            self.classroom.log(student, "-", "", f"400 body is not JSON as the API takes it: {err}"[:160])
            return api_error(400, "invalid_request_error", f"the request body is not valid JSON ({err})")
        chosen = headers.get(FIXTURE_HEADER)
        if looks_like_a_key(chosen, body):  # never logged, never echoed
            self.classroom.log(student, "-", "", "404 a fixture name that looks like an API key (not shown)")
            return api_error(
                404,
                "not_found_error",
                "that fixture name looks like a real Anthropic API key, so it is neither shown nor kept: "
                f"name a fixture this server serves ({', '.join(self.classroom.fixtures)})",
            )
        if count:
            return self.classroom.count_tokens(student, body, chosen, headers)
        return self.classroom.answer(student, body, chosen, headers=headers, size=heap)

    def start_over(self, body: bytearray, headers: dict, student: str) -> Reply:
        return Reply(200, {}, {"reset": student, "fixtures": self.classroom.reset(student)})

    def student(self, headers: dict) -> str | Reply:
        """The API key the client sent (x-api-key or a bearer token): the student's name, or a 401."""
        key = headers.get("x-api-key", "")
        auth = headers.get("authorization", "")
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

    async def status(self, request: Request) -> Response:
        """The class as JSON: every student's row for the teacher (the token printed at start), else only
        the caller's own. A key is a student's only identity: listed to all, anyone could be anyone."""
        status = self.classroom.status()
        if not self.teachers(request):
            caller = self.student(header_dict(request))
            mine = [row for row in status["students"] if row["student"] == caller]
            status |= {"students": mine, "others": len(status["students"]) - len(mine)}
        return as_response(Reply(200, {}, status))

    def teachers(self, request: Request) -> bool:
        """Whether the request carries the teacher's token (`?token=`, printed in the banner)."""
        given = request.query_params.get("token", "")
        return secrets.compare_digest(given.encode(), self.teacher_token.encode())

    async def front_page(self, request: Request) -> Response:
        """How to connect, then the class table: HTML for a browser (every name escaped), text for curl."""
        host = printable(utf8(request.headers.get("host", "")) or self.url.split("//")[1])[:100]
        names = ", ".join(self.classroom.fixtures)
        text = (
            "Agent Loop Workbook: classroom replay server\n\n"
            f"  ANTHROPIC_BASE_URL=http://{host}  ANTHROPIC_API_KEY=<your name>\n\n"
            f'fixtures: {names} (the first is the default; model "replay:NAME" or header '
            f"{FIXTURE_HEADER}: NAME picks another)\n"
            "start over: send the first message alone, or POST /replay/reset with your key\n"
            "the task to send as your first message (the replies answer it):\n"
            + "".join(
                f"  {name}: {printable(recorded_task(fixture))[:300]}\n"
                for name, fixture in self.classroom.fixtures.items()
            )
            + "\n"
            + textwrap.fill(NOT_REACTING, 100)
            + "\n\n"
            + (self.classroom.table(self.limits.listed) if self.teachers(request) else NO_TABLE)
            + "\n"
        )
        headers = {"x-content-type-options": "nosniff"}
        if "text/html" not in request.headers.get("accept", ""):
            return Response(text.encode(), 200, headers, "text/plain; charset=utf-8")
        title = "Agent Loop Workbook: classroom replay server"
        page = f"<!doctype html><meta charset=utf-8><title>{title}</title><pre>{html.escape(text)}</pre>\n"
        return Response(page.encode(), 200, headers, "text/html; charset=utf-8")

    async def not_served(self, request: Request, error: HTTPException) -> Response:
        """A path or method not served here (404, 405), in the API's error shape."""
        path = printable(request.url.path)[:100]
        if error.status_code == 405:
            reply = api_error(405, "invalid_request_error", f"{request.method} is not served at {path}")
        else:
            served = "the replay server answers POST /v1/messages"
            reply = api_error(404, "not_found_error", f"{path} is not served here: {served}")
        return as_response(reply)

    async def failed(self, request: Request, error: Exception) -> Response:
        """A bug of the server's: one line in the log and the API's 500, never a traceback."""
        self.classroom.log("?", "-", "", f"500 server error: {error!r}")
        return as_response(
            api_error(500, "api_error", f"the replay server failed ({error!r}); tell the teacher")
        )

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
    quiet = f"{QUIET // 60} min"
    caps = {  # flag -> (default, what it caps): each a whole number, 1 or more
        "--max-students": (
            Limits.students,
            f"names (API keys) kept at once (default {Limits.students}); when full, a name quiet {quiet} "
            "gives up its place, else a new one is refused",
        ),
        "--max-connections-per-address": (
            AddressCaps.connections,
            f"connections one client address may hold open (default {AddressCaps.connections})",
        ),
        "--max-names-per-address": (
            AddressCaps.names,
            f"names (API keys) one client address may bring that sent a request in the last {quiet} "
            f"(default {AddressCaps.names})",
        ),
    }
    for flag, (default, what) in caps.items():
        parser.add_argument(flag, type=positive, default=default, metavar="N", help=what)
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
