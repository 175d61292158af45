"""A long recording is judged request by request on what each adds (contract.RequestChain), and exactly
as strictly as when every request is judged whole: a bad message deep in a chain of deltas is refused
with the same one line as in a fixture that stores every request whole."""

import copy
import json

from workbook import cli
from workbook.api import contract
from workbook.errors import FixtureError
from workbook.replay import fixtures, request_delta

import pytest
from conftest import ROOT

TURNS = 40  # deep enough that a problem sits far from the start of the chain
DEEP = 2 * 30 + 1  # the assistant message of turn 30 (its result follows it)


def conversation(turns: int = TURNS) -> list:
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
    messages = conversation()
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
    messages = conversation()
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
    messages = conversation(40)
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
    messages = conversation()
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
