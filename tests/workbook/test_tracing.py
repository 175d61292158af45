"""workbook/tracing.py: a trace's lines written whole, and a trace read back as a fixture."""

import json
import os

from workbook import tracing
from workbook.errors import FixtureError, WorkbookError

import pytest

REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "done"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 2},
}
RUN = [
    {"event": "run", "task": "go", "workspace": "", "provenance": "recorded", "args": ["--max-steps=3"]},
    {"event": "start", "model": "claude-sonnet-4-5", "max_tokens": 8000, "system": "s", "tools": []},
    {
        "event": "model_call",
        "request": {"new_from": 0, "new_messages": [{"role": "user", "content": "go"}]},
        "response": REPLY,
    },
    {"event": "stop", "reason": "the model ended its turn (stop_reason end_turn)"},
]


def written(tmp_path, lines) -> object:
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_each_event_is_one_whole_line(tmp_path):
    path = tmp_path / "t.jsonl"
    tracing.trace(path, "start", model="m")
    tracing.trace(path, "stop", reason="done")
    tracing.trace(None, "stop")  # no trace file: nothing written, no error
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == ["start", "stop"]


def test_a_fifo_is_refused_in_one_line_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(WorkbookError) as refused:  # ENXIO: no reader
        tracing.append_line(tmp_path / "fifo", {"event": "x"})
    line = str(refused.value)
    assert (
        line.startswith(f"{tmp_path / 'fifo'}: cannot write the trace or audit log there (")
        and "\n" not in line
    )


def test_a_trace_becomes_a_fixture_with_its_task_flags_and_each_call(tmp_path):
    fixture = tracing.trace_to_fixture(written(tmp_path, RUN), "s10_trace")
    assert (fixture["task"], fixture["args"], fixture["script"]) == ("go", ["--max-steps=3"], "s10_trace")
    [exchange] = fixture["exchanges"]
    assert exchange["request"]["messages"] == [{"role": "user", "content": "go"}]
    assert exchange["response"] == {"status": 200, "body": REPLY}


def test_the_trace_of_a_run_a_ctrl_c_stopped_is_refused_saying_what_to_do(tmp_path):
    stopped = [*RUN[:-1], {"event": "stop", "reason": "interrupted by the user (Ctrl-C during a model call)"}]
    with pytest.raises(FixtureError, match="which a replay cannot press .* --resume"):
        tracing.trace_to_fixture(written(tmp_path, stopped))


def test_a_file_that_is_no_trace_is_one_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("not json\n")
    with pytest.raises(FixtureError, match="not a JSON-lines trace"):
        tracing.trace_to_fixture(path)


def calling(tool: str) -> dict:
    """A model_call line whose reply asks for `tool`."""
    use = {"type": "tool_use", "id": "toolu_1", "name": tool, "input": {"path": "a.txt"}}
    return RUN[2] | {"response": REPLY | {"content": [use], "stop_reason": "tool_use"}}


@pytest.mark.parametrize("tool", ["read_file", "bash", "edit_file"])
def test_a_live_runs_trace_whose_tools_used_its_own_folder_is_refused_saying_what_to_do(tmp_path, tool):
    live = [RUN[0] | {"live": True}, RUN[1], calling(tool), RUN[3]]
    with pytest.raises(FixtureError, match='a live run.s trace.*set "workspace": "NAME"'):
        tracing.trace_to_fixture(written(tmp_path, live))


def test_a_live_trace_that_only_writes_and_a_replayed_one_that_reads_both_replay(tmp_path):
    only_writes = [RUN[0] | {"live": True}, RUN[1], calling("write_file"), RUN[3]]
    assert tracing.trace_to_fixture(written(tmp_path, only_writes))["exchanges"]
    replayed = [RUN[0] | {"live": False}, RUN[1], calling("read_file"), RUN[3]]  # its fixture's workspace: ""
    assert tracing.trace_to_fixture(written(tmp_path, replayed))["exchanges"]
