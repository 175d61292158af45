"""connection — one client's connection to the classroom server: HTTP/1.1 as an asyncio Protocol.

The event loop hands each connection the bytes as they arrive (`data_received`); the connection finds
each request's head and body in them, answers, and goes on to the next (keep-alive). A body is taken
with a content-length or chunked, and refused (413, 400) before it is read when its size says no.
Each reply leaves in one write, its headers built once for a recorded reply. What a request gets is
the server's business (workbook/classroom/server.py: `respond`); this module only speaks HTTP.

Why a Protocol and not asyncio's streams: a stream reader wakes a coroutine for every read and a
timeout needs a timer for every read; here a request that arrives whole (the usual case) is answered
inside the one call that brought its bytes, and a connection keeps one deadline, a number, with one
timer that is moved only when the deadline comes sooner (a slow client still meets it).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from workbook.api.wire import sse_bytes
from workbook.classroom.students import Reply, api_error, printable

if TYPE_CHECKING:
    from workbook.classroom.server import ReplayServer

HEAD_BYTES = 64 * 1024  # a request line and its headers, at most (431 above)
MOST_HEADERS = 100
CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})(?:;[^\r\n]*)?\r?\n")  # plain hex digits, an extension
PHRASES = {status.value: status.phrase for status in HTTPStatus} | {529: "Overloaded"}
NO_CRLF = "a chunk's data must be followed by CRLF, as its size said"
TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # a header's name, as HTTP spells one
HEADER = re.compile(rf"({TOKEN}):([^\r\n]*)\r\n")
PLAIN_HEADERS = re.compile(rf"(?:{TOKEN}:[^\r\n]*\r\n)*")
NOT_RESENT = ("content-type", "content-length", "transfer-encoding", "connection")  # the server's own


class Refusal(Exception):
    """A request answered before its body is read (too large, a bad length): answer, then close."""

    def __init__(self, reply: Reply):
        super().__init__(reply.body["error"]["message"])
        self.reply = reply


@dataclass
class Request:
    """One HTTP request as read: the line, the headers (names lower-cased), the body."""

    method: str
    target: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)  # repeated headers joined by ", "
    body: bytes = b""

    @property
    def path(self) -> str:
        return urlsplit(self.target).path.rstrip("/")

    def keep_alive(self) -> bool:
        wanted = self.headers.get("connection", "").lower()
        return wanted != "close" if self.version == "HTTP/1.1" else wanted == "keep-alive"


@dataclass
class Page:
    """A reply that is not the API's JSON: the front page, as HTML or plain text."""

    kind: str
    data: bytes


