"""Every file and function a notebook's prose names exists, and is the one it names.

A handout that cites `tests/test_s02_drift.py` or `retry_policy()` sends a student looking for
something that is not there. The prose is checked against the repo: paths must exist, and a function
written as `name()` must be defined in the notebook's step, a step before it, or the workbook package.
"""

import importlib
import json
import os
import pkgutil
import re

import workbook
from workbook import paths

import pytest
from conftest import ROOT, STEPS

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PATH = re.compile(
    r"`((?:tests|workbook|fixtures|docs|notebooks|bench)/[\w./-]+\.\w+|s\d\d_\w+\.(?:py|ipynb))`"
)
CALLED = re.compile(r"`(?:([a-z_][\w]*)\.)?([A-Za-z_]\w*)\(\)`")


def prose(path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def modules_for(path) -> list:
    """The notebook's step and those before it (the epilogue: all of them), then every workbook module."""
    step = path.stem[:3]
    steps = [s for s in STEPS if s[:3] <= step] if re.match(r"s\d\d", step) else STEPS
    names = [
        *map(paths.step_module, steps),
        *(f"workbook.{m.name}" for m in pkgutil.iter_modules(workbook.__path__) if m.name != "__main__"),
    ]
    return [importlib.import_module(name) for name in names]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_file_a_notebook_names_exists(path):
    missing = [name for name in PATH.findall(prose(path)) if not (ROOT / name).exists()]
    missing += [
        n
        for n in PATH.findall(prose(path))
        if re.match(r"s\d\d_", n) and not (ROOT / "notebooks" / n).exists() and not (ROOT / n).exists()
    ]
    assert not missing, f"{path.name} names files that do not exist: {sorted(set(missing))}"


def defines(module, name: str) -> bool:
    """Whether a module defines `name`, as a function of its own or a method of one of its classes."""
    classes = [value for value in vars(module).values() if isinstance(value, type)]
    return hasattr(module, name) or any(name in vars(cls) for cls in classes)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_function_a_notebook_names_is_defined(path):
    modules = modules_for(path)
    by_name = {module.__name__.rpartition(".")[2]: module for module in modules}
    missing = []
    for owner, name in CALLED.findall(prose(path)):
        if owner in by_name:
            found = hasattr(by_name[owner], name)
        elif owner:  # `client.messages.create()`, `json.dumps()`: not ours to check
            continue
        else:
            found = any(defines(module, name) for module in modules) or hasattr(__builtins__, name)
            found = found or hasattr(os, name)  # a system call (`write()`), as the prose names it
        if not found:
            missing.append(f"{owner + '.' if owner else ''}{name}()")
    assert not missing, f"{path.name} names functions no module it uses defines: {sorted(set(missing))}"
