"""Server-held threads and the SDK's own tool runner, in process (Match.CONVERSATION) and over real HTTP.

`client.beta.messages.tool_runner` (anthropic 2.14) keeps the conversation on the server by default:
the first request carries `thread: {"type": "create"}`, each later one `{"type": "continue",
"previous_message_id": ...}` and only the new messages. Replay and the classroom server hold threads
as the API does, so the runner completes a recorded fixture with its defaults, JSON and streaming.
A compaction it asks for (`compact_before_next_turn()`) is answered as the API answers it, using no
recorded turn (workbook/api/compaction.py; its own tests are in test_compaction.py).
"""

import functools
import subprocess
from pathlib import Path

from workbook import errors, scratch
from workbook.api import compaction, threads, wire
from workbook.api.compare import Match
from workbook.replay import transport as replay

import anthropic
import httpx2
import pytest
from anthropic import beta_tool
from thread_clients import FIXTURES, MODEL, S01, S02, answers_to, s01_client, server_client, serving


def workspace_tools(workspace: Path) -> list:
    """The tools the two fixtures call, as `@beta_tool` functions that really act in `workspace`."""

    @beta_tool
    def bash(command: str) -> str:
        """Run a shell command in the workspace; returns its output and exit code."""
        done = subprocess.run(command, shell=True, cwd=workspace, capture_output=True, text=True, timeout=120)
        return f"{(done.stdout + done.stderr).strip()}\n[exit code {done.returncode}]"

    @beta_tool
    def read_file(path: str) -> str:
        """Read a text file in the workspace."""
        return (workspace / path).read_text()

    @beta_tool
    def list_files(glob: str = "*") -> str:
        """List the workspace's files that match a glob pattern."""
        return "\n".join(sorted(str(p.relative_to(workspace)) for p in workspace.glob(glob)))

    @beta_tool
    def edit_file(path: str, old_text: str, new_text: str) -> str:
        """Replace old_text, which must occur exactly once, with new_text."""
        text = (workspace / path).read_text()
        if text.count(old_text) != 1:
            raise ValueError(f"old_text occurs {text.count(old_text)} times in {path}, not once")
        (workspace / path).write_text(text.replace(old_text, new_text))
        return f"edited {path}"

    return [bash, read_file, list_files, edit_file]


def run_tool_runner(client, fixture: dict, stream: bool, **params) -> list:
    """The SDK's tool runner with its defaults on the fixture's task; the stop_reason of every reply."""
    workspace = scratch.copy_workspace(fixture["workspace"])
    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=4096,
        tools=workspace_tools(workspace) + server_tools(fixture),
        messages=[{"role": "user", "content": fixture["task"]}],
        stream=stream,
        **params,
    )
    replies = [item.get_final_message() if stream else item for item in runner]
    return [reply.stop_reason for reply in replies]


def server_tools(fixture: dict) -> list:
    """The server tools the fixture's first request declares (s06_pause_turn's web search): the API runs
    one only for a request that declares it, and so does the replay."""
    return [t for t in fixture["exchanges"][0]["request"].get("tools", []) if "type" in t]


def recorded_stops(fixture: dict) -> list:
    return [wire.recorded_message(e["response"])["stop_reason"] for e in fixture["exchanges"]]


def recorded_ids(fixture: dict) -> list:
    return [wire.recorded_message(e["response"])["id"] for e in fixture["exchanges"]]


# -- a classroom server in a thread, and a client that logs every exchange ---------------------------


@pytest.fixture
def server():
    """A replay server for the fixtures on a free loopback port."""
    with serving() as served:
        yield served


def thread_kinds(bodies: list[dict]) -> list:
    return [(body.get("thread") or {}).get("type") for body in bodies]


# -- the runner with its defaults completes a fixture ----------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("name", FIXTURES)
def test_tool_runner_completes_a_fixture_in_process(name, stream):
    fixture = FIXTURES[name]
    client, transport = replay.replay_client(fixture, name, match=Match.CONVERSATION, max_retries=0)
    assert run_tool_runner(client, fixture, stream) == recorded_stops(fixture)
    sent = transport.seen
    assert transport.cursor == len(sent) == len(fixture["exchanges"])  # no request refused or repeated
    assert thread_kinds(sent) == ["create"] + ["continue"] * (len(sent) - 1)
    continued_from = [body["thread"]["previous_message_id"] for body in sent[1:]]
    assert continued_from == recorded_ids(fixture)[:-1]  # each continues from the reply before it
    # Only what is new: the task, then each turn's tool results; nothing at all to resume a paused turn.
    new = [1] + [1 if stop == "tool_use" else 0 for stop in recorded_stops(fixture)[:-1]]
    assert [len(body["messages"]) for body in sent] == new


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("name", FIXTURES)
def test_tool_runner_completes_a_fixture_against_the_server(server, name, stream):
    fixture = FIXTURES[name]
    client, logged = server_client(server, name)
    assert run_tool_runner(client, fixture, stream) == recorded_stops(fixture)
    bodies, statuses = zip(*logged.log)
    assert statuses == (200,) * len(fixture["exchanges"])  # every continue got a 200, none a fallback
    assert thread_kinds(bodies) == ["create"] + ["continue"] * (len(bodies) - 1)
    assert all("system" not in body and "tools" not in body for body in bodies[1:])  # the thread keeps them
    [student] = server.classroom.status()["students"]
    assert (student["turn"], student["mistakes"]) == (len(fixture["exchanges"]), 0)
    log = server.classroom.out.getvalue()
    assert log.count("thread create · 200") == 1 and log.count("thread continue · 200") == len(bodies) - 1


