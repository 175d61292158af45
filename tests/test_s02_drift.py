"""From s02 on: what a step inherits from the step before it stays byte-identical, unless it says so.

The convention. Each step's module docstring (from s02 on) carries one line, which may wrap until
the next blank line:

    Changed from sNN: NAME, NAME (a note in brackets is ignored), NAME

listing every top-level name of the previous step — function, class or assigned constant — whose
definition this step changes or drops. Every other top-level name the two scripts share must have
byte-identical source, comments on its lines included. The list is kept honest too: a listed name
must exist in the previous step, and must really differ or be gone. Imports and new names are free.

These tests run over every pair of consecutive steps that exist, so each new step gets them for free.
"""

import ast
import re

import pytest
from conftest import ROOT, STEPS

PAIRS = list(zip(STEPS, STEPS[1:]))  # e.g. ("s01_agent_loop", "s02_tools")


def definitions(source: str) -> dict[str, str]:
    """Top-level name -> its source lines (decorators and same-line comments included)."""
    lines, found = source.splitlines(), {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        else:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        for name in names:
            found[name] = "\n".join(lines[start - 1 : node.end_lineno])
    return found


def declared_changes(source: str, previous: str) -> list[str] | None:
    """The names after `Changed from <previous>:` in the module docstring, or None without that line."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    found = re.search(rf"^Changed from {previous}: (.+?)(?:\n\s*\n|\Z)", doc, re.MULTILINE | re.DOTALL)
    if not found:
        return None
    items = re.sub(r"\([^)]*\)", "", found.group(1)).split(",")
    return [re.match(r"\s*(\w+)", item).group(1) for item in items if item.strip()]


def drift(previous_source: str, source: str, previous: str) -> list[str]:
    """Every way `source` breaks the convention against the step before it (empty when it keeps it)."""
    before, after = definitions(previous_source), definitions(source)
    changed = declared_changes(source, previous)
    if changed is None:
        return [f"the docstring has no `Changed from {previous}: ...` line"]
    problems = [
        f"{name}: listed as changed but {previous} has no such name" for name in changed if name not in before
    ]
    for name, text in before.items():
        differs = after.get(name) != text
        if differs and name not in changed:
            gone = "is gone" if name not in after else "differs"
            problems.append(f"{name} {gone} from {previous}, but the docstring does not list it as changed")
        if not differs and name in changed:
            problems.append(f"{name}: listed as changed but byte-identical to {previous}")
    return problems


def banners(source: str) -> list[str]:
    """The section banners (`# -- name ---`), minus the `new in sNN` ones, in order."""
    found = re.findall(r"^# -- (.+?) -+$", source, re.MULTILINE)
    return [b for b in found if not b.startswith("new in ")]


def read(step: str) -> str:
    return (ROOT / f"{step}.py").read_text()


@pytest.mark.parametrize("previous, step", PAIRS)
def test_what_a_step_inherits_is_unchanged_unless_its_docstring_says_so(previous, step):
    assert drift(read(previous), read(step), previous[:3]) == []


@pytest.mark.parametrize("previous, step", PAIRS)
def test_a_step_keeps_the_section_order_of_the_step_before(previous, step):
    assert banners(read(step))[: len(banners(read(previous)))] == banners(read(previous))


@pytest.mark.parametrize("previous, step", PAIRS)
def test_a_step_says_what_it_adds_and_marks_where_it_starts(previous, step):
    source, number = read(step), step[:3]
    doc = ast.get_docstring(ast.parse(source))
    first = doc.splitlines()[0]
    assert first.startswith(f"{step}.py — "), f"the docstring should open `{step}.py — Title`, not {first!r}"
    assert f"Adds over {previous[:3]}:" in doc and "\nRun: python " in doc
    assert re.search(rf"^# -- new in {number}: .+ -+$", source, re.MULTILINE), (
        f"no `# -- new in {number}: ...` banner"
    )


# -- the checker itself catches what it should -----------------------------------------------------


def test_the_checker_catches_an_unannounced_edit():
    s01, s02 = read("s01_agent_loop"), read("s02_tools")
    edited = s02.replace("BASH_TIMEOUT = 30", "BASH_TIMEOUT = 60")
    assert drift(s01, edited, "s01") == [
        "BASH_TIMEOUT differs from s01, but the docstring does not list it as changed"
    ]


def test_the_checker_catches_a_dropped_name_and_a_dishonest_list():
    s01, s02 = read("s01_agent_loop"), read("s02_tools")
    dishonest = s02.replace("Changed from s01: SYSTEM,", "Changed from s01: SYSTEM, show_turn, nothing,")
    problems = drift(s01, dishonest, "s01")
    assert "show_turn: listed as changed but byte-identical to s01" in problems
    assert "nothing: listed as changed but s01 has no such name" in problems
    dropped = s02.replace("run_tool (replaced by execute), ", "")
    assert drift(s01, dropped, "s01") == [
        "run_tool is gone from s01, but the docstring does not list it as changed"
    ]
