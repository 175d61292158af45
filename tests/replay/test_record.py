"""--record: the real API through a transport that hands each completed exchange to the run's journal,
which becomes the fixture at the end; no key and no password is ever kept."""

import json
import signal
import subprocess
import sys
import threading
import time

from workbook import cli
from workbook.replay import fixtures, journal

from conftest import ROOT, offline_env
from standin import Reply, StandIn, message, scripted, text, tool_use

KEY, PASSWORD = "sk-ant-journal-key-4242", "pa55word-journal"


def bash_turns(turns: int, command: str = "true {n}"):
    """A brain: `turns - 1` turns of one bash call each (inputs differ), then a last text answer."""

    def brain(body, n):
        if n < turns - 1:
            return message([tool_use(f"toolu_{n}", "bash", {"command": command.format(n=n)})], "tool_use")
        return message([text(f"done after {n} calls")])

    return brain


def record(run_main, api, path, tmp_path, *flags, **env):
    env = {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.url} | env
    argv = ["--record", str(path), "run it", "--workspace", str(tmp_path), *flags]
    return run_main("s01_agent_loop", *argv, **env)


def lines_of(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_each_exchange_is_a_line_of_the_journal_as_it_completes(run_main, tmp_path):
    recording = tmp_path / "rec.json"
    seen = []  # the journal's line count when each request arrives: header + the exchanges before it
    inner = bash_turns(4)

    def brain(body, n):
        seen.append(len(lines_of(journal.journal_of(recording))))
        return inner(body, n)

    with StandIn(brain) as api:
        code, out = record(run_main, api, recording, tmp_path)
    assert code == 0, out
    assert seen == [0, 2, 3, 4]  # no file before the first exchange; then header + one line each
    assert not journal.journal_of(recording).exists()  # made the fixture at the end, then removed
    loaded = fixtures.load_fixture(recording)
    assert [e["request"] for e in loaded["exchanges"]] == [r["body"] for r in api.requests]
    stored = json.loads(recording.read_text())["exchanges"]
    assert "request" in stored[0] and all("request_delta" in e for e in stored[1:])


def test_the_journal_holds_no_secret_at_any_moment(run_main, tmp_path):
    recording = tmp_path / "rec.json"
    leaks = []

    def brain(body, n):
        written = journal.journal_of(recording)
        held = written.read_text() if written.exists() else ""
        leaks.extend(secret for secret in (KEY, PASSWORD) if secret in held)
        if n == 0:  # the model echoes the key, and asks bash to print it
            return message(
                [text(f"key {KEY}"), tool_use("toolu_k", "bash", {"command": f"echo {KEY}"})], "tool_use"
            )
        if n == 1:
            return message([tool_use("toolu_j", "bash", {"command": "true"})], "tool_use")
        return message([text("done")])

    with StandIn(brain) as api:
        url = api.url.replace("http://", f"http://user:{PASSWORD}@")
        code, out = record(run_main, api, recording, tmp_path, ANTHROPIC_BASE_URL=url)
    assert code == 0, out
    assert len(api.requests) == 3 and not leaks  # read at requests 2 and 3, when it held lines
    assert KEY not in recording.read_text() and PASSWORD not in recording.read_text()


def test_a_killed_recording_loads_from_its_journal_and_check_takes_it(run_main, tmp_path, capsys):
    recording, third = tmp_path / "rec.json", threading.Event()
    inner = bash_turns(10)

    def brain(body, n):
        if n == 2:  # exchanges 1 and 2 are complete and journaled before request 3 is sent
            third.set()
            return Reply(body=message([text("too late")]), delay=60)
        return inner(body, n)

    with StandIn(brain) as api:
        env = offline_env(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=api.url)
        argv = ["--record", str(recording), "run it", "--workspace", str(tmp_path), "--permission", "all"]
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc = subprocess.Popen([sys.executable, "s06_recovery.py", *argv], cwd=ROOT, env=env, **quiet)
        try:
            assert third.wait(timeout=120), "the recording never sent its third request"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        sent = [r["body"] for r in api.requests[:2]]
    kept = journal.journal_of(recording)
    assert not recording.exists() and kept.exists()
    loaded = fixtures.load_fixture(kept)
    assert [e["request"] for e in loaded["exchanges"]] == sent  # whole requests, as the stand-in saw them
    assert loaded["script"] == "s06_recovery" and loaded["provenance"] == "recorded"
    assert KEY not in kept.read_text()
    assert cli.main(["check", str(kept)]) == 0
    assert f"ok  {kept}" in capsys.readouterr().out
    with StandIn(bash_turns(2)) as api:  # recording to the same name again: the journal is not lost
        code, out = record(run_main, api, recording, tmp_path)
    assert code == 1 and "--force" in out and len(out.strip().splitlines()) == 1
    assert not api.requests and kept.exists()


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


def recorded_size(run_main, tmp_path, turns: int) -> int:
    recording = tmp_path / f"rec_{turns}.json"
    with StandIn(bash_turns(turns, "seq {n} $(({n} + 150))")) as api:  # ~0.9 kB of output a turn
        code, out = record(run_main, api, recording, tmp_path)
    assert code == 0 and len(api.requests) == turns, out
    return recording.stat().st_size


def test_a_recording_grows_with_its_turns_not_their_square(run_main, tmp_path):
    small, large = recorded_size(run_main, tmp_path, 10), recorded_size(run_main, tmp_path, 100)
    # whole requests: about (100/10)^2 = 100x; as deltas, linear plus the fixed fields (~10x)
    assert large / small < 15, (small, large)