def test_the_sdk_sends_the_threads_beta_header():
    seen_headers = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen_headers.append(request.headers.get("anthropic-beta"))
        return wire.http_response(S01["exchanges"][len(seen_headers) - 1]["response"])

    client = anthropic.Anthropic(
        api_key="k", http_client=anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(answer))
    )
    run_tool_runner(client, S01, stream=False)
    assert seen_headers == [threads.BETA, threads.BETA]


def test_strict_replay_still_holds_the_workbooks_own_steps_to_the_recording():
    client, _ = replay.replay_client(S01, "s01", max_retries=0)  # the default: strict
    with pytest.raises(replay.ReplayMismatch, match="turn 1: system: expected"):
        run_tool_runner(client, S01, stream=False)  # the runner sends no system prompt


def test_conversation_matching_still_catches_a_loop_that_loses_the_reply():
    client, _ = replay.replay_client(S01, "s01", match=Match.CONVERSATION, max_retries=0)
    task = {"role": "user", "content": S01["task"]}
    first = client.messages.create(model=MODEL, max_tokens=100, messages=[task])
    answers = [{"type": "tool_result", "tool_use_id": b.id, "content": "x"} for b in first.content]
    forgot_the_reply = [task, {"role": "user", "content": answers}]
    # Combined, the two user messages are one turn whose tool_results answer nothing: the API's 400 first,
    # then what the recording expected.
    with pytest.raises(
        anthropic.BadRequestError, match="unexpected `tool_use_id`.*expected 3 messages, got 2"
    ):
        client.messages.create(model=MODEL, max_tokens=100, messages=forgot_the_reply)


def test_an_unknown_match_is_a_clear_error():
    with pytest.raises(
        errors.WorkbookError, match="match='loose': use one of strict, structure, conversation"
    ):
        replay.replay_client(S01, "s01", match="loose")


# -- what the API answers when a thread cannot go on -------------------------------------------------


def continue_from(client, previous: str, messages: list, **extra):
    return client.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=messages,
        thread={"type": "continue", "previous_message_id": previous},
        betas=[threads.BETA],
        **extra,
    )


@pytest.fixture(params=["in-process", "server"])
def client_for(request, server):
    """A client on s01's fixture, in process (conversation matching) or through the server."""
    return functools.partial(s01_client, request.param, server)


