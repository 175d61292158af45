"""workbook/classroom/students.py: each student's place in each fixture, their requests judged and
answered, the teacher's log and class table. In process through starlette's TestClient; the SDK's own
loops (JSON, a retried 529, a dropped connection) over a real socket, as a student runs them."""

import io
import json
import re
import threading
import tracemalloc

from workbook import scratch
from workbook.api import json_text, wire
from workbook.classroom import students
from workbook.replay import fixtures

import anthropic
import pytest
from conftest import ROOT
from student_requests import (
    BODY1,
    BODY2,
    EVIL,
    FIXTURE,
    IDS,
    S01,
    TITLE,
    TURN1,
    error_message,
    get,
    in_process,
    on_a_socket,
    overloaded_first,
    post,
    refused_saying,
    request,
    results,
    sdk_bytes,
    turn2,
    variant,
)

import s01_agent_loop

serve = pytest.fixture(in_process, name="serve")
listening = pytest.fixture(on_a_socket, name="listening")


def test_sdk_runs_the_s01_loop_to_the_end(listening):
    server, _ = listening()
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
        status, _, reply = post(server.client, request(messages, tools=tools, max_tokens=300))
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


def test_sdk_retries_a_recorded_529_and_dropped_connection_through_the_server(listening, tmp_path):
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

    server, log = listening(flaky=variant(tmp_path, "flaky", edit))
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=2)
    settings = s01_agent_loop.Settings(scratch.copy_workspace("hello"))
    turns = s01_agent_loop.agent_loop(client, [dict(TURN1[0])], settings)
    assert [t.stop_reason for t in turns] == ["tool_use", "end_turn"]
    assert "529 overloaded_error (recorded)" in log.getvalue()
    assert "closed without an answer" in log.getvalue()


def test_an_unanswered_tool_use_gets_a_400_naming_the_message_and_the_id(serve):
    server, _ = serve()
    assert post(server.client, request(TURN1))[0] == 200
    status, _, data = post(server.client, request(turn2(IDS[:2])))
    assert status == 400
    message = error_message(data)
    assert message.startswith(
        f"messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: {IDS[2]}."
    )
    assert "each tool_use id needs one tool_result, in the next user message" in message
    assert "Compared with the recording of turn 2: messages[2]: expected 3 content blocks, got 2" in message


def test_the_sdk_raises_its_bad_request_error_carrying_the_teaching_message(listening):
    server, _ = listening()
    client = anthropic.Anthropic(api_key="alice", base_url=server.url, max_retries=0)
    client.messages.create(model="m", max_tokens=100, messages=TURN1)
    with pytest.raises(
        anthropic.BadRequestError, match=f"messages.1: `tool_use` ids were found without .*{IDS[2]}"
    ):
        client.messages.create(model="m", max_tokens=100, messages=turn2(IDS[:2]))


def test_a_request_that_differs_from_the_recording_says_how(serve):
    server, _ = serve()
    post(server.client, request(TURN1))
    only_first = [TURN1[0], {"role": "assistant", "content": BODY1["content"][:1]}, results(IDS[:1])]
    status, _, data = post(server.client, request(only_first))
    assert status == 400
    assert (
        "turn 2: your request differs from the recording: messages[1]: expected 3 content blocks, got 1"
        in (error_message(data))
    )


def test_a_recorded_web_search_is_sent_only_to_a_request_that_declares_the_tool(serve):
    paused = fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json")
    server, _ = serve(s06_pause_turn=paused)
    recorded = paused["exchanges"][0]["request"]
    status, _, data = post(server.client, request(recorded["messages"]))  # a loop of one's own: no tools
    assert status == 400 and error_message(data).startswith(
        "tools: the recorded reply uses the server tool `web_search`, but this request does not declare it"
    )
    assert error_message(data).endswith(
        'Compared with the recording of turn 1: the recording\'s request declares it in `tools`: {"type": '
        '"web_search_20250305", "name": "web_search", "max_uses": 5}; declare it too'
    )
    search = {"type": "web_search_20250305", "name": "web_search"}
    status, _, data = post(server.client, request(recorded["messages"], tools=[search]))
    assert status == 200 and data["stop_reason"] == "pause_turn"


