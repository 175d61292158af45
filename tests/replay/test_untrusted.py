"""Fixtures, flags and files come from strangers: what the workbook refuses, what it keeps to itself,
and what it writes only whole. Each test is one finding of the red-team pass (issue 15)."""

import contextlib
import copy
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from argparse import Namespace
from pathlib import Path

from workbook import cli, conversation, errors, files, launch, scratch, scrub, tracing
from workbook.replay import fixture_flags, fixtures, journal, trust

import pytest
from conftest import ROOT, offline_env
from standin import StandIn, message, scripted, text, tool_use

import s01_agent_loop as s01
import s02_tools as s02

HELLO = ROOT / "fixtures" / "s01_hello_agent.json"
BUDGET = ROOT / "fixtures" / "s05_max_steps.json"
STOP_HOOK = ROOT / "fixtures" / "s06_stop_hook.json"


def fixture(path=HELLO, **changes) -> dict:
    loaded = copy.deepcopy(fixtures.load_fixture(path))
    loaded.update(changes)
    return loaded


def refused(tmp_path, value, *words) -> str:
    """`value` written as a fixture is refused by the loader and by `check`, each in one line."""
    path = tmp_path / "f.json"
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    with pytest.raises(errors.FixtureError) as caught:
        fixtures.load_fixture(path)
    line = str(caught.value)
    assert "\n" not in line and str(path) in line
    for word in words:
        assert word in line, line
    return line


