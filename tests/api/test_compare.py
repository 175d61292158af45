"""Comparing a request with its recording: one vocabulary (Match), each match looser than the last."""

import copy

from workbook.api import compare
from workbook.replay import fixtures

import pytest
from conftest import ROOT


def good():
    return copy.deepcopy(fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json"))


def test_the_diff_explains_a_missing_assistant_turn():
    recorded = good()["exchanges"][1]["request"]
    sent = {**recorded, "messages": [recorded["messages"][0], recorded["messages"][2]]}
    diff = compare.request_diff(recorded, sent)
    assert diff.startswith("expected 3 messages, got 2")


def test_structure_ignores_tool_output_but_not_ids():
    recorded = good()["exchanges"][1]["request"]
    sent = copy.deepcopy(recorded)
    sent["messages"][2]["content"][0]["content"] = "different output on this machine"
    assert compare.request_diff(recorded, sent, compare.Match.STRUCTURE) is None
    assert "content expected" in compare.request_diff(recorded, sent)
    sent["messages"][2]["content"][0]["tool_use_id"] = "toolu_other"
    assert "tool_use_id expected" in compare.request_diff(recorded, sent, compare.Match.STRUCTURE)


def test_conversation_ignores_what_a_loop_of_ones_own_writes_but_not_the_ids():
    recorded = good()["exchanges"][1]["request"]
    theirs = copy.deepcopy(recorded) | {"system": "mine", "max_tokens": 5, "tools": []}
    theirs["messages"][2]["content"][0]["is_error"] = True  # their tool failed where the recording's ran
    assert compare.request_diff(recorded, theirs, compare.Match.CONVERSATION) is None
    assert compare.request_diff(recorded, theirs, compare.Match.STRUCTURE).startswith("messages[2]")
    theirs["messages"][1]["content"][-1]["id"] = "toolu_other"
    assert "id expected" in compare.request_diff(recorded, theirs, compare.Match.CONVERSATION)


def test_each_match_is_looser_than_the_one_before_and_the_looser_of_two_wins():
    strict, structure, conversation = compare.Match
    assert strict.looser(structure) is structure and structure.looser(strict) is structure
    assert conversation.looser(strict) is conversation and strict.looser(None) is strict
    assert compare.Match("structure") is structure  # the word a fixture's `match` field holds


def test_the_name_notebooks_knew_conversation_by_still_reads_as_it():
    assert compare.Match("shape") is compare.Match.CONVERSATION
    with pytest.raises(ValueError):
        compare.Match("loose")


def test_equal_requests_have_no_difference_whatever_the_match():
    recorded = good()["exchanges"][1]["request"]
    assert all(compare.request_diff(recorded, copy.deepcopy(recorded), m) is None for m in compare.Match)
