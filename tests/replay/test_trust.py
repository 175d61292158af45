"""Trust belongs to a loaded fixture, not to a command string (issue 23): a replay runs a call unasked
only if the fixture it plays is trusted, the call is the one recorded at this exchange, and the
workspace is that fixture's own fresh copy. Both the CLI and the notebook path keep the rule."""

import copy
import json

from workbook import scratch
from workbook.replay import fixtures
from workbook.replay import transport as replay

from conftest import ROOT
from standin import message, text, tool_use

import s01_agent_loop as s01
import s02_tools as s02

TRUSTED_S02 = ROOT / "fixtures" / "s02_fix_divide_by_zero.json"
HELLO = ROOT / "fixtures" / "s01_hello_agent.json"
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
    settings = s02.Settings(workspace or scratch.copy_workspace(fixture["workspace"]))
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
    assert any(str(r["content"]).startswith("not run:") for r in transport.seen[5]["messages"][-1]["content"])


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
