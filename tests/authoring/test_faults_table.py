"""docs/faults.md stays true: every fixture and test it names exists, every fault class has a test."""

import ast
import functools
import re

import pytest
from conftest import ROOT

TABLE = (ROOT / "docs" / "faults.md").read_text()
ROWS = [line for line in TABLE.splitlines() if line.startswith("| ") and not line.startswith("| fault")]
REQUIRED = [  # the fault classes the reliability issue lists, each a row's first words
    "429", "529", "500", "connection drop", "timeout", "400", "401", "403", "prompt too long",
    "`max_tokens` inside", "overloaded inside", "`pause_turn`", "`refusal`", "tool raises",
    "tool timeout", "unknown tool", "bad arguments", "path escape", "dangerous command",
    "huge output", "malformed fixture", "exhausted fixture", "Ctrl-C mid-tool",
]  # fmt: skip


def test_every_fault_class_has_a_row_with_a_test():
    for fault in REQUIRED:
        rows = [row for row in ROWS if row[2:].startswith(fault)]
        assert rows, f"no row for {fault}"
        assert re.search(r"tests/\w+/test_", rows[0]), f"the row for {fault} names no test"


@functools.cache  # some hundred references name a dozen files: each is parsed once
def defined_tests(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("reference", sorted(set(re.findall(r"tests/\w+/test_\w+\.py::\w+", TABLE))))
def test_every_named_test_exists(reference):
    file, name = reference.split("::")
    assert (ROOT / file).exists(), f"{file} does not exist"
    assert name in defined_tests(ROOT / file), f"{name} is not in {file}"


@pytest.mark.parametrize("fixture", sorted(set(re.findall(r"`(s0\d_\w+\.json)`", TABLE))))
def test_every_named_fixture_exists(fixture):
    assert (ROOT / "fixtures" / fixture).exists()
