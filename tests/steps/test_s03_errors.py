"""s03: errors are data — API failures go through one visible retry layer, and what retrying cannot fix
stops the run cleanly with the conversation saved. Tool failures become results from s02 on (s02's
execute()); their tests are here, beside the rest of "errors are data", and run from s02.

Behaviour tests run against every step from s03 on (later steps inherit it); the fixture replays
run s03's own main, as `python s03_errors.py --replay F` would.
"""

import dataclasses
import json
import os
import re
import time
from pathlib import Path

from workbook import scratch
from workbook.api import contract
from workbook.replay import fixtures, trust
from workbook.replay import transport as replay

import anthropic
import httpx2
import psutil
import pytest
from conftest import ROOT, STEPS, load_step, main_in_process, run_script
from standin import StandIn, api_error, message, scripted, text, tool_use

import s03_errors as s03

STEPS_FROM = [s for s in STEPS if s >= "s03"]
NO_WAIT = s03.Retry(sleep=lambda seconds: None, rand=lambda: 0.5)


@pytest.fixture(params=STEPS_FROM)
def step(request):
    """The step module under test: s03, and every later step, which must keep its behaviour."""
    return load_step(request.param)


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    return workspace.resolve()


def call(step, name: str, tool_input: dict, workspace: Path):
    """One call through the step's execute(); --permission all, since these tests are about errors, and
    auto runs only read-only commands unasked (tests/steps/test_s02_tools.py tests that)."""
    block = anthropic.types.ToolUseBlock(type="tool_use", id="toolu_t", name=name, input=tool_input)
    return step.execute(block, workspace, "all")


# -- tool failures are results the model reads: s02's execute(), so every step from s02 on -------


@pytest.fixture(params=[s for s in STEPS if s >= "s02"])
def tool_step(request):
    """s02, whose execute() makes whatever a handler raises a result, and every later step."""
    return load_step(request.param)


def test_an_exception_s02_did_not_expect_is_a_result_with_its_type(tool_step, ws):
    (ws / "loop").symlink_to(ws / "loop")  # a symlink loop: workspace_files.resolved makes it an OSError
    output, is_error = call(tool_step, "read_file", {"path": "loop"}, ws)
    assert is_error and output.startswith("error: OSError: [Errno 40] a symbolic link loop")
    assert str(ws) not in output and "Traceback" not in output


def test_any_exception_a_handler_raises_becomes_type_and_message(tool_step, ws, monkeypatch):
    def broken(workspace, path):
        return {}[path]  # KeyError, deep in a handler

    monkeypatch.setattr(tool_step.REGISTRY["read_file"], "handler", broken)
    assert call(tool_step, "read_file", {"path": "notes.txt"}, ws) == ("error: KeyError: 'notes.txt'", True)


def test_reading_a_directory_names_the_os_error(tool_step, ws):
    (ws / "pkg").mkdir()
    output, is_error = call(tool_step, "read_file", {"path": "pkg"}, ws)
    assert is_error and output == "error: IsADirectoryError: [Errno 21] Is a directory: 'pkg'"


def test_editing_a_file_that_is_not_utf8_is_a_unicode_error_result(tool_step, ws):
    (ws / "menu.py").write_bytes('"crème": 7\n'.encode("latin-1"))
    output, is_error = call(tool_step, "edit_file", {"path": "menu.py", "old_text": "7", "new_text": "8"}, ws)
    assert is_error and output.startswith("error: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe8")
    assert (ws / "menu.py").read_bytes() == '"crème": 7\n'.encode("latin-1")


def test_a_refusal_keeps_its_own_words_without_a_type_name(tool_step, ws):
    output, is_error = call(tool_step, "read_file", {"path": "../x"}, ws)
    assert is_error and output == "error: ../x is outside the workspace; use a path inside it, relative to it"


def test_a_non_zero_exit_is_information_not_an_error(tool_step, ws):
    output, is_error = call(tool_step, "bash", {"command": "echo broken >&2; exit 3"}, ws)
    assert (output, is_error) == ("broken\n[exit code 3]", False)