def test_a_mistake_keeps_the_cursor_so_the_corrected_request_goes_through(serve):
    server, _ = serve()
    post(server.client, request(TURN1))
    assert post(server.client, request(turn2(IDS[:2])))[0] == 400
    status, _, data = post(server.client, request(turn2()))
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
    status, _, data = post(server.client, body)
    assert status == 400
    assert expected in error_message(data)


@pytest.mark.parametrize("max_tokens", [0, -5, 10**30])
def test_max_tokens_the_api_refuses_is_a_400(serve, max_tokens):
    server, _ = serve()
    status, _, data = post(server.client, request(TURN1, max_tokens=max_tokens))
    assert status == 400 and error_message(data).startswith("max_tokens")


def test_a_new_question_after_the_last_reply_is_a_400_saying_a_new_conversation_began(serve):
    server, _ = serve()
    post(server.client, request(TURN1))
    post(server.client, request(turn2()))
    more = [*turn2(), {"role": "assistant", "content": BODY2["content"]}, {"role": "user", "content": "more"}]
    status, _, data = post(server.client, request(more))
    assert status == 400
    message = error_message(data)
    assert "s01_hello_agent holds 2 turns and all were answered" in message
    assert "your loop stopped as it should (stop_reason end_turn)" in message
    assert "a new conversation began" in message and "A loop stops when" not in message
    assert "run your program again" in message and "POST /replay/reset" in message


def test_a_loop_that_asks_again_after_the_last_reply_is_told_when_a_loop_stops(serve):
    server, _ = serve()
    post(server.client, request(TURN1))
    post(server.client, request(turn2()))
    again = [*turn2(), {"role": "assistant", "content": BODY2["content"]}]  # no new question: it just asked
    status, _, data = post(server.client, request(again))
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
    assert post(server.client, request([wrapped]))[0] == 200
    status, _, data = post(server.client, request([wrapped, *turn2()[1:]]))
    assert (status, data["stop_reason"]) == (200, "end_turn")
    [row] = server.classroom.status()["students"]
    assert (row["turn"], row["mistakes"]) == (2, 0)


def test_a_first_turn_without_the_recorded_task_word_for_word_is_still_refused(serve):
    server, _ = serve()
    status, _, data = post(server.client, request([mini_swe_agent_task(FIXTURE["task"].upper())]))
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
    post(server.client, request(TURN1))
    status, _, data = post(server.client, request(split_turn()))
    assert status == 400
    assert error_message(data).endswith(
        "expected 3 messages, got 7 — messages[1]: expected tool_use, tool_use, tool_use; got tool_use"
    )


def test_a_request_after_a_recording_that_ended_on_an_error_is_told_which_error(serve):
    ends_on_400 = fixtures.load_fixture(ROOT / "fixtures" / "grade_s03_overloaded_then_400.json")
    server, _ = serve(grade_s03_overloaded_then_400=ends_on_400)
    asked = [exchange["request"] for exchange in ends_on_400["exchanges"]]
    assert [post(server.client, body)[0] for body in asked] == [529, 200, 400]
    status, _, data = post(server.client, asked[-1])  # the 400's request again
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
    status, headers, data = post(server.client, request(TURN1))
    assert (status, headers["retry-after"], headers["request-id"], data) == (
        429,
        "7",
        "req_recorded",
        recorded["body"],
    )
    assert post(server.client, request(TURN1))[0] == 200  # the retry is the recording's next exchange


def test_two_students_interleaved_keep_separate_cursors(serve):
    server, _ = serve()
    assert post(server.client, request(TURN1), key="alice")[2]["stop_reason"] == "tool_use"
    assert post(server.client, request(TURN1), key="bob")[2]["stop_reason"] == "tool_use"
    assert post(server.client, request(turn2()), key="alice")[2]["stop_reason"] == "end_turn"
    assert post(server.client, request(turn2(IDS[:1])), key="bob")[0] == 400  # bob's mistake is bob's alone
    assert post(server.client, request(turn2()), key="bob")[2]["stop_reason"] == "end_turn"
    rows = {s["student"]: (s["turn"], s["mistakes"]) for s in server.classroom.status()["students"]}
    assert rows == {"alice": (2, 0), "bob": (2, 1)}


