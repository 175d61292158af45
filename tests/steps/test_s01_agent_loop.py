"""s01: the loop itself — what it appends, when it stops, and how every mode runs it."""

import copy
import inspect
import json
import signal
import subprocess
import sys
import time

from workbook import scratch
from workbook.replay import commands as fixture_commands
from workbook.replay import fixtures, trust
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT, offline_env
from standin import Reply, StandIn, message, scripted, text, tool_use

import s01_agent_loop as s01

FIXTURE = ROOT / "fixtures" / "s01_hello_agent.json"


def one_turn_fixture(content: list, stop_reason: str) -> dict:
    """A one-exchange fixture, for loop behaviour that needs only the first reply."""
    fixture = copy.deepcopy(fixtures.load_fixture(FIXTURE))
    fixture["exchanges"] = fixture["exchanges"][:1]
    fixture["exchanges"][0]["response"]["body"].update(content=content, stop_reason=stop_reason)
    return fixture


def replay_s01(fixture: dict, workspace=None):
    """Run s01's loop on a fixture, in a fresh copy of its workspace unless one is given."""
    client, transport = replay.replay_client(fixture, "test")
    messages = [{"role": "user", "content": fixture["task"]}]
    settings = s01.Settings(workspace or scratch.copy_workspace(fixture["workspace"]))
    turns = s01.agent_loop(client, messages, settings)
    return turns, messages, transport


def test_stops_on_end_turn(tmp_path):
    turns, messages, _ = replay_s01(one_turn_fixture([text("all done")], "end_turn"), tmp_path)
    assert [t.stop_reason for t in turns] == ["end_turn"]
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_stops_on_max_tokens_without_running_the_cut_off_tool(tmp_path):
    cut = tool_use("toolu_cut", "bash", {"command": "touch should_not_exist"})
    turns, messages, transport = replay_s01(one_turn_fixture([cut], "max_tokens"), tmp_path)
    assert turns[-1].stop_reason == "max_tokens"
    assert not (tmp_path / "should_not_exist").exists()
    assert len(transport.seen) == 1 and messages[-1]["role"] == "assistant"


def test_every_tool_use_is_answered_once_in_one_message(tmp_path):
    fixture = fixtures.load_fixture(FIXTURE)
    _, messages, transport = replay_s01(fixture)
    asked = [b.id for b in messages[1]["content"] if b.type == "tool_use"]
    answered = [b["tool_use_id"] for b in transport.seen[1]["messages"][2]["content"]]
    assert len(asked) == 3 and answered == asked


def test_assistant_content_is_appended_verbatim(tmp_path):
    fixture = fixtures.load_fixture(FIXTURE)
    turns, messages, transport = replay_s01(fixture)
    assert messages[1]["content"] is turns[0].content
    assert (
        transport.seen[1]["messages"][1]["content"] == fixture["exchanges"][0]["response"]["body"]["content"]
    )


def test_tools_really_run_in_the_workspace():
    workspace = scratch.copy_workspace("hello")
    replay_s01(fixtures.load_fixture(FIXTURE), workspace)
    assert (workspace / "hello_agent.txt").read_text() == "Hello from Agent Loop!\n"


def test_the_seed_token_figures_replay():
    turns, _, transport = replay_s01(fixtures.load_fixture(FIXTURE))
    assert [t.usage.input_tokens for t in turns] == [114, 671]
    assert [len(body["messages"]) for body in transport.seen] == [1, 3]


def broken_loop(line_to_drop: str):
    """s01's own agent_loop with one line removed: what a student's slip looks like."""
    source = inspect.getsource(s01.agent_loop)
    assert line_to_drop in source
    namespace = dict(vars(s01))
    exec(source.replace(line_to_drop, "pass"), namespace)
    return namespace["agent_loop"]


