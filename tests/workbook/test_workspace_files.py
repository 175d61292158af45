"""workbook/workspace_files.py: what the file tools open. A symlink loop is one is_error line, not a
traceback (issue 39), and a file read for the model shows it no secret of the process's."""

import errno
import os

from workbook import workspace_files

import anthropic
import pytest

import s02_tools as s02
import s03_errors as s03

LOOPS = {"loop": "loop", "a": "b", "b": "a"}  # a link to itself, and two links to each other


@pytest.fixture
def workspace(tmp_path):
    for name, target in LOOPS.items():
        os.symlink(target, tmp_path / name)
    return tmp_path.resolve()


@pytest.mark.parametrize("step", [s02, s03])
@pytest.mark.parametrize(
    "name, tool_input",
    [
        ("read_file", {"path": "loop"}),
        ("read_file", {"path": "a/inside"}),
        ("write_file", {"path": "b", "content": "x"}),
        ("edit_file", {"path": "loop", "old_text": "x", "new_text": "y"}),
    ],
)
def test_a_symlink_loop_is_one_is_error_line(step, name, tool_input, workspace):
    call = anthropic.types.ToolUseBlock(type="tool_use", id="toolu_l", name=name, input=tool_input)
    output, is_error = step.execute(call, workspace, "all")
    assert is_error and output.count("\n") == 0 and "symbolic link loop" in output
    assert "RuntimeError" not in output and str(workspace) not in output


def test_resolved_turns_a_loop_into_an_os_error(workspace):
    with pytest.raises(OSError) as raised:
        workspace_files.resolved(workspace / "loop")
    assert raised.value.errno == errno.ELOOP and raised.value.filename == str(workspace / "loop")


def test_a_file_read_for_the_model_holds_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-teacher-key-0123456789")
    (tmp_path / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-api03-teacher-key-0123456789\r\nX=1\n")
    text = workspace_files.read_text(tmp_path / ".env", ".env", 10_000)
    assert text == "ANTHROPIC_API_KEY=[secret removed]\nX=1\n"
