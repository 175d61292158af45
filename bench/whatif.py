"""Changes to the replay not made, applied only inside a benchmark so their effect can be measured.

Each is a context manager that patches the workbook for the duration; its files are untouched.
`python bench/run.py --what-if NAME` measures the per-turn rows (bench/per_turn.py) with it applied,
next to the rows without it, in one run.

- diff-fast-path: `request_diff` returns None at once when the request equals the recorded one (one C
  level dict comparison); only a request that differs is normalised and walked for a readable diff.
  Exactly equivalent: the figure says what a second path would save.
- no-response-check: the fixture loader skips checking each recorded response against the SDK's
  `Message` (the SDK parses the body anyway; only a malformed body's error would be less precise).
"""

from __future__ import annotations

import contextlib

from workbook.api import compare, contract
from workbook.replay import player

from bench.common import replaced


@contextlib.contextmanager
def diff_fast_path():
    original = compare.request_diff

    def request_diff(expected, actual, *args, **kwargs):
        return None if expected == actual else original(expected, actual, *args, **kwargs)

    with replaced(player, "request_diff", request_diff):
        yield


@contextlib.contextmanager
def no_response_check():
    with replaced(contract, "response_problems", lambda response: []):
        yield


WHAT_IFS = {
    "diff-fast-path": diff_fast_path,
    "no-response-check": no_response_check,
}


def applied(name: str | None):
    """The named change as a context manager (a do-nothing one for None)."""
    if name is None:
        return contextlib.nullcontext()
    if name not in WHAT_IFS:
        raise SystemExit(f"unknown --what-if {name!r}: choose one of {', '.join(WHAT_IFS)}")
    return WHAT_IFS[name]()
