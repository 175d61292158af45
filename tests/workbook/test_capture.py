"""workbook/capture.py's Group and run: nothing a tool's command starts outlives the call, on
success, timeout or Ctrl-C (issue 39: `sleep 313 &`, a `cat` blocked on a FIFO, children left after a
timeout, all outlived the step). The last tests are s01's and s03's run_bash, which the steps call
through; they pass once run_bash runs its command with capture.Group (or capture.run)."""

import os
import subprocess
import sys
import time
from pathlib import Path

from workbook import capture, processes

import pytest


def wait_until_running(marker: str) -> None:
    """Wait for the event: a process with `sleep <marker>` as its command line is running."""
    deadline = time.monotonic() + 30  # a safety net only
    while not processes.running(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.01)


def all_ended(*markers: str) -> bool:
    """Whether every process with one of `markers` in its command line has ended: a SIGKILL is delivered
    as the process next runs, so wait for that event (a deadline only as a safety net)."""
    deadline = time.monotonic() + 30
    while any(processes.running(m) for m in markers) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not any(processes.running(m) for m in markers)


@pytest.fixture
def marker():
    """A sleep length no other process uses: `sleep <marker>` is how a test finds what was left."""
    value = str(310_000 + os.getpid() % 1000 * 10 + int(time.monotonic() * 1000) % 10)
    yield value
    for pid in processes.running(f"sleep {value}") + processes.running(
        f"cat fifo{value}"
    ):  # never leave one behind
        os.kill(pid, 9)


LEAVERS = {
    "background": "sleep {m} & echo started",
    "subshell": "(sleep {m} &) ; echo started",
    "setsid": "setsid sleep {m} & echo started",
    "daemon": (
        f'{sys.executable} -c "import os, sys\nif os.fork() == 0:\n    os.setsid()\n'
        "    if os.fork() == 0: os.execvp('sleep', ['sleep', '{m}'])\n    os._exit(0)\n\" ; echo started"
    ),
    "nohup": "nohup sleep {m} >/dev/null 2>&1 & echo started",
    # setsid with no environment, so without the call's mark: found as an orphan re-parented to us.
    # The shell waits until the daemon is in its own session (its pid written), then ends.
    "unmarked": "env -i setsid sh -c 'echo $$ > daemon.pid; exec sleep {m}' & "
    "while [ ! -s daemon.pid ]; do :; done; echo started",
}


@pytest.mark.parametrize("how", sorted(LEAVERS))
def test_nothing_a_command_started_outlives_it(how, marker, tmp_path):
    done = capture.run(LEAVERS[how].format(m=marker), tmp_path, 30)
    assert done.returncode == 0 and done.stdout.startswith("started")
    assert all_ended(f"sleep {marker}")


def test_a_cat_blocked_on_a_fifo_ends_with_its_timeout(marker, tmp_path):
    os.mkfifo(tmp_path / f"fifo{marker}")
    with pytest.raises(subprocess.TimeoutExpired):
        capture.run(f"sleep {marker} & cat fifo{marker}", tmp_path, 1)
    assert all_ended(f"sleep {marker}", f"cat fifo{marker}")


def interrupt_then_check(monkeypatch, patch: tuple, started: str, marker: str, folder: Path) -> None:
    """Run `started`, then `sleep marker` in the foreground, in `folder`, with `patch` (owner, name,
    stand-in) raising the Ctrl-C on the way: the Ctrl-C comes through, and nothing the command started
    is left running."""
    monkeypatch.setattr(*patch)
    with pytest.raises(KeyboardInterrupt):
        capture.run(f"{started} sleep {marker}", folder, 30)
    monkeypatch.undo()
    assert all_ended(f"sleep {marker}")


def test_a_ctrl_c_ends_the_command_and_all_it_started(marker, tmp_path, monkeypatch):
    real_wait = subprocess.Popen.wait
    waits = []

    def interrupted(process, timeout=None):
        """The first wait ends in a Ctrl-C once the sleeper runs (the event); any later wait is real."""
        if waits:
            return real_wait(process, timeout)
        waits.append(process)
        wait_until_running(marker)
        raise KeyboardInterrupt

    interrupt_then_check(
        monkeypatch, (subprocess.Popen, "wait", interrupted), f"setsid sleep {marker} &", marker, tmp_path
    )
    assert waits


def test_a_ctrl_c_before_the_group_heard_of_the_command_still_ends_it(marker, tmp_path, monkeypatch):
    """The Ctrl-C lands after Popen started the command and before group.started(): the window a loaded
    machine once hit (a `sleep 397` outlived s02 beside two busy processes). The mark finds it."""

    def interrupted(group, process):
        wait_until_running(marker)
        raise KeyboardInterrupt

    interrupt_then_check(
        monkeypatch, (capture.Group, "started", interrupted), f"sleep {marker} &", marker, tmp_path
    )


def test_the_command_gets_a_tools_environment_and_its_mark(monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_teacherGitHubToken0123456789")
    output = capture.run("env", tmp_path, 10).stdout
    assert "GITHUB_TOKEN" not in output and f"{capture.MARK}=" in output and "PATH=" in output


# -- the steps' bash ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(LEAVERS))
def test_s02s_bash_leaves_nothing_running(how, marker, tmp_path):
    import s02_tools

    assert s02_tools.bash(tmp_path, LEAVERS[how].format(m=marker)).startswith("started")
    assert all_ended(f"sleep {marker}")


def test_s02s_bash_timeout_leaves_nothing_running(marker, tmp_path, monkeypatch):
    import s02_tools

    monkeypatch.setattr(s02_tools, "BASH_TIMEOUT", 1)
    os.mkfifo(tmp_path / f"fifo{marker}")
    with pytest.raises(s02_tools.ToolError, match="timed out"):
        s02_tools.bash(tmp_path, f"setsid sleep {marker} & cat fifo{marker}")
    assert all_ended(f"sleep {marker}", f"cat fifo{marker}")


@pytest.mark.parametrize("how", ["background", "subshell", "nohup"])
def test_s01s_run_bash_leaves_nothing_of_its_group_running(how, marker, tmp_path):
    """s01's run_bash is the plain version a reader writes: a process group of its own, ended with the
    call. (What leaves the group, setsid or a daemon, is s02's lesson: capture.run.)"""
    import s01_agent_loop

    assert s01_agent_loop.run_bash(LEAVERS[how].format(m=marker), tmp_path).startswith("started")
    assert all_ended(f"sleep {marker}")


def test_a_command_s_processes_are_looked_for_once_when_its_call_ends_cleanly(tmp_path, monkeypatch):
    """run() ends its Group itself, and the with block ends it again: the second finds end() done and
    walks no process list a second time; an end() cut short would still be run whole (it sets ended last)."""
    walks = []
    carrying = processes.carrying
    monkeypatch.setattr(processes, "carrying", lambda *args: walks.append(args) or carrying(*args))
    done = capture.run("echo hi", tmp_path, 10)
    assert done.stdout.strip() == "hi" and len(walks) == 1
