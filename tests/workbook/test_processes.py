"""workbook/processes.py: processes found and ended through psutil, by what they are to us."""

import os
import subprocess
import sys

from workbook import processes

import psutil
import pytest

# A child that starts a grandchild, says its pid, and waits on its input.
PARENT = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],\n"
    "                         stdin=subprocess.PIPE)\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def family():
    """(parent, grandchild pid): a process and the one it started, both waiting; ended after the test."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    grandchild = int(parent.stdout.readline())
    yield parent, grandchild
    processes.kill([parent.pid, grandchild])
    parent.wait()


def test_below_finds_every_process_at_any_depth(family):
    parent, grandchild = family
    found = {p.pid for p in processes.below(os.getpid())}  # in no promised order
    assert {parent.pid, grandchild} <= found
    assert [p.pid for p in processes.children(parent.pid)] == [grandchild]
    assert "sys.stdin.read()" in processes.command_line(psutil.Process(grandchild))


def test_kill_ends_them_all_and_passes_over_the_ended(family):
    parent, grandchild = family
    below = processes.below(parent.pid)
    processes.kill([parent, *below])
    gone, alive = psutil.wait_procs([psutil.Process(grandchild)], timeout=30)
    assert parent.wait(30) == -9 and not alive
    processes.kill([parent.pid, grandchild])  # ended already: no error


def test_an_ended_process_has_nothing_below_it():
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert processes.below(ended.pid) == [] and processes.children(ended.pid) == []


def test_carrying_finds_the_processes_whose_environment_holds_the_mark():
    marked = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env=os.environ | {"TEST_MARK": "m1"},
    )
    try:
        assert processes.carrying("TEST_MARK", "m1") == [marked.pid]
        assert processes.carrying("TEST_MARK", "m1", after=marked.pid) == []
        assert processes.carrying("TEST_MARK", "m2") == []
    finally:
        marked.kill()
        marked.wait()


def test_in_session_finds_the_processes_of_a_new_session():
    leader = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        assert processes.in_session(leader.pid) == [leader.pid]
    finally:
        leader.kill()
        leader.wait()


def test_running_finds_a_command_line_until_it_has_ended():
    needle = f"import sys; sys.stdin.read()  # {os.getpid()}"
    waiting = subprocess.Popen([sys.executable, "-c", needle], stdin=subprocess.PIPE)
    assert processes.running(needle) == [waiting.pid]
    waiting.kill()
    waiting.wait()
    assert processes.running(needle) == []


def test_the_users_threads_count_this_processes_own():
    assert processes.threads_of_user(os.getuid()) >= psutil.Process().num_threads() >= 1
    assert processes.threads_of_user(os.getuid() + 12345) == 0  # a user with no processes


def test_resident_memory_is_summed_over_the_processes(family):
    parent, grandchild = family
    one = processes.resident([psutil.Process(parent.pid)])
    assert (
        one > 1 << 20 and processes.resident([psutil.Process(parent.pid), psutil.Process(grandchild)]) > one
    )
