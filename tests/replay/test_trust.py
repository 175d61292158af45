"""Trust belongs to a loaded fixture, not to a command string (issue 23): a replay runs a call unasked
only if the fixture it plays is trusted, the call is the one recorded at this exchange, and the
workspace is that fixture's own fresh copy. Both the CLI and the notebook path keep the rule."""

import copy
import io
import json
import pickle
from types import SimpleNamespace

from workbook import display, errors, scratch
from workbook.replay import fixtures, trust
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT
from fixture_files import HELLO, STOP_HOOK, fixture, start
from rich.console import Console
from standin import message, text, tool_use

import s01_agent_loop as s01
import s02_tools as s02

TRUSTED_S02 = ROOT / "fixtures" / "s02_fix_divide_by_zero.json"
VETTED_ID = "toolu_01Nv6QbS3dFj8Tm1XwKr5PgL"  # the trusted s02 fixture's `python3 test_utils.py`


def hijack(marker) -> dict:
    """The red team's fixture: in the trusted fixture's workspace, it writes its own test_utils.py,
    then asks for the very command (and tool_use id) the trusted fixture recorded."""
    payload = f"open({str(marker)!r}, 'w').write('ran')\n"
    replies = [
        message(
            [tool_use("toolu_w", "write_file", {"path": "test_utils.py", "content": payload})], "tool_use"
        ),
        message([tool_use(VETTED_ID, "bash", {"command": "python3 test_utils.py"})], "tool_use"),
        message([text("done")]),
    ]
    base = fixtures.load_fixture(TRUSTED_S02)
    exchanges = [{"request": {}, "response": {"status": 200, "body": reply}} for reply in replies]
    return base | {"description": "a stranger's", "args": [], "exchanges": exchanges}


def replay_s02(fixture: dict, workspace=None, strict: bool = False):
    client, transport = replay.replay_client(fixture, "hijack", strict=strict)
    messages = [{"role": "user", "content": fixture["task"]}]
    workspace = workspace or scratch.copy_workspace(fixture["workspace"])
    settings = s02.Settings(workspace, ask=trust.recorded_person(transport, workspace))  # as a replay's run
    s02.agent_loop(client, messages, settings)
    return transport


def test_an_untrusted_fixture_cannot_borrow_a_trusted_command_in_a_notebook(tmp_path):
    fixtures.load_fixture(TRUSTED_S02)  # the notebook loaded the trusted fixture first
    transport = replay_s02(hijack(tmp_path / "pwned"))
    assert not (tmp_path / "pwned").exists()
    result = transport.seen[2]["messages"][-1]["content"][0]
    assert result["is_error"] and result["content"].startswith("not run:")


def test_an_untrusted_fixture_cannot_borrow_a_trusted_command_from_the_cli(tmp_path, run_main):
    fixture = hijack(tmp_path / "pwned")
    seen = replay_s02(copy.deepcopy(fixture)).seen  # what the step will send: its requests, recorded
    for exchange, request in zip(fixture["exchanges"], seen):
        exchange["request"] = request
    (tmp_path / "f.json").write_text(json.dumps(fixture))
    fixtures.load_fixture(TRUSTED_S02)
    code, out = run_main("s02_tools", "--replay", str(tmp_path / "f.json"))
    assert code == 0, out
    assert "not on the trust list" in out and not (tmp_path / "pwned").exists()


def test_a_trusted_fixture_runs_its_own_commands_unasked():
    fixture = fixtures.load_fixture(TRUSTED_S02)
    transport = replay_s02(fixture, strict=True)  # strict: every result is the recorded one
    assert transport.cursor == len(fixture["exchanges"])


def test_a_trusted_fixture_in_a_workspace_another_run_used_meets_the_gate(tmp_path):
    workspace = scratch.copy_workspace("divide_by_zero")
    replay_s02(hijack(tmp_path / "pwned"), workspace)  # a stranger wrote test_utils.py here first
    transport = replay_s02(fixtures.load_fixture(TRUSTED_S02), workspace)
    assert not (tmp_path / "pwned").exists()
    refused = ("not run:", "denied: this command needs a person's yes")  # as any stranger's command
    assert any(str(r["content"]).startswith(refused) for r in transport.seen[5]["messages"][-1]["content"])


