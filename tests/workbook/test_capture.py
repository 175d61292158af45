"""workbook/capture.py's Group and run_command: nothing a tool's command starts outlives the call, on
success, timeout or Ctrl-C (issue 39: `sleep 313 &`, a `cat` blocked on a FIFO, children left after a
timeout, all outlived the step). The last tests are s01's and s03's run_bash, which the steps call
through; they pass once run_bash runs its command with capture.Group (or capture.run_command)."""

import os
import subprocess
import sys
import time
from pathlib import Path

from workbook import capture

import pytest


def running(marker: str) -> list[int]:
    """The live processes whose command line holds `marker` (zombies, already dead, are not counted)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture
def marker():
    """A sleep length no other process uses: `sleep <marker>` is how a test finds what was left."""
    value = str(310_000 + os.getpid() % 1000 * 10 + int(time.monotonic() * 1000) % 10)
    yield value
    for pid in running(f"sleep\0{value}") + running(f"cat\0fifo{value}"):  # never leave one behind
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
}


@pytest.mark.parametrize("how", sorted(LEAVERS))
def test_nothing_a_command_started_outlives_it(how, marker, tmp_path):
    started = time.monotonic()
    code, output = capture.run_command(LEAVERS[how].format(m=marker), tmp_path, 30)
    assert code == 0 and output.startswith("started")
    assert running(f"sleep\0{marker}") == []
    assert time.monotonic() - started < capture.DRAIN_WAIT  # nothing left holds the pipe open


def test_a_cat_blocked_on_a_fifo_ends_with_its_timeout(marker, tmp_path):
    os.mkfifo(tmp_path / f"fifo{marker}")
    code, output = capture.run_command(f"sleep {marker} & cat fifo{marker}", tmp_path, 1)
    assert code is None
    assert running(f"sleep\0{marker}") == [] and running(f"cat\0fifo{marker}") == []


def test_a_ctrl_c_ends_the_command_and_all_it_started(marker, tmp_path):
    def interrupted(process, timeout):
        time.sleep(0.5)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture.run_command(f"setsid sleep {marker} & sleep {marker}", tmp_path, 30, interrupted)
    assert running(f"sleep\0{marker}") == []


def test_the_command_gets_a_tools_environment_and_its_mark(monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_teacherGitHubToken0123456789")
    code, output = capture.run_command("env", tmp_path, 10)
    assert "GITHUB_TOKEN" not in output and f"{capture.MARK}=" in output and "PATH=" in output


# -- the steps' run_bash ---------------------------------------------------------------------------

WIRED = pytest.mark.xfail(
    reason="s01's and s03's run_bash call capture.Group once the steps are rewired (docs: security report)",
    strict=False,
)


@WIRED
@pytest.mark.parametrize("step", ["s01_agent_loop", "s03_errors"])
@pytest.mark.parametrize("how", ["background", "setsid", "daemon"])
def test_a_steps_bash_leaves_nothing_running(step, how, marker, tmp_path):
    run_bash = __import__(step).run_bash
    output = run_bash(LEAVERS[how].format(m=marker), tmp_path)
    assert output.startswith("started")
    assert running(f"sleep\0{marker}") == []


@WIRED
@pytest.mark.parametrize("step", ["s01_agent_loop", "s03_errors"])
def test_a_steps_bash_timeout_leaves_nothing_running(step, marker, tmp_path):
    run_bash = __import__(step).run_bash
    os.mkfifo(tmp_path / f"fifo{marker}")
    with pytest.raises(Exception) if step == "s03_errors" else _nothing():
        run_bash(f"setsid sleep {marker} & cat fifo{marker}", tmp_path, timeout=1)
    assert running(f"sleep\0{marker}") == [] and running(f"cat\0fifo{marker}") == []


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@WIRED
def test_a_second_ctrl_c_in_s05_leaves_nothing_running(marker, tmp_path):
    """s05 runs a step in a process of its own; two SIGINTs while bash runs a command that started a
    setsid sleeper: after the step exits, no sleeper is left."""
    code = (
        "import os, signal, threading, s03_errors as s03, s05_budget as s05\n"
        "from pathlib import Path\n"
        "def twice():\n"
        "    import time; time.sleep(1.5); os.kill(os.getpid(), signal.SIGINT); time.sleep(0.3); "
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "threading.Thread(target=twice, daemon=True).start()\n"
        f"s05.bash(Path({str(tmp_path)!r}), 'setsid sleep {marker} & sleep {marker}')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True, timeout=60
    )
    assert done.returncode != 0
    time.sleep(0.2)
    assert running(f"sleep\0{marker}") == []
