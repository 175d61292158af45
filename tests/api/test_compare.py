"""Comparing a request with its recording: one vocabulary (Match), each match looser than the last."""

import copy

from workbook.api import compare
from workbook.replay import fixtures

import pytest
from conftest import ROOT
from student_requests import FIXTURE, IDS, turn2


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


def reminder(text="<system-reminder>today is a day</system-reminder>"):
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


def test_conversation_leaves_out_what_a_client_adds_around_the_lesson():
    """Claude Code's turns: a system message after the first user turn, reminder blocks around the task,
    text after the tool results, cache_control and metadata; none of them is the lesson."""
    recorded = good()["exchanges"][1]["request"]
    theirs = copy.deepcopy(recorded) | {"metadata": {"user_id": "someone"}}
    task = theirs["messages"][0]["content"]
    theirs["messages"][0]["content"] = [reminder(), reminder(), {"type": "text", "text": task}]
    theirs["messages"][2]["content"].append(reminder("the task tools haven't been used recently"))
    theirs["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    theirs["messages"].insert(1, {"role": "system", "content": "Available agent types: none"})
    theirs["messages"].append({"role": "system", "content": [{"type": "text", "text": "keep going"}]})
    assert compare.request_diff(recorded, theirs, compare.Match.CONVERSATION) is None
    assert compare.request_diff(recorded, theirs, compare.Match.STRUCTURE) is not None  # strict stays strict
    assert compare.request_diff(recorded, theirs) is not None


def test_conversation_still_counts_turns_and_pairs_results_by_id():
    recorded = good()["exchanges"][1]["request"]
    theirs = copy.deepcopy(recorded)
    theirs["messages"].insert(1, {"role": "system", "content": "mine"})
    del theirs["messages"][2]  # the assistant turn not appended: the system message is no turn of its own
    diff = compare.request_diff(recorded, theirs, compare.Match.CONVERSATION)
    assert "the assistant turn was not appended" in diff
    theirs = copy.deepcopy(recorded)
    theirs["messages"][2]["content"][0]["tool_use_id"] = "toolu_other"
    theirs["messages"][2]["content"].insert(0, reminder())  # text first is the contract's to refuse
    assert "tool_use_id expected" in compare.request_diff(recorded, theirs, compare.Match.CONVERSATION)
    theirs["messages"][2]["content"] = [reminder()]  # the results dropped, only text left
    assert "expected 3 content blocks, got 0" in compare.request_diff(
        recorded, theirs, compare.Match.CONVERSATION
    )


def test_conversation_compares_the_recorded_task_among_the_first_user_turns_text_blocks():
    recorded = good()["exchanges"][1]["request"]
    task = recorded["messages"][0]["content"]
    theirs = copy.deepcopy(recorded)
    theirs["messages"][0]["content"] = [reminder(), {"type": "text", "text": f"\n  {task}  \n"}]
    assert compare.request_diff(recorded, theirs, compare.Match.CONVERSATION) is None  # trimmed, found
    theirs["messages"][0]["content"] = [reminder(), {"type": "text", "text": f"{task} Then stop."}]
    assert compare.request_diff(recorded, theirs, compare.Match.CONVERSATION) is None  # in a client's words
    theirs["messages"][0]["content"] = [reminder(), {"type": "text", "text": task.replace(" ", "  ", 1)}]
    diff = compare.request_diff(recorded, theirs, compare.Match.CONVERSATION)
    assert diff == (
        f'messages[0]: your first user turn does not carry the recorded task; send "{task}" as the task (a '
        "text block of its own, as the recording does)"
    )
    theirs["messages"][1]["content"][-1]["id"] = "toolu_other"  # the structure is compared first
    assert "id expected" in compare.request_diff(recorded, theirs, compare.Match.CONVERSATION)


def test_the_recorded_task_is_quoted_on_one_printable_line_and_shortened():
    recorded = good()["exchanges"][0]["request"]
    long_task = "list\x1b[2J the files\n" + "x" * 200
    recorded = recorded | {"messages": [{"role": "user", "content": long_task}]}
    diff = compare.request_diff(recorded, good()["exchanges"][0]["request"], compare.Match.CONVERSATION)
    quoted = diff.split("send ", 1)[1].split(" as the task")[0]
    assert quoted.startswith('"list\\x1b[2J the files\\nxxx') and quoted.endswith('…" (219 characters)')
    assert quoted.isprintable() and len(quoted) < 130


def test_conversation_only_ignores_what_a_student_writes_but_not_the_ids():
    recorded = FIXTURE["exchanges"][1]["request"]
    theirs = {"model": "x", "max_tokens": 5, "stream": True, "system": "mine", "messages": turn2()}
    spaced = {"type": "text", "text": f"  {FIXTURE['task']}\n"}  # the recorded task, with its own spacing
    theirs["messages"][0] = {"role": "user", "content": [spaced]}
    assert compare.request_diff(recorded, theirs, compare.Match.CONVERSATION) is None
    assert compare.request_diff(recorded, theirs, compare.Match.STRUCTURE).startswith(
        "max_tokens"
    )  # unchanged
    swapped = turn2([IDS[1], IDS[0], IDS[2]])  # the API pairs results by id: any order is the same turn
    assert compare.request_diff(recorded, {"messages": swapped}, compare.Match.CONVERSATION) is None
    wrong = turn2([IDS[0], IDS[1], "toolu_other"])
    problem = compare.request_diff(recorded, {"messages": wrong}, compare.Match.CONVERSATION)
    assert problem == f'messages[2].content[2]: tool_use_id expected "{IDS[2]}", got "toolu_other"'
