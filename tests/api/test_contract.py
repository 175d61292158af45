"""The one contract: every row of docs/faults.md's fidelity table, as a test.

The API accepts what the SDK's types describe, with the rules the types cannot say; the contract must
accept all of it and refuse the rest in the API's own words, from every judge (check, the in-process
replay, the classroom server)."""

import copy
import json
import subprocess
import sys

from workbook import errors
from workbook.api import compare, contract, wire
from workbook.classroom import students
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import httpx2
import pytest
from conftest import ROOT, STEPS

S01 = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
TEXT = {"type": "text", "text": "hi"}


def use(tool_id: str) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": "bash", "input": {"command": "ls"}}


def result(tool_id: str, content="ok") -> dict:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def body(*messages, **fields) -> dict:
    return {"model": "claude-sonnet-5", "max_tokens": 100, "messages": list(messages)} | fields


def user(*content):
    return {"role": "user", "content": list(content)}


def assistant(*content):
    return {"role": "assistant", "content": list(content)}


def problems(request, betas=contract.NO_BETAS) -> list[str]:
    return [str(p) for p in contract.request_problems(request, betas)]


# -- what the API accepts, the contract accepts ------------------------------------------------------

ROUND = [user(TEXT), assistant(use("toolu_A"), use("toolu_B"))]


@pytest.mark.parametrize(
    "request_body",
    [
        body(user(TEXT), user(TEXT)),  # consecutive user turns: the API combines them
        body(*ROUND, user(result("toolu_B"), result("toolu_A"))),  # results in any order: paired by id
        body(*ROUND, user(result("toolu_A")), user(result("toolu_B"), TEXT)),  # split over two user messages
        body(user(TEXT), assistant(TEXT), assistant(TEXT)),  # consecutive assistant turns, prefill
        body(
            user(TEXT),
            stream=True,
            tool_choice={"type": "auto"},
            metadata={"user_id": "u1"},
            stop_sequences=["END"],
            thinking={"type": "enabled", "budget_tokens": 1024},
            service_tier="auto",
            system=[{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        ),
        body(
            user({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}})
        ),
        body(user({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}})),
        body(*ROUND[:1], assistant({"type": "thinking", "thinking": "hm", "signature": "s"}, TEXT)),
        body(*ROUND, user(result("toolu_A", [TEXT]), result("toolu_B", [TEXT]))),
    ],
    ids=["two-users", "any-order", "split", "prefill", "options", "image", "document", "thinking", "blocks"],
)
def test_what_the_api_accepts_the_contract_accepts(request_body):
    assert problems(request_body) == []


def test_every_recorded_request_of_every_fixture_passes():
    for path in sorted((ROOT / "fixtures").glob("*.json")):
        for exchange in fixtures.load_fixture(path)["exchanges"]:
            assert contract.exchange_problems(exchange) == [], path.name


# -- what the API refuses, the contract refuses in the API's words ----------------------------------


@pytest.mark.parametrize(
    "request_body, words",
    [
        (body(user(TEXT), foo=1), "foo: Extra inputs are not permitted"),
        (body(user(TEXT), stream_options={}), "stream_options: Extra inputs are not permitted"),
        (body(user(TEXT), temperature="hot"), "temperature: Input should be a valid number"),  # see SAMPLING
        (body(user(TEXT), context_management="all"), "context_management: Input should be"),  # a beta param
        (body(user(TEXT), tools="notalist"), "tools: Input should be a valid list"),
        (body(user(TEXT), max_tokens="many"), "max_tokens: Input should be a valid integer"),
        ({"model": "m", "messages": [user(TEXT)]}, "max_tokens: Field required"),
        (
            body(*ROUND, user(result("toolu_A", {"type": "text"}), result("toolu_B"))),
            "messages.2.content.0.content: Input should be a valid string or a valid list",
        ),
        (body(user({"type": "txet", "text": "x"})), "messages.0.content.0.type: Input tag 'txet'"),
        (body({"role": "bot", "content": "x"}), "messages.0.role: Input tag 'bot'"),
    ],
)
def test_wrong_shapes_are_named_by_their_field_path(request_body, words):
    assert problems(request_body)[0].startswith(words)