def check(*argv) -> tuple[int, str]:
    """`python -m workbook ARGV`, run in this process (as the command line runs it): exit code and
    everything printed. tests/workbook/test_package.py starts the real command line once."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = cli.main(list(argv))
    return code, printed.getvalue()


# -- fixtures are data -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, why",
    [
        (["--save", "/tmp/x"], "names a file"),
        (["--trace", "x.jsonl"], "names a file"),
        (["--record", "mine.json"], "names a file"),
        (["--workspace", "/"], "names a file"),
        (["--replay", "other.json"], "names a file"),
        (["--save=/tmp/x"], "names a file"),
        (["--sav", "/tmp/x"], "not a flag a fixture may set"),  # argparse would take it for --save
        (["--resume", "/etc/passwd"], "fixtures/conversations/"),
        (["--resume", "fixtures/conversations/../../README.md"], "fixtures/conversations/"),
        (["do something else"], "not a flag a fixture may set"),  # would become the task
        ([3], "list of strings"),
        ("--max-steps 3", "list of strings"),
        (["--max-steps", "0"], "at least 1"),
        (["--max-steps", "-1"], "may not start with '-'"),
        (["--max-cost", "nan"], "positive number"),
        (["--max-cost", "inf"], "positive number"),
        (["--permission", "all"], "ask, auto or deny"),
        (["--max-steps"], "needs a value"),
    ],
)
def test_fixture_args_set_behaviour_flags_only(tmp_path, args, why):
    refused(tmp_path, fixture(BUDGET, args=args), "`args`", why)


def test_a_resumed_conversation_must_be_one(tmp_path, monkeypatch):
    monkeypatch.setattr(fixture_flags, "CONVERSATIONS", tmp_path)
    monkeypatch.setattr(fixture_flags, "ROOT", tmp_path.parent)
    (tmp_path / "bad.json").write_text(json.dumps({"messages": "not a list"}))
    problems = fixture_flags.args_problems(["--resume", f"{tmp_path.name}/bad.json"], "s05_budget")
    assert problems and "not a saved conversation" in problems[0]


def test_fixture_args_are_checked_against_the_step_that_runs_them(tmp_path):
    refused(tmp_path, fixture(args=["--max-steps", "3"]), "not a flag of s01_agent_loop")


def test_the_projects_own_args_still_pass():
    assert fixture_flags.args_problems(["--max-steps", "3"], "s05_budget") == []
    assert (
        fixture_flags.args_problems(["--resume", "fixtures/conversations/s05_interrupted.json"], "s05_budget")
        == []
    )
    assert fixture_flags.args_problems(["--stop-hook", "sh check.sh", "--web-search"], "s06_recovery") == []


@pytest.mark.parametrize("workspace", ["/etc", "../../..", "hello/../../..", "~", "missing", 3, None])
def test_workspace_names_a_folder_under_fixtures_workspace(tmp_path, workspace):
    refused(tmp_path, fixture(workspace=workspace), "`workspace`")


def test_copy_workspace_refuses_a_path(tmp_path):
    with pytest.raises(errors.FixtureError, match="not a path"):
        scratch.copy_workspace("../../..")


@pytest.mark.parametrize("script", ["../../../tmp/evil", "s07_more", "replay", 3])
def test_script_names_one_of_the_steps(tmp_path, script):
    refused(tmp_path, fixture(script=script), "`script` must name one of the steps")


def edited(path_in_fixture: str, value):
    """The hello fixture with one value deep inside replaced (path like 'exchanges.0.request.model')."""
    changed = fixture()
    *parents, last = path_in_fixture.split(".")
    target = changed
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return changed


@pytest.mark.parametrize(
    "where, value, named",
    [
        ("task", None, "`task`"),
        ("task", 3, "`task`"),
        ("scenario", ["x"], "`scenario`"),
        ("read_latency", "slow", "read_latency"),
        ("match", "exactly", "`match`"),
        ("exchanges.0.request.messages", [1, 2], "messages.0: Input should be a valid dictionary"),
        (
            "exchanges.0.request.messages.0.content",
            [1],
            "messages.0.content.0: Input should be a valid dictionary",
        ),
        (
            "exchanges.0.request.messages.0.content",
            7,
            "messages.0.content: Input should be a valid string or a valid list",
        ),
        ("exchanges.1.request.messages.1.content.1.id", None, "content.1.id: Input should be a valid string"),
        (
            "exchanges.1.request.messages.2.content.0.content",
            [{"type": "text"}],
            "content.0.content.0.text: Field required",
        ),
        ("exchanges.0.request.max_tokens", True, ".max_tokens"),
        ("exchanges.0.request.tools", [3], ".tools"),
        ("exchanges.0.response.status", True, ".status"),
        ("exchanges.0.response.status", "200", ".status"),
        ("exchanges.0.response.headers", {"retry-after": 1}, ".headers"),
        (
            "exchanges.0.response",
            {"status": 200, "stream": [{"event": "x", "data": {"type": "x"}}]},
            ".stream",
        ),
    ],
)
def test_every_field_is_type_checked_at_every_depth(tmp_path, where, value, named):
    refused(tmp_path, edited(where, value), named)


STREAMED = ROOT / "fixtures" / "s04_repeated_call.json"  # its responses are SSE streams


@pytest.mark.parametrize(
    "where, value, named",
    [
        (
            "exchanges.0.response.stream.0.data.message.content",
            -1,
            "stream[0].data.message.content: Input should be a valid list",
        ),
        ("exchanges.0.response.stream.3.data.index", 7, "has not started"),
        ("exchanges.0.response.stream.3.event", "ping", "must equal data's `type`"),
    ],
)
def test_a_stream_is_checked_as_the_sdk_will_read_it(tmp_path, where, value, named):
    streamed = fixture(STREAMED)
    target = streamed
    *parents, last = where.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[last] = value
    refused(tmp_path, streamed, named)


def test_a_recorded_request_needs_model_and_max_tokens(tmp_path):
    hello = fixture()
    del hello["exchanges"][0]["request"]["model"]
    refused(tmp_path, hello, "request.model: Field required")


@pytest.mark.parametrize(
    "text_, named",
    [
        ("[" * 100_000, "nested"),
        ("[" * 80 + "1" + "]" * 80, "nested more than"),
        ('{"max_tokens": NaN}', "not a JSON fixture"),
        ('{"n": ' + "9" * 5000 + "}", "not a JSON fixture"),
    ],
    ids=["100000-deep", "80-deep", "NaN", "5000-digits"],
)
def test_json_no_checker_can_read_is_one_line(tmp_path, text_, named):
    refused(tmp_path, text_, named)


def test_check_on_a_folder_a_fifo_or_nothing_is_one_line_and_nonzero(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for argv, said in [
        (["check", str(tmp_path)], "is a folder"),
        (["check", str(fifo)], "not a regular file"),
        (["check"], "needs one or more fixture files"),
        (["rebuild"], "needs one or more fixture files"),
        (["trust"], "needs one or more fixture files"),
    ]:
        code, out = check(*argv)
        assert code != 0 and said in out and "Traceback" not in out, (argv, out)
        assert len(out.strip().splitlines()) == 1, out


def test_rebuild_never_runs_a_file_the_fixture_names(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    hostile = fixture(provenance="scripted", script=str(evil.with_suffix("")))
    (tmp_path / "f.json").write_text(json.dumps(hostile))
    code, out = check("rebuild", str(tmp_path / "f.json"))
    assert code == 1 and "`script` must name one of the steps" in out
    assert not marker.exists()


def test_rebuild_refuses_a_fixture_not_on_the_trust_list(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(fixture(description="edited by someone")))
    code, out = check("rebuild", str(tmp_path / "f.json"))
    assert code == 1 and "python -m workbook trust" in out and "Traceback" not in out


def test_rebuild_of_a_trusted_fixture_stores_the_same_requests_and_keeps_it_trusted(tmp_path, monkeypatch):
    trust_file = tmp_path / "TRUSTED"
    trust_file.write_bytes(trust.TRUST_FILE.read_bytes())
    monkeypatch.setattr(trust, "TRUST_FILE", trust_file)
    copy_ = tmp_path / "hello.json"
    copy_.write_bytes(HELLO.read_bytes())
    assert cli.main(["rebuild", str(copy_)]) == 0
    assert copy_.read_bytes() == HELLO.read_bytes()  # the script sends what was recorded
    assert trust.is_trusted(copy_.read_bytes()) and str(copy_) in trust_file.read_text()


# -- trust -----------------------------------------------------------------------------------------


def test_every_fixture_in_the_repo_is_trusted_as_it_is_now():
    listed = trust.trusted_digests()
    for path in sorted((ROOT / "fixtures").glob("*.json")):
        digest = trust.fixture_digest(path.read_bytes())
        assert digest in listed, (
            f"{path.name} changed or is new: `python -m workbook trust fixtures/{path.name}`"
        )


def start(*argv, script="s02_tools", **env):
    args = Namespace(
        task=None,
        replay=None,
        record=None,
        force=False,
        model=None,
        workspace=None,
        default_fixture="fixtures/s01_hello_agent.json",
    )
    it = iter(argv)
    for flag in it:
        if flag.startswith("--"):
            setattr(args, flag[2:], True if flag == "--force" else next(it))
        else:
            args.task = flag
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ANTHROPIC_API_KEY", raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        return launch.start(args, "claude-sonnet-5", script)


def test_a_copy_of_a_project_fixture_is_trusted_and_an_edited_one_is_not(tmp_path):
    same, changed = tmp_path / "same.json", tmp_path / "changed.json"
    same.write_bytes(HELLO.read_bytes())
    changed.write_text(json.dumps(fixture(description="shared by a stranger")))
    run = start("--replay", str(same))
    run.finish()
    assert run.trusted
    run = start("--replay", str(changed))
    run.finish()
    assert not run.trusted and "not on the trust list" in run.banner


def test_trust_adds_a_fixture_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(trust, "TRUST_FILE", tmp_path / "TRUSTED")
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(fixture(description="written by me")))
    assert cli.main(["trust", str(mine)]) == 0
    assert trust.is_trusted(mine.read_bytes())
    mine.write_text(json.dumps(fixture(description="changed since")))
    assert not trust.is_trusted(mine.read_bytes())


def test_s01_has_no_gate_so_it_replays_only_trusted_commands(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(fixture(description="shared by a stranger")))
    with pytest.raises(errors.FixtureError, match="no permission gate.*python -m workbook trust"):
        start("--replay", str(tmp_path / "f.json"), script="s01_agent_loop")
    start("--replay", str(HELLO), script="s01_agent_loop").finish()  # the project's own: trusted


# -- secrets stay home -----------------------------------------------------------------------------


def test_tools_get_no_anthropic_variable(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-1")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-secret-2")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://u:p@example.com")
    monkeypatch.setenv("HOME_FOR_TOOLS", "not on the allowlist")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = scrub.tool_environment()
    assert not [name for name in env if name.startswith("ANTHROPIC_")] and "HOME_FOR_TOOLS" not in env
    assert env["LANG"] == "C.UTF-8" and env.get("PATH") == os.environ.get("PATH")


def test_scrub_removes_every_credential_at_any_depth(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-1234")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://alice:hunter2hunter2@proxy.example/v1?token=abc")
    dirty = {"a": ["env: ANTHROPIC_API_KEY=sk-ant-secret-1234", {"sk-ant-secret-1234": 1}], "n": 3}
    clean = json.dumps(scrub.scrub_secrets(dirty))
    assert "sk-ant-secret-1234" not in clean and '"n": 3' in clean
    assert "hunter2hunter2" not in scrub.scrub_secrets("see https://alice:hunter2hunter2@proxy.example/")


def test_a_plain_endpoint_and_a_bare_user_are_not_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
    kept = {"endpoint": "https://api.anthropic.com", "remote": "ssh://git@github.com/o/r"}
    assert scrub.scrub_secrets(kept) == kept


def test_an_endpoint_is_kept_without_userinfo_or_query():
    assert (
        scrub.public_endpoint("https://u:pw@host.example:8443/v1?key=s#f") == "https://host.example:8443/v1"
    )
    assert scrub.public_endpoint(None) == "https://api.anthropic.com"


def env_dumping_model():
    """A model that asks bash for the environment, then stops."""
    return scripted(
        message([tool_use("toolu_env", "bash", {"command": "env; echo KEY=$ANTHROPIC_API_KEY"})], "tool_use"),
        message([text("done")]),
    )


def test_a_recording_keeps_no_key_and_no_password(run_main, tmp_path):
    key, password = "sk-ant-live-key-5678", "pa55word-in-url"
    recording = tmp_path / "rec.json"
    with StandIn(env_dumping_model()) as api:
        url = api.url.replace("http://", f"http://user:{password}@") + "?token=query-secret"
        argv = ["--record", str(recording), "show env", "--workspace", str(tmp_path)]
        code, out = run_main("s01_agent_loop", *argv, ANTHROPIC_API_KEY=key, ANTHROPIC_BASE_URL=url)
    assert code == 0, out
    saved = recording.read_text()
    assert key not in saved
    assert password not in saved and "query-secret" not in saved
    assert fixtures.load_fixture(recording)["recorded"]["endpoint"] == api.url


# -- atomic saves ----------------------------------------------------------------------------------


WRITER = """
import sys
from workbook import files
path = sys.argv[1]
for n in range(10**6):
    files.write_atomic(path, (b"A" if n % 2 else b"B") * 30_000_000)