def test_an_unknown_thread_id_gets_the_apis_not_found_error(client_for):
    client = client_for()
    with pytest.raises(anthropic.NotFoundError) as caught:
        continue_from(client, "msg_never_sent", [{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 404 and caught.value.error_code == "thread_not_found"
    assert "msg_never_sent" in caught.value.message


def start_thread(client):
    """s01's task as the first turn of a new thread."""
    return client.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": S01["task"]}],
        thread={"type": "create"},
        betas=[threads.BETA],
    )


def test_a_reply_is_continued_once(client_for):
    client = client_for()
    first = start_thread(client)
    second = continue_from(client, first.id, answers_to(first))
    assert second.stop_reason == "end_turn"
    with pytest.raises(anthropic.BadRequestError) as caught:
        continue_from(client, first.id, answers_to(first))
    assert caught.value.error_code == "thread_already_continued"


def test_a_continue_is_checked_as_the_whole_conversation(client_for):
    client = client_for()
    first = start_thread(client)
    one_answer_missing = answers_to(first)
    one_answer_missing[0]["content"].pop()
    with pytest.raises((anthropic.BadRequestError, replay.ReplayMismatch)) as caught:
        continue_from(client, first.id, one_answer_missing)
    # The request carried one message; the problem is named where it sits in the whole conversation.
    assert "turn 2" in str(caught.value) and "messages[2]" in str(caught.value)


def test_a_refused_continue_lets_its_thread_go_so_sending_it_again_costs_a_lookup(client_for, monkeypatch):
    """Red team five: after one 16-21 MB thread, each ~170-byte continue was expanded for 3-5 s, and a
    refused one kept its thread to be sent again and again."""
    opened = []
    monkeypatch.setattr(threads.Held, "open", counted(threads.Held.open, opened))
    client = client_for()
    first = start_thread(client)
    one_answer_missing = answers_to(first)
    one_answer_missing[0]["content"].pop()
    with pytest.raises((anthropic.BadRequestError, replay.ReplayMismatch)):
        continue_from(client, first.id, one_answer_missing)
    assert len(opened) == 1
    for messages in (one_answer_missing, answers_to(first)):  # the same again, or corrected: a 404
        with pytest.raises(anthropic.NotFoundError) as caught:
            continue_from(client, first.id, messages)
        assert caught.value.error_code == "thread_not_found"
    assert len(opened) == 1  # neither was expanded (the SDK, told thread_not_found, sends the whole)


def counted(function, calls: list):
    def call(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    return call


def test_a_refused_continue_holds_no_bytes_and_a_refused_create_holds_none():
    held = threads.Threads(ledger=threads.Ledger())
    created_thread(held, 1)
    assert held.bytes > 0 and held.ledger.total == held.bytes
    held.let_go(continue_of("msg_1")["thread"])
    assert held.held == {} and held.bytes == 0 and held.ledger.total == 0
    held.let_go({"type": "create"})  # nothing was held for it
    held.let_go(None)
    assert held.held == {} and held.ledger.total == 0


def test_a_continue_that_resends_the_system_prompt_is_refused(client_for):
    client = client_for()
    first = client.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        system="mine",
        messages=[{"role": "user", "content": S01["task"]}],
        thread={"type": "create"},
        betas=[threads.BETA],
    )
    with pytest.raises(anthropic.BadRequestError, match="system: a continue takes these from the thread"):
        continue_from(client, first.id, answers_to(first), system="mine")


def test_threads_are_held_per_student(server):
    alice, _ = server_client(server, "s01_hello_agent", "alice")
    bob, _ = server_client(server, "s01_hello_agent", "bob")
    first = alice.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": S01["task"]}],
        thread={"type": "create"},
        betas=[threads.BETA],
    )
    with pytest.raises(anthropic.NotFoundError):  # bob cannot continue alice's thread
        continue_from(bob, first.id, answers_to(first))
    assert continue_from(alice, first.id, answers_to(first)).stop_reason == "end_turn"


# -- the fallback: a thread replay cannot hold makes the SDK send the whole history itself ----------

CLEARS_OLD_RESULTS = {"edits": [{"type": "clear_tool_uses_20250919"}]}  # a server-side edit of the history


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_fallback_makes_the_sdk_resend_the_whole_history_in_process(stream):
    client, transport = replay.replay_client(S01, "s01", match=Match.CONVERSATION, max_retries=0)
    stops = run_tool_runner(client, S01, stream, context_management=CLEARS_OLD_RESULTS)
    assert stops == recorded_stops(S01)
    sent = transport.seen
    assert thread_kinds(sent) == ["create", None, None]  # refused once, then no thread at all
    assert [len(body["messages"]) for body in sent] == [1, 1, 3]  # the whole history, resent


def test_the_fallback_makes_the_sdk_resend_the_whole_history_against_the_server(server):
    client, logged = server_client(server, "s01_hello_agent")
    assert run_tool_runner(client, S01, False, context_management=CLEARS_OLD_RESULTS) == recorded_stops(S01)
    refused, *served = logged.log
    assert refused[1] == 400 and refused[0]["thread"] == {"type": "create"}
    assert [(len(body["messages"]), "thread" in body, status) for body, status in served] == [
        (1, False, 200),
        (3, False, 200),
    ]


def test_the_refusal_names_its_error_code_and_what_replay_cannot_hold():
    refusal = pytest.raises(
        threads.Refusal,
        threads.Threads().expand,
        {"thread": {"type": "create"}, "messages": [], "context_management": CLEARS_OLD_RESULTS},
    )
    error = refusal.value.body()["error"]
    assert refusal.value.status == 400 and error["type"] == "invalid_request_error"
    assert error["details"] == {
        "error_code": "thread_unsupported_request",
        "unsupported": ["context_management"],
    }


# -- issue 13: the transport keeps no parsed copy of each request -----------------------------------


def test_the_transport_keeps_each_request_as_the_bytes_sent():
    client, transport = replay.replay_client(S01, "s01")
    messages = S01["exchanges"][0]["request"]
    client.messages.create(**messages)
    assert [type(raw) for raw in transport.sent] == [bytes]
    assert transport.seen == [messages]  # parsed only when asked


# -- issue 23 / 29: held threads are bounded in bytes, per student and in all --------------------------


def created_thread(held: threads.Threads, n: int, text: str = "x" * 1000) -> str:
    """Hold one thread of a user message and a reply `msg_n`; returns the reply's id."""
    request = {"messages": [{"role": "user", "content": text}]}
    held.hold({"type": "create"}, request, {"id": f"msg_{n}", "content": [{"type": "text", "text": "ok"}]})
    return f"msg_{n}"


def continue_of(previous: str) -> dict:
    return {"thread": {"type": "continue", "previous_message_id": previous}, "messages": []}


def test_a_thread_is_held_as_compact_json_about_the_size_of_its_conversation():
    held = threads.Threads(ledger=threads.Ledger())
    created_thread(held, 1, "y" * 100_000)
    assert 100_000 < held.bytes < 101_000  # the text once, not three parsed copies
    request, _ = held.expand(continue_of("msg_1"))
    assert (
        request["messages"][0]["content"] == "y" * 100_000 and request["messages"][1]["role"] == "assistant"
    )


def test_a_students_thread_flood_drops_their_oldest_first_and_a_dropped_one_is_not_found():
    held = threads.Threads(most=6_000, ledger=threads.Ledger())
    ids = [created_thread(held, n) for n in range(50)]  # about 1.1 kB each: five fit
    assert list(held.held) == ids[-5:] and held.bytes <= 6_000
    with pytest.raises(threads.Refusal) as caught:
        held.expand(continue_of(ids[0]))
    assert caught.value.status == 404 and caught.value.details["error_code"] == "thread_not_found"
    assert held.expand(continue_of(ids[-1]))[0]["messages"][0]["content"] == "x" * 1000


def test_threads_of_every_student_together_stay_under_the_total_oldest_of_all_first():
    ledger = threads.Ledger(most=10_000)
    alice, bob = threads.Threads(ledger=ledger), threads.Threads(ledger=ledger)
    first = created_thread(alice, 0)
    for n in range(1, 30):
        created_thread(bob, n)
    assert ledger.total <= 10_000 and first not in alice.held  # alice's old thread went first
    assert len(bob.held) == len(ledger.entries) and bob.bytes == ledger.total


def test_a_collected_clients_threads_are_no_longer_counted():
    ledger = threads.Ledger()
    held = threads.Threads(ledger=ledger)
    created_thread(held, 1)
    assert ledger.total > 0
    del held
    created_thread(threads.Threads(ledger=ledger), 2)  # the next change settles what was released
    assert len(ledger.entries) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_sdk_recovers_from_a_dropped_thread_by_sending_the_whole_conversation(stream):
    client, transport = replay.replay_client(S02, "s02", match=Match.CONVERSATION, max_retries=0)
    transport.player.threads = threads.Threads(most=1, ledger=threads.Ledger())  # nothing stays held
    assert run_tool_runner(client, S02, stream) == recorded_stops(S02)
    kinds = thread_kinds(transport.seen)
    assert kinds[0] == "create" and "continue" in kinds  # each continue is a 404, then resent whole
    assert transport.cursor == len(S02["exchanges"])


# -- issue 50: compaction, a side request that uses no recorded turn --------------------------------


def run_compacting_runner(client, fixture: dict, stream: bool, after: int = 1) -> list:
    """The tool runner as run_tool_runner, asked to compact once its `after`-th reply is in: every reply's
    stop_reason, the compaction's among them."""
    workspace = scratch.copy_workspace(fixture["workspace"])
    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=4096,
        tools=workspace_tools(workspace),
        messages=[{"role": "user", "content": fixture["task"]}],
        stream=stream,
        betas=[compaction.BETA],
    )
    stops = []
    for item in runner:
        stops.append((item.get_final_message() if stream else item).stop_reason)
        if len(stops) == after:
            runner.compact_before_next_turn()
    return stops


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("name", ["s01_hello_agent", "s02_fix_divide_by_zero"])
def test_the_tool_runners_compaction_uses_no_turn_and_the_runner_walks_the_recording(server, name, stream):
    fixture = FIXTURES[name]
    client, logged = server_client(server, name)
    stops = run_compacting_runner(client, fixture, stream)
    recorded = recorded_stops(fixture)
    assert stops == recorded[:1] + ["compaction"] + recorded[1:]
    assert [status for _, status in logged.log] == [200] * len(stops)
    asked, after = logged.log[1][0], logged.log[2][0]
    assert asked["compaction"] == {"type": "summarize"}
    assert [block["type"] for block in after["messages"][0]["content"]] == ["compaction"]  # what it kept
    [student] = server.classroom.status()["students"]
    assert (student["turn"], student["mistakes"], student["side"]) == (len(recorded), 0, 1)
    assert "side request · 200 compaction" in server.classroom.out.getvalue()
