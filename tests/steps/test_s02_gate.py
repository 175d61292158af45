"""s02's gate and file tools against a stranger's calls: only read-only commands run unasked, and no
file tool reads a pipe or writes what is not a file."""

import io
import os
import threading
import tracemalloc
from pathlib import Path

import anthropic
import pytest

import s02_tools as s02


def call(name: str, tool_input: dict, workspace: Path, permission: str = "auto"):
    block = anthropic_block(name, tool_input)
    return s02.execute(block, workspace, permission)


def anthropic_block(name: str, tool_input: dict):

    return anthropic.types.ToolUseBlock(type="tool_use", id="toolu_t", name=name, input=tool_input)


@pytest.fixture
def ws(tmp_path):
    """A workspace beside a folder the model must not touch."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("keep")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    return workspace.resolve()


ESCAPES = [  # what the red-team pass ran under the old denylist, and more of the same
    "rm --recursive --force ../victim",
    "echo x > ../victim/keep.txt",
    "find .. -delete",
    "ls; rm -r ../victim",
    "ls && rm -r ../victim",
    "ls\nrm -r ../victim",
    "ls & rm -r ../victim",
    "cat ../victim/keep.txt",
    "cat /etc/hostname",
    "echo $(rm -r ../victim)",
    "echo `rm -r ../victim`",
    "cat < ../victim/keep.txt",
    "python3 -c 'import shutil; shutil.rmtree(\"../victim\")'",
]


@pytest.mark.parametrize("command", ESCAPES)
def test_auto_runs_only_read_only_commands_and_says_how_to_allow_the_rest(ws, command):
    output, is_error = call("bash", {"command": command}, ws)  # pytest's stdin is no terminal
    if s02.dangerous(command):  # it needs a person's yes, and nobody is there to give it
        assert is_error and output.startswith("denied: this command needs a person's yes (")
    else:
        assert is_error and output.startswith("not run:")
        assert "--permission ask" in output and "--permission all" in output
    assert (ws.parent / "victim" / "keep.txt").read_text() == "keep"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_asks_at_a_terminal_for_what_it_will_not_run_alone(ws, monkeypatch):
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    output, is_error = call("bash", {"command": "touch made"}, ws)
    assert not is_error and (ws / "made").exists()
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    output, is_error = call("bash", {"command": "touch refused"}, ws)
    assert is_error and "said no" in output and not (ws / "refused").exists()


def test_permission_all_runs_every_command_unasked(ws):
    output, is_error = call("bash", {"command": "touch made && ls"}, ws, "all")
    assert not is_error and "made" in output


def test_read_file_refuses_a_fifo_instead_of_hanging(ws):
    os.mkfifo(ws / "pipe")
    done = []
    worker = threading.Thread(
        target=lambda: done.append(call("read_file", {"path": "pipe"}, ws)), daemon=True
    )
    worker.start()
    worker.join(timeout=120)  # a safety net: a hang is the failure
    assert done, "read_file hung on a FIFO"
    output, is_error = done[0]
    assert is_error and "not a regular file" in output


def test_read_file_reads_only_what_the_result_carries(ws):
    with open(ws / "huge.log", "wb") as file:  # sparse: 300 MB that take no disk
        file.write(b"first line\n")
        file.truncate(300_000_000)
        file.seek(-10, os.SEEK_END)
        file.write(b"last line\n")
    tracemalloc.start()
    output, is_error = call("read_file", {"path": "huge.log"}, ws)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not is_error and output.startswith("first line") and output.endswith("last line\n")
    assert "bytes in the middle not read" in output and peak < 5_000_000


def test_writing_or_editing_something_that_is_not_a_file_is_refused(ws):
    os.mkfifo(ws / "pipe")
    assert call("write_file", {"path": "pipe", "content": "x"}, ws)[1] is True
    assert call("edit_file", {"path": "pipe", "old_text": "a", "new_text": "b"}, ws)[1] is True


def test_a_glob_repeating_star_star_over_a_deep_tree_is_refused_in_one_line(ws):
    """After one write to a 40-deep path, `**/**/**/**/**/*` ran past 30 s (red team five): each ** walks
    the whole tree below the one before. One ** reaches every depth, so more are refused."""
    deep = ws.joinpath(*[f"d{n}" for n in range(40)])
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("x\n")
    for tool in ("list_files", "grep"):
        given = {"glob": "**/**/**/**/**/*"} | ({"pattern": "x"} if tool == "grep" else {})
        output, is_error = call(tool, given, ws)
        assert is_error and output.count("\n") == 0 and "narrow it" in output
    output, is_error = call("list_files", {"glob": "**/f.txt"}, ws)  # one **: the same file, found
    assert not is_error and output == str(deep.relative_to(ws) / "f.txt")


def test_the_person_is_told_why_auto_asks_and_warned_of_a_danger_first(ws):
    told = []

    def person(call, danger, why):
        told.append((danger, why))
        return False

    for command in ("python3 test_utils.py", "rm -rf build"):
        s02.execute(anthropic_block("bash", {"command": command}), ws, "auto", None, person)
    assert told[0] == (None, "'python3' is not a read-only command auto knows")
    assert told[1][0] == "rm -r/-f deletes with no undo"
