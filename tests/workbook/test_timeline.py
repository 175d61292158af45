"""s04's timeline reads right in an 80-column terminal and says in words which calls ran together."""

import io
from types import SimpleNamespace

from workbook import display

import pytest
from rich.console import Console

from s04_parallel import Timed


def call(name: str, path: str):
    return SimpleNamespace(name=name, input={"path": path})


@pytest.fixture
def screen(monkeypatch):
    """display.console as an 80-column terminal that writes to memory: returns what it printed."""
    out = io.StringIO()
    monkeypatch.setattr(
        display, "console", Console(file=out, width=80, force_terminal=False, highlight=False)
    )
    return lambda: out.getvalue().splitlines()


def timed(*rows):
    """Timed records from (group, started, ended) rows, each a read of a long path."""
    return [
        Timed(i, call("read_file", f"inventory/a/long/folder/module_{i}.py"), *row)
        for i, row in enumerate(rows)
    ]


def bar(line: str) -> str:
    return line.split("|")[1]


def test_every_line_fits_80_columns_with_the_bars_whole(screen):
    display.show_timeline(timed((1, 0.0, 0.2), (1, 0.0, 0.2), (2, 0.2, 0.3)))
    lines = screen()
    assert max(map(len, lines)) <= 80
    calls = [line for line in lines if "|" in line]
    assert len(calls) == 3 and all(line.endswith("|") for line in calls)


def test_calls_that_overlap_are_said_to_run_together(screen):
    display.show_timeline(timed((1, 0.0, 0.2), (1, 0.01, 0.2), (1, 0.02, 0.21)))
    assert "   group 1: 3 reads ran together, up to 3 at once" in screen()


def test_calls_run_one_by_one_are_a_staircase_and_said_so(screen):
    display.show_timeline(timed((1, 0.0, 0.1), (1, 0.1, 0.2), (1, 0.2, 0.3)))
    lines = screen()
    starts = [len(bar(line)) - len(bar(line).lstrip()) for line in lines if "|" in line]
    assert starts == sorted(starts) and len(set(starts)) == 3
    assert "   group 1: 3 reads sent to the thread pool together; none overlapped another" in lines


def test_calls_too_quick_to_time_are_listed_by_group_with_no_bars(screen):
    """Round-10 to round-14 readers took bars drawn for 0 ms calls for durations."""
    display.show_timeline(timed((1, 0.0, 0.0001), (1, 0.0002, 0.0003), (2, 0.0004, 0.0005)))
    lines = screen()
    assert not any("|" in line or "█" in line for line in lines)
    assert [line.split()[0] for line in lines[1:4]] == ["g1", "g1", "g2"]
    assert lines[0].endswith("; too quick to time: no bars)")
    assert "   group 1: 2 reads sent to the thread pool together (each too quick to time)" in lines
    assert any(line.startswith("   group 2: read_file") and line.endswith(", alone") for line in lines)


def test_a_turn_of_one_call_shows_no_timeline(screen):
    display.show_timeline(timed((1, 0.0, 0.2)))
    assert screen() == []


def test_patching_a_steps_console_in_a_test_puts_supports_console_back(monkeypatch):
    """conftest.Step sets `console` on workbook.display; undoing the patch must not delete it (every later
    test in the same worker, the timeline's included, prints through it)."""
    from conftest import load_step

    before = display.console
    with monkeypatch.context() as patch:
        patch.setattr(load_step("s02_tools"), "console", None)
        assert display.console is None
    assert display.console is before