def test_sending_the_first_message_alone_starts_the_student_over(serve):
    server, log = serve()
    post(server.client, request(TURN1))
    status, _, data = post(server.client, request(TURN1))  # the student re-ran their program
    assert (status, data["stop_reason"]) == (200, "tool_use")
    assert post(server.client, request(turn2()))[2]["stop_reason"] == "end_turn"
    assert "restart" in log.getvalue().splitlines()[1]


def test_a_first_message_the_recording_expects_again_is_a_retry_not_a_restart(serve, tmp_path):
    server, _ = serve(retry=variant(tmp_path, "retry", overloaded_first))
    assert post(server.client, request(TURN1))[0] == 529
    assert post(server.client, request(TURN1))[0] == 200
    assert server.classroom.status()["students"][0]["restarts"] == 0


def test_the_first_fixture_is_the_default_and_model_or_header_picks_another(serve, tmp_path):
    def edit(f):
        f["exchanges"][0]["response"]["body"]["id"] = "msg_other"

    server, _ = serve(s01_hello_agent=FIXTURE, other=variant(tmp_path, "other", edit))
    assert post(server.client, request(TURN1), key="a")[2]["id"] == BODY1["id"]
    assert post(server.client, request(TURN1, model="replay:other"), key="b")[2]["id"] == "msg_other"
    assert post(server.client, request(TURN1), key="c", x_replay_fixture="other")[2]["id"] == "msg_other"
    status, _, data = post(server.client, request(TURN1), key="d", x_replay_fixture="nope")
    assert (status, data["error"]["type"]) == (404, "not_found_error")  # as the API answers an unknown model
    assert (
        "no fixture 'nope' on this replay server; it serves: s01_hello_agent, other"
        in data["error"]["message"]
    )


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
    status, headers, data = post(server.client, request(TURN1))
    assert (status, headers["content-type"], data) == (200, "application/json", BODY1)
    status, headers, text = post(server.client, request(turn2(), stream=True))
    assert headers["content-type"].startswith("text/event-stream")
    assert text == wire.sse_bytes(sse["exchanges"][1]["response"]["stream"]).decode()


def test_the_recordings_own_bytes_are_answered_and_a_rerun_restarts(serve):
    server, log = serve()
    assert post(server.client, sdk_bytes(0))[2] == BODY1
    assert post(server.client, sdk_bytes(1))[2] == BODY2
    status, _, data = post(server.client, sdk_bytes(0))  # the program run again: a restart
    assert (status, data) == (200, BODY1)
    row = server.classroom.status()["students"][0]
    assert (row["turn"], row["requests"], row["restarts"], row["last"]) == (1, 3, 1, "200 tool_use (json)")
    lines = log.getvalue().splitlines()
    assert "turn 2/2" in lines[1] and "200 end_turn (json)" in lines[1]
    assert "turn 1/2" in lines[2] and "restart · 200 tool_use (json)" in lines[2]


def test_a_beta_header_and_the_graders_observer_see_every_request(serve):
    server, _ = serve()
    post(server.client, sdk_bytes(0))
    spaced = json.dumps(FIXTURE["exchanges"][1]["request"]).encode()  # the same request, other bytes
    assert post(server.client, spaced)[2] == BODY2
    assert post(server.client, sdk_bytes(0), anthropic_beta="some-beta-2025-01-01")[0] == 200
    seen = []
    server.classroom.observer = lambda student, *_: seen.append(student)
    assert post(server.client, sdk_bytes(1))[0] == 200
    assert seen == ["alice"]


