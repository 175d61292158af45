"""The classroom replay server, over real HTTP: the SDK, a hand-written loop, broken loops, many students."""

import copy
import http.client
import io
import json
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from urllib.parse import urlsplit

from workbook import scratch
from workbook.api import compare, json_text, wire
from workbook.classroom import caps
from workbook.classroom import server as classroom_server
from workbook.classroom import students as classroom
from workbook.replay import fixtures

import anthropic
import pytest
from conftest import ROOT, offline_env

import s01_agent_loop

S01 = ROOT / "fixtures" / "s01_hello_agent.json"
FIXTURE = fixtures.load_fixture(S01)
TURN1 = FIXTURE["exchanges"][0]["request"]["messages"]  # the first message alone
BODY1, BODY2 = (e["response"]["body"] for e in FIXTURE["exchanges"])
IDS = [b["id"] for b in BODY1["content"]]  # the three tool_use ids turn 1 asks for


# -- helpers: a server in a thread, a raw HTTP client -------------------------------------------------


@pytest.fixture
def serve():
    """Start a replay server on a free loopback port; returns (server, log) — log is what it printed."""
    started = []

    def start(limits=None, per_address=None, **fixtures: dict):
        fixtures = fixtures or {"s01_hello_agent": FIXTURE}  # by name, the first is the default
        log = io.StringIO()
        server = classroom_server.ReplayServer(fixtures, port=0, out=log, limits=limits, caps=per_address)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return server, log

    yield start
    for server in started:  # uvicorn takes a tenth of a second to stop: the next test does not wait for it
        threading.Thread(target=stop, args=(server,), daemon=True).start()


def stop(server) -> None:
    server.shutdown()
    server.server_close()


def post(url: str, body, key: str | None = "alice", path: str = "/v1/messages", **headers):
    """A raw HTTP POST, as a loop written from scratch would send it: (status, headers, decoded body)."""
    parts = urlsplit(url)
    sent = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
    sent |= {"x-api-key": key} if key else {}
    sent |= {k.replace("_", "-"): v for k, v in headers.items()}
    sent = {k: v for k, v in sent.items() if v is not None}
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
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
    return fixtures.load_fixture(path)


# -- the SDK and hand-written loops run a fixture to the end ----------------------------------------


def test_sdk_runs_the_s01_loop_to_the_end(serve):
    server, _ = serve()
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    workspace = scratch.copy_workspace(FIXTURE["workspace"])
    messages = [{"role": "user", "content": FIXTURE["task"]}]
    turns = s01_agent_loop.agent_loop(client, messages, s01_agent_loop.Settings(workspace))
    assert [t.stop_reason for t in turns] == ["tool_use", "end_turn"]
    assert turns[-1].content[0].text == BODY2["content"][0]["text"]
    assert (workspace / "hello_agent.txt").read_text() == "Hello from Agent Loop!\n"
    assert [(s["student"], s["turn"], s["mistakes"]) for s in server.classroom.status()["students"]] == [
        ("alice", 2, 0)
    ]


def test_a_hand_written_loop_with_its_own_prompt_and_tools_is_accepted(serve):
    server, _ = serve()
    messages = [{"role": "user", "content": FIXTURE["task"]}]  # the recorded task: the replies answer it
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
    settings = s01_agent_loop.Settings(scratch.copy_workspace("hello"))
    turns = s01_agent_loop.agent_loop(client, [dict(TURN1[0])], settings)
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
    assert message.startswith(
        f"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: {IDS[2]}."
    )
    assert "each tool_use id needs one tool_result, in the next user message" in message
    assert "Compared with the recording of turn 2: messages[2]: expected 3 content blocks, got 2" in message