"""


def small_program(code: str, *args: str) -> list[str]:
    """The command that runs `code` in a Python of its own."""
    return [sys.executable, "-c", code, *args]


def wait_for_saves(proc: subprocess.Popen, path: Path, saves: int, timeout: float = 120) -> None:
    """Until `path` has been replaced `saves` times (each atomic save renames a new file over it, with a
    new inode), or fail: the event that says the saver is saving again, not a guess of when it is."""
    seen, deadline = path.stat().st_ino, time.monotonic() + timeout  # a safety net only
    while saves:
        assert proc.poll() is None, "the saver ended"
        assert time.monotonic() < deadline, f"{path.name} was not saved {saves} more time(s)"
        inode = path.stat().st_ino
        saves -= inode != seen
        seen = inode
        time.sleep(0.005)


def test_kill_9_during_a_save_leaves_a_whole_file(tmp_path):
    target = tmp_path / "conversation.json"
    target.write_bytes(b"A" * 30_000_000)
    proc = subprocess.Popen(small_program(WRITER, str(target)), cwd=ROOT, env=offline_env())
    wait_for_saves(proc, target, 1)  # killed while it writes the next one
    assert proc.poll() is None, "the writer was still writing when killed"
    proc.kill()
    proc.wait()
    data = target.read_bytes()
    assert len(data) == 30_000_000 and data.count(data[:1]) == len(data)


def test_write_atomic_refuses_a_folder(tmp_path):
    with pytest.raises(errors.WorkbookError, match="is a folder"):
        files.write_atomic(tmp_path, "x")


def test_kill_9_during_a_recording_keeps_the_exchanges_so_far(tmp_path):
    from standin import Reply

    first = message([tool_use("toolu_1", "bash", {"command": "echo hi"})], "tool_use")
    replies = [first, Reply(body=message([text("too late")]), delay=30)]
    recording = tmp_path / "rec.json"
    with StandIn(lambda body, n: replies[n]) as api:
        env = offline_env(ANTHROPIC_API_KEY="sk-test-secret-9", ANTHROPIC_BASE_URL=api.url)
        argv = ["--record", str(recording), "hi", "--workspace", str(tmp_path)]
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc = subprocess.Popen([sys.executable, "s01_agent_loop.py", *argv], cwd=ROOT, env=env, **quiet)
        deadline = time.time() + 30
        while len(api.requests) < 2 and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not recording.exists()  # the run never ended: its exchanges are in its journal, which loads
    assert len(fixtures.load_fixture(journal.journal_of(recording))["exchanges"]) == 1


def test_record_refuses_to_overwrite_without_force(tmp_path):
    existing = tmp_path / "mine.json"
    existing.write_text("keep me")
    with pytest.raises(errors.WorkbookError, match="--force"):
        start("--record", str(existing), "a task", ANTHROPIC_API_KEY="sk-x")
    assert existing.read_text() == "keep me"


# -- conflicting flags, and no task at all ---------------------------------------------------------


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--replay", str(HELLO), "a task"], "--replay runs the fixture's own task"),
        (["--replay", str(HELLO), "--record", "RECORDING", "t"], "give one of them"),
        (["--record", "RECORDING"], "give a task too"),
        (["--force"], "--force only applies to --record"),
        (["--workspace", "."], "--workspace is for a live run"),
    ],
)
def test_conflicting_flags_are_an_error(run_main, tmp_path, argv, said):
    recording = tmp_path / "recording.json"
    argv = [str(recording) if arg == "RECORDING" else arg for arg in argv]
    code, out = run_main("s01_agent_loop", *argv, ANTHROPIC_API_KEY="sk-test-secret")
    assert code == 1 and said in out and len(out.strip().splitlines()) == 1, out
    assert not recording.exists()


@pytest.mark.parametrize("argv", [["--bogus"], ["--rec", "RECORDING", "t"], ["a", "b"]])
def test_a_bad_flag_is_one_line(run_main, tmp_path, argv):
    argv = [str(tmp_path / "recording.json") if arg == "RECORDING" else arg for arg in argv]
    code, out = run_main("s01_agent_loop", *argv)
    assert code == 2 and "error:" in out and len(out.strip().splitlines()) == 1, out


def test_with_a_key_and_no_task_the_default_fixture_replays(run_main):
    code, out = run_main("s01_agent_loop", ANTHROPIC_API_KEY="sk-test-secret")
    assert code == 0, out
    banner = " ".join(out.split("\ntask:")[0].split())  # the banner's lines, before the task
    assert "offline replay of fixtures/s01_hello_agent.json" in banner and "to run live" in banner


# -- temp folders ----------------------------------------------------------------------------------


def test_replays_leave_no_workspace_behind(run_main):
    root = scratch.scratch_root()
    before = set(root.glob("*/workspace"))  # copies other tests in this process still hold
    for _ in range(3):
        assert run_main("s01_agent_loop")[0] == 0
    assert set(root.glob("*/workspace")) <= before


def made_by_a_process(code: str) -> Path:
    """The workspace path a separate Python process printed, after it has ended."""
    return Path(subprocess.check_output(small_program(code), cwd=ROOT, env=offline_env(), text=True).strip())


def test_a_killed_runs_copy_is_swept_by_the_next_run(tmp_path):
    # os._exit: no clean-up at exit, as after a kill
    make = (
        "import os; from workbook import scratch\n"
        "print(scratch.copy_workspace('hello'), flush=True); os._exit(0)"
    )
    left = made_by_a_process(make)
    assert left.name == "workspace" and left.is_dir()
    scratch.release(scratch.copy_workspace("hello").parent)
    assert not left.exists()


def test_a_process_removes_its_copies_when_it_exits():
    make = "from workbook import scratch; print(scratch.copy_workspace('hello'))"
    left = made_by_a_process(make)
    assert not left.exists() and not left.parent.exists()


# -- Ctrl-C ---------------------------------------------------------------------------------------


def test_ctrl_c_while_replay_py_starts_is_not_a_traceback():
    # While the SDK loads: on first use, once `check` reads the fixture (workbook/lazy.py). The first
    # `-X importtime` line of its types, not a sleep, says it has begun.
    command = [sys.executable, "-X", "importtime", "-m", "workbook", "check", str(HELLO)]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.Popen(command, cwd=ROOT, env=offline_env(), **pipes)
    for line in proc.stderr:
        if line.rsplit("|", 1)[-1].strip().startswith("anthropic.types"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in out + err and "interrupted" in err


# -- the steps: bash's environment, the gate, file tools, limits, saves ------------------------------


def bash_of_s02(command, workspace):
    return s02.bash(workspace, command)


@pytest.mark.parametrize("run_bash", [s01.run_bash, bash_of_s02], ids=["s01", "s02-s06"])
def test_bash_runs_without_the_key(run_bash, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-in-a-tool-1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://u:pw-never-in-a-tool@example.com")
    output = run_bash("env; echo key=$ANTHROPIC_API_KEY", tmp_path)
    assert "never-in-a-tool" not in output and "ANTHROPIC_" not in output and "PATH=" in output


def call(name: str, tool_input: dict, workspace: Path, permission: str = "auto"):
    block = anthropic_block(name, tool_input)
    return s02.execute(block, workspace, permission)


def anthropic_block(name: str, tool_input: dict):
    import anthropic

    return anthropic.types.ToolUseBlock(type="tool_use", id="toolu_t", name=name, input=tool_input)


@pytest.fixture
def ws(tmp_path):
    """A workspace beside a folder the model must not touch."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("keep")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    return workspace.resolve()


