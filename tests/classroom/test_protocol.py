"""workbook/classroom/protocol.py: uvicorn's connection with the deadlines and caps it leaves out, over
real sockets (nothing in process can show framing, a deadline or a slow reader)."""

import http.client
import json
import socket
import threading
import time
import tracemalloc
from urllib.parse import urlsplit

from workbook.classroom import students

import anthropic
import pytest
from student_requests import (
    TURN1,
    answer_of,
    error_message,
    head,
    on_a_socket,
    post,
    raw_exchange,
    read_answer,
    request,
    turn2,
)

listening = pytest.fixture(on_a_socket, name="listening")


def test_a_body_over_32_mb_is_a_413_answered_before_the_body_is_read(listening):
    server, log = listening(limits=students.Limits(linger=0.2))
    # the headers alone, claiming 40 MB: the answer can only come before the body, which never comes
    received = raw_exchange(server.url, head(content_length=40 * 1024 * 1024))
    status, data = answer_of(received)
    assert status == 413
    assert data["type"] == "error" and data["error"]["type"] == "request_too_large"
    assert "32 MB" in data["error"]["message"] and "41,943,040" in data["error"]["message"]
    assert "127.0.0.1: 413 Request exceeds" in log.getvalue()  # and the connection closed: it was read


def test_a_client_that_sends_a_body_too_large_whole_still_reads_the_413(listening):
    server, _ = listening(limits=students.Limits(body_bytes=2000))
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    with pytest.raises(anthropic.RequestTooLargeError, match="the most is 2,000 bytes"):
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x" * 50_000}])
    # http.client stops at the first failed write: the server must drain the body it refused, or
    # closing on unread bytes resets the connection and the student sees a broken pipe, not the 413
    status, _, data = post(server.url, b"x" * 8_000_000)
    assert (status, data["error"]["type"]) == (413, "request_too_large")
    assert post(server.url, request(TURN1))[0] == 200  # the server carries on


def test_a_client_waiting_for_100_continue_hears_413_instead(listening):
    server, _ = listening(limits=students.Limits(linger=0.2))
    received = raw_exchange(server.url, head(content_length=40 * 1024 * 1024, expect="100-continue"))
    assert received.startswith(b"HTTP/1.1 413") and b"100 Continue" not in received


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "0x10", "１２"])
def test_a_bad_content_length_is_a_400_and_the_connection_closes(listening, length):
    server, log = listening()
    status, data = answer_of(raw_exchange(server.url, head(content_length=length)))  # read until closed
    assert status == 400
    assert "not HTTP/1.1 as this server reads it" in error_message(data)
    assert "127.0.0.1: 400 the request is not HTTP/1.1" in log.getvalue()


def test_two_different_content_lengths_are_a_400(listening):
    server, _ = listening()
    twice = head(content_length=5).replace(b"\r\n\r\n", b"\r\ncontent-length: 7\r\n\r\n")
    status, data = answer_of(raw_exchange(server.url, twice))
    assert status == 400 and "not HTTP/1.1 as this server reads it" in error_message(data)


def test_a_chunked_body_is_read_and_its_size_checked(listening):
    server, _ = listening(limits=students.Limits(body_bytes=1000))
    body = json.dumps(request(TURN1)).encode()
    chunked = head(transfer_encoding="chunked", connection="close")
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 100]), body[i : i + 100]) for i in range(0, len(body), 100)
    )
    assert answer_of(raw_exchange(server.url, chunked + chunks + b"0\r\n\r\n"))[0] == 200
    status, data = answer_of(raw_exchange(server.url, chunked + b"400\r\n" + b"x" * 1024 + b"\r\n0\r\n\r\n"))
    assert (status, data["error"]["type"]) == (413, "request_too_large")
    status, data = answer_of(raw_exchange(server.url, chunked + b"zz\r\nxx\r\n0\r\n\r\n"))
    assert status == 400 and "Invalid character in chunk size" in error_message(data)


@pytest.mark.parametrize("size", [b"-1", b"+2", b"0x2", b" 2", b"2 ", b""])
def test_a_chunk_size_that_is_not_plain_hex_digits_is_a_400_before_anything_is_read(listening, size):
    server, log = listening()
    chunked = head(transfer_encoding="chunked")
    # the chunk's data never comes: only a refusal at its size line can answer
    status, data = answer_of(raw_exchange(server.url, chunked + size + b"\r\n"))
    assert status == 400 and "Invalid character in chunk size" in error_message(data)
    assert "400 the request is not HTTP/1.1" in log.getvalue()


