"""exercise_tables.py — the truth tables an exercise's piece is held to, where the recordings cannot reach.

A table is data: each row is what the piece is given and what the step's answer is. A test holds the
step's own function to every row (tests/classroom/test_exercises.py), so a table that no longer says
what the step does fails there, not in front of a student. `first_mistake(name, piece)` runs a table
on a student's piece: the first row it gets wrong, in words, or None.
"""

from __future__ import annotations

from types import SimpleNamespace

# -- s04's plan: which calls run together ----------------------------------------------------------

READS = {"read_file", "grep", "list_files"}  # s02's read-only tools
PLAN_ROWS = [  # the tools asked for in one turn, in order -> the groups of indexes the step runs
    (["read_file", "read_file"], [[0, 1]]),
    (["read_file", "grep", "list_files"], [[0, 1, 2]]),
    (["write_file", "read_file"], [[0], [1]]),
    (["read_file", "write_file", "read_file", "grep"], [[0], [1], [2, 3]]),
    (["bash", "bash"], [[0], [1]]),
    (["edit_file", "write_file", "read_file"], [[0], [1], [2]]),
    (["grep", "no_such_tool", "grep"], [[0], [1], [2]]),
    ([], []),
]


def plan_mistake(plan) -> str | None:
    """The first row the student's plan() gets wrong, said as what went wrong."""
    for tools, expected in PLAN_ROWS:
        blocks = [
            SimpleNamespace(type="tool_use", name=name, id=f"toolu_{i}", input={})
            for i, name in enumerate(tools)
        ]
        got = plan(blocks)
        got = [list(group) for group in got] if isinstance(got, (list, tuple)) else got
        if got == expected:
            continue
        asked = ", ".join(tools) or "no calls"
        said = f"plan([{asked}]) returned {got!r}; the step's plan returns {expected!r}"
        flat = [i for group in got for i in group] if isinstance(got, list) else None
        if flat is not None and sorted(flat) != list(range(len(tools))):
            return f"{said}: every call must be in exactly one group"
        if flat is not None and flat != list(range(len(tools))):
            return f"{said}: the calls' order changed; they run in the order asked"
        if isinstance(got, list) and any(len(g) > 1 and any(tools[i] not in READS for i in g) for g in got):
            return f"{said}: a call that is not a read ran beside other calls"
        return f"{said}: reads in a row ran apart, one at a time"
    return None


# -- s06's next_transition: what the loop does after each call ---------------------------------------

LIMITS = {"max_tokens": 8000}  # s01's MAX_TOKENS, as a state's default
TRANSITION_ROWS = [  # (the case, stop_reason, the recovery state's fields, the stop hook) -> transition
    ("the model asked for tools", "tool_use", {}, None, "next_turn"),
    ("the model ended its turn, no stop hook", "end_turn", {}, None, "done"),
    ("a stop sequence", "stop_sequence", {}, None, "done"),
    ("a refusal", "refusal", {}, None, "done"),
    ("cut by max_tokens, first time", "max_tokens", {}, None, "escalate"),
    ("cut again after escalating", "max_tokens", {"max_tokens": 64_000}, None, "continue"),
    ("cut after 2 continuations", "max_tokens", {"max_tokens": 64_000, "continuations": 2}, None, "continue"),
    ("cut after 3 continuations", "max_tokens", {"max_tokens": 64_000, "continuations": 3}, None, "fail"),
    ("paused by a server tool", "pause_turn", {}, None, "resume_pause"),
    ("paused a 5th time", "pause_turn", {"pauses": 5}, None, "fail"),
    ("ended, the stop hook passed", "end_turn", {}, (True, "ok\n[exit code 0]"), "done"),
    ("ended, the stop hook failed", "end_turn", {}, (False, "1 failed\n[exit code 1]"), "hook_retry"),
    (
        "ended, the hook failed after 2 retries",
        "end_turn",
        {"hook_failures": 2},
        (False, "1 failed\n[exit code 1]"),
        "fail",
    ),
]


def transition_mistake(next_transition) -> str | None:
    """The first row the student's next_transition() gets wrong, named by its case."""
    import s06_recovery as s06  # the step's own state and hook types: a row is what the loop would pass

    for case, stop, fields, hook, expected in TRANSITION_ROWS:
        state = s06.Recovery(**fields)
        response = SimpleNamespace(stop_reason=stop, content=[], stop_details=None)
        result = next_transition(
            response, state, [{"role": "user", "content": "go"}], hook and s06.HookResult(*hook)
        )
        got = result[0] if isinstance(result, tuple) and result else result
        if got != expected:
            where = ", ".join(f"state.{k}={v}" for k, v in fields.items()) or "a fresh state"
            return (
                f"{case} (stop_reason {stop}, {where}): your next_transition returned {got!r}; "
                f"the step's is {expected!r}"
            )
    return None


TABLES = {"plan": (PLAN_ROWS, plan_mistake), "next_transition": (TRANSITION_ROWS, transition_mistake)}


def first_mistake(name: str, piece) -> str | None:
    return TABLES[name][1](piece)
