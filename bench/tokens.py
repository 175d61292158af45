"""4. Token growth: input tokens per turn, and their running total, when every turn resends the history.

Figures are chars/4 of each request's JSON as the loop really sent it (an estimate: no tokenizer
offline); bench/per_turn.py puts the same number in each response's usage.input_tokens. The API bills the
input of every request, so the total grows with the square of the number of turns.

With s06 (once it exists): the same scripted turns replayed by s06 with a context limit, above which
the scripted model answers 400 "prompt is too long", so s06 collapses old tool results and retries;
its column counts only the requests that were answered (a rejected request is not billed).
"""

from __future__ import annotations

import itertools

from bench.common import has_step
from bench.per_turn import estimate_tokens, make_long_fixture

CHECKPOINTS = (1, 10, 50, 100, 150, 200)
COMMAND = "seq 1 500 # {n}"  # about 1.9 kB of output per call: a file read's worth, long enough to collapse
# (s02's auto mode runs only read-only commands it knows, so the s06 run says --permission all)
COLLAPSE_STEP = "s06"
COLLAPSE_AT = 0.5  # the context limit for s06, as a share of the last request's size without collapse


def per_turn_tokens(fixture: dict) -> list[int]:
    """Input tokens of every answered request, in order: chars/4 of its JSON (also its usage figure)."""
    return [estimate_tokens(e["request"]) for e in fixture["exchanges"] if e["response"].get("status") == 200]


def cumulative(values: list[int]) -> list[int]:
    return list(itertools.accumulate(values))


def growth(fixture: dict, collapsed: dict | None = None, checkpoints=CHECKPOINTS) -> dict:
    """Rows at the checkpoints: tokens this turn and cumulative, plain and (if given) with collapse."""
    plain = per_turn_tokens(fixture)
    total = cumulative(plain)
    squeezed = per_turn_tokens(collapsed) if collapsed else []
    squeezed_total = cumulative(squeezed)
    rows = []
    for turn in sorted({t for t in checkpoints if t <= len(plain)} | {len(plain)}):  # and the last
        row = {"turn": turn, "tokens": plain[turn - 1], "cumulative": total[turn - 1]}
        if collapsed:
            row["collapsed"] = squeezed_total[turn - 1] if turn <= len(squeezed) else None
        rows.append(row)
    half = len(total) // 2
    common = min(len(plain), len(squeezed))  # compare like with like: the turns both runs made
    return {
        "rows": rows,
        "turns": len(plain),
        "doubling": total[-1] / total[half - 1] if half else float("nan"),  # 2 if linear, 4 if quadratic
        "collapsed_turns": len(squeezed),
        "common_turns": common,
        "plain_common": total[common - 1] if common else None,
        "collapsed_common": squeezed_total[common - 1] if common else None,
    }


def plain_fixture(turns: int = 200) -> dict:
    """s01's run of `turns` turns, each a call with COMMAND's output: every request resends it all."""
    return make_long_fixture(turns, "s01_agent_loop", command=COMMAND)


def collapse_fixture(plain: dict) -> tuple[dict | None, str]:
    """s06's run of the same turns under a context limit, or None and why not."""
    step = has_step(COLLAPSE_STEP)
    if step is None:
        return None, f"n/a ({COLLAPSE_STEP} not written yet)"
    limit = int(per_turn_tokens(plain)[-1] * COLLAPSE_AT)
    turns = len(per_turn_tokens(plain))
    try:
        fixture = make_long_fixture(turns, step, context_limit=limit, command=COMMAND, permission="all")
        return fixture, f"{step}, context limit {limit:,} tokens"
    except Exception as err:  # a step in progress: report, do not stop the table
        return None, f"n/a ({step} failed on the long fixture: {type(err).__name__}: {err})"