@pytest.mark.parametrize(
    "messages, words",
    [
        (ROUND + [user(TEXT)], "messages.1: `tool_use` ids were found without `tool_result` blocks"),
        (ROUND + [user(result("toolu_A"))], "immediately after: toolu_B. Each `tool_use` block"),
        (ROUND, "messages.1: `tool_use` ids were found without"),
        (
            [user(TEXT), assistant(TEXT), user(result("toolu_X"))],
            "messages.2.content.0: unexpected `tool_use_id`",
        ),
        (
            ROUND + [user(result("toolu_A"), result("toolu_A"), result("toolu_B"))],
            "Found multiple `tool_result`",
        ),
        (ROUND + [user(TEXT, result("toolu_A"), result("toolu_B"))], "`tool_result` blocks must come first"),
        (
            [user(TEXT), assistant(use("toolu_A"), use("toolu_A"))],
            "messages.1.content.1: `tool_use` ids must be",
        ),
        ([assistant(TEXT)], 'messages: first message must use the "user" role'),
        ([user(TEXT), user(), user(TEXT)], "messages.1: all messages must have non-empty content"),
        ([], "messages: at least one message is required"),
    ],
)
def test_the_rules_the_types_cannot_say(messages, words):
    assert any(words in p for p in problems(body(*messages)))


def test_tool_results_first_holds_for_the_combined_turn():
    later = ROUND + [user(result("toolu_A"), TEXT), user(result("toolu_B"))]
    assert "messages.3.content.0: `tool_result` blocks must come first" in problems(body(*later))[0]


# -- the beta headers that change a rule -------------------------------------------------------------

SYSTEM_TURN = {"role": "system", "content": "from now on, be brief"}


def test_a_mid_conversation_system_message_needs_no_beta_and_stands_where_the_api_documents():
    """Placement, from the API's docs: after a user message (or an assistant message ending in server-tool
    use), last or followed by an assistant message, never messages[0], text only; no beta header."""
    after_user = body(user(TEXT), SYSTEM_TURN, assistant(TEXT), user(TEXT))
    assert problems(after_user) == [] and problems(body(user(TEXT), SYSTEM_TURN)) == []
    searched = assistant({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}})
    assert problems(body(user(TEXT), searched, SYSTEM_TURN)) == []
    assert problems(body(SYSTEM_TURN, user(TEXT)))[0].startswith(
        "messages.0.role: a system message must immed"
    )
    after_assistant = body(user(TEXT), assistant(TEXT), SYSTEM_TURN, user(TEXT))
    assert [str(p).split(":")[0] for p in problems(after_assistant)] == ["messages.2.role"] * 2
    assert "followed by an assistant" in problems(body(user(TEXT), SYSTEM_TURN, user(TEXT)))[0]
    twice = body(user(TEXT), SYSTEM_TURN, SYSTEM_TURN)
    assert [p[:50] for p in problems(twice)] == [
        "messages.1.role: a system message must be the last message or be followed by an assistant message"[
            :50
        ],
        "messages.2.role: a system message must immediately follow a user message"[:50],
    ]
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    pictured = body(user(TEXT), {"role": "system", "content": [image]})
    assert problems(pictured)[0].startswith("messages.1.content.0.type: Input tag 'image'")  # the SDK's types
    assert contract.conversation_problems(pictured["messages"]) == [
        contract.Problem("messages.1.content", contract.SYSTEM_TEXT)
    ]


def test_the_sampling_fields_the_sdks_types_dropped_are_taken_with_their_types_checked():
    assert problems(body(user(TEXT), temperature=1, top_p=0.9, top_k=40)) == []
    assert problems(body(user(TEXT), temperature=0.0)) == []
    assert problems(body(user(TEXT), temperature=1.5)) == [
        "temperature: Input should be less than or equal to 1"
    ]
    assert problems(body(user(TEXT), top_k=2.5)) == ["top_k: Input should be a valid integer"]
    assert problems(body(user(TEXT), top_p=True)) == ["top_p: Input should be a valid number"]
    assert problems(body(user(TEXT), temperature=1, stream_options={})) == [
        "stream_options: Extra inputs are not permitted"
    ]


def test_a_thread_needs_the_threads_beta():
    request = body(user(TEXT), thread={"type": "create"})
    assert problems(request)[0].startswith(
        "thread: requires the beta header `anthropic-beta: message-threads"
    )
    assert problems(request, contract.Betas.of({"anthropic-beta": "other-beta"}))[0].startswith("thread: ")
    assert problems(request, contract.Betas.of({"anthropic-beta": contract.THREADS_BETA})) == []


# -- comparing with the recording happens on the combined form --------------------------------------


