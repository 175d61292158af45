"""workbook/classroom/caps.py: the names and bytes an address may hold (in process), and the connections
it may hold open, within the open-file limit (over real sockets: only a connection holds one)."""

import re
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit

from workbook.classroom import caps, students

import pytest
from conftest import ROOT, offline_env
from student_requests import (
    S01,
    TURN1,
    error_message,
    head,
    in_process,
    on_a_socket,
    post,
    raw_exchange,
    read_answer,
    refused_saying,
    request,
    turn2,
)

serve = pytest.fixture(in_process, name="serve")
listening = pytest.fixture(on_a_socket, name="listening")


def test_one_address_cannot_fill_the_class_with_new_names(serve):
    per = caps.AddressCaps(connections=64, names=3)
    server, log = serve(limits=students.Limits(students=100), per_address=per)
    for name in ("a", "b", "c"):
        assert post(server.client, request(TURN1), key=name)[0] == 200
    refused_saying(server, "d", "brought 3 names", "--max-names-per-address")
    assert post(server.client, request(turn2()), key="a")[0] == 200  # its own names carry on
    assert [s["student"] for s in server.classroom.status()["students"]] == ["a", "b", "c"]
    assert "403 a new name over this address's 3" in log.getvalue()


def test_a_name_quiet_ten_minutes_gives_its_place_when_the_class_is_full(serve):
    server, log = serve(limits=students.Limits(students=2))
    assert post(server.client, request(TURN1), key="alice")[0] == 200
    assert post(server.client, request(TURN1), key="bob")[0] == 200
    refused_saying(server, "carol", "already keeps 2 students")  # both spoke just now
    server.admission.seats["alice"].last -= caps.QUIET  # as if alice had been quiet ten minutes
    assert post(server.client, request(TURN1), key="carol")[0] == 200
    assert {s["student"] for s in server.classroom.status()["students"]} == {"bob", "carol"}
    assert "its place given to a new name" in log.getvalue()


def test_a_name_stops_counting_for_its_address_once_quiet(serve):
    server, _ = serve(per_address=caps.AddressCaps(names=2))
    for name in ("a", "b"):
        assert post(server.client, request(TURN1), key=name)[0] == 200
    refused_saying(server, "c", "brought 2 names", "--max-names-per-address")
    server.admission.seats["a"].last -= caps.QUIET
    assert post(server.client, request(TURN1), key="c")[0] == 200
    assert post(server.client, request(turn2()), key="a")[0] == 200  # a name used before is its own again


def test_an_address_holding_too_many_unanswered_bytes_gets_a_429(serve):
    server, _ = serve(per_address=caps.AddressCaps(held_bytes=1000))
    status, _, data = post(server.client, request(TURN1, metadata={"user_id": "x" * 2000}))
    assert (status, data["error"]["type"]) == (429, "rate_limit_error")
    assert post(server.client, request(TURN1))[0] == 200  # what it held was given back


def test_refused_requests_under_new_names_seat_none_and_the_next_student_gets_in(serve):
    per = caps.AddressCaps(connections=64, names=3)
    server, log = serve(limits=students.Limits(students=100), per_address=per)
    for n in range(10):  # ten new names, each refused: not one of them holds a place
        status, _, data = post(server.client, request(TURN1, max_tokens=0), key=f"mallory{n}")
        assert status == 400 and error_message(data).startswith("max_tokens")
    assert post(server.client, request(TURN1), key="dave")[0] == 200  # not a 403: no name was seated
    assert [s["student"] for s in server.classroom.status()["students"]] == ["dave"]
    assert len(server.admission.seats) == 1 and "Traceback" not in log.getvalue()


def test_one_address_cannot_hold_every_connection(listening):
    per = caps.AddressCaps(connections=3, names=16)
    server, log = listening(limits=students.Limits(connections=10), per_address=per)
    parts = urlsplit(server.url)
    held = [socket.create_connection((parts.hostname, parts.port), timeout=60) for _ in range(3)]
    try:
        for sock in held:  # each served and kept open
            sock.sendall(head("GET /replay/status", connection="keep-alive"))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert raw_exchange(server.url, b"") == b""  # a fourth from the same address: closed at once
        assert "3 open already from this address" in log.getvalue()
        assert (
            server.admission.open_connections == 3
        )  # the class (10) is far from full: other machines get in
    finally:
        for sock in held:
            sock.close()


