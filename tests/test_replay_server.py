"""The classroom replay server, over real HTTP: the SDK, a hand-written loop, broken loops, many students."""

import copy
import http.client
import io
import json
import re
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import anthropic
import pytest
from conftest import ROOT, offline_env

import replay
import replay_server
import s01_agent_loop

S01 = ROOT / "fixtures" / "s01_hello_agent.json"
FIXTURE = replay.load_fixture(S01)
TURN1 = FIXTURE["exchanges"][0]["request"]["messages"]  # the first message alone
BODY1, BODY2 = (e["response"]["body"] for e in FIXTURE["exchanges"])
IDS = [b["id"] for b in BODY1["content"]]  # the three tool_use ids turn 1 asks for


# -- helpers: a server in a thread, a raw HTTP client -------------------------------------------------


@pytest.fixture
def serve():
    """Start a replay server on a free loopback port; returns (server, log) — log is what it printed."""
    started = []

    def start(**fixtures: dict):
        fixtures = fixtures or {"s01_hello_agent": FIXTURE}  # by name, the first is the default
        log = io.StringIO()
        server = replay_server.ReplayServer(fixtures, port=0, out=log)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return server, log

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def post(url: str, body, key: str | None = "alice", path: str = "/v1/messages", **headers):
    """A raw HTTP POST, as a loop written from scratch would send it: (status, headers, decoded body)."""
    parts = urlsplit(url)
    sent = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    sent |= {"x-api-key": key} if key else {}
    sent |= {k.replace("_", "-"): v for k, v in headers.items()}
    sent = {k: v for k, v in sent.items() if v is not None}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", path, body if isinstance(body, bytes) else json.dumps(body), sent)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    kind = response.getheader("content-type", "")
    data = json.loads(raw) if "json" in kind else raw.decode()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


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
    return replay.load_fixture(path)


# -- the SDK and hand-written loops run a fixture to the end ----------------------------------------


def test_sdk_runs_the_s01_loop_to_the_end(serve):
    server, _ = serve()
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    workspace = replay.copy_workspace(FIXTURE["workspace"])
    messages = [{"role": "user", "content": FIXTURE["task"]}]
    turns = s01_agent_loop.agent_loop(client, messages, workspace)
    assert [t.stop_reason for t in turns] == ["tool_use", "end_turn"]
    assert turns[-1].content[0].text == BODY2["content"][0]["text"]
    assert (workspace / "hello_agent.txt").read_text() == "Hello from Agent Loop!\n"
    assert [(s["student"], s["turn"], s["mistakes"]) for s in server.classroom.status()["students"]] == [
        ("alice", 2, 0)
    ]


def test_a_hand_written_loop_with_its_own_prompt_and_tools_is_accepted(serve):
    server, _ = serve()
    messages = [{"role": "user", "content": "my own wording of the task"}]
    tools = [{"name": "bash", "description": "mine", "input_schema": {"type": "object"}}]
    stops = []
    for _ in range(5):  # a loop that never stops would fail here, not hang
        status, _, reply = post(server.url, request(messages, tools=tools, max_tokens=300))
        assert status == 200, reply
        stops.append(reply["stop_reason"])
        messages.append({"role": "assistant", "content": reply["content"]})
        if reply["stop_reason"] != "tool_use":
            break
        asked = [b["id"] for b in reply["content"] if b["type"] == "tool_use"]
        answer = results(asked, output="my tool failed")
        answer["content"][0]["is_error"] = True  # a student's tool may fail where the recording's did not
        messages.append(answer)
    assert stops == ["tool_use", "end_turn"]


def test_sdk_retries_a_recorded_529_and_dropped_connection_through_the_server(serve, tmp_path):
    overloaded = {
        "status": 529,
        "headers": {"retry-after-ms": "10", "x-should-retry": "true"},
        "body": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    }
    first = FIXTURE["exchanges"][0]["request"]

    def edit(f):
        dropped = {"error": "connect"}
        f["exchanges"][:0] = [
            {"request": first, "response": dropped},
            {"request": first, "response": overloaded},
        ]

    server, log = serve(flaky=variant(tmp_path, "flaky", edit))
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=2)
    turns = s01_agent_loop.agent_loop(client, [dict(TURN1[0])], replay.copy_workspace("hello"))
    assert [t.stop_reason for t in turns] == ["tool_use", "end_turn"]
    assert "529 overloaded_error (recorded)" in log.getvalue()
    assert "closed without an answer" in log.getvalue()


# -- mistakes are answered the way the API answers them, and teach --------------------------------