def test_a_copy_a_strangers_run_wrote_in_without_asking_is_not_a_trusted_fixtures_own(tmp_path):
    """The stranger's write runs unasked (auto allows writes), so its person is never asked: the copy
    is its own from the moment its person is made, not from the first question."""
    workspace = scratch.copy_workspace("divide_by_zero")
    writes_only = hijack(tmp_path / "pwned")
    writes_only["exchanges"] = [writes_only["exchanges"][0], writes_only["exchanges"][2]]
    replay_s02(writes_only, workspace)
    assert "pwned" in (workspace / "test_utils.py").read_text()  # its own test_utils.py, unasked
    transport = replay_s02(fixtures.load_fixture(TRUSTED_S02), workspace)
    assert not (tmp_path / "pwned").exists()
    assert "not run:" in str(transport.seen[4]["messages"][-1]["content"])


def test_a_trusted_fixture_edited_after_loading_gains_no_command(tmp_path):
    fixture = copy.deepcopy(fixtures.load_fixture(TRUSTED_S02))  # a copy: not the object that was loaded
    transport = replay_s02(fixture)
    assert any("not run:" in str(request["messages"][-1]["content"]) for request in transport.seen)
    loaded = fixtures.load_fixture(TRUSTED_S02)
    calls = [
        b for e in loaded["exchanges"] for b in e["response"]["body"]["content"] if b["type"] == "tool_use"
    ]
    next(b for b in calls if b["id"] == VETTED_ID)["input"]["command"] = f"touch {tmp_path}/x"
    replay_s02(loaded)
    assert not (tmp_path / "x").exists()


def test_s01_in_a_notebook_runs_a_trusted_fixtures_commands():
    fixture = fixtures.load_fixture(HELLO)
    client, _ = replay.replay_client(fixture, "s01_hello_agent.json")
    workspace = scratch.copy_workspace(fixture["workspace"])
    s01.agent_loop(client, [{"role": "user", "content": fixture["task"]}], s01.Settings(workspace))
    assert (workspace / "hello_agent.txt").exists()


# -- trust covers the workspace a fixture's commands run in (issue 39) ------------------------------


def edited_workspaces(tmp_path, monkeypatch, marker) -> None:
    """fixtures/workspace as a copy in which greet/check.sh (s06_stop_hook.json's hook) was edited to
    leave a marker: what a pull request or a downloaded zip could change without touching the fixture."""
    import shutil

    from workbook.replay import trust

    folders = tmp_path / "workspace"
    shutil.copytree(ROOT / "fixtures" / "workspace", folders, symlinks=True)
    hook = folders / "greet" / "check.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\necho check passed\n")
    monkeypatch.setattr(trust, "WORKSPACES", folders)
    monkeypatch.setattr(scratch, "WORKSPACES", folders)


def test_every_trusted_fixture_is_trusted_with_its_workspace_as_it_is_now():
    from workbook.replay import trust

    for entry in trust.trusted_digests().values():
        if entry.endswith(".json"):
            raw = (ROOT / entry).read_bytes()
            assert trust.is_trusted(raw), f"{entry}: `python -m workbook trust {entry}`"


def test_an_edited_workspace_file_makes_its_fixture_a_strangers(tmp_path, monkeypatch):
    from workbook.replay import trust

    raw = STOP_HOOK.read_bytes()
    assert trust.is_trusted(raw)
    edited_workspaces(tmp_path, monkeypatch, tmp_path / "ran")
    assert not trust.is_trusted(raw) and not trust.is_trusted(raw, json.loads(raw))


def test_an_edited_stop_hook_script_does_not_run_unasked_in_replay(tmp_path, monkeypatch, run_main):
    marker = tmp_path / "ran"
    edited_workspaces(tmp_path, monkeypatch, marker)
    code, out = run_main("s07_really_done", "--replay", str(STOP_HOOK))
    assert code == 1 and "not on the trust list" in out and "Traceback" not in out
    assert not marker.exists()


