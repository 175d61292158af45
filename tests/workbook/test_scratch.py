"""A replay's workspace is a fresh copy in a folder of its own, and no copy outlives its run."""

import os
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


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return home


def test_a_relative_xdg_cache_home_is_ignored(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "cache-here")
    assert scratch.cache_home() == home / ".cache"
    assert scratch.cache_folder("agent-loop-workbook") == home / ".cache" / "agent-loop-workbook"
    assert not (tmp_path / "cache-here").exists()


def test_an_absolute_xdg_cache_home_is_used(home, tmp_path, monkeypatch):
    cache = tmp_path / "xdg"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert scratch.cache_folder("agent-loop-workbook") == cache / "agent-loop-workbook"


def test_a_cache_under_a_folder_others_can_write_is_not_used(home, tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # made beforehand by someone, mode 0777, no sticky bit
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    folder = scratch.cache_folder("agent-loop-workbook")
    assert folder.parent == scratch.scratch_root() and scratch.private_path(folder)


def test_a_cache_folder_swapped_for_a_link_is_not_used(home, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / ".cache").mkdir()
    (home / ".cache" / "agent-loop-workbook").symlink_to(elsewhere)
    assert scratch.cache_folder("agent-loop-workbook").parent == scratch.scratch_root()


def test_a_sticky_folder_is_private_below_when_the_next_folder_is_ours(tmp_path):
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine = sticky / "mine"
    mine.mkdir(mode=0o700)
    assert scratch.private_path(mine) and not scratch.private_path(sticky)


def test_a_cached_file_is_read_only_if_it_is_a_private_file_of_ours(tmp_path):
    good = tmp_path / "good.bin"
    good.write_bytes(b"ok")
    good.chmod(0o644)
    assert scratch.read_private(good) == b"ok"
    link = tmp_path / "link.bin"
    link.symlink_to(good)
    with pytest.raises(OSError):
        scratch.read_private(link)
    good.chmod(0o666)
    with pytest.raises(PermissionError):
        scratch.read_private(good)


@pytest.mark.skipif(os.getuid() != 0, reason="only root can give a file to another user")
def test_a_cached_file_another_user_owns_is_not_read(tmp_path):
    theirs = tmp_path / "theirs.bin"
    theirs.write_bytes(b"planted")
    os.chown(theirs, 65534, 65534)
    with pytest.raises(PermissionError):
        scratch.read_private(theirs)


def test_a_relative_tmpdir_puts_no_scratch_root_in_the_current_folder(tmp_path, monkeypatch):
    """As in a process started with TMPDIR=relative-tmp: tempfile has not yet chosen its folder."""
    monkeypatch.setenv("TMPDIR", "relative-tmp")
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setattr(scratch, "_PRIVATE_ROOT", None)  # none made yet, as in a new process
    monkeypatch.chdir(tmp_path)
    assert str(scratch.scratch_root()).startswith("/tmp/") and not (tmp_path / "relative-tmp").exists()
