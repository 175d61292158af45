"""protocol — one client's connection to the classroom server: uvicorn's, plus what it leaves out.

uvicorn (with its C parser, httptools) reads HTTP/1.1, keeps connections alive and closes one idle
`timeout_keep_alive` seconds after a reply, and stops reading a body the application is not taking.
What it leaves to the application is here: a deadline on every other wait for the client, a cap on a
head's bytes and on a body's pieces, the connections each address and the class may hold
(workbook/classroom/caps.py), and its refusals in the Messages API's shape, logged in one line.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from http import HTTPStatus

from workbook.classroom.caps import Admission
from workbook.classroom.students import Reply, api_error

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_BYTES = 64 * 1024  # a request's line and headers, at most (431 above): the C parser sets no limit
MOST_PIECES = 100_000  # pieces a body may arrive in (a chunked body's chunks): one-byte chunks cost CPU


class Connection(HttpToolsProtocol):
    """One client's connection: uvicorn's, plus the deadlines and caps it leaves to the application.

    uvicorn closes a kept-alive connection `timeout_keep_alive` seconds after a reply. It sets no
    deadline on a new connection's first request, on a request's head or body, or on a reply the
    client does not read, and its C parser takes a head of any size. Those are here: one deadline at a
    time, set when a wait begins and never moved by bytes that trickle in, so a client sending a byte
    every few seconds (slowloris) meets it all the same.
    """

    def __init__(self, *args, admission: Admission, **kwargs):
        super().__init__(*args, **kwargs)
        self.admission, self.limits = admission, admission.limits
        self.address = "?"
        self.counted = False  # in the admission's count of open connections
        self.waiting = ""  # what the client owes: request, head, body, drain, reading ("" nothing)
        self.since = 0.0  # when that wait began: a full class closes the connection waiting longest
        self.deadline = 0.0  # when that wait ends
        self.timer: asyncio.TimerHandle | None = None
        self.head_bytes = self.pieces = 0
        self.in_message = False  # a request's head or body is still arriving
        self.begun = self.asked = self.answered = 0  # requests begun, read whole, and answered whole
        self.refusal: Reply | None = None  # why the parser was stopped, when the workbook stopped it
        self.refused = False  # a refusal was written: what the client sends now is dropped
        self.ended = False  # the client sent its last byte (a half-close)

    # -- the event loop's calls --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(OneWrite(transport, self.loop))
        self.address = self.client[0] if self.client else "?"
        if not self.admission.opened(self):
            transport.close()
            return
        # Nagle off, so that a reply goes out at once (asyncio sets it only on sockets whose protocol
        # number says TCP, and a socket accepted from socket.create_server's says 0)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.wait("request", self.limits.idle)

    def connection_lost(self, exc: Exception | None) -> None:
        self.waiting = ""
        if self.timer is not None:
            self.timer.cancel()
        self.admission.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # the rest of a refused request, read and dropped so the client reads the refusal
        head = self.begun if self.waiting == "head" else None
        super().data_received(data)
        if head == self.begun and self.waiting == "head" and not self.refused:  # all of it one head's
            self.head_bytes += len(data)
            if self.head_bytes > HEAD_BYTES:
                self.refuse(api_error(431, "invalid_request_error", f"headers over {HEAD_BYTES:,} bytes"))

    def pause_writing(self) -> None:
        """The client is not reading what we write: it has `write` seconds to take it."""
        super().pause_writing()
        self.wait("reading", self.limits.write)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.waiting == "reading":
            self.stop_waiting()

    # -- the parser's calls (each calls uvicorn's, then moves the deadline) ----------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["workbook.connection"] = self  # a handler may close it without an answer: `drop`
        self.head_bytes = self.pieces = 0
        self.begun += 1
        self.in_message = True
        self.wait("head", self.limits.headers)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        headers = dict(self.headers)
        chunked = b"transfer-encoding" in headers
        length = self.limits.body_bytes if chunked else int(headers.get(b"content-length", b"0") or 0)
        self.wait("body", self.limits.body + min(length, self.limits.body_bytes) / self.limits.body_rate)

    def on_body(self, body: bytes) -> None:
        self.pieces += 1
        if self.pieces > MOST_PIECES and self.waiting != "drain":  # stops the parser: uvicorn then
            # calls send_400_response (a body already answered is dropped as it comes, for `linger` s)
            self.refusal = api_error(
                400, "invalid_request_error", f"a body sent in more than {MOST_PIECES:,} pieces (chunks)"
            )
            raise ValueError(self.refusal.body["error"]["message"])
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_message = False
        self.asked += 1
        if self.waiting == "drain":  # the body of a request answered early has all come: carry on
            self.wait("request", self.limits.idle)
        elif self.waiting in ("head", "body"):
            self.stop_waiting()  # the handler has it now: judging is the server's own time

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.answered += 1
        if self.ended and not self.in_message and self.answered >= self.asked:  # all it asked is answered
            self.close_now()
        if self.transport.is_closing() or self.waiting == "reading":
            return
        if self.answered > self.asked:  # answered before its body came (a 413): what comes is dropped
            self.wait("drain", self.limits.linger)
        elif not self.in_message:  # (else the next request, sent before this answer, is on its way in)
            self.wait("request", self.limits.idle)

    def send_400_response(self, msg: str) -> None:
        """What the library says to what it cannot parse, in the API's shape (and one line in the log),
        with the parser's own words when uvicorn calls this as it handles the parser's error."""
        error = sys.exc_info()[1]
        said = f" ({error})" if isinstance(error, httptools.HttpParserError) and not self.refusal else ""
        self.refuse(self.refusal or api_error(400, "invalid_request_error", NOT_HTTP + said))

    def eof_received(self) -> bool:
        """The client sent all it will: close once what it asked is answered (True: the transport
        is ours to close, through OneWrite, so that a reply not yet sent goes first)."""
        self.ended = True
        if self.in_message or self.answered >= self.asked:
            self.close_now()
        return True

    # -- deadlines: one at a time, one timer, moved only when a deadline comes sooner -------------------

    def wait(self, what: str, seconds: float) -> None:
        self.waiting, self.since = what, self.loop.time()
        self.deadline = self.since + seconds
        if self.timer is None or self.timer.when() > self.deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(self.deadline, self.check_deadline)

    def stop_waiting(self) -> None:
        self.waiting = ""  # the timer stays: when it comes, nothing is owed

    def check_deadline(self) -> None:
        self.timer = None
        if not self.waiting:
            return
        if self.loop.time() < self.deadline:  # the deadline moved later since: wait on
            self.timer = self.loop.call_at(self.deadline, self.check_deadline)
            return
        if self.waiting in WAITS:
            self.log(f"timed out {WAITS[self.waiting]}")
        self.close_now()

    def close_now(self) -> None:
        """Closed: at once, and whatever the client did not take is dropped (closing would wait for it)."""
        self.waiting = ""
        if self.transport.get_write_buffer_size():
            self.transport.abort()
        else:
            self.transport.close()

    # -- answers the library cannot give -------------------------------------------------------------

    def refuse(self, reply: Reply) -> None:
        """Answer a request that will not be read (too big a head, not HTTP), then close the connection.

        The client may still be sending: what it sends is read and dropped for `linger` seconds, or
        closing with unread bytes would reset the connection before the client reads the answer."""
        self.log(f"{reply.status} {reply.body['error']['message']}")
        self.refused = True
        halfway = self.cycle is not None and self.cycle.response_started and not self.cycle.response_complete
        if not halfway and self.waiting != "drain":  # else a reply is out already, or halfway: just close
            self.transport.write(error_bytes(reply, self.server_state.default_headers))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.wait("drain", self.limits.linger)

    def drop(self) -> None:
        """Close without an answer: a recorded connection failure."""
        self.close_now()

    def log(self, text: str) -> None:
        self.admission.classroom.log("?", "-", "", f"{self.address}: {text}")


class OneWrite:
    """A connection's transport whose writes in one turn of the event loop leave in one send: uvicorn
    writes a reply's head and its body apart, and a second send costs as much as the rest of a small
    reply (bench/server_load.py measures it). Everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self.transport, self.loop = transport, loop
        self.pending: list[bytes] = []
        self.ended = False  # write_eof was called: nothing more is sent

    def write(self, data: bytes) -> None:
        if self.ended:
            return
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append(data)

    def flush(self) -> None:
        if self.pending and not self.transport.is_closing():
            self.transport.write(b"".join(self.pending))
        self.pending.clear()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def write_eof(self) -> None:
        self.flush()
        self.ended = True
        self.transport.write_eof()

    def abort(self) -> None:
        self.pending.clear()
        self.transport.abort()

    def __getattr__(self, name: str):
        return getattr(self.transport, name)


WAITS = {"head": "reading the request's head", "body": "reading the request's body"}
WAITS["reading"] = "writing the reply: the client stopped reading"
NOT_HTTP = "the request is not HTTP/1.1 as this server reads it; an HTTP client library sends it right"


def error_bytes(reply: Reply, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """An API error as a whole HTTP response that closes its connection."""
    data = json.dumps(reply.body).encode()
    head = [f"HTTP/1.1 {reply.status} {HTTPStatus(reply.status).phrase}".encode()]
    head += [name + b": " + value for name, value in default_headers]
    head += [b"content-type: application/json", b"content-length: %d" % len(data), b"connection: close"]
    return b"\r\n".join(head) + b"\r\n\r\n" + data