def test_the_sdk_raises_its_bad_request_error_carrying_the_teaching_message(serve):
    server, _ = serve()
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    client.messages.create(model="m", max_tokens=100, messages=TURN1)
    with pytest.raises(
        anthropic.BadRequestError, match=f"messages.1: `tool_use` ids were found without .*{IDS[2]}"
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


def test_a_recorded_web_search_is_sent_only_to_a_request_that_declares_the_tool(serve):
    paused = fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json")
    server, _ = serve(s06_pause_turn=paused)
    recorded = paused["exchanges"][0]["request"]
    status, _, data = post(server.url, request(recorded["messages"]))  # a loop of one's own: no tools
    assert status == 400 and error_message(data).startswith(
        "tools: the recorded reply uses the server tool `web_search`, but this request does not declare it"
    )
    assert error_message(data).endswith(
        'Compared with the recording of turn 1: the recording\'s request declares it in `tools`: {"type": '
        '"web_search_20250305", "name": "web_search", "max_uses": 5}; declare it too'
    )
    search = {"type": "web_search_20250305", "name": "web_search"}
    status, _, data = post(server.url, request(recorded["messages"], tools=[search]))
    assert status == 200 and data["stop_reason"] == "pause_turn"


def test_a_mistake_keeps_the_cursor_so_the_corrected_request_goes_through(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    assert post(server.url, request(turn2(IDS[:2])))[0] == 400
    status, _, data = post(server.url, request(turn2()))
    assert (status, data["stop_reason"]) == (200, "end_turn")


@pytest.mark.parametrize(
    "body, expected",
    [
        (request(TURN1) | {"max_tokens": None}, "max_tokens: Input should be a valid integer"),
        ({"model": "m", "messages": TURN1}, "max_tokens: Field required"),
        (
            request([{"role": "assistant", "content": "hi"}]),
            'messages: first message must use the "user" role',
        ),
        (request([{"role": "user", "content": [{"text": "no type"}]}]), "messages.0.content.0.type: Field"),
        (request(TURN1) | {"temperature": "hot"}, "temperature: Input should be a valid number"),
        (request(TURN1) | {"tools": "notalist"}, "tools: Input should be a valid list"),
        (b"{not json", "not valid JSON"),
        (
            b'{"model": "m", "max_tokens": ' + b"9" * 5000 + b"}",
            "not valid JSON",
        ),  # past Python's 4,300 digits
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


def test_a_new_question_after_the_last_reply_is_a_400_saying_a_new_conversation_began(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    post(server.url, request(turn2()))
    more = [*turn2(), {"role": "assistant", "content": BODY2["content"]}, {"role": "user", "content": "more"}]
    status, _, data = post(server.url, request(more))
    assert status == 400
    message = error_message(data)
    assert "s01_hello_agent holds 2 turns and all were answered" in message
    assert "your loop stopped as it should (stop_reason end_turn)" in message
    assert "a new conversation began" in message and "A loop stops when" not in message
    assert "run your program again" in message and "POST /replay/reset" in message


def test_a_loop_that_asks_again_after_the_last_reply_is_told_when_a_loop_stops(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    post(server.url, request(turn2()))
    again = [*turn2(), {"role": "assistant", "content": BODY2["content"]}]  # no new question: it just asked
    status, _, data = post(server.url, request(again))
    assert status == 400
    message = error_message(data)
    assert "your loop asked again after the last reply (stop_reason end_turn)" in message
    assert "A loop stops when stop_reason is not tool_use" in message and "POST /replay/reset" in message


def mini_swe_agent_task(task: str) -> dict:
    """mini-swe-agent's first user turn with its default template: the task inside words of its own."""
    text = f"Please solve this issue: {task}\n\nYou can execute bash commands and edit files to implement "
    return {"role": "user", "content": [{"type": "text", "text": text + "the necessary changes."}]}


def test_a_task_inside_a_clients_own_words_walks_the_recording(serve):
    server, _ = serve()
    wrapped = mini_swe_agent_task(FIXTURE["task"])
    assert post(server.url, request([wrapped]))[0] == 200
    status, _, data = post(server.url, request([wrapped, *turn2()[1:]]))
    assert (status, data["stop_reason"]) == (200, "end_turn")
    [row] = server.classroom.status()["students"]
    assert (row["turn"], row["mistakes"]) == (2, 0)


def test_a_first_turn_without_the_recorded_task_word_for_word_is_still_refused(serve):
    server, _ = serve()
    status, _, data = post(server.url, request([mini_swe_agent_task(FIXTURE["task"].upper())]))
    assert status == 400
    assert "your first user turn does not carry the recorded task; send " in error_message(data)


def split_turn() -> list:
    """Turn 1's three tool_use blocks as the OpenAI Agents SDK (with LitellmModel) sends them back: one
    assistant turn each, each answered apart."""
    pairs = [
        [{"role": "assistant", "content": [block]}, results([block["id"]])] for block in BODY1["content"]
    ]
    return [TURN1[0], *(message for pair in pairs for message in pair)]


def test_a_split_turn_is_told_where_it_parted_from_the_recording(serve):
    server, _ = serve()
    post(server.url, request(TURN1))
    status, _, data = post(server.url, request(split_turn()))
    assert status == 400
    assert error_message(data).endswith(
        "expected 3 messages, got 7 — messages[1]: expected tool_use, tool_use, tool_use; got tool_use"
    )


def test_a_request_after_a_recording_that_ended_on_an_error_is_told_which_error(serve):
    ends_on_400 = fixtures.load_fixture(ROOT / "fixtures" / "grade_s03_overloaded_then_400.json")
    server, _ = serve(grade_s03_overloaded_then_400=ends_on_400)
    asked = [exchange["request"] for exchange in ends_on_400["exchanges"]]
    assert [post(server.url, body)[0] for body in asked] == [529, 200, 400]
    status, _, data = post(server.url, asked[-1])  # the 400's request again
    assert status == 400
    message = error_message(data)
    assert "the recording ended on a 400 invalid_request_error: max_tokens: 200000 > 64000" in message
    assert "stop_reason None" not in message and "A program stops on an error it cannot fix" in message


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


def overloaded_first(f) -> None:
    """A variant's edit: the recording's first request answered 529 once, then as recorded (a retry)."""
    error = {
        "status": 529,
        "headers": {},
        "body": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    }
    f["exchanges"].insert(0, {"request": FIXTURE["exchanges"][0]["request"], "response": error})


def test_a_first_message_the_recording_expects_again_is_a_retry_not_a_restart(serve, tmp_path):
    server, _ = serve(retry=variant(tmp_path, "retry", overloaded_first))
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
            events = wire.message_to_events(exchange["response"].pop("body"))
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
    assert text == wire.sse_bytes(sse["exchanges"][1]["response"]["stream"]).decode()


def test_message_to_events_and_back_is_the_same_message():
    thinking = {"type": "thinking", "thinking": "let me look at the files first", "signature": "sig=="}
    message = BODY1 | {"content": [thinking, {"type": "text", "text": "Listing… ✓"}, *BODY1["content"]]}
    events = wire.message_to_events(message)
    assert [e["event"] for e in events][:2] == ["message_start", "content_block_start"]
    assert [e["event"] for e in events][-2:] == ["message_delta", "message_stop"]
    assert wire.events_to_message(events) == message


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
    message = wire.events_to_message(events)
    assert message["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
    ]
    assert (message["stop_reason"], message["usage"]) == (
        "tool_use",
        {"input_tokens": 114, "output_tokens": 40},
    )
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert wire.events_to_message([*events[:3], {"event": "error", "data": error}]) == error


def test_conversation_only_ignores_what_a_student_writes_but_not_the_ids():
    recorded = FIXTURE["exchanges"][1]["request"]
    theirs = {"model": "x", "max_tokens": 5, "stream": True, "system": "mine", "messages": turn2()}
    spaced = {"type": "text", "text": f"  {FIXTURE['task']}\n"}  # the recorded task, with its own spacing
    theirs["messages"][0] = {"role": "user", "content": [spaced]}
    assert compare.request_diff(recorded, theirs, compare.Match.CONVERSATION) is None
    assert compare.request_diff(recorded, theirs, compare.Match.STRUCTURE).startswith(
        "max_tokens"
    )  # unchanged
    swapped = turn2([IDS[1], IDS[0], IDS[2]])  # the API pairs results by id: any order is the same turn
    assert compare.request_diff(recorded, {"messages": swapped}, compare.Match.CONVERSATION) is None
    wrong = turn2([IDS[0], IDS[1], "toolu_other"])
    problem = compare.request_diff(recorded, {"messages": wrong}, compare.Match.CONVERSATION)
    assert problem == f'messages[2].content[2]: tool_use_id expected "{IDS[2]}", got "toolu_other"'


# -- the teacher's view -----------------------------------------------------------------------------


def test_the_teacher_sees_one_line_per_request_and_a_class_table(serve):
    server, log = serve()
    post(server.url, request(TURN1), key="alice")
    post(server.url, request(turn2(IDS[:2])), key="alice")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2
    assert re.search(r"alice\s+s01_hello_agent\s+turn 1/2\s+200 tool_use \(json\)", lines[0])
    assert re.search(
        r"alice\s+s01_hello_agent\s+turn 2/2\s+400 messages.1: `tool_use` ids were found", lines[1]
    )
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("GET", f"/?token={server.teacher_token}")  # the class table is the teacher's
    page = conn.getresponse().read().decode()
    conn.close()
    assert f"ANTHROPIC_BASE_URL=http://127.0.0.1:{parts.port}" in page
    assert re.search(r"alice\s+s01_hello_agent\s+1/2\s+2\s+1\s+0\s+400 messages.1: `tool_use`", page)


def test_unknown_paths_are_a_404_in_the_api_shape(serve):
    server, _ = serve()
    status, _, data = post(server.url, request(TURN1), path="/v1/complete")
    assert (status, data["error"]["type"]) == (404, "not_found_error")


# -- the command line -------------------------------------------------------------------------------


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


def test_a_missing_fixture_or_busy_port_is_a_one_line_error(serve, capsys):
    assert classroom_server.main(["fixtures/nope.json", "--port", "0"]) == 1
    server, _ = serve()
    assert classroom_server.main([str(S01), "--port", str(server.server_address[1])]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith("error: fixtures/nope.json: no such fixture")
    assert errors[1].startswith(f"error: cannot listen on 127.0.0.1:{server.server_address[1]}")


# -- a class at once: speed, fairness, limits, the teacher's terminal ------------------------------


def raw_exchange(url: str, data: bytes, read_until_closed: bool = True) -> bytes:
    """Send raw bytes to the server and return what comes back until it closes (or 10 s pass)."""
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


def test_a_body_over_32_mb_is_a_413_answered_before_the_body_is_read(serve):
    server, log = serve(limits=classroom.Limits(linger=0.2))
    # the headers alone, claiming 40 MB: the answer can only come before the body, which never comes
    received = raw_exchange(server.url, head(content_length=40 * 1024 * 1024))
    status, data = answer_of(received)
    assert status == 413
    assert data["type"] == "error" and data["error"]["type"] == "request_too_large"
    assert "32 MB" in data["error"]["message"] and "41,943,040" in data["error"]["message"]
    assert "127.0.0.1: 413 Request exceeds" in log.getvalue()  # and the connection closed: it was read


def test_a_client_that_sends_a_body_too_large_whole_still_reads_the_413(serve):
    server, _ = serve(limits=classroom.Limits(body_bytes=2000))
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    with pytest.raises(anthropic.RequestTooLargeError, match="the most is 2,000 bytes"):
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x" * 50_000}])
    # http.client stops at the first failed write: the server must drain the body it refused, or
    # closing on unread bytes resets the connection and the student sees a broken pipe, not the 413
    status, _, data = post(server.url, b"x" * 8_000_000)
    assert (status, data["error"]["type"]) == (413, "request_too_large")
    assert post(server.url, request(TURN1))[0] == 200  # the server carries on


def test_a_client_waiting_for_100_continue_hears_413_instead(serve):
    server, _ = serve(limits=classroom.Limits(linger=0.2))
    received = raw_exchange(server.url, head(content_length=40 * 1024 * 1024, expect="100-continue"))
    assert received.startswith(b"HTTP/1.1 413") and b"100 Continue" not in received


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "0x10", "１２"])
def test_a_bad_content_length_is_a_400_and_the_connection_closes(serve, length):
    server, log = serve()
    status, data = answer_of(raw_exchange(server.url, head(content_length=length)))  # read until closed
    assert status == 400
    assert "not HTTP/1.1 as this server reads it" in error_message(data)
    assert "127.0.0.1: 400 the request is not HTTP/1.1" in log.getvalue()


def test_two_different_content_lengths_are_a_400(serve):
    server, _ = serve()
    twice = head(content_length=5).replace(b"\r\n\r\n", b"\r\ncontent-length: 7\r\n\r\n")
    status, data = answer_of(raw_exchange(server.url, twice))
    assert status == 400 and "not HTTP/1.1 as this server reads it" in error_message(data)


def test_a_chunked_body_is_read_and_its_size_checked(serve):
    server, _ = serve(limits=classroom.Limits(body_bytes=1000))
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


def test_headers_sent_too_slowly_time_out_and_close_the_connection(serve):
    server, log = serve(limits=classroom.Limits(headers=0.3))
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


def test_a_body_that_stops_arriving_times_out_and_closes_the_connection(serve):
    server, log = serve(limits=classroom.Limits(body=0.2))
    received = raw_exchange(server.url, head(content_length=100) + b'{"model":')  # 9 of 100 bytes
    assert received == b""  # closed without an answer
    assert "timed out" in log.getvalue()


def test_an_idle_kept_alive_connection_is_closed_after_its_limit(serve):
    server, _ = serve(limits=classroom.Limits(idle=0.2))
    assert raw_exchange(server.url, b"") == b""


def test_a_full_class_closes_the_connection_waiting_longest_to_let_a_new_one_in(serve):
    server, log = serve(limits=classroom.Limits(connections=2))
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


def test_a_kept_alive_connection_serves_many_requests_with_nagle_off(serve):
    server, _ = serve()
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


def test_each_student_has_a_lock_of_their_own_so_one_never_waits_on_another(serve):
    server, _ = serve()
    classroom = server.classroom
    assert classroom.desk("alice") is classroom.desk("alice")
    assert classroom.desk("alice") is not classroom.desk("bob")
    done = []
    with classroom.desk("alice"):  # alice is busy (say, checking a 17 MB request)
        alice = threading.Thread(target=lambda: done.append(post(server.url, request(TURN1), key="alice")[0]))
        alice.start()
        assert post(server.url, request(TURN1), key="bob")[0] == 200  # bob is answered meanwhile
        alice.join(0.2)
        assert alice.is_alive() and done == []  # alice's own next request waits for alice
    alice.join(10)
    assert done == [200]
    assert not classroom.lock.locked()


def test_a_big_body_parses_to_the_same_json():
    big = json.dumps(request(turn2()) | {"padding": [{"text": "x" * 100}] * 5000}).encode()
    assert len(big) > 256 * 1024
    assert classroom_server.parse_json(big) == json.loads(big)


def refused_saying(server, key: str, *words: str) -> None:
    """A new student's first request is refused as the API refuses a key (403 permission_error), in a
    message that says each of `words`: why, and the flag that would let them in."""
    status, _, data = post(server.url, request(TURN1), key=key)
    assert (status, data["error"]["type"]) == (403, "permission_error")
    assert all(word in data["error"]["message"] for word in words), data["error"]["message"]


def test_the_class_is_capped_and_the_next_student_is_told_why(serve):
    server, log = serve(limits=classroom.Limits(students=2))
    assert post(server.url, request(TURN1), key="alice")[0] == 200
    assert post(server.url, request(TURN1), key="bob")[0] == 200
    refused_saying(server, "carol", "already keeps 2 students", "--max-students")
    assert post(server.url, request(turn2()), key="alice")[0] == 200  # those already in carry on
    assert {s["student"] for s in server.classroom.status()["students"]} == {"alice", "bob"}


def test_max_students_is_a_command_line_flag(capsys):
    with pytest.raises(SystemExit):
        classroom_server.main([str(S01), "--max-students", "0"])
    assert "1 or more" in capsys.readouterr().err


def test_the_class_table_lists_at_most_its_limit_and_says_how_many_more(serve):
    server, _ = serve(limits=classroom.Limits(listed=3))
    for name in "abcde":
        post(server.url, request(TURN1), key=name)
    page = get(server.url, f"/?token={server.teacher_token}")
    assert re.search(r"^c\s+s01_hello_agent", page, re.M) and not re.search(r"^d\s+s01", page, re.M)
    assert "... and 2 more rows: GET /replay/status lists them all" in page
    assert len(server.classroom.status()["students"]) == 5


def get(url: str, path: str, **headers) -> str:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", path, headers={k.replace("_", "-"): v for k, v in headers.items()})
        return conn.getresponse().read().decode()
    finally:
        conn.close()


EVIL = "\x9b2J<i>x</i>\u202e"  # \x9b: the 8-bit escape (CSI), then markup, then a bidi override
TITLE = "\x1b]0;PWNED\x07"  # a window title


def test_escape_codes_in_a_name_reach_the_teacher_escaped_never_raw(serve):
    server, log = serve()
    assert post(server.url, request(TURN1), key=EVIL.encode())[0] == 200  # UTF-8: bytes HTTP takes
    assert post(server.url, request(TURN1), key=TITLE)[0] == 400  # a control character it does not
    assert post(server.url, request(TURN1, model=f"replay:{TITLE}nope"))[0] == 404
    for text in (
        log.getvalue(),
        server.classroom.table(),
        get(server.url, f"/?token={server.teacher_token}"),
    ):
        assert not any(c in text for c in "\x1b\x07\x9b\u202e")
    assert "\\x9b2…\\u202e s01_hello_agent" in log.getvalue()  # cut in its middle to the column's 12
    assert "\\x9b2…\\u202e  s01_hello_agent" in server.classroom.table()
    assert "no fixture '\\x1b]0;PWNED\\x07nope'" in log.getvalue()


def test_names_cut_to_their_columns_stay_distinct_and_marked_at_80_columns(serve):
    runner = {"js-ts_runner-pinned_s01_hello": FIXTURE, "js-ts_runner-latest_s01_hello": FIXTURE}
    server, log = serve(**runner)
    for name in ("js-ts_runner-pinned", "js-ts_runner-latest", "js-ts_other-pinned"):
        for fixture in runner:
            assert post(server.url, request(TURN1, model=f"replay:{fixture}"), key=name)[0] == 200
    shown = {line.split()[1] for line in log.getvalue().splitlines()}
    assert shown == {"js-ts…pinned", "js-ts…latest", "js-t…inned~2"}  # each cut marked, none alike
    fixtures_shown = {line.split()[2] for line in log.getvalue().splitlines()}
    assert len(fixtures_shown) == 2 and all("…" in name for name in fixtures_shown)
    table = server.classroom.table().splitlines()
    assert {row.split()[0] for row in table[1:] if not row.startswith(" ")} == shown  # (a result wraps)
    assert max(len(row) for row in table) <= 80


def test_the_log_cuts_a_reason_at_a_word_and_says_done_past_the_end(serve):
    server, log = serve()
    post(server.url, request(TURN1))
    post(server.url, request(turn2()))
    again = [*turn2(), {"role": "assistant", "content": BODY2["content"]}]
    assert post(server.url, request(again))[0] == 400  # asked again after the recording's last turn
    last = log.getvalue().splitlines()[-1]
    assert last.split()[3] == "done" and "turn 3/2" not in last
    assert len(last) <= 150 and last.endswith("…") and last[-2] != " "
    cut_after = last[:-1].split()[-1]
    assert cut_after in past_the_end_words()  # a whole word of the reason, not part of one


def past_the_end_words() -> list[str]:
    messages = [*turn2(), {"role": "assistant", "content": BODY2["content"]}]
    return classroom.past_the_end("s01_hello_agent", FIXTURE["exchanges"], messages).split()


def test_printable_escapes_controls_and_bidi_overrides_and_keeps_names_in_any_script():
    assert classroom.printable("李雷 Zoë") == "李雷 Zoë"
    assert classroom.printable("a\u202eb\nc\x00") == "a\\u202eb\\nc\\x00"


def test_a_name_sent_as_utf_8_bytes_is_read_as_utf_8(serve):
    server, _ = serve()
    raw = json.dumps(request(TURN1)).encode()
    sent = head(content_length=len(raw), connection="close").replace(
        b"x-api-key: alice", "x-api-key: 李雷".encode()
    )
    assert answer_of(raw_exchange(server.url, sent + raw))[0] == 200
    assert [s["student"] for s in server.classroom.status()["students"]] == ["李雷"]


def test_the_page_for_a_browser_is_html_with_names_and_the_host_escaped(serve):
    server, _ = serve()
    post(server.url, request(TURN1), key=EVIL.encode())
    post(server.url, request(TURN1), key="<i>x</i>")  # short enough to be shown whole
    page = get(server.url, f"/?token={server.teacher_token}", accept="text/html", host="<b>evil</b>:1")
    assert page.startswith("<!doctype html>")
    assert "<i>" not in page and "&lt;i&gt;x&lt;/i&gt;" in page
    assert "<b>" not in page and "&lt;b&gt;evil&lt;/b&gt;" in page


def test_the_front_page_says_the_recordings_do_not_react_to_tool_output(serve):
    server, _ = serve()
    page = " ".join(get(server.url, "/").split())
    assert "they do not read your tool output" in page and "still the recorded one" in page


def test_the_front_page_gives_each_fixtures_task_to_send(serve, tmp_path):
    def escape(fixture):
        fixture["exchanges"][0]["request"]["messages"][0]["content"] = "list\x1b[2J the files"

    server, _ = serve(s01_hello_agent=FIXTURE, escape=variant(tmp_path, "escape", escape))
    page = get(server.url, "/")
    assert f"  s01_hello_agent: {FIXTURE['task']}\n" in page
    assert "  escape: list\\x1b[2J the files\n" in page and "\x1b" not in page  # shown, never acted on


def test_a_real_api_key_is_refused_and_never_printed(serve):
    server, log = serve()
    status, _, data = post(server.url, request(TURN1), key="sk-ant-api03-SECRETSECRET")
    assert (status, data["error"]["type"]) == (401, "authentication_error")
    assert "looks like a real Anthropic API key" in data["error"]["message"]
    assert "SECRET" not in log.getvalue() and "SECRET" not in get(server.url, "/")


def test_a_key_longer_than_a_name_is_refused(serve):
    server, _ = serve()
    status, _, data = post(server.url, request(TURN1), key="a" * 65)
    assert status == 401 and "65 characters" in data["error"]["message"]


# -- issue 23: what one hostile client could do to the class ----------------------------------------


@pytest.mark.parametrize("size", [b"-1", b"+2", b"0x2", b" 2", b"2 ", b""])
def test_a_chunk_size_that_is_not_plain_hex_digits_is_a_400_before_anything_is_read(serve, size):
    server, log = serve()
    chunked = head(transfer_encoding="chunked")
    # the chunk's data never comes: only a refusal at its size line can answer
    status, data = answer_of(raw_exchange(server.url, chunked + size + b"\r\n"))
    assert status == 400 and "Invalid character in chunk size" in error_message(data)
    assert "400 the request is not HTTP/1.1" in log.getvalue()


def test_a_chunk_that_claims_gigabytes_is_a_413_once_its_data_passes_the_limit(serve):
    server, _ = serve(limits=classroom.Limits(body_bytes=1000, linger=0.2))
    claim = head(transfer_encoding="chunked") + b"123456789\r\n"  # 4.9 GB, a size HTTP allows
    status, data = answer_of(raw_exchange(server.url, claim + b"x" * 5000))
    assert (status, data["error"]["type"]) == (413, "request_too_large")


def test_a_chunk_extension_after_a_plain_size_is_still_read(serve):
    server, _ = serve()
    body = json.dumps(request(TURN1)).encode()
    sent = head(transfer_encoding="chunked", connection="close") + b"%x;name=v\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )
    assert answer_of(raw_exchange(server.url, sent))[0] == 200


@pytest.mark.parametrize("encoding", ["gzip, chunked", "chunked, identity", "xchunked", "identity"])
def test_a_transfer_encoding_other_than_chunked_is_a_400(serve, encoding):
    server, _ = serve()
    sent = head(transfer_encoding=encoding, connection="close") + b"2\r\n{}\r\n0\r\n\r\n"
    status, data = answer_of(raw_exchange(server.url, sent))
    message = error_message(data)
    assert status == 400 and ("only chunked is taken" in message or "Transfer-Encoding" in message)


def test_one_address_cannot_hold_every_connection(serve):
    per = caps.AddressCaps(connections=3, names=16)
    server, log = serve(limits=classroom.Limits(connections=10), per_address=per)
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


def test_one_address_cannot_fill_the_class_with_new_names(serve):
    per = caps.AddressCaps(connections=64, names=3)
    server, log = serve(limits=classroom.Limits(students=100), per_address=per)
    for name in ("a", "b", "c"):
        assert post(server.url, request(TURN1), key=name)[0] == 200
    refused_saying(server, "d", "brought 3 names", "--max-names-per-address")
    assert post(server.url, request(turn2()), key="a")[0] == 200  # its own names carry on
    assert [s["student"] for s in server.classroom.status()["students"]] == ["a", "b", "c"]
    assert "403 a new name over this address's 3" in log.getvalue()


def test_the_caps_and_how_they_are_decided_are_in_the_banner(serve):
    server, _ = serve()
    text = classroom_server.banner(server, classroom.LOOPBACK)
    assert "per client address: 500 connections, 300 names, 128 MB unanswered" in text
    assert "the class is full, the name quiet longest gives up its place" in text
    assert all(len(line) <= 80 for line in text.splitlines()[5:])  # the caps fit a terminal


@pytest.mark.parametrize("where", ["model", "header"])
def test_a_key_sent_as_the_fixture_name_is_never_logged_nor_echoed(serve, where):
    server, log = serve()
    key = "sk-ant-api03-SECRETSECRET"
    if where == "model":
        status, _, data = post(server.url, request(TURN1, model=f"replay:{key}"))
    else:
        status, _, data = post(server.url, request(TURN1), x_replay_fixture=key)
    assert (status, data["error"]["type"]) == (404, "not_found_error")
    assert "looks like a real Anthropic API key" in data["error"]["message"]
    assert "SECRET" not in json.dumps(data) and "SECRET" not in log.getvalue()
    assert "(not shown)" in log.getvalue()


def test_a_big_body_is_judged_off_the_loop_while_others_are_answered(serve):
    server, _ = serve()
    padded = request(turn2()) | {"metadata": {"user_id": "x" * (classroom_server.OFF_LOOP_BYTES + 10)}}
    judged_on = []
    server.classroom.observer = lambda student, *_: judged_on.append(
        (student, threading.current_thread().name)
    )
    post(server.url, request(TURN1), key="big")
    assert post(server.url, padded, key="big")[0] == 200  # the same answer, from a worker thread
    assert post(server.url, request(TURN1), key="small")[0] == 200
    assert [who for who, _ in judged_on] == ["big", "big", "small"]
    assert judged_on[1][1].startswith("replay-judge") and not judged_on[2][1].startswith("replay-judge")


# -- the recording's own bytes, as a student's SDK sends them: each parsed and judged ----------------


def test_requests_sent_back_to_back_or_in_pieces_are_each_answered_in_order(serve):
    server, _ = serve()
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


def test_a_client_that_stops_reading_its_replies_is_closed_after_the_write_limit(serve):
    server, log = serve(limits=classroom.Limits(write=0.3))
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


def test_a_chunked_body_arriving_in_pieces_is_read_whole_and_its_framing_checked(serve):
    server, _ = serve()
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


# -- the SDK's own bytes, a restart, a recorded retry, a beta (each judged in full, as any request) ---


def sdk_bytes(exchange: int, fixture: dict = FIXTURE) -> bytes:
    """A recorded request as compact JSON, the way the SDK writes it: what a student's SDK loop sends."""
    sent = fixture["exchanges"][exchange]["request"]
    return json.dumps(sent, separators=(",", ":"), ensure_ascii=False).encode()


def test_the_recordings_own_bytes_are_answered_and_a_rerun_restarts(serve):
    server, log = serve()
    assert post(server.url, sdk_bytes(0))[2] == BODY1
    assert post(server.url, sdk_bytes(1))[2] == BODY2
    status, _, data = post(server.url, sdk_bytes(0))  # the program run again: a restart
    assert (status, data) == (200, BODY1)
    row = server.classroom.status()["students"][0]
    assert (row["turn"], row["requests"], row["restarts"], row["last"]) == (1, 3, 1, "200 tool_use (json)")
    lines = log.getvalue().splitlines()
    assert "turn 2/2" in lines[1] and "200 end_turn (json)" in lines[1]
    assert "turn 1/2" in lines[2] and "restart · 200 tool_use (json)" in lines[2]


def test_a_beta_header_and_the_graders_observer_see_every_request(serve):
    server, _ = serve()
    post(server.url, sdk_bytes(0))
    spaced = json.dumps(FIXTURE["exchanges"][1]["request"]).encode()  # the same request, other bytes
    assert post(server.url, spaced)[2] == BODY2
    assert post(server.url, sdk_bytes(0), anthropic_beta="some-beta-2025-01-01")[0] == 200
    seen = []
    server.classroom.observer = lambda student, *_: seen.append(student)
    assert post(server.url, sdk_bytes(1))[0] == 200
    assert seen == ["alice"]


def test_the_recordings_bytes_keep_a_recorded_retry_a_retry(serve, tmp_path):
    retry = variant(tmp_path, "retry", overloaded_first)
    server, _ = serve(retry=retry)
    assert post(server.url, sdk_bytes(0, retry))[0] == 529
    assert post(server.url, sdk_bytes(1, retry))[0] == 200
    assert post(server.url, sdk_bytes(2, retry))[0] == 200
    assert post(server.url, sdk_bytes(1, retry))[0] == 529  # turn 1 after the end: a restart, as recorded
    row = server.classroom.status()["students"][0]
    assert (row["turn"], row["restarts"]) == (1, 1)


def test_the_recordings_bytes_that_need_a_beta_are_refused_without_it(serve, tmp_path):
    def edit(f):  # a recording may use any beta (it keeps no headers): this one a server-held thread
        f["exchanges"][0]["request"]["thread"] = {"type": "create"}

    threaded = variant(tmp_path, "threaded", edit)
    server, _ = serve(threaded=threaded)
    for _ in range(2):  # a new student, then a known one
        status, _, data = post(server.url, sdk_bytes(0, threaded))
        assert status == 400 and "requires the beta header" in error_message(data)


# -- the library's limits and the workbook's: memory, heads, idle clients, one shared host ----------


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


def traced_peak(work) -> int:
    """The most memory this process held above what it held before, while `work` ran (every thread)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def test_a_huge_chunked_body_is_a_413_without_being_held(serve):
    server, _ = serve(limits=classroom.Limits(body_bytes=2**20, linger=30))
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


def test_one_byte_chunks_cost_no_more_memory_than_the_body(serve):
    server, _ = serve()
    body = json.dumps(request(TURN1)).encode().ljust(50_000)  # JSON, padded with spaces
    sent = head(transfer_encoding="chunked", connection="close") + one_byte_chunks(body)  # 300 KB
    answers = []
    peak = traced_peak(lambda: answers.append(answer_of(raw_exchange(server.url, sent))))
    assert answers[0][0] == 200
    assert peak < 2 * 2**20  # the wire is 6 times the body; the server keeps the body once
    too_many = head(transfer_encoding="chunked") + one_byte_chunks(b"x" * 100_001)
    status, data = answer_of(raw_exchange(server.url, too_many))
    assert status == 400 and "more than 100,000 pieces" in error_message(data)


def test_a_head_with_bare_lf_line_endings_gets_a_400_in_the_apis_shape(serve):
    server, log = serve()
    raw = json.dumps(request(TURN1)).encode()
    bare = head(content_length=len(raw)).replace(b"\r\n", b"\n") + raw
    status, data = answer_of(raw_exchange(server.url, bare))
    assert status == 400 and "not HTTP/1.1 as this server reads it" in error_message(data)
    assert "127.0.0.1: 400" in log.getvalue()


def test_a_head_over_64_kb_is_a_431(serve):
    server, log = serve()
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


def test_a_kept_alive_connection_is_closed_when_idle_after_a_reply(serve):
    server, _ = serve(limits=classroom.Limits(idle=0.3))
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(head("GET /replay/status", connection="keep-alive"))
        assert read_answer(sock)[0] == 200
        assert sock.recv(65536) == b""  # then nothing asked: closed by the server, within the limit


def test_fifty_students_on_one_address_are_all_served_with_default_flags(serve):
    server, _ = serve()
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


def test_a_name_quiet_ten_minutes_gives_its_place_when_the_class_is_full(serve):
    server, log = serve(limits=classroom.Limits(students=2))
    assert post(server.url, request(TURN1), key="alice")[0] == 200
    assert post(server.url, request(TURN1), key="bob")[0] == 200
    refused_saying(server, "carol", "already keeps 2 students")  # both spoke just now
    server.admission.seats["alice"].last -= caps.QUIET  # as if alice had been quiet ten minutes
    assert post(server.url, request(TURN1), key="carol")[0] == 200
    assert {s["student"] for s in server.classroom.status()["students"]} == {"bob", "carol"}
    assert "its place given to a new name" in log.getvalue()


def test_a_name_stops_counting_for_its_address_once_quiet(serve):
    server, _ = serve(per_address=caps.AddressCaps(names=2))
    for name in ("a", "b"):
        assert post(server.url, request(TURN1), key=name)[0] == 200
    refused_saying(server, "c", "brought 2 names", "--max-names-per-address")
    server.admission.seats["a"].last -= caps.QUIET
    assert post(server.url, request(TURN1), key="c")[0] == 200
    assert post(server.url, request(turn2()), key="a")[0] == 200  # a name used before is its own again


def test_a_forwarded_for_header_does_not_change_a_clients_address(serve):
    server, _ = serve(per_address=caps.AddressCaps(names=1))
    assert post(server.url, request(TURN1), key="a")[0] == 200
    status, _, _ = post(server.url, request(TURN1), key="b", x_forwarded_for="10.9.9.9")
    assert status == 403


def test_an_address_holding_too_many_unanswered_bytes_gets_a_429(serve):
    server, _ = serve(per_address=caps.AddressCaps(held_bytes=1000))
    status, _, data = post(server.url, request(TURN1, metadata={"user_id": "x" * 2000}))
    assert (status, data["error"]["type"]) == (429, "rate_limit_error")
    assert post(server.url, request(TURN1))[0] == 200  # what it held was given back


def test_a_client_gone_mid_body_gives_back_what_its_request_held(serve):
    server, _ = serve(per_address=caps.AddressCaps(held_bytes=1000))
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


def test_side_requests_and_count_tokens_use_no_turn_and_the_table_marks_them(serve):
    server, log = serve()
    status, _, counted = post(server.url, request(TURN1), path="/v1/messages/count_tokens?beta=true")
    assert status == 200 and set(counted) == {"input_tokens"} and counted["input_tokens"] > 0
    probe = request([{"role": "user", "content": "quota"}], max_tokens=1)
    status, _, reply = post(server.url, probe)
    assert status == 200 and "side request" in reply["content"][0]["text"]
    status, _, reply = post(server.url, request(TURN1))
    assert status == 200 and reply["content"] == BODY1["content"]  # the real turn 1 is still turn 1
    [row] = server.classroom.status()["students"]
    assert (row["turn"], row["requests"], row["side"], row["mistakes"]) == (1, 1, 2, 0)
    assert re.search(
        r"alice\s+s01_hello_agent\s+1/2\s+1\+2 side\s+0\s+0\s+200 tool_use", server.classroom.table()
    )
    assert "side request · count_tokens" in log.getvalue()
    status, _, refused = post(server.url, {"messages": "no"}, path="/v1/messages/count_tokens")
    assert status == 400 and error_message(refused) == "messages: Field required"


def test_a_students_last_request_is_remembered_only_while_small_and_let_go_with_the_student():
    """Each student's next request is judged on what it adds to their last one, which the classroom keeps
    while it is small (Limits.remembered) and the class's together fit (remembered_all)."""
    loaded = {"s01_hello_agent": fixtures.load_fixture(S01)}
    headers = {"anthropic-version": "2023-06-01"}
    sent = json.dumps(request(TURN1)).encode()
    room = classroom.Classroom(loaded, out=io.StringIO(), limits=classroom.Limits(remembered_all=len(sent)))
    for name in ("ann", "bob"):
        assert room.answer(name, json.loads(sent), None, headers, size=len(sent)).status == 200
    ann, bob = (room.cursors[(name, "s01_hello_agent")] for name in ("ann", "bob"))
    assert ann.player.requests.sent.messages == TURN1 and ann.remembered == len(sent)
    assert bob.player.requests.sent.messages == [] and bob.remembered == 0  # the class's share is ann's
    assert room.remembered == len(sent)
    room.forget("ann")
    assert room.remembered == 0
    assert room.answer("bob", json.loads(sent), None, headers, size=len(sent)).status == 200
    assert bob.remembered == room.remembered == len(sent)  # ann's share, let go, is bob's now
    room.answer("bob", json.loads(sent), None, headers, size=None)  # a size not known: nothing kept
    assert bob.player.requests.sent.messages == [] and room.remembered == 0


def test_the_server_gives_the_classroom_each_bodys_size_so_a_small_one_is_remembered(serve):
    server, _ = serve()
    body = json.dumps(request(TURN1)).encode()
    assert post(server.url, body)[0] == 200
    cursor = server.classroom.cursors[("alice", "s01_hello_agent")]
    assert cursor.remembered == json_text.measured(body)[1] > len(body)  # its cost as parsed
    assert cursor.player.requests.sent.messages == TURN1


def test_a_remembered_request_is_counted_by_its_cost_on_the_heap_not_its_length(serve):
    """32 students' 1 MB requests held 18 times the class's cap (red team five): a body of short blocks
    is counted as the memory it takes once parsed, and one over the cap is not kept."""
    blocks = [{"type": "text", "text": "a short line of text"}] * 20_000
    body = json.dumps(request([{"role": "user", "content": blocks}])).encode()
    tracemalloc.start()
    parsed = json.loads(body)
    on_heap = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert json_text.measured(body)[1] >= on_heap > 4 * len(body)  # the estimate never undercounts
    del parsed
    server, _ = serve(limits=classroom.Limits(remembered=2 * len(body)))
    assert post(server.url, request(TURN1))[0] == 200  # seated, and its small request kept
    assert server.classroom.remembered > 0
    post(server.url, body)  # a mistake against the recording: what matters is what is kept
    cursor = server.classroom.cursors[("alice", "s01_hello_agent")]
    assert cursor.remembered == 0 and server.classroom.remembered == 0


# -- red team five: bounded cost per request ---------------------------------------------------------


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
    status, _, data = post(server.url, raw)
    assert status == 400 and words in error_message(data)
    assert post(server.url, request(TURN1), key="dave")[0] == 200
    assert "Traceback" not in log.getvalue()


@pytest.mark.parametrize("max_tokens", [0, -5, 10**30])
def test_max_tokens_the_api_refuses_is_a_400(serve, max_tokens):
    server, _ = serve()
    status, _, data = post(server.url, request(TURN1, max_tokens=max_tokens))
    assert status == 400 and error_message(data).startswith("max_tokens")


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


def test_event_loop_trouble_is_one_line_a_kind_counted_never_a_traceback(serve):
    server, log = serve()
    error = OSError(24, "Too many open files")
    for _ in range(12):
        server.trouble(None, {"message": "socket.accept() out of system resource", "exception": error})
    lines = [line for line in log.getvalue().splitlines() if "out of system resource" in line]
    assert len(lines) == 2 and "  1 so far: socket.accept()" in lines[0] and "  10 so far: " in lines[1]
    assert "Too many open files" in lines[0] and "Traceback" not in log.getvalue()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_localhost_is_announced_as_loopback_not_open(serve, host):
    server, _ = serve()
    assert "loopback only" in classroom_server.banner(server, host)
    assert "OPEN to the network" in classroom_server.banner(server, "0.0.0.0")


# -- red team five: the class table is the teacher's -------------------------------------------------


def test_replay_status_shows_a_student_only_their_own_row_and_the_teacher_every_row(serve):
    server, _ = serve()
    for name in ("alice", "bob"):
        post(server.url, request(TURN1), key=name)
    own = json.loads(get(server.url, "/replay/status", x_api_key="alice"))
    assert [r["student"] for r in own["students"]] == ["alice"] and own["others"] == 1
    assert json.loads(get(server.url, "/replay/status?token=guess"))["students"] == []
    every = json.loads(get(server.url, f"/replay/status?token={server.teacher_token}"))
    assert [r["student"] for r in every["students"]] == ["alice", "bob"]
    assert "bob" not in get(server.url, "/") and "bob" in get(server.url, f"/?token={server.teacher_token}")


def test_reset_starts_over_only_the_caller(serve):
    server, _ = serve()
    for name in ("alice", "bob"):
        post(server.url, request(TURN1), key=name)
    assert post(server.url, {}, key="alice", path="/replay/reset")[2]["reset"] == "alice"
    turns = {r["student"]: r["turn"] for r in server.classroom.status()["students"]}
    assert turns == {"alice": 0, "bob": 1}


def test_refused_requests_under_new_names_seat_none_and_the_next_student_gets_in(serve):
    per = caps.AddressCaps(connections=64, names=3)
    server, log = serve(limits=classroom.Limits(students=100), per_address=per)
    for n in range(10):  # ten new names, each refused: not one of them holds a place
        status, _, data = post(server.url, request(TURN1, max_tokens=0), key=f"mallory{n}")
        assert status == 400 and error_message(data).startswith("max_tokens")
    assert post(server.url, request(TURN1), key="dave")[0] == 200  # not a 403: no name was seated
    assert [s["student"] for s in server.classroom.status()["students"]] == ["dave"]
    assert len(server.admission.seats) == 1 and "Traceback" not in log.getvalue()
