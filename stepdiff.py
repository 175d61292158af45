"""stepdiff.py — what one step adds to the one before it.

python stepdiff.py s01 s02     the unified diff from s01's script to s02's
python stepdiff.py s03         the diff from the step before s03
python stepdiff.py --stat      lines added and removed between each pair of consecutive steps
"""

import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def scripts() -> dict[str, Path]:
    """Every step script here, by step: {"s01": s01_agent_loop.py, ...}."""
    return {p.name[:3]: p for p in sorted(ROOT.glob("s[0-9][0-9]_*.py"))}


def diff(old: Path, new: Path) -> list[str]:
    """The unified diff between two scripts, as lines."""
    a, b = old.read_text().splitlines(keepends=True), new.read_text().splitlines(keepends=True)
    return list(difflib.unified_diff(a, b, old.name, new.name))


def stat(old: Path, new: Path) -> tuple[int, int]:
    """(lines added, lines removed) from old to new."""
    lines = diff(old, new)[2:]  # skip the ---/+++ header
    return sum(x.startswith("+") for x in lines), sum(x.startswith("-") for x in lines)


def main(argv: list[str]) -> int:
    steps = scripts()
    if argv == ["--stat"]:
        for old, new in zip(list(steps), list(steps)[1:]):
            added, removed = stat(steps[old], steps[new])
            size = len(steps[new].read_text().splitlines())
            print(f"{old} -> {new}  +{added} -{removed}  ({steps[new].name}, {size} lines)")
        return 0
    if len(argv) == 1 and argv[0] in steps and argv[0] != min(steps):
        argv = [list(steps)[list(steps).index(argv[0]) - 1], argv[0]]
    if len(argv) != 2 or not all(step in steps for step in argv):
        print(f"usage: python stepdiff.py OLD NEW | NEW | --stat   (the steps here: {', '.join(steps)})")
        return 2
    try:
        sys.stdout.writelines(diff(steps[argv[0]], steps[argv[1]]))
    except BrokenPipeError:  # `| head` stopped reading: fine
        sys.stdout = None
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
