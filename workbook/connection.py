"""connection — one client's connection to the classroom server: HTTP/1.1 on asyncio streams.

Requests are read one after another on a kept-alive connection, each read bounded in time; a body
is taken with a content-length or chunked, and refused (413, 400) before it is read when its size
says no. Each reply leaves in one write, or, streamed, one chunk per event. What a request gets is
the server's business (workbook/server.py: `respond`); this module only speaks HTTP.
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

from workbook.classroom import Reply, api_error, printable
from workbook.wire import sse_bytes

if TYPE_CHECKING:
    from workbook.server import ReplayServer

HEAD_BYTES = 64 * 1024  # a request line and its headers, at most (431 above)
MOST_HEADERS = 100
CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})(?:;[^\r\n]*)?\r?\n")  # plain hex digits, an extension
PHRASES = {status.value: status.phrase for status in HTTPStatus} | {529: "Overloaded"}
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


class Connection:
    """One client's connection: requests read one after another (keep-alive), each answered in one write.

    Every read is bounded in time (`Limits`): waiting for the next request `idle`, a request's headers
    from its first byte `headers`, its body `body` plus a second per `body_rate` bytes. A client sending
    a byte every few seconds (slowloris) cannot hold its connection past these.
    """

    def __init__(self, server: ReplayServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server, self.reader, self.writer = server, reader, writer
        self.limits = server.limits
        self.address = (writer.get_extra_info("peername") or ("?",))[0]
        # Nagle off, so SSE events written one by one go out at once (asyncio sets it only on sockets
        # whose protocol number says TCP, and an accepted socket's says 0). With it on, two small
        # writes wait for the client's delayed ACK: 40 ms a request.
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def serve(self) -> None:
        try:
            while await self.one_request():
                pass
        except TimeoutError as err:
            self.log(f"timed out reading the request's {err.args[0] if err.args else 'bytes'}")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # a student who hangs up mid-request is not news

    async def one_request(self) -> bool:
        """Read one request and answer it; False once the connection is to close."""
        request = await self.read_request()
        if request is None:
            return False
        try:
            request.body = await self.read_body(request)
        except Refusal as refusal:
            await self.refuse(refusal.reply)
            return False
        answer = await self.server.respond(request, self.address)
        if isinstance(answer, Page):
            self.write(page_bytes(answer, request.keep_alive()))
        elif answer.drop:  # a recorded connection failure: close without a word
            return False
        else:
            await self.send(answer, request.keep_alive())
        return request.keep_alive()

    async def read_request(self) -> Request | None:
        """The next request's line and headers; None when the client hung up, stayed idle, or sent
        something that is not HTTP (answered with a 400 or 431 first)."""
        try:
            async with asyncio.timeout(self.limits.idle):
                first = await self.reader.readexactly(1)  # its first byte starts the headers' clock
        except (TimeoutError, asyncio.IncompleteReadError):
            return None
        try:
            async with asyncio.timeout(self.limits.headers):
                head = first + await self.reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise TimeoutError("headers") from None
        except (asyncio.LimitOverrunError, ValueError):
            await self.refuse(api_error(431, "invalid_request_error", f"headers over {HEAD_BYTES:,} bytes"))
            return None
        request = parse_head(head)
        if isinstance(request, Reply):
            await self.refuse(request)
            return None
        return request

    async def read_body(self, request: Request) -> bytes:
        """The body, sent with a content-length or chunked; a Refusal if too large or malformed."""
        limits, encoding = self.limits, request.headers.get("transfer-encoding")
        if encoding is not None:
            if encoding.strip().lower() != "chunked":
                raise Refusal(bad_request(f"transfer-encoding: only chunked is taken, got {encoding[:40]!r}"))
            if "content-length" in request.headers:
                raise Refusal(bad_request("send a content-length or transfer-encoding: chunked, not both"))
            self.continue_if_asked(request)
            try:
                async with asyncio.timeout(limits.body + limits.body_bytes / limits.body_rate):
                    return await self.read_chunks()
            except TimeoutError:
                raise TimeoutError("body") from None
        length = body_length(request, limits.body_bytes)
        if not length:
            return b""
        self.continue_if_asked(request)
        try:
            async with asyncio.timeout(limits.body + length / limits.body_rate):
                return await self.reader.readexactly(length)
        except TimeoutError:
            raise TimeoutError("body") from None

    def continue_if_asked(self, request: Request) -> None:
        """A client that waits for 100 Continue hears it once the headers are found acceptable."""
        if request.headers.get("expect", "").lower() == "100-continue":
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    async def read_chunks(self) -> bytes:
        """A chunked body: each size plain hex digits, checked before its chunk is read."""
        chunks, total, most = [], 0, self.limits.body_bytes
        while size := chunk_size(await self.reader.readuntil(b"\n")):
            total += size
            if total > most:
                raise Refusal(too_large(most, f"the chunks so far add up to {total:,} bytes"))
            chunks.append(await self.reader.readexactly(size))
            if await self.reader.readuntil(b"\n") not in (b"\r\n", b"\n"):
                raise Refusal(bad_request("a chunk's data must be followed by CRLF, as its size said"))
        for _ in range(MOST_HEADERS):  # trailers, then the blank line
            if await self.reader.readuntil(b"\n") in (b"\r\n", b"\n"):
                return b"".join(chunks)
        raise Refusal(bad_request(f"more than {MOST_HEADERS} trailer lines"))

    async def refuse(self, reply: Reply) -> None:
        """Answer a request whose body was not read, then close the connection.

        The client may still be sending that body: read and drop it for a bounded time, or closing
        with unread bytes would reset the connection before the client reads the answer.
        """
        self.log(f"{reply.status} {reply.body['error']['message']}")
        try:
            await self.send(reply, keep_alive=False)
            self.writer.write_eof()
            async with asyncio.timeout(self.limits.linger):
                while await self.reader.read(64 * 1024):
                    pass
        except (OSError, TimeoutError, RuntimeError):  # a reset or the linger's end: done with this client
            pass

    async def send(self, reply: Reply, keep_alive: bool) -> None:
        """A reply: JSON with a length in one write, or SSE one chunk per event as each is ready."""
        headers = {k: v for k, v in reply.headers.items() if k.lower() not in NOT_RESENT}
        if reply.events is None:
            data = reply.wire.get("body") if reply.wire is not None else None
            if data is None:
                data = json.dumps(reply.body, ensure_ascii=False).encode()
                if reply.wire is not None:
                    reply.wire["body"] = data
            kind = {"content-type": "application/json", "content-length": len(data)}
            self.write(status_head(reply.status, headers | kind, keep_alive) + data)
            await self.drained()
            return
        kind = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        self.write(status_head(reply.status, headers | kind | {"transfer-encoding": "chunked"}, keep_alive))
        for event in reply.events:
            chunk = sse_bytes([event])
            self.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await self.drained()
        self.write(b"0\r\n\r\n")
        await self.drained()

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drained(self) -> None:
        """Wait (bounded) only if the student is not reading as fast as we write."""
        if self.writer.transport.get_write_buffer_size():
            async with asyncio.timeout(self.limits.write):
                await self.writer.drain()

    def log(self, text: str) -> None:
        self.server.classroom.log("?", "-", "", f"{self.address}: {text}")


def parse_head(head: bytes) -> Request | Reply:
    """The request line and headers, or the 400 (431) that says why they are not HTTP/1.1."""
    line, *lines = head[:-4].decode("latin-1").split("\r\n")
    parts = line.split()
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return bad_request(f"not an HTTP/1.1 request line: {printable(line[:60])!r}")
    if len(lines) > MOST_HEADERS:
        return api_error(431, "invalid_request_error", f"more than {MOST_HEADERS} headers")
    request = Request(*parts)
    for text in lines:
        name, colon, value = text.partition(":")
        if not colon or not name or name != name.strip():
            return bad_request(f"not a header line: {printable(text[:60])!r}")
        name, value = name.lower(), value.strip()
        seen = request.headers.get(name)
        request.headers[name] = value if seen is None else f"{seen}, {value}"
    return request


def body_length(request: Request, most: int) -> int:
    """The content-length header as a number of bytes: a Refusal (400, 413) when it is not one we take."""
    values = {v.strip() for v in request.headers.get("content-length", "0").split(",")}
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


_dates = {}  # second -> the date header's value: formatted once a second, not once a request


def http_date() -> str:
    now = int(time.time())
    if now not in _dates:
        _dates.clear()
        _dates[now] = formatdate(now, usegmt=True)
    return _dates[now]


def status_head(status: int, headers: dict, keep_alive: bool) -> bytes:
    """The status line and headers of a reply, as one block of bytes."""
    lines = [
        f"HTTP/1.1 {status} {PHRASES.get(status, '')}",
        "server: workbook-replay/1",
        f"date: {http_date()}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [] if keep_alive else ["connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", errors="replace")


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