ESCAPES = [  # what the red-team pass ran under the old denylist, and more of the same
    "rm --recursive --force ../victim",
    "echo x > ../victim/keep.txt",
    "find .. -delete",
    "ls; rm -r ../victim",
    "ls && rm -r ../victim",
    "ls\nrm -r ../victim",
    "ls & rm -r ../victim",
    "cat ../victim/keep.txt",
    "cat /etc/hostname",
    "echo $(rm -r ../victim)",
    "echo `rm -r ../victim`",
    "cat < ../victim/keep.txt",
    "python3 -c 'import shutil; shutil.rmtree(\"../victim\")'",
]


@pytest.mark.parametrize("command", ESCAPES)
def test_auto_runs_only_read_only_commands_and_says_how_to_allow_the_rest(ws, command):
    output, is_error = call("bash", {"command": command}, ws)  # pytest's stdin is no terminal
    assert is_error and output.startswith("not run:")
    assert "--permission ask" in output and "--permission all" in output
    assert (ws.parent / "victim" / "keep.txt").read_text() == "keep"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_asks_at_a_terminal_for_what_it_will_not_run_alone(ws, monkeypatch):
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    output, is_error = call("bash", {"command": "touch made"}, ws)
    assert not is_error and (ws / "made").exists()
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    output, is_error = call("bash", {"command": "touch refused"}, ws)
    assert is_error and "said no" in output and not (ws / "refused").exists()