def test_an_unanswered_tool_use_gets_a_400_naming_the_message_and_the_id(serve):
    server, _ = serve()
    assert post(server.url, request(TURN1))[0] == 200
    status, _, data = post(server.url, request(turn2(IDS[:2])))
    assert status == 400
    message = error_message(data)
    assert f"messages[2]: tool_use {IDS[2]} from messages[1] has no tool_result" in message
    assert "exactly one tool_result" in message
    assert "Compared with the recording of turn 2: messages[2]: expected 3 content blocks, got 2" in message


def test_the_sdk_raises_its_bad_request_error_carrying_the_teaching_message(serve):
    server, _ = serve()
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    client.messages.create(model="m", max_tokens=100, messages=TURN1)
    with pytest.raises(
        anthropic.BadRequestError, match=f"tool_use {IDS[2]} from messages\\[1\\] has no tool_result"
    ):
        client.messages.create(model="m", max_tokens=100, messages=turn2(IDS[:2]))


def test_a_request_that_differs_from_the_recording_says_how(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    only_first = [TURN1[0], {"role": "assistant", "content": BODY1["content"][:1]}, results(IDS[:1])]
    status, _, data = post(server.url, request(only_first))
    assert status == 400
    assert (
        "turn 2: your request differs from the recording: messages[1]: expected 3 content blocks, got 1"
        in (error_message(data))
    )


def test_a_mistake_keeps_the_cursor_so_the_corrected_request_goes_through(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    assert post(server.url, request(turn2(IDS[:2])))[0] == 400
    status, _, data = post(server.url, request(turn2()))
    assert (status, data["stop_reason"]) == (200, "end_turn")


@pytest.mark.parametrize(
    "body, expected",
    [
        (request(TURN1) | {"max_tokens": None}, "max_tokens: must be a positive integer"),
        ({"model": "m", "messages": TURN1}, "max_tokens: Field required"),
        (request([{"role": "assistant", "content": "hi"}]), "messages[0] must come from the user"),
        (request([{"role": "user", "content": [{"text": "no type"}]}]), "must be an object with a type"),
        (b"{not json", "not valid JSON"),
    ],
)
def test_a_malformed_request_is_a_400_that_says_what_is_wrong(serve, body, expected):
    server, _ = serve()
    status, _, data = post(server.url, body)
    assert status == 400
    assert expected in error_message(data)


def test_no_api_key_is_a_401_and_no_anthropic_version_a_400(serve):
    server, _ = serve()
    status, _, data = post(server.url, request(TURN1), key=None)
    assert (status, data["error"]["type"]) == (401, "authentication_error")
    assert "your name as the API key" in data["error"]["message"]
    status, _, data = post(server.url, request(TURN1), anthropic_version=None)
    assert status == 400 and "anthropic-version" in error_message(data)


def test_asking_past_the_end_of_the_fixture_is_a_clear_400_not_a_hang(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    post(server.url, request(turn2()))
    more = [*turn2(), {"role": "assistant", "content": BODY2["content"]}, {"role": "user", "content": "more"}]
    status, _, data = post(server.url, request(more))
    assert status == 400
    assert "s01_hello_agent holds 2 turns and all were answered" in error_message(data)
    assert "stop_reason end_turn" in error_message(data)


def test_recorded_errors_are_served_as_recorded_headers_included(serve, tmp_path):
    recorded = {
        "status": 429,
        "headers": {"retry-after": "7", "request-id": "req_recorded", "content-type": "application/json"},
        "body": {
            "type": "error",
            "error": {"type": "rate_limit_error", "message": "Number of requests exceeded"},
        },
    }

    def edit(f):
        f["exchanges"].insert(0, {"request": FIXTURE["exchanges"][0]["request"], "response": recorded})

    server, _ = serve(limited=variant(tmp_path, "limited", edit))
    status, headers, data = post(server.url, request(TURN1))
    assert (status, headers["retry-after"], headers["request-id"], data) == (
        429,
        "7",
        "req_recorded",
        recorded["body"],
    )
    assert post(server.url, request(TURN1))[0] == 200  # the retry is the recording's next exchange


# -- cursors: one per student, restarts ------------------------------------------------------------


def test_two_students_interleaved_keep_separate_cursors(serve):
    server, _ = serve()
    assert post(server.url, request(TURN1), key="alice")[2]["stop_reason"] == "tool_use"
    assert post(server.url, request(TURN1), key="bob")[2]["stop_reason"] == "tool_use"
    assert post(server.url, request(turn2()), key="alice")[2]["stop_reason"] == "end_turn"
    assert post(server.url, request(turn2(IDS[:1])), key="bob")[0] == 400  # bob's mistake is bob's alone
    assert post(server.url, request(turn2()), key="bob")[2]["stop_reason"] == "end_turn"
    rows = {s["student"]: (s["turn"], s["mistakes"]) for s in server.classroom.status()["students"]}
    assert rows == {"alice": (2, 0), "bob": (2, 1)}


def test_a_bearer_token_names_the_student_too(serve):
    server, _ = serve()
    post(server.url, request(TURN1), key=None, authorization="Bearer carol")
    assert [s["student"] for s in server.classroom.status()["students"]] == ["carol"]


def test_sending_the_first_message_alone_starts_the_student_over(serve):
    server, log = serve()
    post(server.url, request(TURN1))
    status, _, data = post(server.url, request(TURN1))  # the student re-ran their program
    assert (status, data["stop_reason"]) == (200, "tool_use")
    assert post(server.url, request(turn2()))[2]["stop_reason"] == "end_turn"
    assert "restart" in log.getvalue().splitlines()[1]


def test_a_first_message_the_recording_expects_again_is_a_retry_not_a_restart(serve, tmp_path):
    def edit(f):
        error = {
            "status": 529,
            "headers": {},
            "body": {"type": "error", "error": {"type": "overloaded_error"}},
        }
        f["exchanges"].insert(0, {"request": FIXTURE["exchanges"][0]["request"], "response": error})

    server, _ = serve(retry=variant(tmp_path, "retry", edit))
    assert post(server.url, request(TURN1))[0] == 529
    assert post(server.url, request(TURN1))[0] == 200
    assert server.classroom.status()["students"][0]["restarts"] == 0


def test_post_replay_reset_puts_the_student_back_at_turn_1(serve):
    server, _ = serve()
    post(server.url, request(TURN1), key="alice")
    post(server.url, request(TURN1), key="bob")
    status, _, data = post(server.url, {}, key="alice", path="/replay/reset")
    assert (status, data) == (200, {"reset": "alice", "fixtures": ["s01_hello_agent"]})
    status, _, data = post(server.url, request(turn2()), key="alice")
    assert status == 400 and "expected 1 messages, got 3" in error_message(data)
    assert post(server.url, request(turn2()), key="bob")[0] == 200


# -- several fixtures -----------------------------------------------------------------------------


def test_the_first_fixture_is_the_default_and_model_or_header_picks_another(serve, tmp_path):
    def edit(f):
        f["exchanges"][0]["response"]["body"]["id"] = "msg_other"

    server, _ = serve(s01_hello_agent=FIXTURE, other=variant(tmp_path, "other", edit))
    assert post(server.url, request(TURN1), key="a")[2]["id"] == BODY1["id"]
    assert post(server.url, request(TURN1, model="replay:other"), key="b")[2]["id"] == "msg_other"
    assert post(server.url, request(TURN1), key="c", x_replay_fixture="other")[2]["id"] == "msg_other"
    status, _, data = post(server.url, request(TURN1), key="d", x_replay_fixture="nope")
    assert (status, data["error"]["type"]) == (404, "not_found_error")  # as the API answers an unknown model
    assert (
        "no fixture 'nope' on this replay server; it serves: s01_hello_agent, other"
        in data["error"]["message"]
    )


# -- streaming --------------------------------------------------------------------------------------


def test_streaming_through_the_sdk_gives_the_same_message_as_json(serve):
    server, _ = serve()
    streaming = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    plain = anthropic.Anthropic(api_key="bob", base_url=server.url, max_retries=0)
    for exchange in FIXTURE["exchanges"]:
        body = exchange["request"]
        with streaming.messages.stream(model="m", max_tokens=100, messages=body["messages"]) as stream:
            streamed = stream.get_final_message()
        created = plain.messages.create(model="m", max_tokens=100, messages=body["messages"])
        assert created.to_dict() == exchange["response"]["body"]
        assert streamed.to_dict(exclude_none=True) == created.to_dict(exclude_none=True)


def test_a_fixture_recorded_as_sse_is_served_as_json_to_a_plain_request(serve, tmp_path):
    def edit(f):
        for exchange in f["exchanges"]:
            events = replay.message_to_events(exchange["response"].pop("body"))
            exchange["response"] = {
                "status": 200,
                "headers": {"content-type": "text/event-stream"},
                "stream": events,
            }

    sse = variant(tmp_path, "sse", edit)
    server, _ = serve(sse=sse)
    status, headers, data = post(server.url, request(TURN1))
    assert (status, headers["content-type"], data) == (200, "application/json", BODY1)
    status, headers, text = post(server.url, request(turn2(), stream=True))
    assert headers["content-type"].startswith("text/event-stream")
    assert text == replay.sse_bytes(sse["exchanges"][1]["response"]["stream"]).decode()


def test_message_to_events_and_back_is_the_same_message():
    thinking = {"type": "thinking", "thinking": "let me look at the files first", "signature": "sig=="}
    message = BODY1 | {"content": [thinking, {"type": "text", "text": "Listing… ✓"}, *BODY1["content"]]}
    events = replay.message_to_events(message)
    assert [e["event"] for e in events][:2] == ["message_start", "content_block_start"]
    assert [e["event"] for e in events][-2:] == ["message_delta", "message_stop"]
    assert replay.events_to_message(events) == message


def sse(kind: str, **data) -> dict:
    return {"event": kind, "data": {"type": kind, **data}}


def test_events_to_message_reads_a_stream_as_the_api_sends_it():
    start = BODY1 | {"content": [], "stop_reason": None, "usage": {"input_tokens": 114, "output_tokens": 1}}
    tool = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}
    events = [
        sse("message_start", message=start),
        sse("ping"),
        sse("content_block_start", index=0, content_block=tool),
        *[
            sse("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": piece})
            for piece in ("", '{"command": "l', 's"}')
        ],
        sse("content_block_stop", index=0),
        sse(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 40},
        ),
        sse("message_stop"),
    ]
    message = replay.events_to_message(events)
    assert message["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
    ]
    assert (message["stop_reason"], message["usage"]) == (
        "tool_use",
        {"input_tokens": 114, "output_tokens": 40},
    )
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert replay.events_to_message([*events[:3], {"event": "error", "data": error}]) == error


