"""--record keeps a journal: one line per exchange as the run goes, made the fixture at its end; a
fixture stores each request as what is new since the one before, and loads as whole requests."""

import copy
import json
import signal
import subprocess
import sys
import threading

from workbook import cli
from workbook.errors import FixtureError
from workbook.replay import fixtures, journal, request_delta

import pytest
from conftest import ROOT, offline_env
from standin import Reply, StandIn, message, text, tool_use

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


# -- the journal, as the run goes ------------------------------------------------------------------


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


# -- a killed recording -----------------------------------------------------------------------------


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


def test_a_journal_torn_mid_line_loads_what_came_before(tmp_path):
    source = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    path = tmp_path / "rec.json.journal"
    header = {k: v for k, v in source.items() if k != "exchanges"}
    lines = [header, *request_delta.stored_exchanges(source["exchanges"])]
    text_ = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_text(text_ + '{"request_delta": {"messages_ke')  # a kill -9 mid-write
    assert fixtures.load_fixture(path)["exchanges"] == source["exchanges"]


# -- the delta form ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "fixtures").glob("*.json")))
def test_every_fixture_stored_as_deltas_loads_as_the_same_whole_requests(name, tmp_path):
    whole = fixtures.load_fixture(ROOT / "fixtures" / name)
    stored = whole | {"exchanges": request_delta.stored_exchanges(whole["exchanges"])}
    path = tmp_path / name
    path.write_text(json.dumps(stored))
    assert fixtures.load_fixture(path)["exchanges"] == whole["exchanges"]


def test_a_delta_says_what_changed_besides_the_messages():
    first = {
        "model": "m",
        "max_tokens": 10,
        "tool_choice": {"type": "auto"},
        "messages": [{"role": "user", "content": "a"}],
    }
    second = {"model": "m", "max_tokens": 64000, "messages": [{"role": "user", "content": "b"}]}
    delta = request_delta.delta_of(first, second)["request_delta"]
    assert delta == {
        "messages_kept": 0,
        "messages_added": second["messages"],
        "set": {"max_tokens": 64000},
        "unset": ["tool_choice"],
    }
    assert request_delta.applied(first, delta) == second


def delta_fixture() -> dict:
    whole = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    return whole | {"exchanges": request_delta.stored_exchanges(whole["exchanges"])}


def _first_as_delta(f):
    f["exchanges"][0] = {"request_delta": {"messages_kept": 0, "messages_added": []}} | {
        k: v for k, v in f["exchanges"][0].items() if k != "request"
    }


HOSTILE_DELTAS = {  # name -> (change to a delta-form fixture, words the one line must hold)
    "first_is_a_delta": (_first_as_delta, "needs a whole `request`"),
    "kept_too_many": (lambda d: d.update(messages_kept=10**9), "messages_kept"),
    "kept_negative": (lambda d: d.update(messages_kept=-1), "messages_kept"),
    "kept_true": (lambda d: d.update(messages_kept=True), "messages_kept"),
    "kept_missing": (lambda d: d.pop("messages_kept"), "messages_kept"),
    "kept_a_float": (lambda d: d.update(messages_kept=1.0), "messages_kept"),
    "added_not_a_list": (lambda d: d.update(messages_added="hi"), "messages_added"),
    "set_messages": (lambda d: d.update(set={"messages": []}), "`messages` changes only"),
    "set_not_an_object": (lambda d: d.update(set=[1]), ".set"),
    "unset_unknown": (lambda d: d.update(unset=["nothing_here"]), "nothing_here"),
    "unset_not_strings": (lambda d: d.update(unset=[{"a": 1}]), ".unset"),
    "unknown_field": (lambda d: d.update(replace_all=True), "replace_all"),
    "empty_messages": (lambda d: d.update(messages_kept=0, messages_added=[]), "messages"),
    "breaks_the_api_rules": (
        lambda d: d.update(
            messages_added=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]
        ),
        "tool_result",
    ),
    "set_bad_max_tokens": (lambda d: d.update(set={"max_tokens": "lots"}), "max_tokens"),
}


def hostile_delta(name: str) -> dict:
    fixture = delta_fixture()
    change, _ = HOSTILE_DELTAS[name]
    if change is _first_as_delta:
        change(fixture)
    else:
        change(fixture["exchanges"][1]["request_delta"])
    return fixture


@pytest.mark.parametrize("name", HOSTILE_DELTAS)
def test_a_delta_that_does_not_apply_is_one_line_naming_its_place(name, tmp_path, capsys):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(hostile_delta(name)))
    with pytest.raises(FixtureError, match=r"exchanges\[[01]\]") as caught:
        fixtures.load_fixture(path)
    assert HOSTILE_DELTAS[name][1] in str(caught.value) and "\n" not in str(caught.value)
    assert cli.main(["check", str(path)]) == 1
    said = capsys.readouterr()
    assert "Traceback" not in said.err and len(said.err.strip().splitlines()) == 1


def test_both_forms_in_one_exchange_are_refused():
    fixture = delta_fixture()
    fixture["exchanges"][1]["request"] = {"model": "m"}
    assert "holds both" in fixtures.fixture_problems(fixture)[0]


def test_a_few_bytes_of_deltas_cannot_rebuild_into_gigabytes():
    fixture = delta_fixture()
    many = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}] * 5_000
    fixture["exchanges"][0]["request"]["messages"] = many + [{"role": "user", "content": "z"}]
    again = fixture["exchanges"][1] | {
        "request_delta": {"messages_kept": len(many) + 1, "messages_added": []}
    }
    fixture["exchanges"] = fixture["exchanges"][:1] + [copy.copy(again) for _ in range(600)]
    assert "over 5,000,000 messages" in fixtures.fixture_problems(fixture)[0]


# -- size --------------------------------------------------------------------------------------------


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
