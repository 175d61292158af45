"""What a student sends the classroom server, and how a test sends it: in process through starlette's
TestClient (what a route or the classroom does with a request), or over a real socket (what uvicorn and
the workbook's connection do with bytes: framing, deadlines, caps per connection)."""

import copy
import http.client
import io
import json
import re
import socket
import threading
from contextlib import contextmanager
from urllib.parse import urlsplit

from workbook.classroom import server as classroom_server
from workbook.replay import fixtures

from conftest import ROOT
from starlette.testclient import TestClient

S01 = ROOT / "fixtures" / "s01_hello_agent.json"
FIXTURE = fixtures.load_fixture(S01)
TURN1 = FIXTURE["exchanges"][0]["request"]["messages"]  # the first message alone
BODY1, BODY2 = (e["response"]["body"] for e in FIXTURE["exchanges"])
IDS = [b["id"] for b in BODY1["content"]]  # the three tool_use ids turn 1 asks for
EVIL = "\x9b2J<i>x</i>\u202e"  # \x9b: the 8-bit escape (CSI), then markup, then a bidi override
TITLE = "\x1b]0;PWNED\x07"  # a window title


def request(messages: list, **extra) -> dict:
    """A request a student's own loop might send: its own model, max_tokens, system prompt, no tools."""
    return {
        "model": "claude-sonnet-5",
        "max_tokens": 1024,
        "system": "my own prompt",
        "messages": messages,
    } | extra


def results(ids: list[str], output: str = "done") -> dict:
    """The user message answering these tool_use ids (a student's tools print whatever they print)."""
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": output} for i in ids],
    }


def turn2(ids: list[str] = IDS) -> list:
    return [TURN1[0], {"role": "assistant", "content": BODY1["content"]}, results(ids)]


def error_message(data: dict) -> str:
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    return data["error"]["message"]


def variant(tmp_path, name: str, edit) -> dict:
    """A copy of s01's fixture changed by `edit`, written to tmp_path and loaded as a fixture must be."""
    fixture = copy.deepcopy(FIXTURE)
    edit(fixture)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(fixture))
    return fixtures.load_fixture(path)


def overloaded_first(f) -> None:
    """A variant's edit: the recording's first request answered 529 once, then as recorded (a retry)."""
    error = {
        "status": 529,
        "headers": {},
        "body": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    }
    f["exchanges"].insert(0, {"request": FIXTURE["exchanges"][0]["request"], "response": error})


def sdk_bytes(exchange: int, fixture: dict = FIXTURE) -> bytes:
    """A recorded request as compact JSON, the way the SDK writes it: what a student's SDK loop sends."""
    sent = fixture["exchanges"][exchange]["request"]
    return json.dumps(sent, separators=(",", ":"), ensure_ascii=False).encode()


# -- servers: in process, or listening on a real socket -----------------------------------------------


@contextmanager
def servers(listening: bool):
    """`start(limits=None, per_address=None, **fixtures)` -> (server, log): a replay server of s01's
    fixture (or those named, the first the default). Listening: on a free loopback port, in a thread
    (`server.url`). Else in process: `server.client`, a TestClient on its routes, nothing listening."""
    started = []

    def start(limits=None, per_address=None, **named: dict):
        named = named or {"s01_hello_agent": FIXTURE}
        log = io.StringIO()
        server = classroom_server.ReplayServer(named, port=0, out=log, limits=limits, caps=per_address)
        if listening:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        else:
            server.socket.close()  # never listened on: a request can only come through the client
            server.client = TestClient(server.app, raise_server_exceptions=False).__enter__()
        started.append(server)
        return server, log

    try:
        yield start
    finally:
        for server in started:
            if listening:  # uvicorn takes a tenth of a second to stop: the next test does not wait for it
                threading.Thread(target=stop, args=(server,), daemon=True).start()
            else:
                server.client.__exit__(None, None, None)


def stop(server) -> None:
    server.shutdown()
    server.server_close()


def post(to, body, key: str | bytes | None = "alice", path: str = "/v1/messages", **headers):
    """A POST as a loop written from scratch would send it, to a TestClient or a server's URL (over a real
    socket): (status, headers, decoded body)."""
    sent = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    sent |= {"x-api-key": key} if key else {}
    sent |= {k.replace("_", "-"): v for k, v in headers.items()}
    sent = {k: v for k, v in sent.items() if v is not None}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    if isinstance(to, TestClient):
        response = to.post(path, content=data, headers=sent)
        status, got, raw = response.status_code, dict(response.headers), response.content
    else:
        parts = urlsplit(to)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        try:
            conn.request("POST", path, data, sent)
            answer = conn.getresponse()
            status, got, raw = answer.status, dict(answer.getheaders()), answer.read()
        finally:
            conn.close()
    got = {k.lower(): v for k, v in got.items()}
    return status, got, json.loads(raw) if "json" in got.get("content-type", "") else raw.decode()


def refused_saying(server, key: str, *words: str) -> None:
    """A new student's first request is refused as the API refuses a key (403 permission_error), in a
    message that says each of `words`: why, and the flag that would let them in."""
    status, _, data = post(server.client, request(TURN1), key=key)
    assert (status, data["error"]["type"]) == (403, "permission_error")
    assert all(word in data["error"]["message"] for word in words), data["error"]["message"]


def get(to, path: str, **headers) -> str:
    """A GET's body as text, from a TestClient or a server's URL."""
    sent = {k.replace("_", "-"): v for k, v in headers.items()}
    if isinstance(to, TestClient):
        return to.get(path, headers=sent).text
    parts = urlsplit(to)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", path, headers=sent)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


# -- raw bytes on a real socket -----------------------------------------------------------------------


def raw_exchange(url: str, data: bytes, read_until_closed: bool = True) -> bytes:
    """Send raw bytes to the server and return what comes back until it closes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
            if not read_until_closed and b"\r\n\r\n" in received:
                break
        return received


def head(kind: str = "POST /v1/messages", **headers) -> bytes:
    lines = [f"{kind} HTTP/1.1", "host: test", "x-api-key: alice", "anthropic-version: 2023-06-01"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer_of(received: bytes) -> tuple[int, dict]:
    status_line, _, rest = received.partition(b"\r\n")
    body = rest.split(b"\r\n\r\n", 1)[1]
    return int(status_line.split()[1]), json.loads(body)


def read_answer(sock: socket.socket) -> tuple[int, dict]:
    """One whole reply from a kept-alive connection (its head, then content-length bytes)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head_part, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head_part.lower()).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head_part.split()[1]), json.loads(body[:length])


# -- the fixtures: a test module names them `serve = pytest.fixture(in_process)` -----------------------


def in_process():
    """start(...) -> (server, log), its routes reached through `server.client`, nothing listening."""
    with servers(listening=False) as start:
        yield start


def on_a_socket():
    """start(...) -> (server, log), listening at `server.url`: for what only uvicorn and the workbook's
    connection do with bytes."""
    with servers(listening=True) as start:
        yield start