def test_a_copy_that_is_not_the_trusted_workspace_runs_nothing_unasked(tmp_path, monkeypatch):
    """The copy is judged on its own bytes: a workspace edited after the fixture was loaded (between the
    check and the copy) gives a copy that no trusted fixture's call may run in unasked."""
    from workbook.replay import trust

    fixture = fixtures.load_fixture(TRUSTED_S02)  # trusted, as the repo has it
    edited_workspaces(tmp_path, monkeypatch, tmp_path / "ran")
    (tmp_path / "workspace" / "divide_by_zero" / "utils.py").write_text("import os\n")
    workspace = scratch.copy_workspace(fixture["workspace"])
    transport = replay_s02(fixture, workspace)
    results = [
        block
        for request in transport.seen
        for message in request["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("tool_use_id") == VETTED_ID
    ]
    assert results and results[0]["is_error"] and results[0]["content"].startswith("not run:")
    assert trust.copy_made_here(workspace).trusted is False


def test_trust_lists_the_workspace_and_a_later_trust_replaces_its_line(tmp_path, monkeypatch):
    from workbook import cli
    from workbook.replay import trust

    monkeypatch.setattr(trust, "TRUST_FILE", tmp_path / "TRUSTED")
    mine = tmp_path / "mine.json"
    mine.write_bytes(STOP_HOOK.read_bytes())
    assert cli.main(["trust", str(mine)]) == 0
    lines = (tmp_path / "TRUSTED").read_text().splitlines()
    assert any(line.endswith("  fixtures/workspace/greet/") for line in lines)
    edited_workspaces(tmp_path, monkeypatch, tmp_path / "ran")
    assert not trust.is_trusted(mine.read_bytes())
    assert cli.main(["trust", str(mine)]) == 0  # the teacher read the new check.sh
    again = (tmp_path / "TRUSTED").read_text().splitlines()
    assert trust.is_trusted(mine.read_bytes()) and len(again) == len(lines) and again != lines


def test_every_fixture_in_the_repo_is_trusted_as_it_is_now():
    listed = trust.trusted_digests()
    for path in sorted((ROOT / "fixtures").glob("*.json")):
        digest = trust.fixture_digest(path.read_bytes())
        assert digest in listed, (
            f"{path.name} changed or is new: `python -m workbook trust fixtures/{path.name}`"
        )


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


def test_s01_has_no_gate_so_it_replays_only_trusted_commands(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(fixture(description="shared by a stranger")))
    with pytest.raises(errors.FixtureError, match="no permission gate.*python -m workbook trust"):
        start("--replay", str(tmp_path / "f.json"), script="s01_agent_loop")
    start("--replay", str(HELLO), script="s01_agent_loop").finish()  # the project's own: trusted


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
    code, out = run_main("s07_really_done", "--replay", str(tmp_path / "f.json"))
    assert code == 1 and "the fixture's --stop-hook 'touch pwned': not run:" in out
    after_banner = out.split("\ntask:", 1)[1]
    assert len(after_banner.strip().splitlines()) == 2  # the task, then the one line


# -- the evidence is an object handed on, never a table looked up by id() (issue 48) -----------------

VETTED = anthropic.types.ToolUseBlock(
    type="tool_use", id=VETTED_ID, name="bash", input={"command": "python3 test_utils.py"}
)
VETTED_AT = 4  # the trusted s02 fixture recorded VETTED in the response to its 4th request


def test_a_loaded_fixture_vouches_and_no_copy_of_it_does():
    loaded = fixtures.load_fixture(TRUSTED_S02)
    assert trust.vouched_by(loaded).workspace == "divide_by_zero"
    copies = (copy.copy(loaded), copy.deepcopy(loaded), loaded | {}, dict(loaded), loaded.copy())
    for copied in (*copies, pickle.loads(pickle.dumps(loaded))):
        assert copied == loaded and trust.vouched_by(copied) is None, type(copied)


def test_what_a_fixture_vouches_for_is_fixed_when_it_is_loaded(tmp_path):
    loaded = fixtures.load_fixture(TRUSTED_S02)
    before = copy.deepcopy(trust.vouched_by(loaded).calls)
    call = loaded["exchanges"][VETTED_AT - 1]["response"]["body"]["content"][0]
    call["input"]["command"] = "touch pwned"
    assert trust.vouched_by(loaded).calls == before and "python3 test_utils.py" in str(before)
    (tmp_path / "f.json").write_text(json.dumps(dict(loaded)))  # the edited dict, as a file: a stranger's
    assert trust.vouched_by(fixtures.load_fixture(tmp_path / "f.json")) is None


def test_copy_workspace_knows_its_copies_and_only_the_first_person_takes_one(tmp_path):
    fixture = fixtures.load_fixture(TRUSTED_S02)
    workspace = scratch.copy_workspace(fixture["workspace"])
    made = trust.copy_made_here(workspace)
    assert (made.name, made.trusted, made.taken) == ("divide_by_zero", True, False)
    assert trust.copy_made_here(workspace.parent) is None and trust.copy_made_here(tmp_path) is None
    first = trust.recorded_person(replay.replay_client(fixture)[1], workspace)
    second = trust.recorded_person(replay.replay_client(fixture)[1], workspace)
    assert first.owns_copy and not second.owns_copy and made.taken


def person_at(fixture, cursor: int, workspace=None, otherwise=None):
    """The gate's person for a replay of `fixture` that has served `cursor` exchanges."""
    transport = SimpleNamespace(fixture=fixture, cursor=cursor)
    workspace = workspace or scratch.copy_workspace("divide_by_zero")
    return trust.recorded_person(transport, workspace, otherwise)


def test_the_person_says_yes_only_to_the_call_recorded_at_the_exchange_served(tmp_path):
    loaded = fixtures.load_fixture(TRUSTED_S02)
    no = lambda call, danger, why: False  # noqa: E731  (the person at the terminal, saying no)
    assert person_at(loaded, VETTED_AT)(VETTED, None) is True
    assert (
        person_at(loaded, VETTED_AT)(VETTED, "it deletes files") is None
    )  # a recording's yes is not a person's
    assert person_at(loaded, VETTED_AT - 1, otherwise=no)(VETTED, None) is False  # another exchange
    other = VETTED.model_copy(update={"input": {"command": "python3 -c 'import os'"}})
    assert person_at(loaded, VETTED_AT, otherwise=no)(other, None) is False  # the same id, another command
    assert person_at(dict(loaded), VETTED_AT)(VETTED, None) is None  # a dict that vouches for nothing
    assert (
        person_at(loaded, VETTED_AT, tmp_path)(VETTED, None) is None
    )  # a folder copy_workspace did not make
    assert person_at(loaded, VETTED_AT, scratch.copy_workspace("hello"))(VETTED, None) is None  # not its own


def test_a_replay_started_from_the_cli_has_a_person_of_its_own(tmp_path):
    run = start("--replay", str(TRUSTED_S02))
    run.finish()
    assert run.ask.transport is run.transport and run.ask.owns_copy
    assert trust.copy_made_here(run.workspace).name == "divide_by_zero"


def shown_question(monkeypatch, call, danger, answer) -> list[str]:
    """What a replay's person shows at an 80-column terminal when asked about `call`."""
    out = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=out, width=80, color_system=None))
    trust.show_question(call, danger, answer)
    return out.getvalue().splitlines()


def test_a_replays_person_is_asked_as_a_live_one_is_and_says_what_it_answered(monkeypatch):
    call = SimpleNamespace(name="bash", input={"command": "python3 test_utils.py"})
    assert shown_question(monkeypatch, call, None, True) == [
        "allow bash?",
        "  $ python3 test_utils.py",
        "[y/N] y (the replay answers for the person: its fixture ran this call)",
    ]
    lines = shown_question(
        monkeypatch, SimpleNamespace(name="bash", input={"command": "rm -rf x"}), "rm", None
    )
    assert lines[0] == "allow bash (rm)?" and lines[-1].startswith("[y/N] no answer")


def test_a_replays_question_about_a_huge_call_is_bounded(monkeypatch):
    write = SimpleNamespace(name="write_file", input={"path": "big.txt", "content": "line\n" * 100_000})
    lines = shown_question(monkeypatch, write, None, True)
    assert len(lines) <= 45 and "more lines)" in lines[-2]