class Connection(asyncio.Protocol):
    """One client's connection: requests read one after another (keep-alive), each answered in one write.

    Every wait has a deadline (`Limits`): for the next request `idle`, a request's headers from its
    first byte `headers`, its body `body` plus a second per `body_rate` bytes, a reply the client does
    not take `write`. A client sending a byte every few seconds (slowloris) cannot hold its connection
    past these: a deadline is set when its wait begins, never moved by the bytes that trickle in.
    """

    def __init__(self, server: ReplayServer):
        self.server, self.limits = server, server.limits
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.address = "?"
        self.buffer = bytearray()
        self.request: Request | None = None  # a request whose head is read and whose body is awaited
        self.length = 0  # the awaited body's content-length
        self.chunks: Chunked | None = None  # or its chunks, when it is sent chunked
        self.waiting = "idle"  # idle, headers, body; judging, writing, lingering; closed
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False  # in the server's count of open connections
        self.ended = False  # the client sent its last byte: close once its reply has gone

    # -- the event loop's calls --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        """A new connection: served, unless the class or this client address has its most open already."""
        self.transport = transport
        self.address = (transport.get_extra_info("peername") or ("?",))[0]
        if not self.server.opened(self.address):
            self.waiting = "closed"
            transport.close()
            return
        self.counted = True
        # Nagle off, so SSE events and replies go out at once (asyncio sets it only on sockets whose
        # protocol number says TCP, and an accepted socket's says 0). With it on, two small writes wait
        # for the client's delayed ACK: 40 ms a request.
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.wait("idle", self.limits.idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting = "closed"
        if self.timer is not None:
            self.timer.cancel()
        if self.counted:
            self.counted = False
            self.server.closed(self.address)

    def data_received(self, data: bytes) -> None:
        if self.waiting in ("lingering", "closed"):
            return  # a refused body, read and dropped so the client reads the refusal
        self.buffer += data
        if self.waiting in ("idle", "headers", "body"):
            self.read_on()

    def eof_received(self) -> bool:
        """The client sent all it will: close, once a reply still being judged or written has gone."""
        self.ended = True
        return self.waiting in ("judging", "writing")

    def pause_writing(self) -> None:
        """The client is not reading as fast as we write: read nothing more until it has taken it."""
        if self.waiting != "lingering":
            self.transport.pause_reading()
            self.wait("writing", self.limits.write)

    def resume_writing(self) -> None:
        if self.waiting == "writing":
            self.transport.resume_reading()
            self.next_request()
            self.read_on()

    # -- deadlines: one number per connection, one timer ----------------------------------------------

    def wait(self, what: str, seconds: float) -> None:
        """Start waiting for `what`, for at most `seconds`: the timer moves only if this comes sooner."""
        self.waiting, self.deadline = what, self.loop.time() + seconds
        if self.timer is None or self.timer.when() > self.deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(self.deadline, self.check_deadline)

    def check_deadline(self) -> None:
        self.timer = None
        if self.waiting in ("judging", "closed"):
            return  # a reply being judged is the server's to finish; its next wait sets a new deadline
        if self.loop.time() < self.deadline:  # the deadline moved later since: wait on
            self.timer = self.loop.call_at(self.deadline, self.check_deadline)
            return
        if self.waiting in ("headers", "body"):
            self.log(f"timed out reading the request's {self.waiting}")
        if self.waiting == "writing":
            self.log("timed out writing the reply: the client stopped reading")
        if self.transport.get_write_buffer_size():
            self.transport.abort()  # what the client did not take is dropped: closing would wait for it
        else:
            self.transport.close()  # idle or lingering: closed without a word, as a kept-alive server does
        self.waiting = "closed"

    # -- reading requests ----------------------------------------------------------------------------

    def read_on(self) -> None:
        """Answer every whole request in the buffer; then wait, with a deadline, for the rest of one."""
        try:
            while self.waiting in ("idle", "headers", "body"):
                request = self.next_whole_request()
                if request is None:
                    return
                self.answer(request)
        except Refusal as refusal:
            self.refuse(refusal.reply)
        except Exception as err:  # a bug here must not end the server: one line in the log
            self.log(f"server error: {err!r}")
            self.waiting = "closed"
            self.transport.abort()

    def next_whole_request(self) -> Request | None:
        """The next request if all of it has arrived; else None, waiting for the rest."""
        if self.request is None:
            end = self.buffer.find(b"\r\n\r\n", 0, HEAD_BYTES)
            if end < 0:
                if len(self.buffer) >= HEAD_BYTES:
                    too_long = f"headers over {HEAD_BYTES:,} bytes"
                    raise Refusal(api_error(431, "invalid_request_error", too_long))
                if self.buffer and self.waiting == "idle":  # its first byte starts the headers' clock
                    self.wait("headers", self.limits.headers)
                return None
            head = bytes(self.buffer[: end + 4])
            del self.buffer[: end + 4]
            request = parse_head(head)
            if isinstance(request, Reply):
                raise Refusal(request)
            self.frame(request)
        body = self.body()
        if body is None:
            return None
        request, self.request = self.request, None
        request.body = body
        return request

    def frame(self, request: Request) -> None:
        """How long the body is (a Refusal if it is not one we take); its deadline if it is still to come."""
        limits, encoding = self.limits, request.headers.get("transfer-encoding")
        if encoding is not None:
            if encoding.strip().lower() != "chunked":
                raise Refusal(bad_request(f"transfer-encoding: only chunked is taken, got {encoding[:40]!r}"))
            if "content-length" in request.headers:
                raise Refusal(bad_request("send a content-length or transfer-encoding: chunked, not both"))
            self.chunks, self.length = Chunked(limits.body_bytes), limits.body_bytes
        else:
            self.chunks, self.length = None, body_length(request, limits.body_bytes)
        self.request = request
        if self.length:
            self.continue_if_asked(request)
            if self.chunks is not None or len(self.buffer) < self.length:
                self.wait("body", limits.body + self.length / limits.body_rate)

    def body(self) -> bytes | None:
        """The awaited body, once all of it is in the buffer (taken out of it); else None."""
        if self.chunks is not None:
            return self.chunks.take(self.buffer)
        if len(self.buffer) < self.length:
            return None
        with memoryview(self.buffer) as view:  # one copy of the body, however big, not two
            body = bytes(view[: self.length])
        del self.buffer[: self.length]
        return body

    def continue_if_asked(self, request: Request) -> None:
        """A client that waits for 100 Continue hears it once the headers are found acceptable."""
        if request.headers.get("expect", "").lower() == "100-continue":
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    # -- answering -------------------------------------------------------------------------------------

    def answer(self, request: Request) -> None:
        """The server's answer: at once when judged here, or when a worker thread is done with it."""
        self.waiting = "judging"
        answer = self.server.respond(request, self.address)
        if isinstance(answer, asyncio.Future):
            self.transport.pause_reading()  # what the client sends meanwhile waits in the kernel, not here
            answer.add_done_callback(lambda done: self.judged(done, request))
        else:
            self.reply(answer, request)

    def judged(self, done: asyncio.Future, request: Request) -> None:
        """A worker thread's answer, back on the loop: sent, then on to the requests that came meanwhile."""
        if self.waiting == "closed" or done.cancelled():  # the client left, or the server is stopping
            return
        if done.exception() is not None:
            self.log(f"server error: {done.exception()!r}")
            self.waiting = "closed"
            self.transport.abort()
            return
        self.transport.resume_reading()
        self.reply(done.result(), request)
        self.read_on()

    def reply(self, answer: Reply | Page, request: Request) -> None:
        """Write the answer; then close, or wait for the next request (once a client that stopped
        reading has taken this one: `resume_writing`)."""
        keep_alive = request.keep_alive()
        if isinstance(answer, Page):
            self.write(page_bytes(answer, keep_alive))
        elif answer.drop:  # a recorded connection failure: close without a word
            keep_alive = False
        else:
            self.write(reply_bytes(answer, keep_alive))
        self.ended |= not keep_alive
        if self.waiting == "judging":  # else "writing": the client has not taken it all yet
            self.next_request()

    def next_request(self) -> None:
        """Done with one request: close if the client is done; else the next may be in the buffer
        already (its head has started), or is waited for."""
        if self.ended:
            self.waiting = "closed"
            self.transport.close()  # what is written still goes first
        elif self.buffer:
            self.wait("headers", self.limits.headers)
        else:
            self.wait("idle", self.limits.idle)

    def refuse(self, reply: Reply) -> None:
        """Answer a request whose body was not read, then close the connection.

        The client may still be sending that body: read and drop it for a bounded time, or closing
        with unread bytes would reset the connection before the client reads the answer.
        """
        self.log(f"{reply.status} {reply.body['error']['message']}")
        self.write(reply_bytes(reply, keep_alive=False))
        self.buffer.clear()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.wait("lingering", self.limits.linger)

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def log(self, text: str) -> None:
        self.server.classroom.log("?", "-", "", f"{self.address}: {text}")


class Chunked:
    """A chunked body, read as it arrives: each size plain hex digits, checked before its chunk is read."""

    def __init__(self, most: int):
        self.most, self.total, self.parts = most, 0, []
        self.size: int | None = None  # the chunk whose data is awaited; None: a size line is
        self.trailers = -1  # trailer lines read after the last chunk; -1: not there yet

    def take(self, buffer: bytearray) -> bytes | None:
        """The whole body once its last chunk and trailers are in; until then None (what is read is
        taken out of `buffer`). A Refusal for a bad size, a total over the limit, a missing CRLF."""
        while True:
            if self.trailers >= 0:
                line = line_from(buffer)
                if line is None:
                    return None
                if line in (b"\r\n", b"\n"):
                    return b"".join(self.parts)
                self.trailers += 1
                if self.trailers >= MOST_HEADERS:
                    raise Refusal(bad_request(f"more than {MOST_HEADERS} trailer lines"))
            elif self.size is None:
                line = line_from(buffer)
                if line is None:
                    return None
                size = chunk_size(line)
                if size == 0:
                    self.trailers = 0
                    continue
                self.total += size
                if self.total > self.most:
                    raise Refusal(too_large(self.most, f"the chunks so far add up to {self.total:,} bytes"))
                self.size = size
            else:
                end = buffer.find(b"\n", self.size)
                if end < 0:
                    if len(buffer) > self.size + 2:  # two bytes after the data, and neither ended a line
                        raise Refusal(bad_request(NO_CRLF))
                    return None
                if buffer[self.size : end + 1] not in (b"\r\n", b"\n"):
                    raise Refusal(bad_request(NO_CRLF))
                self.parts.append(bytes(buffer[: self.size]))
                del buffer[: end + 1]
                self.size = None


def line_from(buffer: bytearray) -> bytes | None:
    """The first line of `buffer`, taken out of it (None until it has ended); a line of a chunked
    body's framing longer than a request's head is not one (a 400)."""
    end = buffer.find(b"\n", 0, HEAD_BYTES)
    if end < 0:
        if len(buffer) >= HEAD_BYTES:
            raise Refusal(bad_request(f"a chunk's size line over {HEAD_BYTES:,} bytes"))
        return None
    line = bytes(buffer[: end + 1])
    del buffer[: end + 1]
    return line


def parse_head(head: bytes) -> Request | Reply:
    """The request line and headers, or the 400 (431) that says why they are not HTTP/1.1.

    The usual head, each header a plain name and a value on its own line, is read in one pass of a
    regular expression; any other is read line by line, which says what is wrong with it."""
    text = head.decode("latin-1")
    line_end = text.find("\r\n")
    line, block = text[:line_end], text[line_end + 2 : -2]
    parts = line.split()
    if len(parts) == 3 and parts[2] in ("HTTP/1.1", "HTTP/1.0") and PLAIN_HEADERS.fullmatch(block):
        pairs = HEADER.findall(block)
        headers = {name.lower(): value.strip() for name, value in pairs}
        if len(headers) == len(pairs) and len(pairs) <= MOST_HEADERS:  # else: a name twice, or too many
            return Request(parts[0], parts[1], parts[2], headers)
    return parse_head_by_line(head)


def parse_head_by_line(head: bytes) -> Request | Reply:
    line, *lines = head[:-4].decode("latin-1").split("\r\n")
    parts = line.split()
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return bad_request(f"not an HTTP/1.1 request line: {printable(line[:60])!r}")
    if len(lines) > MOST_HEADERS:
        return api_error(431, "invalid_request_error", f"more than {MOST_HEADERS} headers")
    headers: dict[str, str] = {}
    for text in lines:
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip():
            return bad_request(f"not a header line: {printable(text[:60])!r}")
        name, value = name.lower(), value.strip()
        seen = headers.get(name)
        headers[name] = value if seen is None else f"{seen}, {value}"
    return Request(parts[0], parts[1], parts[2], headers)


def body_length(request: Request, most: int) -> int:
    """The content-length header as a number of bytes: a Refusal (400, 413) when it is not one we take."""
    value = request.headers.get("content-length", "0")
    if value.isdigit() and value.isascii() and len(value) <= 12 and int(value) <= most:
        return int(value)  # the usual case, one plain number; anything else is looked at closely below
    values = {v.strip() for v in value.split(",")}
    if len(values) > 1:
        raise Refusal(bad_request(f"content-length: sent {len(values)} times with different values"))
    value = values.pop()
    if not re.fullmatch(r"[0-9]+", value):
        raise Refusal(bad_request(f"content-length: must be a whole number of bytes, got {value[:20]!r}"))
    if len(value) > 12 or int(value) > most:
        claim = f"{int(value[:12]):,}" + ("…" if len(value) > 12 else "")
        raise Refusal(too_large(most, f"this one says content-length: {claim}"))
    return int(value)


def chunk_size(line: bytes) -> int:
    """A chunk's size line: 1 to 8 hex digits (no sign, no 0x), maybe an extension after `;`."""
    match = CHUNK_SIZE.fullmatch(line)
    if match is None:
        shown = printable(repr(line[:20]))
        raise Refusal(bad_request(f"a chunk's size must be 1 to 8 hexadecimal digits (0-9, a-f): {shown}"))
    return int(match.group(1), 16)


_dates: dict[int, bytes] = {}  # second -> the date header's line: formatted once a second, not once a request


def date_line() -> bytes:
    now = int(time.time())
    line = _dates.get(now)
    if line is None:
        _dates.clear()
        line = _dates[now] = f"date: {formatdate(now, usegmt=True)}\r\n".encode()
    return line


def status_head(status: int, headers: dict, keep_alive: bool) -> bytes:
    """The status line and headers of a reply, as one block of bytes."""
    return status_line(status) + date_line() + header_lines(headers) + (b"\r\n" if keep_alive else CLOSE)


CLOSE = b"connection: close\r\n\r\n"


def status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {PHRASES.get(status, '')}\r\nserver: workbook-replay/1\r\n".encode()


def header_lines(headers: dict) -> bytes:
    return "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1", errors="replace")


