"""workbook/classroom/server.py: the routes (who a student is, the API's errors, the status, reset and
front page, the teacher's token), in process through starlette's TestClient; the command line, a
streamed reply and a 32 MB body over a real socket, where only uvicorn shows what a student gets."""

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

from workbook.api import json_text, threads
from workbook.classroom import server as classroom_server

import anthropic
import pytest
from conftest import ROOT, offline_env
from student_requests import (
    BODY1,
    EVIL,
    FIXTURE,
    S01,
    TURN1,
    answer_of,
    error_message,
    get,
    head,
    in_process,
    on_a_socket,
    post,
    raw_exchange,
    request,
    turn2,
    variant,
)

serve = pytest.fixture(in_process, name="serve")
listening = pytest.fixture(on_a_socket, name="listening")


def test_no_api_key_is_a_401_and_no_anthropic_version_a_400(serve):
    server, _ = serve()
    status, _, data = post(server.client, request(TURN1), key=None)
    assert (status, data["error"]["type"]) == (401, "authentication_error")
    assert "your name as the API key" in data["error"]["message"]
    status, _, data = post(server.client, request(TURN1), anthropic_version=None)
    assert status == 400 and "anthropic-version" in error_message(data)


def test_a_bearer_token_names_the_student_too(serve):
    server, _ = serve()
    post(server.client, request(TURN1), key=None, authorization="Bearer carol")
    assert [s["student"] for s in server.classroom.status()["students"]] == ["carol"]


def test_a_real_api_key_is_refused_and_never_printed(serve):
    server, log = serve()
    status, _, data = post(server.client, request(TURN1), key="sk-ant-api03-SECRETSECRET")
    assert (status, data["error"]["type"]) == (401, "authentication_error")
    assert "looks like a real Anthropic API key" in data["error"]["message"]
    assert "SECRET" not in log.getvalue() and "SECRET" not in get(server.client, "/")


def test_a_key_longer_than_a_name_is_refused(serve):
    server, _ = serve()
    status, _, data = post(server.client, request(TURN1), key="a" * 65)
    assert status == 401 and "65 characters" in data["error"]["message"]


@pytest.mark.parametrize("where", ["model", "header"])
def test_a_key_sent_as_the_fixture_name_is_never_logged_nor_echoed(serve, where):
    server, log = serve()
    key = "sk-ant-api03-SECRETSECRET"
    if where == "model":
        status, _, data = post(server.client, request(TURN1, model=f"replay:{key}"))
    else:
        status, _, data = post(server.client, request(TURN1), x_replay_fixture=key)
    assert (status, data["error"]["type"]) == (404, "not_found_error")
    assert "looks like a real Anthropic API key" in data["error"]["message"]
    assert "SECRET" not in json.dumps(data) and "SECRET" not in log.getvalue()
    assert "(not shown)" in log.getvalue()


def test_a_name_sent_as_utf_8_bytes_is_read_as_utf_8(listening):
    server, _ = listening()
    raw = json.dumps(request(TURN1)).encode()
    sent = head(content_length=len(raw), connection="close").replace(
        b"x-api-key: alice", "x-api-key: 李雷".encode()
    )
    assert answer_of(raw_exchange(server.url, sent + raw))[0] == 200
    assert [s["student"] for s in server.classroom.status()["students"]] == ["李雷"]


def test_unknown_paths_are_a_404_in_the_api_shape(serve):
    server, _ = serve()
    status, _, data = post(server.client, request(TURN1), path="/v1/complete")
    assert (status, data["error"]["type"]) == (404, "not_found_error")


@pytest.mark.parametrize(
    "raw, words",
    [
        (b'{"model": "m", "max_tokens": NaN, "messages": []}', "NaN is not a JSON number"),
        (b'{"model": "m", "max_tokens": Infinity, "messages": []}', "Infinity is not a JSON number"),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "\\ud800"}]}',
            "surrogate",
        ),
    ],
    ids=["NaN", "Infinity", "lone-surrogate"],
)
def test_json_the_api_refuses_is_a_400_in_one_line(serve, raw, words):
    server, log = serve()
    status, _, data = post(server.client, raw)
    assert status == 400 and words in error_message(data)
    assert post(server.client, request(TURN1), key="dave")[0] == 200
    assert "Traceback" not in log.getvalue()


