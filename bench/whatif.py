"""Proposed changes to replay.py, applied only inside a benchmark so their effect can be measured first.

Each is a context manager that patches `replay` (or the process) for the duration; replay.py itself is
untouched. `python bench/run.py --what-if NAME` measures the table's rows with it applied, next to
the rows without it; for whole processes, `python -m bench.launch NAME sNN_x.py` runs a step with it.

- diff-fast-path: `request_diff` returns None at once when the request equals the recorded one (one C
  level dict comparison); only a request that differs is normalised and walked for a readable diff.
  Exactly equivalent: equal requests always gave None.
- identical-fast-path: in strict mode, a request identical to the recorded one is served without
  re-running the API-rule check or the diff: load_fixture already checked every recorded request
  against the rules. (Differs only for a fixture built in memory, never loaded, whose recorded
  request itself breaks the rules.)
- no-pydantic-check: the fixture loader skips `Message.model_validate` of every 200 body (the SDK
  parses the body anyway; only the error message for a malformed body would be less precise).
- gc-freeze: `gc.freeze()` once the fixture is loaded, so the collector stops re-scanning the SDK's
  types and the fixture (every request holds the whole history: quadratic in the turns) each turn,
  and the interpreter's last collection at exit skips them too.
- proposed: identical-fast-path and gc-freeze together, the two the measurements support.
"""

from __future__ import annotations

import contextlib
import gc
import sys

import replay
from bench.common import replaced


@contextlib.contextmanager
def diff_fast_path():
    original = replay.request_diff

    def request_diff(expected, actual, *args, **kwargs):
        return None if expected == actual else original(expected, actual, *args, **kwargs)

    with replaced(replay, "request_diff", request_diff):
        yield


@contextlib.contextmanager
def identical_fast_path():
    """The diff's fast path, and the API-rule check skipped for the body it found identical."""
    original_diff, original_rules = replay.request_diff, replay.check_api_rules
    identical = set()  # ids of request bodies equal to their recording (the transport keeps them alive)

    def request_diff(expected, actual, *args, **kwargs):
        if expected == actual:
            identical.add(id(actual))
            return None
        return original_diff(expected, actual, *args, **kwargs)

    def check_api_rules(body, where):
        if id(body) not in identical:
            original_rules(body, where)

    with replaced(replay, "request_diff", request_diff), replaced(replay, "check_api_rules", check_api_rules):
        yield


@contextlib.contextmanager
def no_pydantic_check():
    with replaced(replay, "_message_problems", lambda body: []):
        yield


@contextlib.contextmanager
def gc_freeze():
    gc.freeze()
    try:
        yield
    finally:
        if not sys.is_finalizing():  # at exit (bench/launch.py) the frozen objects are simply left
            gc.unfreeze()
            gc.collect()  # pay the unfrozen objects' collection here, not in whatever is measured next


@contextlib.contextmanager
def proposed():
    """The changes the measurements support (docs/benchmarks.md): identical-fast-path and gc-freeze."""
    with identical_fast_path(), gc_freeze():
        yield


WHAT_IFS = {
    "diff-fast-path": diff_fast_path,
    "identical-fast-path": identical_fast_path,
    "no-pydantic-check": no_pydantic_check,
    "gc-freeze": gc_freeze,
    "proposed": proposed,
}


def applied(name: str | None):
    """The named change as a context manager (a do-nothing one for None)."""
    if name is None:
        return contextlib.nullcontext()
    if name not in WHAT_IFS:
        raise SystemExit(f"unknown --what-if {name!r}: choose one of {', '.join(WHAT_IFS)}")
    return WHAT_IFS[name]()