def reply_bytes(reply: Reply, keep_alive: bool) -> bytes:
    """A reply in one block of bytes: JSON with a length, or SSE, one chunk per event. A reply the
    classroom keeps (`wire`, a recorded one) is written once; each copy then only takes today's date."""
    if reply.wire is not None and "head" in reply.wire:
        wire = reply.wire
    else:
        wire = encoded(reply)
        if reply.wire is not None:
            reply.wire.update(wire)
    close = b"\r\n" if keep_alive else CLOSE
    return b"".join((wire["head"], date_line(), wire["headers"], close, wire["body"]))


def encoded(reply: Reply) -> dict:
    headers = {k: v for k, v in reply.headers.items() if k.lower() not in NOT_RESENT}
    if reply.events is None:
        data = json.dumps(reply.body, ensure_ascii=False).encode()
        headers |= {"content-type": "application/json", "content-length": len(data)}
    else:
        chunks = [sse_bytes([event]) for event in reply.events]
        data = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
        kind = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        headers |= kind | {"transfer-encoding": "chunked"}
    return {"head": status_line(reply.status), "headers": header_lines(headers), "body": data}


def page_bytes(page: Page, keep_alive: bool) -> bytes:
    headers = {
        "content-type": page.kind,
        "x-content-type-options": "nosniff",
        "content-length": len(page.data),
    }
    return status_head(200, headers, keep_alive) + page.data


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