def test_output_that_is_not_utf8_is_still_output(tool_step, ws):
    output, is_error = call(tool_step, "bash", {"command": r"printf 'caf\351\n'"}, ws)
    assert not is_error and output == "caf\ufffd\n[exit code 0]"


def test_a_command_waiting_for_input_gets_eof_not_a_hang(tool_step, ws):
    output, is_error = call(tool_step, "bash", {"command": "read line; echo got=$line"}, ws)
    assert not is_error and output.startswith("got=")


def alive(pid: int) -> bool:
    """True while pid is a running process (a zombie waiting to be reaped counts as dead)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_timeout_kills_the_whole_process_group(tool_step, ws, monkeypatch):
    # The sleeps do not hold the output pipe, so killing only the shell would return at once and
    # leave both running: only killing the whole process group passes.
    monkeypatch.setattr(tool_step, "BASH_TIMEOUT", 1)
    command = "echo started; sleep 100 >/dev/null 2>&1 & echo $! > bg.pid; sleep 100 >/dev/null 2>&1"
    with pytest.raises(tool_step.ToolError, match=r"timed out after 1 s; it and every process it started"):
        tool_step.bash(ws, command)
    background = int((ws / "bg.pid").read_text())
    deadline = time.monotonic() + 120  # the orphan's reaping by init is asynchronous: a safety net only
    while alive(background) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(background), "the backgrounded sleep survived the timeout"


def test_a_timeout_is_an_is_error_result_with_the_output_so_far(tool_step, ws, monkeypatch):
    monkeypatch.setattr(tool_step, "BASH_TIMEOUT", 1)
    output, is_error = call(tool_step, "bash", {"command": "echo half way; sleep 100"}, ws)
    assert is_error and "timed out after 1 s" in output and output.endswith("Output before that:\nhalf way")


# -- the retry policy, as pure functions --------------------------------------------------------------


@pytest.mark.parametrize(
    "status, retry",
    [(408, True), (409, True), (429, True), (500, True), (502, True), (503, True), (504, True)]
    + [(529, True), (None, True), (400, False), (401, False), (403, False), (404, False), (413, False)]
    + [(422, False)],
)
def test_retry_classification(step, status, retry):
    assert step.retryable(status) is retry


def test_backoff_doubles_with_equal_jitter_and_a_cap(step):
    for attempt in range(1, 12):
        ceiling = min(step.MAX_WAIT, step.BASE_WAIT * 2 ** (attempt - 1))
        low, high = step.backoff(attempt, lambda: 0.0), step.backoff(attempt, lambda: 0.999999)
        assert low == ceiling / 2 and ceiling * 0.999 < high <= ceiling
    assert step.backoff(2, lambda: 0.0) == 2 * step.backoff(1, lambda: 0.0)
    assert step.backoff(40, lambda: 0.999999) <= step.MAX_WAIT


def test_server_wait_prefers_milliseconds_then_seconds_then_a_date(step):
    assert step.server_wait({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert step.server_wait({"retry-after": "2"}) == 2.0
    date = "Wed, 21 Oct 2015 07:28:30 GMT"  # 1445412510 in Unix time
    assert step.server_wait({"retry-after": date}, now=lambda: 1445412500.0) == 10.0
    assert step.server_wait({"retry-after": "soon"}) is None and step.server_wait({}) is None
    assert step.server_wait({"retry-after-ms": "oops", "retry-after": "4"}) == 4.0  # unreadable: the next


@pytest.mark.parametrize(
    "headers",
    [{"retry-after": "0"}, {"retry-after": "-4"}, {"retry-after-ms": "0"}, {"retry-after": "nan"}]
    + [{"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}, {"retry-after-ms": "0", "retry-after": "9"}],
)
def test_a_pause_of_zero_or_less_is_no_pause_asked_for(step, headers):
    """As the SDK reads them (it honours only a pause above 0), and the first number read decides."""
    assert step.server_wait(headers) is None


# -- the retry layer over the real SDK, with recorded responses --------------------------------------


def ok(reply: str = "done") -> dict:
    return {"status": 200, "body": message([text(reply)])}


def fail(status: int, kind: str = "api_error", **headers) -> dict:
    return {
        "status": status,
        "headers": headers,
        "body": {"type": "error", "error": {"type": kind, "message": kind}},
    }


def retried(step, *responses, attempts=None):
    """Send one request through call_model against these responses: (outcome, requests, waits)."""
    fixture = {"exchanges": [{"request": {}, "response": r} for r in responses]}
    client, transport = replay.replay_client(fixture, strict=False, **step.CLIENT_OPTIONS)
    waits = []
    retry = step.Retry(sleep=waits.append, rand=lambda: 0.5, attempts=attempts or step.MAX_ATTEMPTS)
    request = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    try:
        outcome = step.call_model(client.messages.create, retry, **request)
    except Exception as err:  # noqa: BLE001 - the outcome under test
        outcome = err
    return outcome, len(transport.seen), waits


def test_the_sdk_does_not_retry_underneath(step):
    assert step.CLIENT_OPTIONS["max_retries"] == 0
    outcome, requests, waits = retried(step, fail(529, "overloaded_error"), ok(), attempts=1)
    assert isinstance(outcome, step.GaveUp) and requests == 1 and waits == []


def test_overloaded_then_rate_limited_then_ok(step):
    outcome, requests, waits = retried(step, fail(529), fail(429, **{"retry-after": "3"}), ok("fine"))
    assert outcome.content[0].text == "fine" and requests == 3
    assert waits == [step.backoff(1, lambda: 0.5), 3.0]


def test_retry_after_ms_wins_over_retry_after(step):
    outcome, requests, waits = retried(step, fail(503, **{"retry-after-ms": "250", "retry-after": "9"}), ok())
    assert requests == 2 and waits == [0.25]


@pytest.mark.parametrize("asked", [{"retry-after": "0"}, {"retry-after-ms": "0"}, {"retry-after": "-1"}])
def test_a_server_asking_for_no_pause_gets_the_backoff_instead(step, asked):
    outcome, requests, waits = retried(step, fail(429, **asked), fail(529, **asked), ok())
    assert outcome.stop_reason == "end_turn" and requests == 3
    assert waits == [step.backoff(1, lambda: 0.5), step.backoff(2, lambda: 0.5)]  # not [0.0, 0.0]


def test_lost_connections_and_timeouts_are_retried(step):
    outcome, requests, waits = retried(step, {"error": "connect"}, {"error": "timeout"}, ok())
    assert requests == 3 and len(waits) == 2 and outcome.stop_reason == "end_turn"


def test_attempts_are_bounded(step):
    outcome, requests, waits = retried(step, *[fail(529, "overloaded_error")] * 20)
    assert isinstance(outcome, step.GaveUp) and requests == step.MAX_ATTEMPTS
    assert len(waits) == step.MAX_ATTEMPTS - 1 and waits == sorted(waits)
    assert "still failing after 5 attempts (overloaded, 529)" in str(outcome)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_a_client_error_is_never_retried(step, status):
    outcome, requests, waits = retried(step, fail(status), ok())
    assert isinstance(outcome, anthropic.APIStatusError) and outcome.status_code == status
    assert requests == 1 and waits == []


def test_a_server_asking_for_too_long_a_pause_ends_the_run(step):
    # A live server may ask for an hour. A fixture may not (check refuses it, and replay hands on at most
    # 60 s), so this answer comes from a bare transport, as the network would bring it.
    sent = []

    def server(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(429, headers={"retry-after": "3600"}, json=fail(429)["body"])

    http = anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(server))
    client = anthropic.Anthropic(api_key="test", http_client=http, **step.CLIENT_OPTIONS)
    waits = []
    retry = step.Retry(sleep=waits.append, rand=lambda: 0.5, attempts=step.MAX_ATTEMPTS)
    request = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(step.GaveUp, match="asks for a 3600 s pause"):
        step.call_model(client.messages.create, retry, **request)
    assert len(sent) == 1 and waits == []


@pytest.mark.parametrize(
    "status, advice",
    [(401, "check ANTHROPIC_API_KEY"), (400, "the request was invalid: 400"), (404, "check the model id")]
    + [(403, "permissions"), (413, "too large")],
)
def test_each_fatal_error_says_what_to_do_in_one_line(step, status, advice):
    outcome, _, _ = retried(step, fail(status, str(status)))
    line = step.fatal_line(outcome)
    assert advice in line and "\n" not in line


# -- the conversation, saved as plain JSON -------------------------------------------------------------


def test_save_conversation_turns_sdk_objects_into_api_json(step, tmp_path):
    reply = anthropic.types.Message.model_validate(
        message([text("look"), tool_use("toolu_1", "list_files", {})], "tool_use")
    )
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt", "is_error": False}
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": reply.content}]
    messages.append({"role": "user", "content": [result]})
    saved = json.loads(step.save_conversation(messages, tmp_path / "deep" / "c.json").read_text())
    assert saved[1]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "tool_use", "id": "toolu_1", "name": "list_files", "input": {}},
    ]
    assert saved[2]["content"] == [result] and contract.api_rule_problems(saved) == []


# -- live mode, over real HTTP, against a stand-in that misbehaves -----------------------------------


@pytest.fixture
def live(step, ws, monkeypatch):
    """Run `step.main` live against a stand-in with this brain; (exit code, requests, stdout, runs/)."""
    runs = ws.parent / "runs"
    monkeypatch.setattr(step, "RUNS", runs)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("WORKBOOK_NO_SLEEP", "1")  # the waits are said, not slept (workbook/launch.py)
    monkeypatch.delenv("MODEL_ID", raising=False)

    def run(brain, capsys, task="count the notes"):
        with StandIn(brain) as api:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
            code = step.main([task, "--workspace", str(ws), "--permission", "auto"])
        assert not api.rule_problems
        retries = {r["headers"].get("x-stainless-retry-count") for r in api.requests}
        assert retries <= {"0", None}, "the SDK retried underneath the step's own layer"
        return code, api.requests, capsys.readouterr().out, runs

    return run


def finish(reply: str = "2 notes."):
    return message([text(reply)])


def test_live_a_storm_of_529s_stops_after_the_bounded_attempts(live, step, capsys):
    code, requests, out, runs = live(lambda body, n: api_error(529, "overloaded_error", "Overloaded"), capsys)
    assert code == 1 and len(requests) == step.MAX_ATTEMPTS
    assert out.count("overloaded (529) — retrying in") == step.MAX_ATTEMPTS - 1
    assert "attempt 5 of 5" in out and "still failing after 5 attempts" in out and "Traceback" not in out
    [saved] = runs.glob("*/conversation.json")
    assert json.loads(saved.read_text()) == [{"role": "user", "content": "count the notes"}]


def test_live_a_429_with_retry_after_is_waited_out_then_the_task_completes(live, step, capsys):
    limited = api_error(429, "rate_limit_error", "slow down", **{"retry-after": "7"})
    code, requests, out, _ = live(scripted(limited, finish()), capsys)
    assert code == 0 and len(requests) == 2
    assert "rate limited (429) — retrying in 7.0 s (as the server asked), attempt 2 of 5" in out


@pytest.mark.parametrize(
    "asked", [{"retry-after": "0"}, {"retry-after-ms": "0"}, {"retry-after": "Wed, 21 Oct 2015 07:28:30 GMT"}]
)
def test_live_a_429_asking_for_no_pause_backs_off_as_the_sdk_would(live, step, capsys, asked):
    limited = api_error(429, "rate_limit_error", "slow down", **asked)
    code, requests, out, _ = live(scripted(limited, limited, finish()), capsys)
    assert code == 0 and len(requests) == 3
    assert "as the server asked" not in out, out
    waits = [float(w) for w in re.findall(r"rate limited \(429\) — retrying in ([0-9.]+) s, attempt", out)]
    assert len(waits) == 2 and all(w >= step.BASE_WAIT / 2 for w in waits), out  # backoff, never 0


def test_live_a_500_then_success_mid_task_keeps_the_conversation(live, step, capsys):
    first = message([tool_use("toolu_1", "bash", {"command": "wc -l notes.txt"})], "tool_use")  # read-only
    code, requests, out, _ = live(scripted(first, api_error(500, "api_error", "oops"), finish()), capsys)
    assert code == 0 and len(requests) == 3
    assert requests[1]["body"] == requests[2]["body"]  # the retry resends the same conversation
    assert requests[2]["body"]["messages"][2]["content"][0]["content"] == "2 notes.txt\n[exit code 0]"


def test_live_a_403_stops_at_once_with_advice_and_the_conversation(live, step, capsys):
    first = message([tool_use("toolu_1", "read_file", {"path": "notes.txt"})], "tool_use")
    denied = api_error(403, "permission_error", "this key may not use this model")
    code, requests, out, runs = live(scripted(first, denied, finish()), capsys)
    assert code == 1 and len(requests) == 2 and "Traceback" not in out
    assert "403: this key may not use this model" in out and "retrying" not in out
    [saved] = runs.glob("*/conversation.json")
    conversation = json.loads(saved.read_text())
    assert len(conversation) == 3 and contract.api_rule_problems(conversation) == []
    assert conversation[2]["content"][0]["content"] == "alpha\nbeta\n"


def test_live_really_sleeps_the_wait_when_not_told_otherwise(live, step, capsys, monkeypatch):
    monkeypatch.delenv("WORKBOOK_NO_SLEEP")
    busy = api_error(529, "overloaded_error", "Overloaded", **{"retry-after-ms": "10"})
    code, requests, out, _ = live(scripted(busy, finish()), capsys)
    assert code == 0 and len(requests) == 2
    assert "retrying in 0.0 s (as the server asked)" in out and "wait is not spent" not in out


# -- the fixtures, replayed by the script as a reader would ------------------------------------------


REPLAYS = {  # fixture -> the exit code a reader should see
    "s03_fix_failing_test": 0,
    "s03_fix_with_retry": 0,
    "s03_two_kinds_of_error": 0,
    "s03_overloaded_then_ok": 0,
    "s03_bad_key": 1,
    "s03_tool_raises": 0,
    "s03_unknown_tool": 0,
    "s03_should_not_retry": 1,
    "s03_deleted_once": 0,
    "s03_workspace_gone": 1,
}


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """Every s03 fixture replayed by s03's main(["--replay", F]) in this process, as
    `python s03_errors.py --replay F` runs it: the same output and exit code, without an interpreter
    start and an SDK import for each (a second of CPU apiece). A step started as a reader starts it
    is tested in test_output_width.py and test_readme.py."""
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        return {
            name: main_in_process(patch, runs, "s03_errors", "--replay", f"fixtures/{name}.json")[::-1]
            for name in REPLAYS
        }


def replay_s03(replays, name: str) -> str:
    out, code = replays[name]
    assert code == REPLAYS[name], out
    assert "Traceback" not in out
    return out


def test_every_s03_fixture_is_replayed_here():
    assert sorted(REPLAYS) == sorted(p.stem for p in (ROOT / "fixtures").glob("s03_*.json"))


def test_fix_failing_test_really_fails_then_really_passes(replays):
    out = replay_s03(replays, "s03_fix_failing_test")
    failed = out.index("FAIL  test_user_names_are_not_case_sensitive: grace / hopper was refused")
    assert failed < out.index("3 passed, 0 failed\n  [exit code 0]")
    assert "[exit code 1]" in out and "end_turn" in out


BOTH_RETRIES = [  # a 529, then a 429 that says how long to wait: each retried once
    "overloaded (529) — retrying in N s, attempt 2 of 5",
    "rate limited (429) — retrying in N s (as the server asked), attempt 2 of 5",
]


def retries(out: str) -> list[str]:
    """The retry layer's lines on screen, each wait written N s (a replay's jitter is its own)."""
    return [re.sub(r"\d+\.\d s", "N s", line) for line in out.splitlines() if "retrying in" in line]


def test_fix_with_retry_shows_both_retries_then_the_same_fix(replays):
    out = replay_s03(replays, "s03_fix_with_retry")
    assert retries(out) == BOTH_RETRIES
    # each retry shows under the rule of the turn whose call it retries
    assert out.index("turn 1 ") < out.index("overloaded (529)") < out.index("turn 2 ")
    assert out.index("turn 6 ") < out.index("rate limited (429)") < out.index("turn 7 ")
    assert out.index("turn 7 ") < out.index("3 passed, 0 failed")
    assert (
        out.index("turn 3 ") < out.index("error: FileNotFoundError") < out.index("turn 4 ")
    )  # read, corrected


def test_the_default_shows_a_tool_error_read_and_two_model_calls_retried(replays):
    out = replay_s03(replays, "s03_two_kinds_of_error")
    assert retries(out) == BOTH_RETRIES
    assert out.index("turn 1 ") < out.index("overloaded (529)") < out.index("error: FileNotFoundError")
    assert out.index("error: FileNotFoundError") < out.index("turn 2 ") < out.index("read_file src/login.py")
    assert out.index("turn 4 ") < out.index("rate limited (429)") < out.index("3 passed, 0 failed")
    assert out.count("stop_reason=") == 5  # the failed calls are retried inside their turn, never a turn


def test_overloaded_then_ok_shows_every_attempt_and_completes(replays):
    out = replay_s03(replays, "s03_overloaded_then_ok")
    assert retries(out) == [
        "overloaded (529) — retrying in N s, attempt 2 of 5",
        "rate limited (429) — retrying in N s (as the server asked), attempt 3 of 5",
        "connection failed (no answer) — retrying in N s, attempt 2 of 5",
    ]
    assert "retrying in 2.0 s (as the server asked)" in out
    assert "(a replay has no clock: the 2.0 s wait is not spent)" in out and "notes.txt has 1 line." in out


def test_bad_key_stops_cleanly_with_the_conversation_saved(replays):
    out = replay_s03(replays, "s03_bad_key")
    assert "stopped: the API refused the key (401: invalid x-api-key) — check ANTHROPIC_API_KEY" in out
    assert "retrying" not in out
    path = Path(re.search(r"saved to (\S+conversation\.json)", out).group(1))
    conversation = json.loads(path.read_text())
    assert conversation == [{"role": "user", "content": "List the files in this folder."}]
    assert contract.api_rule_problems(conversation) == []
    assert not str(path).startswith(str(ROOT))  # a replay writes beside its temp workspace, not in the repo


def test_tool_raises_is_fed_back_and_the_model_recovers(replays):
    out = replay_s03(replays, "s03_tool_raises")
    assert "error: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9" in out
    assert '"crème brûlée": 8,' in out


def test_unknown_tool_is_fed_back_and_the_next_turn_uses_a_real_one(replays):
    out = replay_s03(replays, "s03_unknown_tool")
    assert "there is no tool 'word_count'; the tools are bash" in out and "7 notes.txt" in out


def test_help_names_the_default_fixture_and_no_test_switch(capsys):
    s03 = load_step("s03_errors")
    with pytest.raises(SystemExit) as done:
        s03.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "fixtures/s03_two_kinds_of_error.json" in out  # both kinds of error
    assert "WORKBOOK_" not in out and "s03_bad_key.json" in out


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "fixtures").glob("s03_*.json")))
def test_every_s03_fixture_is_scripted_with_estimated_usage(name):
    fixture = fixtures.load_fixture(ROOT / "fixtures" / f"{name}.json")
    assert fixture["script"] == "s03_errors" and fixture["provenance"] == "scripted"
    assert "estimates" in fixture["provenance_note"]


def test_the_login_workspace_is_really_broken_before_the_replay():
    workspace = scratch.copy_workspace("login")
    done = run_script(str(workspace / "tests" / "test_login.py"))
    assert done.returncode == 1 and "FAIL  test_user_names_are_not_case_sensitive" in done.stdout
    assert os.path.exists(workspace / "src" / "login.py")


# -- the server's own word, idempotency, and the one harness error that ends a run ------------------


def test_x_should_retry_false_is_obeyed_even_on_a_5xx(step):
    outcome, requests, waits = retried(step, fail(503, **{"x-should-retry": "false"}), ok())
    assert isinstance(outcome, anthropic.InternalServerError) and requests == 1 and waits == []


def test_x_should_retry_true_is_obeyed_even_on_a_4xx(step):
    outcome, requests, _ = retried(
        step, fail(400, "invalid_request_error", **{"x-should-retry": "true"}), ok()
    )
    assert outcome.content[0].text == "done" and requests == 2


def test_x_should_retry_false_is_obeyed_on_a_failure_whose_headers_had_arrived(step):
    """As the SDK: headers that say x-should-retry: false decide, even if the body then broke off; a
    failure with no response at all may pass if sent again."""
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    dropped = anthropic.APIConnectionError(request=request)
    assert step.Retry().reason(dropped) == "connection failed"
    dropped.response = httpx2.Response(200, headers={"x-should-retry": "false"}, request=request)
    assert step.Retry().reason(dropped) is None


def test_the_should_not_retry_fixture_stops_in_one_line_with_the_conversation(run_main):
    code, out = run_main("s03_errors", "--replay", "fixtures/s03_should_not_retry.json")
    assert code == 1 and "Traceback" not in out and "retrying" not in out
    stop, saved = out.strip().splitlines()[-2:]  # the stop in one line, then where the conversation went
    assert stop.startswith("stopped: the API answered 503: ") and stop.endswith("do not retry it.")
    assert saved.startswith("conversation so far (1 message) saved to ")


def test_a_failed_tool_call_is_reported_never_run_again(step, ws, monkeypatch):
    runs = []

    def flaky(workspace, **tool_input):
        runs.append(tool_input)
        raise OSError("disk went away halfway")

    monkeypatch.setitem(
        step.REGISTRY, "write_file", dataclasses.replace(step.REGISTRY["write_file"], handler=flaky)
    )
    output, is_error = call(step, "write_file", {"path": "a.txt", "content": "x"}, ws)
    assert is_error and "disk went away halfway" in output and len(runs) == 1


def test_the_fixtures_that_stop_on_purpose_do_so_in_one_line_as_a_reader_runs_them(replays):
    for name, said in [("s03_should_not_retry", "the API answered 503"), ("s03_workspace_gone", "is gone")]:
        stop, saved = replay_s03(replays, name).rstrip("\n").splitlines()[-2:]  # the stop, then where it went
        assert stop.startswith("stopped: ") and said in stop and saved.startswith("conversation so far"), name
    assert "overloaded (529) — retrying" in replay_s03(replays, "s03_deleted_once")  # retried: it goes on


def test_the_deleted_once_incident_cannot_happen_here(tmp_path):
    recorded = fixtures.load_fixture(ROOT / "fixtures" / "s03_deleted_once.json")
    client, transport = replay.replay_client(recorded, "s03_deleted_once.json", **s03.CLIENT_OPTIONS)
    workspace = scratch.copy_workspace("logs")
    size = (workspace / "app.log").stat().st_size
    audit = tmp_path / "audit.jsonl"
    person = trust.recorded_person(transport, workspace)  # the replay's person at the gate
    settings = s03.Settings(workspace, audit=audit, retry=NO_WAIT, ask=person)
    s03.agent_loop(client, [{"role": "user", "content": recorded["task"]}], settings)
    sent = transport.seen
    assert len(sent) == 4 and sent[1] == sent[2]  # the model call after the 529 is sent again, unchanged
    rotations = [json.loads(line) for line in audit.read_text().splitlines() if "mv app.log" in line]
    assert len(rotations) == 1  # ... and the rotation, which already ran, is not
    assert (workspace / "app.log.1").stat().st_size == size and (workspace / "app.log").read_text() == ""


def test_a_vanished_workspace_is_a_harness_error_that_ends_the_run(run_main):
    code, out = run_main("s03_errors", "--replay", "fixtures/s03_workspace_gone.json")
    assert code == 1 and "Traceback" not in out
    assert re.search(r"stopped.*the workspace .* is gone", out.replace("\n", " ")), out
    assert "conversation so far (4 messages) saved" in out  # it ends on the call that could not run


def test_a_missing_workspace_raises_rather_than_becoming_a_result(step, tmp_path):
    with pytest.raises(step.HarnessError, match="is gone"):
        call(step, "list_files", {}, tmp_path / "not-there")