def test_replay_catches_a_loop_that_forgets_the_assistant_turn():
    loop = broken_loop('messages.append({"role": "assistant", "content": response.content})')
    fixture = fixtures.load_fixture(FIXTURE)
    client, _ = replay.replay_client(fixture, "s01_hello_agent.json")
    with pytest.raises(
        anthropic.BadRequestError
    ) as caught:  # the API's own 400 first, then the recording's hint
        loop(
            client,
            [{"role": "user", "content": fixture["task"]}],
            s01.Settings(scratch.copy_workspace("hello")),
        )
    message_ = str(caught.value)
    assert "unexpected `tool_use_id`" in message_ and "turn 2" in message_
    assert "the assistant turn was not appended" in message_


def test_replay_catches_a_loop_that_drops_the_results(tmp_path):
    loop = broken_loop('messages.append({"role": "user", "content": results})')
    client, _ = replay.replay_client(fixtures.load_fixture(FIXTURE), "s01_hello_agent.json")
    with pytest.raises(
        anthropic.BadRequestError,
        match="`tool_use` ids were found without .* turn 2; the recording differs: "
        "expected 3 messages, got 2 .* the tool results were not appended",
    ):
        loop(
            client,
            [{"role": "user", "content": fixtures.load_fixture(FIXTURE)["task"]}],
            s01.Settings(tmp_path),
        )


def test_an_exhausted_fixture_is_a_clear_error_not_a_hang():
    fixture = copy.deepcopy(fixtures.load_fixture(FIXTURE))
    fixture["exchanges"] = fixture["exchanges"][:1]
    with pytest.raises(replay.ReplayExhausted, match="request 2 but the fixture holds only 1"):
        replay_s01(fixture)


def test_bash_timeout_is_a_result_and_the_loop_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(s01, "BASH_TIMEOUT", 1)
    assert "timed out after 1 s" in s01.run_bash("sleep 5", tmp_path)


def test_bash_result_carries_stdout_stderr_and_exit_code(tmp_path):
    output = s01.run_bash("echo out; echo err >&2; exit 3", tmp_path)
    assert "out" in output and "err" in output and "[exit code 3]" in output


def test_a_wrong_tool_call_is_answered_not_crashed(tmp_path):
    weird = [tool_use("toolu_1", "bash", {"cmd": "ls"}), tool_use("toolu_2", "python", {"code": "1"})]
    fixture = one_turn_fixture(weird, "tool_use")
    fixture["exchanges"].append(copy.deepcopy(fixtures.load_fixture(FIXTURE)["exchanges"][1]))
    client, transport = replay.replay_client(fixture, "test", strict=False)
    s01.agent_loop(client, [{"role": "user", "content": "x"}], s01.Settings(tmp_path))
    results = transport.seen[1]["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2"]
    assert all("the only tool is bash" in r["content"] for r in results)


# -- the script as a reader runs it -----------------------------------------------------------------
# The command-line behaviours run main(argv) in-process through conftest's run_main (same argv, env and
# cwd; no ~1 s SDK import each). test_readme.py runs `python s01_agent_loop.py` as a reader types it.


def test_no_key_replays_both_turns_with_their_token_figures(run_main):
    code, out = run_main("s01_agent_loop")
    assert code == 0, out
    assert "offline replay" in out and "turn 1" in out and "turn 2" in out
    assert "tokens in 114 / out 65" in out and "tokens in 671" in out


def test_help_says_what_the_step_teaches_and_its_fixture(run_main):
    code, out = run_main("s01_agent_loop", "--help")
    assert code == 0 and "The agent loop" in out and "s01_hello_agent.json" in out


@pytest.mark.parametrize(
    "content, expected",
    [
        ("{not json", "not a JSON fixture"),
        (json.dumps({"script": "s01_agent_loop"}), "missing field `scenario`"),
    ],
)
def test_a_bad_fixture_is_one_line_not_a_traceback(run_main, tmp_path, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out = run_main("s01_agent_loop", "--replay", str(bad))  # a traceback would fail the test here
    assert code == 1 and expected in out
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) == 1


