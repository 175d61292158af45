"""workbook/classroom/keeper.py: the graded program's parent, its bounds, and nothing left after it."""

import os
import subprocess
import sys

from workbook import processes
from workbook.classroom import keeper, sandbox

import psutil
import pytest


def test_options_come_before_the_program_each_with_its_own_count_of_words():
    argv = ["--seed", "FROM", "TO", "--cwd", "w", "--", "python", "--seed", "x"]
    assert keeper.options_of(argv) == ({"--seed": ["FROM", "TO"], "--cwd": ["w"]}, ["python", "--seed", "x"])


def test_a_program_killed_by_a_signal_exits_as_a_shell_reports_it():
    assert keeper.exit_code(-9) == 137 and keeper.exit_code(3) == 3


def test_a_program_with_too_many_processes_is_too_much(monkeypatch):
    monkeypatch.setattr(processes, "below", lambda me: [psutil.Process()] * (keeper.PROCESSES + 1))
    assert keeper.too_much(os.getpid()) == f"more than {keeper.PROCESSES} processes at once"


def test_the_keeper_started_isolated_ends_with_the_programs_code_and_leaves_nothing_running(tmp_path):
    marker = f"{310_000 + os.getpid() % 10_000}"
    program = ["sh", "-c", f"setsid sleep {marker} & sleep {marker} & echo started; exit 3"]
    done = subprocess.run(
        sandbox.keeper_argv(["--cwd", str(tmp_path)]) + program, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (3, "started\n"), done.stderr
    assert processes.running(f"sleep {marker}") == []  # the keeper killed both before it exited


MEMFD_WRITER = (
    "import os, sys\n"
    "fd = os.memfd_create('hoard')\n"
    "for _ in range(64): os.write(fd, b'x' * (1 << 20))\n"
    "print('WROTE', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd_create is Linux's")
def test_memory_written_to_a_memfd_counts_against_the_bound(monkeypatch):
    """64 MB in a memfd, which no resident count shows: the watchdog's count holds it, and a bound below
    it stops the program (red team five wrote 1,500 MB so while 14 MB was resident)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", MEMFD_WRITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert writer.stdout.readline() == b"WROTE\n"
        process = psutil.Process(writer.pid)
        assert processes.resident([process]) < 64 << 20 <= processes.shared_memory([process])
        monkeypatch.setattr(processes, "below", lambda me: [process])
        monkeypatch.setattr(keeper, "TOTAL_MEMORY", 64 << 20)
        assert keeper.too_much(os.getpid()) == "more than 0 GiB of memory"
    finally:
        writer.kill()
        writer.wait()
