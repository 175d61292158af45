"""stepdiff — how the loop changed from one step to the next: the step's story.

Each step holds its own mechanism and its whole `agent_loop`; everything else
it imports from the step that introduced it. So the loop is the one thing
every step repeats, and its diff says what changed.

python -m workbook stepdiff s05       how agent_loop changed from s04 to s05
python -m workbook stepdiff s02 s05   how it changed from s02 to s05
python -m workbook stepdiff --stat    each step's size: the file, its
                                      agent_loop, and how that loop changed
"""

import ast
import difflib
import sys
import textwrap
from pathlib import Path

from workbook.paths import STEPS, step_file


def scripts() -> dict[str, Path]:
    """Every step script here, by step: {"s01": s01_agent_loop.py, ...}."""
    return {step[:3]: step_file(step) for step in STEPS}


def loop_source(script: Path) -> list[str]:
    """The lines of a step's agent_loop, as written; for a step that keeps an earlier step's loop
    (`agent_loop = s10.agent_loop`), that step's."""
    text = script.read_text()
    node = loop_node(text)
    if isinstance(node, ast.Assign):  # agent_loop = sNN.agent_loop: the loop of step sNN, unchanged
        return loop_source(scripts()[node.value.value.id[:3]])
    return text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno]


def loop_node(text: str) -> ast.FunctionDef | ast.Assign:
    """A step's `def agent_loop`, or its `agent_loop = sNN.agent_loop`."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == "agent_loop":
            return node
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["agent_loop"]:
            return node
    raise LookupError("no agent_loop")


def diff(old: Path, new: Path) -> list[str]:
    """The unified diff between two steps' agent_loops, as lines."""
    return list(
        difflib.unified_diff(
            loop_source(old), loop_source(new), f"{old.stem}.agent_loop", f"{new.stem}.agent_loop"
        )
    )


def defined(script: Path) -> set[str]:
    """The functions, classes and constants a step defines at its top level (s02's TOOLS is s01's name
    for another list)."""
    body = ast.parse(script.read_text()).body
    named = {n.name for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assigned = [t for n in body if isinstance(n, ast.Assign) for t in n.targets]
    assigned += [n.target for n in body if isinstance(n, ast.AnnAssign)]
    return named | {t.id for t in assigned if isinstance(t, ast.Name)}


def redefined(steps: dict[str, Path], new: str) -> list[str]:
    """What `new`'s loop calls by a name an earlier step gave something else, `name (sNN's)`: a change
    the loop's diff cannot show, since the line that calls it reads the same."""
    loop = loop_node(steps[new].read_text())
    if isinstance(loop, ast.Assign):  # an earlier step's loop, kept: it calls nothing of this step's
        return []
    used = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name)}
    earlier = [name for name in steps if name < new]
    shown = []
    for name in sorted(defined(steps[new]) & used - {"agent_loop", "Settings"}):
        before = [step for step in earlier if name in defined(steps[step])]
        if before:
            shown.append(f"{name} ({before[-1]}'s)")
    return shown


def stat(old: Path, new: Path) -> tuple[int, int]:
    """(lines added, lines removed) from one step's agent_loop to the other's."""
    lines = diff(old, new)[2:]  # skip the ---/+++ header
    return sum(x.startswith("+") for x in lines), sum(x.startswith("-") for x in lines)


def main(argv: list[str]) -> int:
    steps = scripts()
    names = list(steps)
    if argv in (["--help"], ["-h"]):
        print(__doc__.strip())
        return 0
    if argv == ["--stat"]:
        for i, name in enumerate(names):
            script, size, loop = (
                steps[name],
                len(steps[name].read_text().splitlines()),
                len(loop_source(steps[name])),
            )
            change = (
                ""
                if i == 0
                else "  loop +{} -{} from {}".format(*stat(steps[names[i - 1]], script), names[i - 1])
            )
            print(f"{name}  {script.name}: {size} lines, agent_loop {loop} lines{change}")
        return 0
    if argv == names[:1]:  # the first step has no step before it: its whole loop is new
        print(f"{names[0]} is the first step: its agent_loop, all of it new")
        sys.stdout.writelines(loop_source(steps[names[0]]))
        return 0
    if len(argv) == 1 and argv[0] in steps:
        argv = [names[names.index(argv[0]) - 1], argv[0]]
    if len(argv) != 2 or not all(step in steps for step in argv):
        usage = "python -m workbook stepdiff NEW | OLD NEW | --stat"
        print(f"usage: {usage}   (the steps here: {', '.join(names)})")
        return 2
    try:
        lines = diff(steps[argv[0]], steps[argv[1]])
        sys.stdout.writelines(lines)
        if not lines:
            print(f"{argv[1]}'s agent_loop is {argv[0]}'s, line for line")
        swapped = redefined(steps, argv[1])
        if swapped:  # what the diff above cannot show: the calls read the same
            said = f"{argv[1]} defines anew what its loop uses by the same names: {', '.join(swapped)}"
            print("\n" + textwrap.fill(said, 78))
    except BrokenPipeError:  # `| head` stopped reading: fine
        sys.stdout = None
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