def test_a_live_task_without_a_key_says_what_to_do(run_main):
    code, out = run_main("s01_agent_loop", "list the files")
    assert code == 1 and "ANTHROPIC_API_KEY" in out and "Traceback" not in out


# -- live mode, over real HTTP, against a stand-in for the API --------------------------------------


def live(run_main, standin: StandIn, *args) -> tuple[int, str]:
    """s01's main with a key, pointed at the stand-in: the SDK reads both at call time."""
    return run_main(
        "s01_agent_loop", *args, ANTHROPIC_API_KEY="sk-test-secret", ANTHROPIC_BASE_URL=standin.url
    )


def live_session():
    """A model that writes a file with bash, checks it, then stops."""
    return scripted(
        message(
            [tool_use("toolu_w", "bash", {"command": "printf live > out.txt && cat out.txt"})], "tool_use"
        ),
        lambda body: message([text("wrote " + body["messages"][-1]["content"][0]["content"].split()[0])]),
    )


def test_live_mode_runs_the_loop_over_http(run_main, tmp_path):
    with StandIn(live_session()) as api:
        code, out = live(run_main, api, "write live into out.txt", "--workspace", str(tmp_path))
    assert code == 0, out
    assert (tmp_path / "out.txt").read_text() == "live"
    assert len(api.requests) == 2 and not api.rule_problems
    headers = api.requests[0]["headers"]  # this SDK sends the key as a bearer token
    assert "sk-test-secret" in headers.get("x-api-key", "") + headers.get("authorization", "")
    assert api.requests[1]["body"]["messages"][2]["content"][0]["tool_use_id"] == "toolu_w"
    assert "wrote live" in out and "live:" in out
    assert "no permission gate: it runs every command the model asks for, unasked" in out


def test_record_then_replay_offline(run_main, tmp_path, monkeypatch):
    recording = tmp_path / "recorded.json"
    with StandIn(live_session()) as api:
        code, out = live(
            run_main, api, "--record", str(recording), "write live", "--workspace", str(tmp_path)
        )
    assert code == 0, out
    saved = recording.read_text()
    assert "sk-test-secret" not in saved and "authorization" not in saved.lower()
    fixture = fixtures.load_fixture(recording)
    assert fixture["provenance"] == "recorded" and fixture["recorded"]["sdk"].startswith("anthropic ")
    assert len(fixture["exchanges"]) == 2
    refused, out = run_main("s01_agent_loop", "--replay", str(recording))  # s01 has no gate: trusted only
    assert refused == 1 and "python -m workbook trust" in out
    monkeypatch.setattr(trust, "TRUST_FILE", tmp_path / "TRUSTED")
    fixture_commands.trust(recording)  # the reader read it (or recorded it), and says so
    again, out = run_main("s01_agent_loop", "--replay", str(recording))
    assert again == 0, out
    assert "wrote live" in out and "offline replay of" in out


def test_a_401_live_is_one_clear_line(run_main, tmp_path):
    from standin import api_error

    with StandIn(lambda body, n: api_error(401, "authentication_error", "invalid x-api-key")) as api:
        code, out = live(run_main, api, "anything", "--workspace", str(tmp_path))
    assert code == 1 and "invalid x-api-key" in out
    assert "Traceback" not in out


def test_ctrl_c_while_waiting_on_the_model_exits_cleanly(tmp_path):
    # A real SIGINT needs a process of its own: this one stays a subprocess.
    # The stand-in's reply would come long after any safety net: the Ctrl-C is sent once the request
    # has arrived (the event), and must end the wait.
    slow = Reply(body=message([text("too late")]), delay=600)
    with StandIn(lambda body, n: slow) as api:
        env = offline_env(ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=api.url)
        command = [sys.executable, "s01_agent_loop.py", "task", "--workspace", str(tmp_path)]
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120  # a safety net only
        while not api.requests:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in out
    assert "Traceback" not in out + err
