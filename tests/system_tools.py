"""The tools beyond Python that some tests need, and what a test does on a machine without one.

A test that needs one is marked `@needs("bwrap")` (or "node", "wrk"). Where the tool is
missing, the test skips with one line naming the tool and how to install it: a student's laptop (or a
Mac, which has no bubblewrap) runs the rest of the suite green. Where
WORKBOOK_REQUIRE_TOOLS=1 is set, as .ci/run sets it, a missing tool fails the test instead, so CI runs
every test or says which tool it lacked. tests/conftest.py applies the mark (pytest_runtest_setup)."""

import functools
import os
import shutil

import pytest

REQUIRE = "WORKBOOK_REQUIRE_TOOLS"  # set to 1: a missing tool fails its tests instead of skipping them

# tool -> (what it is for, how to install it)
TOOLS = {
    "bwrap": ("bubblewrap, the grader's sandbox", "apt-get install bubblewrap (Linux only)"),
    "node": (
        "Node.js 20 or newer with npm, for the real JavaScript clients",
        "apt-get install nodejs npm (or nodejs.org), then: cd tests/clients/node && npm ci",
    ),
    "wrk": ("wrk, the HTTP load generator of the classroom's benchmark", "apt-get install wrk"),
}


def needs(tool: str) -> pytest.MarkDecorator:
    """Mark a test (or a parameter) as needing `tool`, one of TOOLS."""
    assert tool in TOOLS, tool
    return pytest.mark.needs_tool(tool)


@functools.cache
def missing(tool: str) -> str | None:
    """Why `tool` cannot be used on this machine, or None when it can."""
    if tool == "bwrap":
        from workbook.classroom import sandbox

        return sandbox.find_bwrap()[1]
    if tool == "node":
        lacking = [name for name in ("node", "npm") if shutil.which(name) is None]
        return f"{' and '.join(lacking)} not on PATH" if lacking else None
    return None if shutil.which(tool) else f"{tool} is not on PATH"


def check(tool: str) -> None:
    """Skip (or, under WORKBOOK_REQUIRE_TOOLS=1, fail) the running test when `tool` is missing."""
    problem = missing(tool)
    if problem is None:
        return
    what, install = TOOLS[tool]
    line = f"needs {what}: {problem}; {install}"
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{line} ({REQUIRE}=1: a missing tool fails)", pytrace=False)
    pytest.skip(line)