def test_a_full_class_closes_the_connection_waiting_longest_to_let_a_new_one_in(listening):
    server, log = listening(limits=students.Limits(connections=2))
    parts = urlsplit(server.url)
    first, second = (socket.create_connection((parts.hostname, parts.port), timeout=60) for _ in "ab")
    try:
        asked = head("GET /replay/status", connection="keep-alive")
        first.sendall(asked)
        assert read_answer(first)[0] == 200  # served, and kept open
        second.sendall(asked)
        assert read_answer(second)[0] == 200  # the first has now waited the longest
        assert raw_exchange(server.url, head("GET /", connection="close")).startswith(b"HTTP/1.1 200")
        assert first.recv(65536) == b""  # closed to make room
        assert "closed after 0 s waiting for its client: the class has its most connections" in log.getvalue()
        second.sendall(asked)
        assert read_answer(second)[0] == 200  # the second is still served
    finally:
        first.close()
        second.close()


def test_a_forwarded_for_header_does_not_change_a_clients_address(listening):
    server, _ = listening(per_address=caps.AddressCaps(names=1))
    assert post(server.url, request(TURN1), key="a")[0] == 200
    status, _, _ = post(server.url, request(TURN1), key="b", x_forwarded_for="10.9.9.9")
    assert status == 403


def test_a_client_gone_mid_body_gives_back_what_its_request_held(listening):
    server, _ = listening(per_address=caps.AddressCaps(held_bytes=1000))
    parts = urlsplit(server.url)

    def held_becomes(n: int) -> bool:
        for _ in range(100):  # bounded: each look is one attribute
            if server.admission.held.total == n:
                return True
            threading.Event().wait(0.05)
        return False

    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head(content_length=900) + b'{"model":')
        assert held_becomes(900)  # the body's 900 bytes are held as it is read
    assert held_becomes(0)  # the client has gone: given back
    assert post(server.url, request(TURN1))[0] == 200  # 900 + this would be over 1000


def test_fifty_students_on_one_address_are_all_served_with_default_flags(listening):
    server, _ = listening()
    start, statuses = threading.Barrier(50, timeout=60), []

    def student(name: str):
        start.wait()  # all at once, as a class on one JupyterHub
        statuses.append(post(server.url, request(TURN1), key=name)[0])
        statuses.append(post(server.url, request(turn2()), key=name)[0])

    threads = [threading.Thread(target=student, args=(f"student{i:02d}",)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert statuses == [200] * 100
    rows = server.classroom.status()["students"]
    assert len(rows) == 50 and all(row["turn"] == 2 for row in rows)


NOFILE_THEN_SERVE = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))
os.execv(sys.executable, [sys.executable, "-m", "workbook", "serve", *sys.argv[1:]])
"""


def test_the_server_keeps_its_connections_within_its_open_file_limit_and_lets_the_next_student_in():
    command = [sys.executable, "-c", NOFILE_THEN_SERVE, str(S01.relative_to(ROOT)), "--port", "0"]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=offline_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    idle = []
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline()).group(0)
        port = urlsplit(url).port
        while "open files" not in (line := proc.stdout.readline()):
            pass
        room, burst = map(int, re.findall(r"\d+", line))
        assert room + burst < 160
        for address in ("127.0.0.2", "127.0.0.3"):  # two machines holding idle connections: 200 > 160 files
            for _ in range(100):
                sock = socket.socket()
                sock.bind((address, 0))
                sock.connect(("127.0.0.1", port))
                idle.append(sock)
        assert post(url, request(TURN1), key="dave")[0] == 200  # accepted after them all, and answered
    finally:
        for sock in idle:
            sock.close()
        proc.terminate()
        rest, _ = proc.communicate(timeout=60)
    assert "Traceback" not in rest and "out of system resource" not in rest
    assert re.search(r"dave\s+s01_hello_agent\s+turn 1/2\s+200", rest)
