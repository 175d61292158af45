"""Loading a fixture: every field of a stranger's file is checked before anything uses it, and each
problem is one line naming the file and the place. A recording stores each request as a delta of
the one before: it is judged on what it adds, with the same verdict, and the same line, as whole."""

import copy
import json

from workbook import cli, errors
from workbook.api import contract
from workbook.errors import FixtureError
from workbook.replay import fixtures, request_delta

import pytest
from conftest import ROOT, STEPS
from fixture_files import fixture, refused

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


@pytest.mark.parametrize("workspace", ["/etc", "../../..", "hello/../../..", "~", "missing", 3, None])
def test_workspace_names_a_folder_under_fixtures_workspace(tmp_path, workspace):
    refused(tmp_path, fixture(workspace=workspace), "`workspace`")


@pytest.mark.parametrize("script", ["../../../tmp/evil", "s09_more", "replay", 3])
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


STREAMED = ROOT / "fixtures" / "s05_streamed.json"  # its responses are SSE streams


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


TURNS = 40  # deep enough that a problem sits far from the start of the chain


DEEP = 2 * 30 + 1  # the assistant message of turn 30 (its result follows it)


def tool_rounds(turns: int = TURNS) -> list:
    """A task, then `turns` turns of one tool call and its result."""
    messages = [{"role": "user", "content": "run it"}]
    for n in range(turns):
        call = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "bash", "input": {"command": f"true {n}"}}
        messages.append({"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n:04d}", "content": f"ran {n}"}
        messages.append({"role": "user", "content": [result]})
    return messages


def fixture_of(messages: list, ends: list[int]) -> dict:
    """A fixture whose requests are `messages[:end]` for each end, each answered by s01's first reply."""
    base = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    response = base["exchanges"][0]["response"]
    shared = {k: v for k, v in base["exchanges"][0]["request"].items() if k != "messages"}
    exchanges = [{"request": shared | {"messages": messages[:end]}, "response": response} for end in ends]
    return base | {"exchanges": exchanges}


def user_ends(messages: list) -> list[int]:
    return [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]


def both_forms(fixture: dict, tmp_path) -> tuple:
    """The fixture written whole (every request in full, nothing shared) and as a chain of deltas."""
    whole, deltas = tmp_path / "whole.json", tmp_path / "deltas.json"
    whole.write_text(json.dumps(fixture))
    stored = fixture | {"exchanges": request_delta.stored_exchanges(fixture["exchanges"])}
    deltas.write_text(json.dumps(stored))
    assert "request_delta" in json.loads(deltas.read_text())["exchanges"][-1]
    return whole, deltas


def refusal(path) -> str:
    with pytest.raises(FixtureError) as caught:
        fixtures.load_fixture(path)
    return str(caught.value).replace(str(path), "F")


def _result(tool_id: str, **extra) -> dict:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "x"} | extra


BAD_DEEP = {  # name -> (change to the conversation at DEEP, words the line holds)
    "unknown_result_id": (
        lambda m: m[DEEP + 1]["content"].append(_result("toolu_nowhere")),
        "unexpected `tool_use_id`",
    ),
    "id_reused_from_turn_3": (  # uniqueness spans the whole conversation, not the part a turn adds
        lambda m: (
            m[DEEP]["content"][0].update(id="toolu_0003"),
            m[DEEP + 1].update(content=[_result("toolu_0003")]),
        ),
        "ids must be unique",
    ),
    "extra_field_in_a_message": (lambda m: m[DEEP + 1].update(cache="no"), "Extra inputs are not permitted"),
    "result_not_first": (
        lambda m: m[DEEP + 1].update(
            content=[{"type": "text", "text": "hi"}, _result(f"toolu_{DEEP // 2:04d}")]
        ),
        "must come first",
    ),
    "result_answered_twice_across_messages": (  # a user message after a user message: one turn
        lambda m: m.insert(DEEP + 2, {"role": "user", "content": [_result(f"toolu_{DEEP // 2:04d}")]}),
        "single result",
    ),
    "call_never_answered": (lambda m: m[DEEP + 1].update(content="no result"), "without `tool_result`"),
    "not_a_string_input": (lambda m: m[DEEP]["content"][0].update(input="true"), "valid dictionary"),
}


