"""workbook's replay: the fixture format, the API's rules, and the transport's contract."""

import copy
import importlib
import json

from workbook import cli, errors
from workbook.api import compare, contract
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT, STEPS

FIXTURES = sorted((ROOT / "fixtures").glob("*.json"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_every_fixture_passes_the_checker(path):
    fixture = fixtures.load_fixture(path)
    assert fixture["script"] in STEPS, f"{path.name} names a script that does not exist"
    if fixture["provenance"] == "scripted":
        assert fixture.get("provenance_note"), (
            "a scripted fixture says how it was written and its usage estimated"
        )
    else:
        assert {"date", "model", "sdk"} <= set(fixture["recorded"])


@pytest.mark.parametrize("step", STEPS)
def test_default_model_is_current_not_deprecated(step):
    from anthropic._data import DEPRECATED_MODELS

    model = importlib.import_module(step).MODEL
    assert model not in DEPRECATED_MODELS
    assert model in anthropic.types.Model.__args__[0].__args__, "a model id the installed SDK knows"


# -- the API's rules -------------------------------------------------------------------------------


def user(*content):
    return {"role": "user", "content": list(content)}


def assistant(*content):
    return {"role": "assistant", "content": list(content)}


USE = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
TEXT = {"type": "text", "text": "hi"}


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


# -- fixture checking: every problem names the file and the place ----------------------------------


def fixture_error(tmp_path, fixture) -> str:
    path = tmp_path / "f.json"
    path.write_text(json.dumps(fixture) if not isinstance(fixture, str) else fixture)
    with pytest.raises(errors.FixtureError) as caught:
        fixtures.load_fixture(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    return str(caught.value)


def good():
    return copy.deepcopy(fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json"))


def test_a_body_that_is_not_a_message_names_its_place(tmp_path):
    fixture = good()
    del fixture["exchanges"][1]["response"]["body"]["content"]
    assert "exchanges[1].response.body.content: Field required" in fixture_error(tmp_path, fixture)


def test_a_request_breaking_the_rules_names_its_place(tmp_path):
    fixture = good()
    fixture["exchanges"][1]["request"]["messages"][2]["content"].pop()
    assert "exchanges[1].request.messages.1: `tool_use` ids were found without" in fixture_error(
        tmp_path, fixture
    )


def test_non_utf8_and_truncated_json_are_one_line(tmp_path):
    assert "not a JSON fixture" in fixture_error(tmp_path, b"\xff\xfe".decode("latin-1"))
    assert "not a JSON fixture" in fixture_error(tmp_path, json.dumps(good())[:200])


def test_wrong_types_are_named(tmp_path):
    fixture = good()
    fixture["exchanges"] = {"not": "a list"}
    assert "`exchanges` must be a non-empty list" in fixture_error(tmp_path, fixture)
    assert "provenance" in fixture_error(tmp_path, {**good(), "provenance": "made-up"})


# -- the transport ---------------------------------------------------------------------------------


def test_a_recorded_529_is_retried_by_the_sdk_itself():
    fixture = good()
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    first = fixture["exchanges"][0]
    fixture["exchanges"].insert(
        0, {"request": first["request"], "response": {"status": 529, "body": overloaded}}
    )
    client, transport = replay.replay_client(fixture, "t", max_retries=1)
    client = client.with_options(timeout=5)
    response = client.messages.create(**{k: v for k, v in first["request"].items()})
    assert response.stop_reason == "tool_use" and transport.cursor == 2


def test_a_replayed_stream_parses_through_the_sdk():
    fixture = good()
    body = fixture["exchanges"][1]["response"]["body"]
    start = {**body, "content": [], "stop_reason": None}
    events = [
        {"event": "message_start", "data": {"type": "message_start", "message": start}},
        {
            "event": "content_block_start",
            "data": {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        },
        {
            "event": "content_block_delta",
            "data": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Done."},
            },
        },
        {"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}},
        {
            "event": "message_delta",
            "data": {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        },
        {"event": "message_stop", "data": {"type": "message_stop"}},
    ]
    request = {**fixture["exchanges"][0]["request"], "stream": True}
    stream_fixture = {
        **fixture,
        "exchanges": [{"request": request, "response": {"status": 200, "stream": events}}],
    }
    client, _ = replay.replay_client(stream_fixture, "t")
    with client.messages.stream(**{k: v for k, v in request.items() if k != "stream"}) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Done." and final.stop_reason == "end_turn"


def test_a_mismatch_is_not_retried_by_the_sdk():
    client, transport = replay.replay_client(good(), "t", max_retries=3)
    with pytest.raises(errors.ReplayMismatch, match="turn 1: messages\\[0\\].content\\[0\\]: text expected"):
        client.messages.create(model="m", max_tokens=8000, messages=[{"role": "user", "content": "other"}])
    assert len(transport.seen) == 1


def test_the_diff_explains_a_missing_assistant_turn():
    recorded = good()["exchanges"][1]["request"]
    sent = {**recorded, "messages": [recorded["messages"][0], recorded["messages"][2]]}
    diff = compare.request_diff(recorded, sent)
    assert diff.startswith("expected 3 messages, got 2")


def test_structure_only_ignores_tool_output_but_not_ids():
    recorded = good()["exchanges"][1]["request"]
    sent = copy.deepcopy(recorded)
    sent["messages"][2]["content"][0]["content"] = "different output on this machine"
    assert compare.request_diff(recorded, sent, compare.Match.STRUCTURE) is None
    assert "content expected" in compare.request_diff(recorded, sent)
    sent["messages"][2]["content"][0]["tool_use_id"] = "toolu_other"
    assert "tool_use_id expected" in compare.request_diff(recorded, sent, compare.Match.STRUCTURE)


def test_the_cli_checks_fixtures(tmp_path):
    assert cli.main(["check", str(ROOT / "fixtures" / "s01_hello_agent.json")]) == 0
    (tmp_path / "bad.json").write_text("[]")
    assert cli.main(["check", str(tmp_path / "bad.json")]) == 1


def test_the_fast_path_for_checked_fixtures_still_catches_every_difference():
    fixture = good()
    client, transport = replay.replay_client(fixture, "t", checked=True)
    first = fixture["exchanges"][0]["request"]
    client.messages.create(**first)  # identical to the recording: served without a diff
    sent = {**first, "messages": first["messages"]}  # the same opening again, where turn 2 is due
    with pytest.raises(errors.ReplayMismatch, match="turn 2: expected 3 messages, got 1"):
        client.messages.create(**sent)
    assert transport.cursor == 1