def test_two_user_messages_that_combine_into_the_recorded_one_match_it():
    recorded = S01["exchanges"][1]["request"]
    split = copy.deepcopy(recorded)
    last = split["messages"].pop()
    split["messages"] += [user(*last["content"][:1]), user(*last["content"][1:])]
    if len(last["content"]) == 1:
        split["messages"][-1] = user(TEXT)
        assert compare.request_diff(recorded, split) is not None  # an extra text block is a difference
    else:
        assert compare.request_diff(recorded, split) is None


def test_tool_results_match_by_id_whatever_their_order():
    recorded = body(*ROUND, user(result("toolu_A"), result("toolu_B")))
    swapped = body(*ROUND, user(result("toolu_B"), result("toolu_A")))
    assert compare.request_diff(recorded, swapped) is None
    other = body(*ROUND, user(result("toolu_A"), result("toolu_B", "different")))
    assert "content expected" in compare.request_diff(recorded, other)
    assert compare.request_diff(recorded, other, compare.Match.STRUCTURE) is None  # looser matches too


# -- the in-process replay answers as the API would ---------------------------------------------------


def test_the_in_process_replay_answers_a_refused_request_with_the_apis_400():
    client, transport = replay.replay_client(S01, "s01", max_retries=0)
    first = S01["exchanges"][0]["request"]
    with pytest.raises(anthropic.BadRequestError, match="foo: Extra inputs are not permitted") as caught:
        client.messages.create(**first, extra_body={"foo": 1})
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "replay of s01, turn 1" in caught.value.body["error"]["message"]
    assert transport.cursor == 0  # refused: the recording is still at turn 1
    client.messages.create(**first)
    assert transport.cursor == 1


def test_the_in_process_replay_refuses_a_thread_without_its_beta():
    client, _ = replay.replay_client(S01, "s01", max_retries=0, match=compare.Match.CONVERSATION)
    first = S01["exchanges"][0]["request"]
    with pytest.raises(anthropic.BadRequestError, match="thread: "):
        client.messages.create(**first, extra_body={"thread": {"type": "create"}})


def test_the_workbooks_own_steps_still_replay_strictly():
    client, _ = replay.replay_client(S01, "s01", max_retries=0)
    first = copy.deepcopy(S01["exchanges"][0]["request"])
    first["messages"][0]["content"] = "a different task"
    with pytest.raises(replay.ReplayMismatch, match="turn 1: messages\\[0\\].content\\[0\\]: text expected"):
        client.messages.create(**first)


def test_the_classroom_answers_a_refused_request_with_the_apis_400_and_a_hint():
    room = students.Classroom({"s01": S01}, out=open("/dev/null", "w"))
    reply = room.answer("alice", body(*ROUND, user(result("toolu_A"))), None)
    message = reply.body["error"]["message"]
    assert reply.status == 400 and message.startswith("messages.1: `tool_use` ids were found without")
    assert "— each tool_use id needs one tool_result" in message


# -- recorded responses and their headers are data --------------------------------------------------


def fixture_with(response: dict, at: int = 0) -> dict:
    fixture = copy.deepcopy(S01)
    fixture["exchanges"][at]["response"] = response
    return fixture


def first_problem(fixture) -> str:
    found = fixtures.fixture_problems(fixture)
    assert found, "the fixture should be refused"
    return found[0]


OK = S01["exchanges"][0]["response"]


@pytest.mark.parametrize(
    "response, words",
    [
        ({"status": 500, "body": {"error": 5}}, "response.body.type: Field required"),
        ({"status": 500, "body": {"type": "error", "error": 5}}, "response.body.error: Input should be"),
        (OK | {"status": 204}, "response.status: must be 200 or an error status"),
        (OK | {"status": 302}, "response.status: must be 200 or an error status"),
        (OK | {"headers": {"content-length": "5"}}, "'content-length': not a header a client reads"),
        (
            OK | {"headers": {"transfer-encoding": "chunked"}},
            "'transfer-encoding': not a header a client reads",
        ),
        (OK | {"headers": {"request-id": "r\r\nX-Injected: 1"}}, "request-id: holds a control"),
        (OK | {"headers": {"retry-after": "61"}}, "retry-after: must be a number of seconds from 0 to 60"),
        (OK | {"headers": {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}}, "retry-after: must be a number"),
        (OK | {"headers": {"retry-after-ms": "600000"}}, "retry-after-ms: must be a number of seconds"),
    ],
)
def test_check_refuses_a_response_the_sdk_would_choke_on(response, words):
    assert words in first_problem(fixture_with(response))


def test_headers_a_client_reads_are_kept():
    kept = {"request-id": "req_1", "retry-after": "2", "retry-after-ms": "20", "x-should-retry": "true"}
    kept |= {"anthropic-ratelimit-requests-remaining": "5", "content-type": "application/json"}
    assert contract.response_problems(OK | {"headers": kept}) == []