def test_a_chunk_that_claims_gigabytes_is_a_413_once_its_data_passes_the_limit(listening):
    server, _ = listening(limits=students.Limits(body_bytes=1000, linger=0.2))
    claim = head(transfer_encoding="chunked") + b"123456789\r\n"  # 4.9 GB, a size HTTP allows
    status, data = answer_of(raw_exchange(server.url, claim + b"x" * 5000))
    assert (status, data["error"]["type"]) == (413, "request_too_large")


def test_a_chunk_extension_after_a_plain_size_is_still_read(listening):
    server, _ = listening()
    body = json.dumps(request(TURN1)).encode()
    sent = head(transfer_encoding="chunked", connection="close") + b"%x;name=v\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )
    assert answer_of(raw_exchange(server.url, sent))[0] == 200


@pytest.mark.parametrize("encoding", ["gzip, chunked", "chunked, identity", "xchunked", "identity"])
def test_a_transfer_encoding_other_than_chunked_is_a_400(listening, encoding):
    server, _ = listening()
    sent = head(transfer_encoding=encoding, connection="close") + b"2\r\n{}\r\n0\r\n\r\n"
    status, data = answer_of(raw_exchange(server.url, sent))
    message = error_message(data)
    assert status == 400 and ("only chunked is taken" in message or "Transfer-Encoding" in message)


def test_a_chunked_body_arriving_in_pieces_is_read_whole_and_its_framing_checked(listening):
    server, _ = listening()
    body = json.dumps(request(TURN1)).encode()
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 50]), body[i : i + 50]) for i in range(0, len(body), 50)
    )
    sent = head(transfer_encoding="chunked", connection="close") + chunks + b"0\r\ntrailer: x\r\n\r\n"
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        for at in range(0, len(sent), 7):  # cut through sizes, data and CRLFs alike
            sock.sendall(sent[at : at + 7])
            if at % 140 == 0:
                threading.Event().wait(0.01)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert answer_of(received)[0] == 200
    chunked = head(transfer_encoding="chunked")
    status, data = answer_of(raw_exchange(server.url, chunked + b"2\r\n{}xx\r\n0\r\n\r\n"))
    assert status == 400 and "not HTTP/1.1 as this server reads it" in error_message(data)


