"""A replay's workspace is a fresh copy in a folder of its own, and no copy outlives its run."""

import subprocess
import tempfile
from pathlib import Path

from workbook import errors, scratch

import pytest
from conftest import ROOT, offline_env
from saver import small_program


def test_copy_workspace_refuses_a_path(tmp_path):
    with pytest.raises(errors.FixtureError, match="not a path"):
        scratch.copy_workspace("../../..")


def test_replays_leave_no_workspace_behind(run_main):
    root = scratch.scratch_root()
    before = set(root.glob("*/workspace"))  # copies other tests in this process still hold
    for _ in range(3):
        assert run_main("s01_agent_loop")[0] == 0
    assert set(root.glob("*/workspace")) <= before


def made_by_a_process(code: str) -> Path:
    """The workspace path a separate Python process printed, after it has ended."""
    return Path(subprocess.check_output(small_program(code), cwd=ROOT, env=offline_env(), text=True).strip())


def test_a_killed_runs_copy_is_swept_by_the_next_run(tmp_path):
    # os._exit: no clean-up at exit, as after a kill
    make = (
        "import os; from workbook import scratch\n"
        "print(scratch.copy_workspace('hello'), flush=True); os._exit(0)"
    )
    left = made_by_a_process(make)
    assert left.name == "workspace" and left.is_dir()
    scratch.release(scratch.copy_workspace("hello").parent)
    assert not left.exists()


def test_a_process_removes_its_copies_when_it_exits():
    make = "from workbook import scratch; print(scratch.copy_workspace('hello'))"
    left = made_by_a_process(make)
    assert not left.exists() and not left.parent.exists()


# -- from the red-team round (issue 39) ----------------------------------------


def test_a_sticky_folder_is_private_below_when_the_next_folder_is_ours(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine = sticky / "mine"
    mine.mkdir(mode=0o700)
    assert scratch.private_path(mine) and not scratch.private_path(sticky)


def test_a_relative_tmpdir_puts_no_scratch_root_in_the_current_folder(tmp_path, monkeypatch):
    """As in a process started with TMPDIR=relative-tmp: tempfile has not yet chosen its folder."""
    monkeypatch.setenv("TMPDIR", "relative-tmp")
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(scratch, "_PRIVATE_ROOT", None)  # none made yet, as in a new process
    monkeypatch.chdir(tmp_path)
    assert str(scratch.scratch_root()).startswith("/tmp/") and not (tmp_path / "relative-tmp").exists()