def test_a_stream_event_name_cannot_inject_events():
    stream = wire.message_to_events(OK["body"])
    stream[0] = {
        "event": "message_start\nevent: x",
        "data": stream[0]["data"] | {"type": "message_start\nevent: x"},
    }
    assert "response.stream[0].event: must be one of the API's events" in first_problem(
        fixture_with({"status": 200, "stream": stream})
    )


def test_replay_never_hands_on_a_framing_header_or_a_long_wait():
    recorded = {"content-length": "5", "connection": "close", "x-injected": "1", "request-id": "a\nb"}
    recorded |= {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT", "retry-after-ms": "9e9"}
    assert wire.client_headers(recorded) == {"retry-after": "60", "retry-after-ms": "60000"}
    response = wire.http_response({"status": 529, "headers": recorded, "body": {"type": "error"}})
    assert response.headers["retry-after"] == "60" and "x-injected" not in response.headers
    reply = students.recorded_reply({"status": 529, "headers": recorded, "body": {}}, False)
    assert reply.headers == {"retry-after": "60", "retry-after-ms": "60000"}


# -- the fixture holes: refused in one line, never a traceback in any step ---------------------------


def holes() -> dict[str, dict]:
    """Each hole the red team found, as a fixture that would otherwise load."""
    made = {}
    made["error-5"] = fixture_with({"status": 500, "body": {"error": 5}})
    made["204-with-body"] = fixture_with(OK | {"status": 204})
    stream = wire.message_to_events(OK["body"])
    stream[0] = {
        "event": "message_start\nevent: x",
        "data": stream[0]["data"] | {"type": "message_start\nevent: x"},
    }
    made["sse-newline"] = fixture_with({"status": 200, "stream": stream})
    made["surrogate"] = copy.deepcopy(S01) | {"task": "hi \ud800"}
    made["long-workspace"] = copy.deepcopy(S01) | {"workspace": "w" * 300}
    made["long-digits"] = copy.deepcopy(S01) | {"script": "s05_budget", "args": ["--max-steps=" + "9" * 5000]}
    return made


@pytest.mark.parametrize("hole", sorted(holes()))
def test_check_refuses_each_fixture_hole_in_one_line(hole, tmp_path):
    path = tmp_path / f"{hole}.json"
    path.write_text(json.dumps(holes()[hole]))
    with pytest.raises(errors.FixtureError) as caught:
        fixtures.load_fixture(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


@pytest.mark.parametrize("step", STEPS)
def test_no_step_shows_a_traceback_on_any_hole(step, run_main, tmp_path):
    # In-process, as `python sNN.py --replay F` runs it: an uncaught exception would fail the test.
    for hole, fixture in holes().items():
        path = tmp_path / f"{hole}.json"
        path.write_text(json.dumps(fixture))
        code, out = run_main(step, "--replay", str(path))
        assert code != 0 and "Traceback" not in out and len(out.strip().splitlines()) <= 3, (hole, out)


def test_a_hole_is_one_line_from_a_step_started_as_a_program(tmp_path):
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(holes()["surrogate"]))
    command = [sys.executable, "s01_agent_loop.py", "--replay", str(path)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    said = (run.stdout + run.stderr).splitlines()
    assert run.returncode == 1 and len(said) == 1 and "lone surrogate" in said[0], said


def test_a_refusal_reaches_the_sdk_as_its_bad_request_error():
    response = httpx2.Response(
        400, json=contract.refusal_body(contract.Problem("foo", "Extra inputs"), "hint")
    )
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "foo: Extra inputs — hint",
    }


USE = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}


RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}


@pytest.mark.parametrize(
    "messages, problem",
    [
        ([], "messages: at least one message is required"),
        ([assistant(TEXT)], 'messages: first message must use the "user" role'),
        (
            [user(TEXT), assistant(USE), user(TEXT)],
            "messages.1: `tool_use` ids were found without `tool_result`",
        ),
        (
            [user(TEXT), assistant(USE), user(RESULT, RESULT)],
            "Found multiple `tool_result` blocks with id: toolu_1",
        ),
        ([user(TEXT), assistant(TEXT), user(RESULT)], "messages.2.content.0: unexpected `tool_use_id`"),
        (
            [user(TEXT), assistant(USE), user(TEXT, RESULT)],
            "messages.2.content.1: `tool_result` blocks must come first",
        ),
        ([user(TEXT), assistant(USE)], "messages.1: `tool_use` ids were found without `tool_result`"),
        (
            [user(TEXT), {"role": "user", "content": []}],
            "messages.1: all messages must have non-empty content",
        ),
    ],
)
def test_api_rules_catch_what_the_api_rejects(messages, problem):
    assert any(problem in p for p in contract.api_rule_problems(messages))


