"""Changes to the replay not made, applied only inside a benchmark so their effect can be measured.

Each is a context manager that patches `replay` for the duration; workbook/replay/transport.py
itself is untouched.
`python bench/run.py --what-if NAME` measures the table's rows with it applied, next to the rows
without it; for whole processes, `python -m bench.launch NAME sNN_x.py` runs a step with it.

- diff-fast-path: `request_diff` returns None at once when the request equals the recorded one (one C
  level dict comparison); only a request that differs is normalised and walked for a readable diff.
  Exactly equivalent. Since replay serves a request identical to its checked recording before any
  diff (the fast path this module once proposed is now in workbook/replay/transport.py), this only
  matters for a transport built with `checked=False`.
- no-pydantic-check: the fixture loader skips `Message.model_validate` of every 200 body (the SDK
  parses the body anyway; only the error message for a malformed body would be less precise).
"""

from __future__ import annotations

import contextlib

from workbook.api import compare
from workbook.replay import transport as replay

from bench.common import replaced


@contextlib.contextmanager
def diff_fast_path():
    original = compare.request_diff

    def request_diff(expected, actual, *args, **kwargs):
        return None if expected == actual else original(expected, actual, *args, **kwargs)

    with replaced(replay, "request_diff", request_diff):
        yield


@contextlib.contextmanager
def no_pydantic_check():
    with replaced(replay, "_message_problems", lambda body: []):
        yield


WHAT_IFS = {
    "diff-fast-path": diff_fast_path,
    "no-pydantic-check": no_pydantic_check,
}


def applied(name: str | None):
    """The named change as a context manager (a do-nothing one for None)."""
    if name is None:
        return contextlib.nullcontext()
    if name not in WHAT_IFS:
        raise SystemExit(f"unknown --what-if {name!r}: choose one of {', '.join(WHAT_IFS)}")
    return WHAT_IFS[name]()
