"""workbook/scratch.py: where caches and temp folders go. A relative XDG_CACHE_HOME or TMPDIR is ignored
(the XDG spec; a folder relative to wherever the reader stands is no cache), and a cache whose path
another user could change (a world-writable folder above it, a link planted in it) is not used: what
is cached there is loaded back (issue 39: a planted file was exec'd in the teacher's process)."""

import os
import subprocess
import sys

from workbook import scratch

import pytest
from conftest import ROOT


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


def test_a_relative_tmpdir_puts_no_scratch_root_in_the_current_folder(tmp_path):
    code = "from workbook import scratch; print(scratch.scratch_root())"
    env = {**os.environ, "TMPDIR": "relative-tmp", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("/tmp/") and not (tmp_path / "relative-tmp").exists()