def test_the_recordings_bytes_keep_a_recorded_retry_a_retry(serve, tmp_path):
    retry = variant(tmp_path, "retry", overloaded_first)
    server, _ = serve(retry=retry)
    assert post(server.client, sdk_bytes(0, retry))[0] == 529
    assert post(server.client, sdk_bytes(1, retry))[0] == 200
    assert post(server.client, sdk_bytes(2, retry))[0] == 200
    assert post(server.client, sdk_bytes(1, retry))[0] == 529  # turn 1 after the end: a restart, as recorded
    row = server.classroom.status()["students"][0]
    assert (row["turn"], row["restarts"]) == (1, 1)


def test_the_recordings_bytes_that_need_a_beta_are_refused_without_it(serve, tmp_path):
    def edit(f):  # a recording may use any beta (it keeps no headers): this one a server-held thread
        f["exchanges"][0]["request"]["thread"] = {"type": "create"}

    threaded = variant(tmp_path, "threaded", edit)
    server, _ = serve(threaded=threaded)
    for _ in range(2):  # a new student, then a known one
        status, _, data = post(server.client, sdk_bytes(0, threaded))
        assert status == 400 and "requires the beta header" in error_message(data)


def test_each_student_has_a_lock_of_their_own_so_one_never_waits_on_another(serve):
    server, _ = serve()
    classroom = server.classroom
    assert classroom.desk("alice") is classroom.desk("alice")
    assert classroom.desk("alice") is not classroom.desk("bob")
    done = []
    with classroom.desk("alice"):  # alice is busy (say, checking a 17 MB request)
        alice = threading.Thread(
            target=lambda: done.append(post(server.client, request(TURN1), key="alice")[0])
        )
        alice.start()
        assert post(server.client, request(TURN1), key="bob")[0] == 200  # bob is answered meanwhile
        alice.join(0.2)
        assert alice.is_alive() and done == []  # alice's own next request waits for alice
    alice.join(10)
    assert done == [200]
    assert not classroom.lock.locked()


def test_side_requests_and_count_tokens_use_no_turn_and_the_table_marks_them(serve):
    server, log = serve()
    status, _, counted = post(server.client, request(TURN1), path="/v1/messages/count_tokens?beta=true")
    assert status == 200 and set(counted) == {"input_tokens"} and counted["input_tokens"] > 0
    probe = request([{"role": "user", "content": "quota"}], max_tokens=1)
    status, _, reply = post(server.client, probe)
    assert status == 200 and "side request" in reply["content"][0]["text"]
    status, _, reply = post(server.client, request(TURN1))
    assert status == 200 and reply["content"] == BODY1["content"]  # the real turn 1 is still turn 1
    [row] = server.classroom.status()["students"]
    assert (row["turn"], row["requests"], row["side"], row["mistakes"]) == (1, 1, 2, 0)
    assert re.search(
        r"alice\s+s01_hello_agent\s+1/2\s+1\+2 side\s+0\s+0\s+200 tool_use", server.classroom.table()
    )
    assert "side request · count_tokens" in log.getvalue()
    status, _, refused = post(server.client, {"messages": "no"}, path="/v1/messages/count_tokens")
    assert status == 400 and error_message(refused) == "messages: Field required"


def test_a_students_last_request_is_remembered_only_while_small_and_let_go_with_the_student():
    """Each student's next request is judged on what it adds to their last one, which the classroom keeps
    while it is small (Limits.remembered) and the class's together fit (remembered_all)."""
    loaded = {"s01_hello_agent": fixtures.load_fixture(S01)}
    headers = {"anthropic-version": "2023-06-01"}
    sent = json.dumps(request(TURN1)).encode()
    room = students.Classroom(loaded, out=io.StringIO(), limits=students.Limits(remembered_all=len(sent)))
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
    assert post(server.client, body)[0] == 200
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
    server, _ = serve(limits=students.Limits(remembered=2 * len(body)))
    assert post(server.client, request(TURN1))[0] == 200  # seated, and its small request kept
    assert server.classroom.remembered > 0
    post(server.client, body)  # a mistake against the recording: what matters is what is kept
    cursor = server.classroom.cursors[("alice", "s01_hello_agent")]
    assert cursor.remembered == 0 and server.classroom.remembered == 0


