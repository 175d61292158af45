"""The suite benchmark: the README's test command, its slowest tests, and busy processes beside it."""

from pathlib import Path

import pytest

from bench import suite


def test_suite_command_is_pytest_from_this_environment():
    command = suite.command()
    assert command[-1].endswith("pytest")
    assert Path(command[0]).exists()


def test_suite_reports_the_slowest_tests_pytest_names_and_the_median_run():
    output = "== slowest 3 durations ==\n12.34s setup    tests/a.py::t\n0.50s call tests/b.py::u\n3 passed\n"
    assert suite.slowest_tests(output) == ["12.34s setup    tests/a.py::t", "0.50s call tests/b.py::u"]
    runs = {"walls": [70.0, 50.0, 60.0], "loads": [(0.1, 2.0)] * 3, "cores": 2, "cpu": 99.0}
    text = suite.report(runs | {"wall": 60.0, "summary": "3 passed", "slowest": ["1.00s call a::b"]})
    assert text.startswith("pytest: median 60.0 s wall of 3 run(s) (70.0, 50.0, 60.0 s) on 2 cores")
    assert "load average before→after: 0.1→2.0" in text and text.endswith("    1.00s call a::b")


def test_busy_processes_spin_while_held_and_are_killed_after():
    import os

    with suite.busy_processes(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # alive: no error
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