def test_conversation_only_ignores_what_a_student_writes_but_not_the_ids():
    recorded = FIXTURE["exchanges"][1]["request"]
    theirs = {"model": "x", "max_tokens": 5, "stream": True, "system": "mine", "messages": turn2()}
    theirs["messages"][0] = {"role": "user", "content": [{"type": "text", "text": "my words"}]}
    assert replay.request_diff(recorded, theirs, conversation_only=True) is None
    assert replay.request_diff(recorded, theirs, structure_only=True).startswith("max_tokens")  # unchanged
    swapped = turn2([IDS[1], IDS[0], IDS[2]])
    problem = replay.request_diff(recorded, {"messages": swapped}, conversation_only=True)
    assert problem == f'messages[2].content[0]: tool_use_id expected "{IDS[0]}", got "{IDS[1]}"'


# -- the teacher's view -----------------------------------------------------------------------------


def test_the_teacher_sees_one_line_per_request_and_a_class_table(serve):
    server, log = serve()
    post(server.url, request(TURN1), key="alice")
    post(server.url, request(turn2(IDS[:2])), key="alice")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2
    assert re.search(r"alice\s+s01_hello_agent\s+turn 1/2\s+200 tool_use \(json\)", lines[0])
    assert re.search(rf"alice\s+s01_hello_agent\s+turn 2/2\s+400 messages\[2\]: tool_use {IDS[2]}", lines[1])
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.request("GET", "/")
    page = conn.getresponse().read().decode()
    conn.close()
    assert f"ANTHROPIC_BASE_URL=http://127.0.0.1:{parts.port}" in page
    assert re.search(r"alice\s+s01_hello_agent\s+1/2\s+2\s+1\s+0\s+400 messages\[2\]", page)


def test_unknown_paths_are_a_404_in_the_api_shape(serve):
    server, _ = serve()
    status, _, data = post(server.url, request(TURN1), path="/v1/complete")
    assert (status, data["error"]["type"]) == (404, "not_found_error")


# -- the command line -------------------------------------------------------------------------------


def test_replay_py_serve_starts_prints_its_url_and_answers():
    command = [sys.executable, "replay.py", "serve", str(S01.relative_to(ROOT)), "--port", "0"]
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
        rest, _ = proc.communicate(timeout=10)
    assert re.search(r"dave\s+s01_hello_agent\s+turn 1/2\s+200 tool_use", rest)


def test_a_missing_fixture_or_busy_port_is_a_one_line_error(serve, capsys):
    assert replay_server.main(["fixtures/nope.json", "--port", "0"]) == 1
    server, _ = serve()
    assert replay_server.main([str(S01), "--port", str(server.server_address[1])]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith("error: fixtures/nope.json: no such fixture")
    assert errors[1].startswith(f"error: cannot listen on 127.0.0.1:{server.server_address[1]}")