@pytest.mark.parametrize("name", BAD_DEEP)
def test_a_bad_message_deep_in_a_chain_is_refused_with_the_same_line_as_whole(name, tmp_path, capsys):
    messages = tool_rounds()
    change, words = BAD_DEEP[name]
    change(messages)
    whole, deltas = both_forms(fixture_of(messages, user_ends(messages)), tmp_path)
    line = refusal(whole)
    assert refusal(deltas) == line and words in line and "\n" not in line
    assert cli.main(["check", str(deltas)]) == 1
    said = capsys.readouterr()
    assert "Traceback" not in said.err and said.err.count("\n") == 1


def test_an_empty_final_reply_is_allowed_until_a_message_follows_it(tmp_path):
    """The boundary: the last message of one request, fine there, is judged again once it is not last."""
    messages = tool_rounds()
    messages.insert(DEEP + 2, {"role": "assistant", "content": []})
    ends = user_ends(messages)
    ends.insert(ends.index(DEEP + 2) + 1, DEEP + 3)  # a request that ends on the empty reply: allowed
    whole, deltas = both_forms(fixture_of(messages, ends), tmp_path)
    line = refusal(whole)
    assert refusal(deltas) == line and "non-empty content" in line
    fixture = fixture_of(messages, ends[: ends.index(DEEP + 3) + 1])  # the chain ends on it: fine
    assert (
        fixtures.fixture_problems(
            fixture | {"exchanges": request_delta.stored_exchanges(fixture["exchanges"])}
        )
        == []
    )


def test_every_problem_of_a_chain_is_the_one_each_whole_request_has():
    """Not only the first: fixture_problems lists the same problems, judged whole or on what was added."""
    messages = tool_rounds(40)
    messages[41]["content"] = [_result("toolu_nowhere")]
    messages[60]["content"][0]["id"] = "toolu_0002"
    fixture = fixture_of(messages, user_ends(messages))
    judged_whole = [
        f"exchanges[{n}]{p}"
        for n, e in enumerate(fixture["exchanges"])
        for p in contract.exchange_problems(e)
    ]
    stored = fixture | {"exchanges": request_delta.stored_exchanges(copy.deepcopy(fixture["exchanges"]))}
    assert judged_whole and fixtures.fixture_problems(stored) == judged_whole


def test_a_long_chain_that_keeps_the_rules_loads_and_a_rewritten_history_is_judged_whole(tmp_path):
    messages = tool_rounds()
    ends = user_ends(messages)
    fixture = fixture_of(messages, ends)
    collapsed = [messages[0]] + [
        m
        if m["role"] == "assistant"
        else {"role": "user", "content": [_result(m["content"][0]["tool_use_id"])]}
        for m in messages[1:]
    ]  # what s06's collapse does: the history rewritten, the next request keeps none of it
    fixture["exchanges"].append(
        fixture["exchanges"][-1] | {"request": fixture["exchanges"][-1]["request"] | {"messages": collapsed}}
    )
    _, deltas = both_forms(fixture, tmp_path)
    assert len(fixtures.load_fixture(deltas)["exchanges"]) == len(ends) + 1


def test_a_long_recording_of_tiny_deltas_judges_each_message_once(tmp_path, monkeypatch):
    # Issue 39: a few MB of tiny deltas over one big first message took 30 s to serve. Each request is
    # judged on what it adds to the one before, so each message is judged once (as each shape's).
    messages, turns = tool_rounds(300), 300
    fixture = fixture_of(messages, user_ends(messages)[:turns])
    fixture["exchanges"][0]["request"]["messages"][0]["content"] = "x" * 1_000_000
    path = tmp_path / "deltas.json"
    path.write_text(json.dumps(fixture | {"exchanges": request_delta.stored_exchanges(fixture["exchanges"])}))
    judged = []
    fits = contract.message_fits
    monkeypatch.setattr(contract, "message_fits", lambda name, m: judged.append(id(m)) or fits(name, m))
    loaded = fixtures.load_fixture(path)
    assert len(loaded["exchanges"]) == turns
    assert len(set(judged)) == len(loaded["exchanges"][-1]["request"]["messages"])  # every message, once
    assert len(judged) == len(set(judged))  # and none twice