def test_post_replay_reset_puts_the_student_back_at_turn_1(serve):
    server, _ = serve()
    post(server.client, request(TURN1), key="alice")
    post(server.client, request(TURN1), key="bob")
    status, _, data = post(server.client, {}, key="alice", path="/replay/reset")
    assert (status, data) == (200, {"reset": "alice", "fixtures": ["s01_hello_agent"]})
    status, _, data = post(server.client, request(turn2()), key="alice")
    assert status == 400 and "expected 1 messages, got 3" in error_message(data)
    assert post(server.client, request(turn2()), key="bob")[0] == 200


def test_reset_starts_over_only_the_caller(serve):
    server, _ = serve()
    for name in ("alice", "bob"):
        post(server.client, request(TURN1), key=name)
    assert post(server.client, {}, key="alice", path="/replay/reset")[2]["reset"] == "alice"
    turns = {r["student"]: r["turn"] for r in server.classroom.status()["students"]}
    assert turns == {"alice": 0, "bob": 1}


def test_replay_status_shows_a_student_only_their_own_row_and_the_teacher_every_row(serve):
    server, _ = serve()
    for name in ("alice", "bob"):
        post(server.client, request(TURN1), key=name)
    own = json.loads(get(server.client, "/replay/status", x_api_key="alice"))
    assert [r["student"] for r in own["students"]] == ["alice"] and own["others"] == 1
    assert json.loads(get(server.client, "/replay/status?token=guess"))["students"] == []
    every = json.loads(get(server.client, f"/replay/status?token={server.teacher_token}"))
    assert [r["student"] for r in every["students"]] == ["alice", "bob"]
    assert "bob" not in get(server.client, "/") and "bob" in get(
        server.client, f"/?token={server.teacher_token}"
    )


def test_the_page_for_a_browser_is_html_with_names_and_the_host_escaped(serve):
    server, _ = serve()
    post(server.client, request(TURN1), key=EVIL.encode())
    post(server.client, request(TURN1), key="<i>x</i>")  # short enough to be shown whole
    page = get(server.client, f"/?token={server.teacher_token}", accept="text/html", host="<b>evil</b>:1")
    assert page.startswith("<!doctype html>")
    assert "<i>" not in page and "&lt;i&gt;x&lt;/i&gt;" in page
    assert "<b>" not in page and "&lt;b&gt;evil&lt;/b&gt;" in page


def test_the_front_page_says_the_recordings_do_not_react_to_tool_output(serve):
    server, _ = serve()
    page = " ".join(get(server.client, "/").split())
    assert "they do not read your tool output" in page and "still the recorded one" in page


def test_the_front_page_gives_each_fixtures_task_to_send(serve, tmp_path):
    def escape(fixture):
        fixture["exchanges"][0]["request"]["messages"][0]["content"] = "list\x1b[2J the files"

    server, _ = serve(s01_hello_agent=FIXTURE, escape=variant(tmp_path, "escape", escape))
    page = get(server.client, "/")
    assert f"  s01_hello_agent: {FIXTURE['task']}\n" in page
    assert "  escape: list\\x1b[2J the files\n" in page and "\x1b" not in page  # shown, never acted on


def test_streaming_through_the_sdk_gives_the_same_message_as_json(listening):
    server, _ = listening()
    streaming = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    plain = anthropic.Anthropic(api_key="bob", base_url=server.url, max_retries=0)
    for exchange in FIXTURE["exchanges"]:
        body = exchange["request"]
        with streaming.messages.stream(model="m", max_tokens=100, messages=body["messages"]) as stream:
            streamed = stream.get_final_message()
        created = plain.messages.create(model="m", max_tokens=100, messages=body["messages"])
        assert created.to_dict() == exchange["response"]["body"]
        assert streamed.to_dict(exclude_none=True) == created.to_dict(exclude_none=True)


def test_event_loop_trouble_is_one_line_a_kind_counted_never_a_traceback(serve):
    server, log = serve()
    error = OSError(24, "Too many open files")
    for _ in range(12):
        server.trouble(None, {"message": "socket.accept() out of system resource", "exception": error})
    lines = [line for line in log.getvalue().splitlines() if "out of system resource" in line]
    assert len(lines) == 2 and "  1 so far: socket.accept()" in lines[0] and "  10 so far: " in lines[1]
    assert "Too many open files" in lines[0] and "Traceback" not in log.getvalue()