def traced_peak(work) -> int:
    """The most memory this process held above what it held before, while `work` ran (every thread)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_a_huge_chunked_body_is_a_413_without_being_held(listening):
    server, _ = listening(limits=students.Limits(body_bytes=2**20, linger=30))
    parts = urlsplit(server.url)
    chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)
    answers = []

    def send_16_mb():
        with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
            sock.sendall(head(transfer_encoding="chunked"))
            for _ in range(256):  # 16 MB in all, one 64 KB chunk at a time
                sock.sendall(chunk)
            sock.sendall(b"0\r\n\r\n")
            answers.append(read_answer(sock))

    peak = traced_peak(send_16_mb)
    assert answers[0][0] == 413 and answers[0][1]["error"]["type"] == "request_too_large"
    assert peak < 4 * 2**20  # the 1 MB allowed and the pieces in flight: never the 16 MB sent


def one_byte_chunks(body: bytes) -> bytes:
    return b"".join(b"1\r\n%c\r\n" % byte for byte in body) + b"0\r\n\r\n"


def test_one_byte_chunks_cost_no_more_memory_than_the_body(listening):
    server, _ = listening()
    body = json.dumps(request(TURN1)).encode().ljust(50_000)  # JSON, padded with spaces
    sent = head(transfer_encoding="chunked", connection="close") + one_byte_chunks(body)  # 300 KB
    answers = []
    peak = traced_peak(lambda: answers.append(answer_of(raw_exchange(server.url, sent))))
    assert answers[0][0] == 200
    assert peak < 2 * 2**20  # the wire is 6 times the body; the server keeps the body once
    too_many = head(transfer_encoding="chunked") + one_byte_chunks(b"x" * 100_001)
    status, data = answer_of(raw_exchange(server.url, too_many))
    assert status == 400 and "more than 100,000 pieces" in error_message(data)


def test_a_head_with_bare_lf_line_endings_gets_a_400_in_the_apis_shape(listening):
    server, log = listening()
    raw = json.dumps(request(TURN1)).encode()
    bare = head(content_length=len(raw)).replace(b"\r\n", b"\n") + raw
    status, data = answer_of(raw_exchange(server.url, bare))
    assert status == 400 and "not HTTP/1.1 as this server reads it" in error_message(data)
    assert "127.0.0.1: 400" in log.getvalue()


def test_a_head_over_64_kb_is_a_431(listening):
    server, log = listening()
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nx-long: ")
        try:
            for _ in range(100):  # a header that never ends, 8 KB at a time
                sock.sendall(b"a" * 8192)
        except ConnectionError:
            pass
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    status, data = answer_of(received)
    assert status == 431 and "headers over 65,536 bytes" in data["error"]["message"]
    assert "127.0.0.1: 431 headers over" in log.getvalue()


def test_headers_sent_too_slowly_time_out_and_close_the_connection(listening):
    server, log = listening(limits=students.Limits(headers=0.3))
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/messages HTTP/1.1\r\n")
        closed = False
        for _ in range(100):  # a header byte every 50 ms: each wait is short, the whole is not
            try:
                sock.sendall(b"x")
                sock.settimeout(0.05)
                closed = sock.recv(1024) == b""
            except TimeoutError:
                continue
            except ConnectionError:
                closed = True
            if closed:
                break
    assert closed
    assert "timed out" in log.getvalue()


def test_a_body_that_stops_arriving_times_out_and_closes_the_connection(listening):
    server, log = listening(limits=students.Limits(body=0.2))
    received = raw_exchange(server.url, head(content_length=100) + b'{"model":')  # 9 of 100 bytes
    assert received == b""  # closed without an answer
    assert "timed out" in log.getvalue()


def test_an_idle_kept_alive_connection_is_closed_after_its_limit(listening):
    server, _ = listening(limits=students.Limits(idle=0.2))
    assert raw_exchange(server.url, b"") == b""


def test_a_kept_alive_connection_is_closed_when_idle_after_a_reply(listening):
    server, _ = listening(limits=students.Limits(idle=0.3))
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head("GET /replay/status", connection="keep-alive"))
        assert read_answer(sock)[0] == 200
        assert sock.recv(65536) == b""  # then nothing asked: closed by the server, within the limit


def test_a_kept_alive_connection_serves_many_requests_with_nagle_off(listening):
    server, _ = listening()
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"x-api-key": "alice", "anthropic-version": "2023-06-01", "content-type": "application/json"}
    for body in (request(TURN1), request(turn2()), request(TURN1)):
        conn.request("POST", "/v1/messages", json.dumps(body), headers)
        assert conn.getresponse().read()
        assert server.admission.open_connections == 1  # the same connection each time
    (opened,) = next(iter(server.admission.open_from.values()))
    sock = opened.transport.get_extra_info("socket")
    # Nagle off: a reply's head and body, and SSE events, go out at once, not 40 ms later
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    conn.close()


def test_requests_sent_back_to_back_or_in_pieces_are_each_answered_in_order(listening):
    server, _ = listening()
    first, second = (json.dumps(request(m)).encode() for m in (TURN1, turn2()))
    both = head(content_length=len(first)) + first + head(content_length=len(second)) + second
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(both)  # pipelined: the second request arrives before the first is answered
        sock.sendall(head(content_length=len(first))[:20])  # then a third, in pieces
        threading.Event().wait(0.05)
        sock.sendall(head(content_length=len(first))[20:] + first[:10])
        threading.Event().wait(0.05)
        sock.sendall(first[10:])
        sock.shutdown(socket.SHUT_WR)  # sent all it will: still answered, then closed
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    replies = received.split(b"HTTP/1.1 ")[1:]
    assert [r.split(b" ", 1)[0] for r in replies] == [b"200", b"200", b"200"]
    assert [json.loads(r.split(b"\r\n\r\n", 1)[1])["stop_reason"] for r in replies] == [
        "tool_use",
        "end_turn",
        "tool_use",
    ]


def test_a_client_that_stops_reading_its_replies_is_closed_after_the_write_limit(listening):
    server, log = listening(limits=students.Limits(write=0.3))
    parts = urlsplit(server.url)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
        sock.connect((parts.hostname, parts.port))
        sock.settimeout(0.5)
        asked = head("GET /", connection="keep-alive") * 200
        try:
            for _ in range(200):  # pipelined requests, never a reply read, until the server stops reading
                sock.sendall(asked)
        except (TimeoutError, ConnectionError):
            pass
        # Until the server gives up on the reply it cannot write (an event): the deadline is a safety net
        # only, not the bound under test (5 s was too short beside other work, at a load of 10).
        deadline = time.monotonic() + 60
        while "timed out writing the reply" not in log.getvalue() and time.monotonic() < deadline:
            threading.Event().wait(0.05)
    assert "timed out writing the reply" in log.getvalue()
    while server.admission.open_connections != 0 and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    assert server.admission.open_connections == 0
