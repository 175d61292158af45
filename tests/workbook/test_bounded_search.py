"""workbook/bounded_search.py: a stranger's pattern is bounded in time and memory, compile included
(issue 39: `a{100000000}` was a MemoryError traceback, a nested repeat took 24 GB), and s02's grep
turns a pattern too large to compile into one is_error line."""

import resource
import time
from concurrent.futures import ThreadPoolExecutor

from workbook import bounded_search

import anthropic
import pytest

import s02_tools as s02

BOMBS = [
    "a{100000000}",  # a MemoryError traceback before
    "a{10000000}",  # 2.7 GB before
    "(?:(?:(?:a{100}){100}){100}){100}",  # nested fixed repeats: their product
    "((((a{1000}){1000}){1000}){1000})",
]


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "notes.txt").write_text("alpha\nbeta\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\n")
    return tmp_path.resolve()


def call(pattern: str) -> anthropic.types.ToolUseBlock:
    return anthropic.types.ToolUseBlock(
        type="tool_use", id="toolu_g", name="grep", input={"pattern": pattern}
    )


@pytest.mark.parametrize("pattern", BOMBS)
def test_a_pattern_too_large_to_compile_is_one_is_error_line_and_costs_this_process_nothing(
    pattern, workspace
):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    output, is_error = s02.execute(call(pattern), workspace, "auto")
    assert is_error and output.count("\n") == 0 and "Traceback" not in output
    assert "is too large a regular expression" in output or "ends in time" in output
    # The bound is GREP_CPU_SECONDS of CPU; on a loaded machine the wall clock runs longer: this only
    # says the search did not run on for ever (a backtracking `re` would take years here).
    assert time.monotonic() - started < 20 * s02.GREP_CPU_SECONDS
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KB: the child paid


def test_the_child_is_held_to_its_memory_bound():
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with pytest.raises(bounded_search.PatternError, match="needs more than 512 MB"):
        bounded_search.grep("a{100000000}", [], bounded_search.Path("."))
    grown = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert grown < before + (bounded_search.MEMORY_BYTES >> 10) + 400_000 or grown == before  # KB


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(?:a*)*b"])
def test_a_backtracking_pattern_ends_in_time(pattern, tmp_path, monkeypatch):
    monkeypatch.setattr(s02, "GREP_CPU_SECONDS", 0.5)  # (a|aa)+$ here takes some 3 s: the bound must end it
    (tmp_path / "redos.txt").write_text("a" * 32 + "!\n")
    workspace = tmp_path.resolve()
    started = time.monotonic()
    output, is_error = s02.execute(call(pattern), workspace, "auto")
    assert output == "(no matches)" or (is_error and "ends in time" in output), output
    # The bound is GREP_CPU_SECONDS of CPU; on a loaded machine the wall clock runs longer: this only
    # says the search did not run on for ever (a backtracking `re` would take years here).
    assert time.monotonic() - started < 20 * s02.GREP_CPU_SECONDS


def test_a_pattern_that_is_not_one_says_so(workspace):
    output, is_error = s02.execute(call("(unclosed"), workspace, "auto")
    assert is_error and output.startswith("error: '(unclosed' is not a regular expression: ")


@pytest.mark.parametrize("pattern", ["beta", "b.t", "al{1}p", r"(?:al){1}pha|\bbeta\b"])
def test_plain_and_braced_patterns_find_the_same_lines(pattern, workspace):
    found = bounded_search.grep(pattern, [workspace / "notes.txt"], workspace)
    expected = {"beta": ["notes.txt:2: beta"], "b.t": ["notes.txt:2: beta"]}
    both = ["notes.txt:1: alpha", "notes.txt:2: beta"]
    assert found == expected.get(pattern, ["notes.txt:1: alpha"] if pattern == "al{1}p" else both)


def test_only_plainly_small_patterns_are_searched_in_this_process():
    assert bounded_search.simple("def \\w+\\(") and bounded_search.simple("TODO|FIXME")
    for pattern in ["a{3}", "(a+)+$", "(?:x*)*", "(?:foo){e<=1}", "x" * 2000, "(" * 500 + ")" * 500]:
        assert not bounded_search.simple(pattern), pattern


def test_searches_from_many_threads_at_once_each_get_their_own_answer(workspace):
    """s04 runs reads side by side: each fork answers its own call, bombs and plain ones mixed."""
    patterns = ["al{1}p", BOMBS[0], "bet{1}a", BOMBS[2]] * 2
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda p: s02.execute(call(p), workspace, "auto"), patterns))
    for pattern, (output, is_error) in zip(patterns, outputs):
        if pattern == "al{1}p":
            assert output == "notes.txt:1: alpha"
        elif pattern == "bet{1}a":
            assert output == "notes.txt:2: beta"
        else:
            assert is_error


def test_the_matches_are_bounded(workspace):
    (workspace / "many.txt").write_text("match " + "x" * 5000 + "\n" + "match\n" * 100_000)
    found = bounded_search.grep("mat{1}ch", [workspace / "many.txt"], workspace, max_matches=500)
    assert len(found) == 500 and len(found[0]) < 1100