def test_the_teacher_sees_one_line_per_request_and_a_class_table(serve):
    server, log = serve()
    post(server.client, request(TURN1), key="alice")
    post(server.client, request(turn2(IDS[:2])), key="alice")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2
    assert re.search(r"alice\s+s01_hello_agent\s+turn 1/2\s+200 tool_use \(json\)", lines[0])
    assert re.search(
        r"alice\s+s01_hello_agent\s+turn 2/2\s+400 messages.1: `tool_use` ids were found", lines[1]
    )
    page = get(server.client, f"/?token={server.teacher_token}")  # the class table is the teacher's
    assert "ANTHROPIC_BASE_URL=http://testserver  ANTHROPIC_API_KEY=<your name>" in page
    assert re.search(r"alice\s+s01_hello_agent\s+1/2\s+2\s+1\s+0\s+400 messages.1: `tool_use`", page)


def test_the_class_is_capped_and_the_next_student_is_told_why(serve):
    server, log = serve(limits=students.Limits(students=2))
    assert post(server.client, request(TURN1), key="alice")[0] == 200
    assert post(server.client, request(TURN1), key="bob")[0] == 200
    refused_saying(server, "carol", "already keeps 2 students", "--max-students")
    assert post(server.client, request(turn2()), key="alice")[0] == 200  # those already in carry on
    assert {s["student"] for s in server.classroom.status()["students"]} == {"alice", "bob"}


def test_the_class_table_lists_at_most_its_limit_and_says_how_many_more(serve):
    server, _ = serve(limits=students.Limits(listed=3))
    for name in "abcde":
        post(server.client, request(TURN1), key=name)
    page = get(server.client, f"/?token={server.teacher_token}")
    assert re.search(r"^c\s+s01_hello_agent", page, re.M) and not re.search(r"^d\s+s01", page, re.M)
    assert "... and 2 more rows: GET /replay/status lists them all" in page
    assert len(server.classroom.status()["students"]) == 5


def test_escape_codes_in_a_name_reach_the_teacher_escaped_never_raw(listening):
    server, log = listening()
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
            assert post(server.client, request(TURN1, model=f"replay:{fixture}"), key=name)[0] == 200
    shown = {line.split()[1] for line in log.getvalue().splitlines()}
    assert shown == {"js-ts…pinned", "js-ts…latest", "js-t…inned~2"}  # each cut marked, none alike
    fixtures_shown = {line.split()[2] for line in log.getvalue().splitlines()}
    assert len(fixtures_shown) == 2 and all("…" in name for name in fixtures_shown)
    table = server.classroom.table().splitlines()
    assert {row.split()[0] for row in table[1:] if not row.startswith(" ")} == shown  # (a result wraps)
    assert max(len(row) for row in table) <= 80


def test_the_log_cuts_a_reason_at_a_word_and_says_done_past_the_end(serve):
    server, log = serve()
    post(server.client, request(TURN1))
    post(server.client, request(turn2()))
    again = [*turn2(), {"role": "assistant", "content": BODY2["content"]}]
    assert post(server.client, request(again))[0] == 400  # asked again after the recording's last turn
    last = log.getvalue().splitlines()[-1]
    assert last.split()[3] == "done" and "turn 3/2" not in last
    assert len(last) <= 150 and last.endswith("…") and last[-2] != " "
    cut_after = last[:-1].split()[-1]
    assert cut_after in past_the_end_words()  # a whole word of the reason, not part of one


def past_the_end_words() -> list[str]:
    messages = [*turn2(), {"role": "assistant", "content": BODY2["content"]}]
    return students.past_the_end("s01_hello_agent", FIXTURE["exchanges"], messages).split()


def test_printable_escapes_controls_and_bidi_overrides_and_keeps_names_in_any_script():
    assert students.printable("李雷 Zoë") == "李雷 Zoë"
    assert students.printable("a\u202eb\nc\x00") == "a\\u202eb\\nc\\x00"
