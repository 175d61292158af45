"""3. Parallel speedup (s04): N equal-latency read calls, s04's parallel runner against one-at-a-time.

Both sides run in one process, interleaved, on the same blocks and the same tool layer: the read tool's
handler (READ_TOOL in the step's REGISTRY, or its HANDLERS map) is swapped for one that sleeps LATENCY
seconds, so each call costs the same and the speedup is pure scheduling.

- serial:   the step's per-call function (`execute(block, workspace)`, from s02) on each block in turn;
- parallel: the step's runner for a whole turn's blocks, the first of RUNNER_NAMES that exists,
            called as CALL_RUNNER(runner, blocks, workspace, module).

s04 is written by another engineer: if its names or signature differ, adjust RUNNER_NAMES or
CALL_RUNNER here (one line). Goal: speedup >= 0.9 * N.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
import time
from pathlib import Path

import anthropic

from bench.common import has_step, load_step, median, quiet

STEP = "s04"
RUNNER_NAMES = ("run_tools", "execute_turn", "run_tool_calls", "execute_all")  # s04's turn runner
READ_TOOL = "read_file"
LATENCY = 0.05  # seconds per read call
SIZES = (2, 4, 8)


def CALL_RUNNER(runner, blocks, workspace, module):  # noqa: N802 — a setting, spelled like the constants
    return runner(blocks, module.Settings(workspace))  # s04's run_tools(calls, settings)


def CALL_ONE(module, block, workspace):  # noqa: N802
    return module.execute(block, workspace)


def read_blocks(n: int) -> list:
    """N tool_use blocks of the read tool, typed as the SDK parses them."""
    return [
        anthropic.types.ToolUseBlock(
            type="tool_use", id=f"toolu_bench_{i:02d}", name=READ_TOOL, input={"path": f"f{i}.txt"}
        )
        for i in range(n)
    ]


def sleepy(latency: float):
    def handler(*args, **kwargs) -> str:
        time.sleep(latency)
        return "contents"

    return handler


@contextlib.contextmanager
def slow_reads(module, latency: float):
    """Swap the read tool's handler (in REGISTRY, or else HANDLERS) for one that sleeps `latency` seconds."""
    registry = getattr(module, "REGISTRY", None)
    if registry is not None and READ_TOOL in registry:
        saved = registry[READ_TOOL]
        entry = copy.copy(saved)
        entry.handler = sleepy(latency)
        registry[READ_TOOL] = entry
        table = registry
    else:
        table = module.HANDLERS
        saved, table[READ_TOOL] = table[READ_TOOL], sleepy(latency)
    try:
        yield
    finally:
        table[READ_TOOL] = saved


def find_runner(module):
    return next(
        (getattr(module, name) for name in RUNNER_NAMES if callable(getattr(module, name, None))), None
    )


def unavailable() -> str | None:
    """Why the parallel benchmark cannot run yet, or None when it can."""
    name = has_step(STEP)
    if name is None:
        return f"n/a ({STEP} not written yet)"
    if find_runner(load_step(name)) is None:
        return f"n/a ({name} has none of {', '.join(RUNNER_NAMES)}: set RUNNER_NAMES in bench/parallel.py)"
    return None


def measure(reps: int = 5, sizes=SIZES, latency: float = LATENCY, module=None) -> list[dict]:
    """For each N: median serial and parallel wall time, speedup = serial / parallel, and the ideal N."""
    module = module or load_step(has_step(STEP))
    runner = find_runner(module)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp, quiet(module), slow_reads(module, latency):
        workspace = Path(tmp)
        for n in sizes:
            blocks, serial, parallel = read_blocks(n), [], []
            for _ in range(reps):
                start = time.perf_counter()
                for block in blocks:
                    CALL_ONE(module, block, workspace)
                serial.append(time.perf_counter() - start)
                start = time.perf_counter()
                CALL_RUNNER(runner, blocks, workspace, module)
                parallel.append(time.perf_counter() - start)
            s, p = median(serial), median(parallel)
            rows.append({"n": n, "serial": s, "parallel": p, "speedup": s / p, "goal": 0.9 * n})
    return rows
