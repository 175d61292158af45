"""workbook/environment.py: gathering a live run's git state runs no program the workspace's own git
config names (issue 39: `git status` ran a core.fsmonitor hook unasked, even under --permission deny)."""

import os
import shutil
import subprocess

from workbook import environment

import pytest

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def repository(folder, marker) -> None:
    """A repository whose own config (as a downloaded zip of one could carry) names a hook."""
    hook = folder / "hook.sh"
    hook.write_text(f'#!/bin/sh\necho "$GITHUB_TOKEN $ANTHROPIC_API_KEY" > {marker}\n')
    hook.chmod(0o755)
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run([*git[:3], "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "config", "core.fsmonitor", str(hook)], check=True)
    (folder / "a.txt").write_text("a\n")


@needs_git
def test_git_status_runs_no_fsmonitor_hook_and_still_reads_the_state(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_teacherGitHubToken0123456789")
    marker = tmp_path / "hook-ran"
    repository(tmp_path, marker)
    assert environment.git_state(tmp_path) == "branch main, 2 files changed"
    assert not marker.exists()


@needs_git
def test_the_hook_would_have_run_without_the_safe_options(tmp_path):
    """The repository above is a real attack: plain `git status` runs its hook."""
    marker = tmp_path / "hook-ran"
    repository(tmp_path, marker)
    subprocess.run(["git", "-C", str(tmp_path), "status", "--porcelain"], capture_output=True, env=os.environ)
    assert marker.exists()