def test_permission_all_runs_every_command_unasked(ws):
    output, is_error = call("bash", {"command": "touch made && ls"}, ws, "all")
    assert not is_error and "made" in output


def test_an_edited_copy_of_a_trusted_fixture_meets_the_gate(run_main, tmp_path, monkeypatch):
    edited = json.loads((ROOT / "fixtures" / "s02_fix_divide_by_zero.json").read_text())
    (tmp_path / "f.json").write_text(json.dumps(edited | {"description": "edited"}))
    code, out = run_main("s02_tools", "--replay", str(tmp_path / "f.json"))
    assert code == 1 and "not on the trust list" in out and "not run:" in out  # the diff shows why
    code, out = run_main("s02_tools")  # the project's own, as it is: its commands run unasked
    assert code == 0, out


def test_an_untrusted_stop_hook_meets_the_gate(run_main, tmp_path):
    hooked = fixture(STOP_HOOK, args=["--stop-hook", "touch pwned"])
    (tmp_path / "f.json").write_text(json.dumps(hooked))
    code, out = run_main("s06_recovery", "--replay", str(tmp_path / "f.json"))
    assert code == 1 and "the fixture's --stop-hook 'touch pwned': not run:" in out
    after_banner = out.split("\ntask:", 1)[1]
    assert len(after_banner.strip().splitlines()) == 2  # the task, then the one line


