"""Every step's agent_loop, whatever it adds, still answers each tool_use exactly once.

The steps no longer copy each other (each imports what it inherits), so there is no drift left to
guard. What must hold in all six is the loop's contract: every tool_use id in a reply gets exactly one
tool_result, all of them in the very next user message, before the model is asked again.
"""

import io

from workbook import paths
from workbook.replay import transport as replay

import pytest
from conftest import STEPS, load_step
from rich.console import Console
from standin import message, text, tool_use


def reply(*blocks, stop: str = "tool_use") -> dict:
    return {"status": 200, "body": message(list(blocks), stop_reason=stop)}


TURNS = [  # a known call, an unknown tool, a bad input and another call; then a lone call; then the end
    reply(
        tool_use("toolu_a", "bash", {"command": "echo one"}),
        tool_use("toolu_b", "no_such_tool", {}),
        tool_use("toolu_c", "bash", {"wrong": 1}),
        tool_use("toolu_d", "bash", {"command": "echo two"}),
    ),
    reply(text("one more"), tool_use("toolu_e", "bash", {"command": "echo three"})),
    reply(text("done"), stop="end_turn"),
]


@pytest.mark.parametrize("step_name", STEPS)
def test_every_tool_use_is_answered_exactly_once_in_the_next_user_message(step_name, tmp_path, monkeypatch):
    step = load_step(step_name)
    monkeypatch.setattr(step, "console", Console(file=io.StringIO(), width=100))
    fixture = {"exchanges": [{"request": {}, "response": response} for response in TURNS]}
    client, transport = replay.replay_client(fixture, "loop contract", strict=False)
    extra = (
        {"stream": False} if hasattr(step, "stream_reply") else {}
    )  # s06 on: a plain JSON reply, not a stream
    step.agent_loop(client, [{"role": "user", "content": "go"}], step.Settings(tmp_path, **extra))
    assert transport.cursor == len(TURNS)  # went on after every refusal, and stopped when the model did
    for turn, sent in enumerate(transport.seen[1:]):
        asked, answered = sent["messages"][-2:]
        ids = [b["id"] for b in TURNS[turn]["body"]["content"] if b["type"] == "tool_use"]
        assert (
            asked["role"] == "assistant"
            and [b.get("id") for b in asked["content"] if b["type"] == "tool_use"] == ids
        )
        assert answered["role"] == "user"
        assert [b["tool_use_id"] for b in answered["content"] if b["type"] == "tool_result"] == ids
        assert all(b["type"] == "tool_result" for b in answered["content"])  # nothing but the answers


@pytest.mark.parametrize("step_name", STEPS)
def test_the_loop_takes_the_client_the_messages_and_one_settings_object(step_name):
    import inspect

    step = load_step(step_name)
    assert list(inspect.signature(step.agent_loop).parameters) == ["client", "messages", "settings"]
    earlier = STEPS[STEPS.index(step_name) - 1] if STEPS.index(step_name) else None
    if earlier:  # each step's settings extend the previous step's
        assert issubclass(step.Settings, load_step(earlier).Settings)


@pytest.mark.parametrize("step_name", STEPS)
def test_a_step_never_knows_it_is_replayed(step_name):
    """A replay supplies the model through the client and time through the run's sleep: no step reads the
    run's mode, checks a WORKBOOK_ switch or imports the replay package."""
    import ast
    import re

    source = paths.step_file(step_name).read_text()
    assert not re.search(r"\.mode\b", source) and "WORKBOOK_" not in source
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("workbook.replay")]
    assert "trust" not in source  # the replay's person answers the gate; the gate never asks trust