def test_replay_py_serve_starts_prints_its_url_and_answers():
    command = [sys.executable, "-m", "workbook", "serve", str(S01.relative_to(ROOT)), "--port", "0"]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=offline_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        first = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", first).group(0)
        status, _, data = post(url, request(TURN1), key="dave")
        assert (status, data["id"]) == (200, BODY1["id"])
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=60)
    assert re.search(r"dave\s+s01_hello_agent\s+turn 1/2\s+200 tool_use", rest)


def test_a_missing_fixture_or_busy_port_is_a_one_line_error(listening, capsys):
    assert classroom_server.main(["fixtures/nope.json", "--port", "0"]) == 1
    server, _ = listening()
    assert classroom_server.main([str(S01), "--port", str(server.server_address[1])]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith("error: fixtures/nope.json: no such fixture")
    assert errors[1].startswith(f"error: cannot listen on 127.0.0.1:{server.server_address[1]}")


def test_max_students_is_a_command_line_flag(capsys):
    with pytest.raises(SystemExit):
        classroom_server.main([str(S01), "--max-students", "0"])
    assert "1 or more" in capsys.readouterr().err


def empty_blocks_body(size: int) -> bytes:
    head_ = b'{"model":"claude-sonnet-5","max_tokens":5,"messages":[{"role":"user","content":['
    return head_ + b",".join([b"{}"] * (size // 3)) + b"]}]}"


def peak_rss_mb(pid: int) -> int:
    """The process's peak resident memory (Linux's VmHWM), in MB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) // 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from Linux's /proc")
def test_a_32_mb_body_of_empty_blocks_is_one_400_line_and_serve_stays_under_300_mb():
    command = [sys.executable, "-m", "workbook", "serve", str(S01.relative_to(ROOT)), "--port", "0"]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=offline_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline()).group(0)
        status, _, data = post(url, empty_blocks_body(32 * 2**20 - 100), key="mallory")
        assert status == 400 and "JSON objects and arrays" in error_message(data)
        assert post(url, request(TURN1), key="dave")[0] == 200  # the next student is answered
        peak = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=60)
    assert peak < 300, peak  # one 2 MB body took it from 484 to 1,740 MB (red team five)
    said = [line for line in rest.splitlines() if "mallory" in line]
    assert len(said) == 1 and "400" in said[0] and "Traceback" not in rest


def held_up_where(monkeypatch, owner, name: str, slow) -> tuple[threading.Event, threading.Event]:
    """Make `owner.name` wait for `go` when `slow(*args)` says the call is for the slow student's request
    (as a costly judge would: a 20 MB body checked, a long thread expanded); returns (entered, go)."""
    entered, go, original = threading.Event(), threading.Event(), getattr(owner, name)

    def held(*args):
        if slow(*args):
            entered.set()
            go.wait(60)
        return original(*args)

    monkeypatch.setattr(owner, name, held)
    return entered, go


@pytest.mark.parametrize("costly", ["a body's check", "a thread's expansion"])
def test_a_costly_judge_holds_up_no_other_students_request(serve, monkeypatch, costly):
    """Red team five: a small body was judged on the event loop (64 KB of `{}` blocks: 0.8 s each), and a
    170-byte continue expanded a 20 MB thread there for 3-5 s; every other student waited."""
    server, _ = serve()
    beta = {"anthropic_beta": threads.BETA}
    if costly == "a body's check":
        body = request(TURN1, metadata={"user_id": "slow"})
        entered, go = held_up_where(monkeypatch, json_text, "loads_measured", lambda raw: b'"slow"' in raw)
    else:  # only the slow student holds a thread
        first = post(server.client, request(TURN1, thread={"type": "create"}), key="slow", **beta)[2]
        body = {"model": "m", "max_tokens": 100, "messages": turn2()[2:]}
        body["thread"] = {"type": "continue", "previous_message_id": first["id"]}
        entered, go = held_up_where(monkeypatch, threads.Held, "open", lambda held: True)
    slow, quick, answered = [], [], threading.Event()
    sender = threading.Thread(target=lambda: slow.append(post(server.client, body, key="slow", **beta)[0]))
    sender.start()
    try:
        assert entered.wait(60)  # the slow student's request is being judged, and waits
        threading.Thread(target=ask, args=(server, quick, answered), daemon=True).start()
        # answered while the slow one is still judged (judged on the event loop, it would wait for `go`)
        assert answered.wait(30) and quick == [200] and slow == []
    finally:
        go.set()
        sender.join(60)
    assert slow == [200]


def ask(server, statuses: list, answered: threading.Event) -> None:
    statuses.append(post(server.client, request(TURN1), key="quick")[0])
    answered.set()