def test_api_rules_accept_a_valid_tool_round():
    assert (
        contract.api_rule_problems([user(TEXT), assistant(TEXT, USE), user(RESULT, TEXT), assistant(TEXT)])
        == []
    )


# -- red team five: a body of bad blocks costs one error, not one per block ----------------------------


def padded_empty_blocks(size: int) -> dict:
    """A request of `{}` blocks spaced out to pass json_text's count of objects: each still invalid."""
    block = "{}" + " " * 30
    raw = '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[%s]}]}'
    return json.loads(raw % ",".join([block] * (size // (len(block) + 1))))


MEASURE_CONTRACT = """
import json, resource, sys
from workbook.api import contract
from test_contract import padded_empty_blocks
contract.request_problems(padded_empty_blocks(100))  # the checks and their words, built once a process
body = padded_empty_blocks(int(sys.argv[1]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
problems = contract.request_problems(body)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grew_kb": grew, "problems": [str(p) for p in problems]}))
"""


def test_a_request_of_a_million_bad_blocks_is_refused_at_the_first_at_the_cost_of_one_error():
    """pydantic-core's errors live in Rust, out of tracemalloc's sight: the process's peak tells."""
    size = 8 * 2**20
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'api'}:{ROOT / 'tests'}"}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE_CONTRACT, str(size)], capture_output=True, text=True, cwd=ROOT, env=env
    )
    measured = json.loads(done.stdout)
    assert measured["problems"] == ["messages.0.content.0.text: Field required"]
    assert measured["grew_kb"] * 1024 < size  # every block's errors kept cost 700 times the body


def test_check_refuses_a_fixture_of_empty_blocks_in_one_line_well_under_300_mb(tmp_path):
    blocks = [{}] * (int(2.9 * 2**20) // 3)
    fixture = json.loads((ROOT / "fixtures" / "s01_hello_agent.json").read_text())
    fixture["exchanges"][0]["request"]["messages"][0]["content"] = blocks
    path = tmp_path / "s01_bomb.json"
    path.write_text(json.dumps(fixture, separators=(",", ":")))
    measure = (
        "import resource, subprocess, sys; "
        "done = subprocess.run([sys.executable, '-m', 'workbook', 'check', sys.argv[1]], "
        "capture_output=True, text=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, done.returncode); "
        "print(done.stdout + done.stderr, end='')"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, str(path)], capture_output=True, text=True, cwd=ROOT
    )
    first, *said = done.stdout.splitlines()
    peak_mb, code = map(int, first.split())
    assert code == 1 and len(said) == 1 and "Traceback" not in done.stdout, done.stdout
    assert "JSON objects and arrays" in said[0]
    assert peak_mb < 300  # it was 1.93 GB


@pytest.mark.parametrize("max_tokens", [0, -5, 10**30, contract.MAX_OUTPUT_TOKENS + 1])
def test_max_tokens_is_at_least_1_and_at_most_any_models_output(max_tokens):
    body = {"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}]}
    (problem,) = contract.request_problems(body)
    assert problem.path == "max_tokens"


def test_the_largest_output_any_model_takes_is_accepted():
    body = {
        "model": "m",
        "max_tokens": contract.MAX_OUTPUT_TOKENS,
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert contract.request_problems(body) == []


def s01_with(edit) -> dict:
    fixture = copy.deepcopy(json.loads((ROOT / "fixtures" / "s01_hello_agent.json").read_text()))
    edit(fixture)
    return fixture


def test_check_refuses_a_reply_that_repeats_a_tool_use_id():
    def twice(fixture):
        content = fixture["exchanges"][0]["response"]["body"]["content"]
        content[1]["id"] = content[0]["id"]

    assert any("tool_use` ids must be unique" in p for p in fixtures.fixture_problems(s01_with(twice)))


def test_check_refuses_a_reply_with_a_negative_token_count():
    def negative(fixture):
        fixture["exchanges"][1]["response"]["body"]["usage"]["output_tokens"] = -(10**30)

    (problem,) = fixtures.fixture_problems(s01_with(negative))
    assert problem == "exchanges[1].response.body.usage.output_tokens: a token count is never below zero"