def test_read_file_refuses_a_fifo_instead_of_hanging(ws):
    os.mkfifo(ws / "pipe")
    done = []
    worker = threading.Thread(
        target=lambda: done.append(call("read_file", {"path": "pipe"}, ws)), daemon=True
    )
    worker.start()
    worker.join(timeout=120)  # a safety net: a hang is the failure
    assert done, "read_file hung on a FIFO"
    output, is_error = done[0]
    assert is_error and "not a regular file" in output


def test_read_file_reads_only_what_the_result_carries(ws):
    with open(ws / "huge.log", "wb") as file:  # sparse: 300 MB that take no disk
        file.write(b"first line\n")
        file.truncate(300_000_000)
        file.seek(-10, os.SEEK_END)
        file.write(b"last line\n")
    tracemalloc.start()
    output, is_error = call("read_file", {"path": "huge.log"}, ws)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not is_error and output.startswith("first line") and output.endswith("last line\n")
    assert "bytes in the middle not read" in output and peak < 5_000_000


def test_writing_or_editing_something_that_is_not_a_file_is_refused(ws):
    os.mkfifo(ws / "pipe")
    assert call("write_file", {"path": "pipe", "content": "x"}, ws)[1] is True
    assert call("edit_file", {"path": "pipe", "old_text": "a", "new_text": "b"}, ws)[1] is True


@pytest.mark.parametrize("step", ["s05_budget", "s06_recovery"])
@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-cost", "nan"),
        ("--max-cost", "inf"),
        ("--max-cost", "-1"),
        ("--max-steps", "0"),
        ("--max-steps", "-1"),
    ],
)
def test_nonsense_limits_are_refused_by_the_parser_in_one_line(run_main, step, flag, value):
    code, out = run_main(step, flag, value)
    assert code == 2 and flag in out and len(out.strip().splitlines()) == 1, out


def test_a_folder_or_a_deep_file_as_resume_is_one_line(run_main, tmp_path):
    (tmp_path / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    for bad in (tmp_path, tmp_path / "deep.json"):
        code, out = run_main("s05_budget", "--resume", str(bad))
        assert code == 1 and "Traceback" not in out and str(bad) in out.splitlines()[-1], out


SAVER = """
import sys
from workbook import conversation
messages = [{"role": "user", "content": "x" * 300_000} for _ in range(10)]
while True:
    conversation.save_conversation(messages, __import__("pathlib").Path(sys.argv[1]))
"""


@pytest.mark.parametrize("saves", [1, 2, 3])
def test_kill_9_during_a_conversation_save_leaves_it_whole(tmp_path, saves):
    saved = tmp_path / "conversation.json"
    saved.write_text(json.dumps([{"role": "user", "content": "the old one"}]))
    proc = subprocess.Popen(small_program(SAVER, str(saved)), cwd=ROOT, env=offline_env())
    wait_for_saves(proc, saved, saves)  # then killed while it writes the next one
    assert proc.poll() is None
    proc.kill()
    proc.wait()
    assert isinstance(json.loads(saved.read_text()), list)  # the old list or the new one, never a torn one


def test_a_save_replaces_the_file_instead_of_rewriting_it_in_place(tmp_path):
    saved = tmp_path / "conversation.json"
    conversation.save_conversation([{"role": "user", "content": "first"}], saved)
    before = saved.stat().st_ino
    conversation.save_conversation([{"role": "user", "content": "second"}], saved)
    assert saved.stat().st_ino != before  # a new file renamed over the old: never truncated, then written
    assert [p.name for p in tmp_path.iterdir()] == ["conversation.json"]  # no temp file left behind


def test_saves_and_logs_never_hold_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-leaked-in-a-reply-7")
    said = [{"role": "user", "content": "my key is sk-ant-leaked-in-a-reply-7"}]
    conversation.save_conversation(said, tmp_path / "conversation.json")
    tracing.append_line(tmp_path / "trace.jsonl", {"event": "x", "said": said})
    for name in ("conversation.json", "trace.jsonl"):
        assert "sk-ant-leaked-in-a-reply-7" not in (tmp_path / name).read_text()


CTRL_C_WHEN = {  # the moment to press Ctrl-C: the first `-X importtime` line that says it has come
    "imports": lambda module: module == "workbook",  # the Ctrl-C hook is set, the step's imports go on
    "SDK loads": lambda module: module.startswith("anthropic.types"),  # on first use, in main (lazy.py)
}


@pytest.mark.parametrize("when", CTRL_C_WHEN)
@pytest.mark.parametrize("step", ["s02_tools", "s05_budget", "s06_recovery"])
def test_ctrl_c_while_a_step_starts_is_not_a_traceback(step, when):
    # -X importtime reports each module as its import ends: once the workbook package is in, its Ctrl-C
    # hook is set; the SDK loads later, when main first uses it (workbook/lazy.py), and its types are
    # among the first modules it brings. That line, not a sleep, says when to press Ctrl-C.
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    command = [sys.executable, "-X", "importtime", f"{step}.py"]
    proc = subprocess.Popen(command, cwd=ROOT, env=offline_env(), **pipes)
    said = []
    for line in proc.stderr:
        said.append(line)
        if CTRL_C_WHEN[when](line.rsplit("|", 1)[-1].strip()):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = "".join(said) + err
    assert proc.returncode == 130 and "Traceback" not in out + err and "interrupted" in out + err
