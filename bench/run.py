"""Print the workbook's benchmark table: every figure a ratio measured side by side in one run.

    python bench/run.py                  replay cost, per-turn overhead, parallel speedup, token growth
    python bench/run.py --quick          the same with fewer repetitions
    python bench/run.py --suite          also time the README's test command (`pytest`, slow)
    python bench/run.py --what-if NAME   per-turn cost with a change not made (bench/whatif.py)
    python bench/run.py --server         also load the classroom server (bench/server_load.py)

Benchmarks print figures; nothing here asserts a timing. Results and how to read them: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from bench import parallel, per_turn, replay_cost, server_load, suite, tokens  # noqa: E402
from bench.common import steps  # noqa: E402
from bench.whatif import WHAT_IFS  # noqa: E402

console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
PER_TURN_GOAL = 2.0  # ms per turn beyond the SDK's own call
BREAKDOWN_ROWS = (
    "import rich",
    "import workbook",
    "import script (other)",
    "fixture load",
    "pydantic check",
    "contract check",
    "workspace copy",
    "transport",
    "SDK",
    "tools",
    "rendering",
    "spinner",
    "other",
)


def machine() -> str:
    """The machine line of the report: cores, CPU model, Python, SDK, whether bytecode is cached."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")
    bytecode = "off (PYTHONDONTWRITEBYTECODE=1)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"anthropic {anthropic.__version__}, bytecode cache {bytecode}, load average {load}"
    )


def verdict(value: float, goal: float, at_most: bool = True) -> str:
    """'meets goal' or 'misses by N%', for a figure against its goal."""
    if value != value:  # nan
        return "?"
    if (value <= goal) if at_most else (value >= goal):
        return "[green]meets goal[/]"
    miss = (value / goal - 1) * 100 if at_most else (1 - value / goal) * 100
    return f"[red]misses by {miss:.0f}%[/]"


def none(count: int) -> str:
    return "[green]meets goal[/]" if not count else "[red]misses[/]"


def table(title: str, *columns: str) -> Table:
    t = Table(title=title, title_justify="left")
    for n, c in enumerate(columns):
        t.add_column(c, justify="left" if n == 0 else "right")
    return t


def note(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def ms(value) -> str:
    return "-" if value is None else f"{value:.1f}"


# -- the sections ------------------------------------------------------------------------------------


def section_replay_cost(reps: int, breakdown_reps: int, summary: Table) -> None:
    results = replay_cost.measure(reps)
    t = table(
        f"1. replay cost: each step's default replay (`python sNN_x.py`, no key) against the bare loop on "
        f"the same recording (`python bench/bare_replay.py FIXTURE`), whole process CPU, {reps} rounds, "
        "the two side by side in each",
        "step",
        "CPU best / median",
        "floor best / median",
        "median of the rounds' ratios",
        "best / best",
        "median / median",
        "note",
    )
    for name, r in results.items():
        t.add_row(
            name,
            f"{r['cpu'] * 1000:.0f} / {r['cpu_median'] * 1000:.0f} ms",
            f"{r['floor_cpu'] * 1000:.0f} / {r['floor_cpu_median'] * 1000:.0f} ms",
            f"{r['ratio']:.3f}",
            f"{r['ratio_best']:.3f}",
            f"{r['ratio_median']:.3f}",
            note(r["error"], 40),
        )
        status = note(r["error"], 30) if r["error"] else verdict(r["ratio"], replay_cost.GOAL)
        summary.add_row(
            "1",
            f"replay cost (CPU), {name}",
            f"{r['ratio']:.3f}x bare loop",
            f"<= {replay_cost.GOAL}x",
            status,
        )
    console.print(t)
    names = list(results)
    cells = {n: replay_cost.breakdown(n, breakdown_reps) for n in names}
    b = table(
        f"1b. where a replay's CPU goes (ms in process, median of {breakdown_reps}, each call counted once)",
        "category",
        *(n.split("_")[0] for n in names),
    )
    for row in ("import anthropic", *BREAKDOWN_ROWS):
        b.add_row(
            row,
            *(note(cells[n]["error"], 14) if "error" in cells[n] else ms(cells[n].get(row)) for n in names),
        )
    b.add_row("main() in all", *(ms(cells[n].get("main")) for n in names))
    console.print(b)


def section_per_turn(turns: int, reps: int, which: list[str], what_if: str | None, summary: Table) -> dict:
    fixtures = {}
    for step in which:
        for w in [None, what_if] if what_if else [None]:
            label = step if w is None else f"{step} + {w}"
            try:
                r = per_turn.measure(step, turns, reps, what_if=w, fixture=fixtures.get(step))
            except Exception as err:  # a step in progress: report it and go on
                problem = note(f"{type(err).__name__}: {err}", 50)
                summary.add_row(
                    "2", f"per-turn overhead, {label}", "failed", f"<= {PER_TURN_GOAL} ms", problem
                )
                continue
            fixtures.setdefault(step, r["fixture"])
            t = table(
                f"2. per-turn cost of {label}: {r['turns']} turns, best of {reps} runs (CPU ms per turn)",
                "turns",
                "SDK floor",
                "loop + replay",
                "overhead",
                "transport checks",
            )
            for row in r["windows"] + [dict(r, turns="all")]:
                cells = (row["floor"], row["loop"], row["overhead"], row["transport"])
                t.add_row(row["turns"], *(f"{c:.2f}" for c in cells))
            console.print(t)
            parts = ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(r["categories"].items(), key=lambda kv: -kv[1])
            )
            console.print(f"   loop's time per turn by category (ms): {parts}")
            console.print(
                f"   garbage collector per turn: loop {r['gc_loop']:.2f} ms, floor {r['gc_floor']:.2f} ms "
                f"(full collections: {r['full_gc_loop']} and {r['full_gc_floor']}); "
                f"overhead without it: {r['overhead_without_gc']:.2f} ms per turn"
            )
            stubbed = "" if r["tool_stubbed"] else " (tool not stubbed: includes tool time)"
            first, last = r["windows"][0]["overhead"], r["windows"][-1]["overhead"]
            console.print(f"   overhead in wall time: {r['wall_overhead']:.2f} ms per turn\n")
            summary.add_row(
                "2",
                f"per-turn overhead, {label}",
                f"{r['overhead']:.2f} ms/turn CPU (turns {r['windows'][0]['turns']}: {first:.1f}, "
                f"{r['windows'][-1]['turns']}: {last:.1f}), "
                f"{r['wall_overhead']:.2f} wall{stubbed}",
                f"<= {PER_TURN_GOAL} ms",
                verdict(r["overhead"], PER_TURN_GOAL),
            )
    return fixtures


def section_parallel(reps: int, summary: Table) -> None:
    why = parallel.unavailable()
    if why:
        summary.add_row("3", "parallel speedup (s04)", note(why), ">= 0.9 N", "")
        return
    rows = parallel.measure(reps)
    t = table(
        f"3. parallel speedup: N reads of {parallel.LATENCY * 1000:.0f} ms each, median of {reps}",
        "N",
        "serial",
        "parallel",
        "speedup",
        "goal",
    )
    for r in rows:
        t.add_row(
            str(r["n"]),
            f"{r['serial'] * 1000:.0f} ms",
            f"{r['parallel'] * 1000:.0f} ms",
            f"{r['speedup']:.2f}x",
            f">= {r['goal']:.1f}x",
        )
        summary.add_row(
            "3",
            f"parallel speedup, N={r['n']}",
            f"{r['speedup']:.2f}x",
            f">= {r['goal']:.1f}x",
            verdict(r["speedup"], r["goal"], at_most=False),
        )
    console.print(t)


def section_tokens(turns: int, summary: Table) -> None:
    plain = tokens.plain_fixture(turns)
    collapsed, how = tokens.collapse_fixture(plain)
    g = tokens.growth(plain, collapsed)
    t = table(
        f"4. input tokens per turn: s01, each turn one call whose output is {tokens.COMMAND!r} "
        "(chars/4 of each request's JSON)",
        "turn",
        "tokens this turn",
        "cumulative",
        f"cumulative with {tokens.COLLAPSE_STEP} collapse",
    )
    for row in g["rows"]:
        squeezed = row.get("collapsed")
        cell = f"{squeezed:,}" if squeezed is not None else ("-" if collapsed else "n/a")
        t.add_row(str(row["turn"]), f"{row['tokens']:,}", f"{row['cumulative']:,}", cell)
    console.print(t)
    console.print(f"   with collapse: {note(how, 100)}\n")
    total = g["rows"][-1]["cumulative"]
    n = g["turns"]
    half = n // 2
    summary.add_row(
        "4",
        f"token growth over {g['turns']} turns",
        f"{total:,} in all; turns {half + 1}-{n} cost {g['doubling'] - 1:.2f}x turns 1-{half}",
        "measured",
        "quadratic" if g["doubling"] > 3 else "",
    )
    if collapsed:
        n, plain_n, squeezed_n = g["common_turns"], g["plain_common"], g["collapsed_common"]
        saved = 1 - squeezed_n / plain_n
        summary.add_row(
            "4",
            "with s06 collapse",
            f"{squeezed_n:,} against {plain_n:,} over {n} turns ({saved:.0%} less)",
            "measured",
            "" if n == g["turns"] else f"s06 stopped after {n} turns",
        )
    else:
        summary.add_row("4", "with s06 collapse", note(how), "measured", "")


def section_suite(summary: Table) -> None:
    r = suite.measure(3)  # the goal is the median of 3 runs
    console.print("[bold]5. test suite[/] (bench/suite.py)")
    console.print(escape(suite.report(r)) + "\n")
    result = note(r["summary"], 40) if r["rc"] == 0 else f"exit {r['rc']}: {note(r['summary'], 30)}"
    summary.add_row(
        "5",
        "test suite (`pytest`)",
        f"{r['wall']:.1f} s ({result})",
        f"<= {suite.GOAL:.0f} s",
        verdict(r["wall"], suite.GOAL),
    )


def section_server(requests: int, wrk_rounds: int, summary: Table) -> None:
    r = server_load.measure(requests, wrk_rounds=wrk_rounds)
    console.print("[bold]6. classroom server[/] (bench/server_load.py)")
    console.print(escape(server_load.report(r)) + "\n")
    one = r["levels"][0]
    dropped = sum(s["dropped"] for s in r["storms"])
    stall, held = r["stall"]["other_max"], r["held"]["ratio"]
    rows = [
        (
            "server p50, one student (Python client)",
            f"{one['p50']:.2f} ms",
            "<= 5 ms",
            verdict(one["p50"], 5.0),
        ),
        ("connections dropped in storms", str(dropped), "0", none(dropped)),
        ("another student's slowest, 17 MB request", f"{stall:.0f} ms", "<= 300 ms", verdict(stall, 300)),
        ("memory held by a thread, per byte of its body", f"{held:.2f}x", "<= 1.5x", verdict(held, 1.5)),
    ]
    wrk = {(row["server"], row["students"]): row for row in r["wrk"] or []}
    if ("replay", 50) in wrk and ("threaded", 50) in wrk:
        ratio = wrk[("replay", 50)]["per_s"] / wrk[("threaded", 50)]["per_s"]
        rows.append(
            (
                "wrk, 50 students: server / threaded floor",
                f"{ratio:.2f}x",
                ">= 0.5x",
                verdict(ratio, 0.5, False),
            )
        )
    if ("replay", 200) in wrk:
        p99 = wrk[("replay", 200)]["p99"]
        rows.append(
            (
                "wrk, 200 students (own keys, defaults): server p99",
                f"{p99:.1f} ms",
                "< 100 ms",
                verdict(p99, 100),
            )
        )
    bad = sum(row["non_2xx"] + row["socket_errors"] for row in r["wrk"] or [] if row["server"] == "replay")
    bad += sum(level["errors"] + len(set(level["statuses"]) - {200}) for level in r["levels"])
    rows.append(("non-2xx replies and errors, server", str(bad), "0", none(bad)))
    for row in rows:
        summary.add_row("6", *row)


def section_long(step: str, turns: int, summary: Table) -> None:
    """A long run (per_turn.long_run, in a process of its own): overhead per window, peak memory."""
    r = per_turn.long_run_in_child(step, turns)
    if "error" in r:
        summary.add_row("2b", f"long run, {step}, {turns} turns", "failed", "", note(r["error"], 50))
        return
    t = table(
        f"2b. long run of {step}: {turns} turns, CPU ms per turn", "turns", "SDK floor", "loop", "overhead"
    )
    for row in r["windows"] + [dict(r, turns="all")]:
        t.add_row(row["turns"], *(f"{row[k]:.2f}" for k in ("floor", "loop", "overhead")))
    console.print(t)
    console.print(f"   peak memory of the process: {r['peak_mb']:.0f} MB\n")
    last = r["windows"][-1]
    summary.add_row(
        "2b",
        f"long run, {step}, {turns} turns: overhead per turn (last window)",
        f"{r['overhead']:.2f} ms ({last['turns']}: {last['overhead']:.2f})",
        f"<= {PER_TURN_GOAL} ms",
        verdict(max(r["overhead"], last["overhead"]), PER_TURN_GOAL),
    )
    summary.add_row(
        "2b", "long run, peak memory", f"{r['peak_mb']:.0f} MB", "<= 400 MB", verdict(r["peak_mb"], 400)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--suite", action="store_true", help="also time the whole test suite (slow)")
    parser.add_argument("--server", action="store_true", help="also load the classroom replay server")
    parser.add_argument("--what-if", choices=sorted(WHAT_IFS), help="also measure a replay change not made")
    parser.add_argument(
        "--turns", type=int, default=200, help="length of the generated fixture (default 200)"
    )
    parser.add_argument(
        "--all-steps", action="store_true", help="per-turn cost of every step, not only the first and last"
    )
    parser.add_argument("--long", type=int, metavar="TURNS", help="also a long run of s06 (e.g. 1000 turns)")
    args = parser.parse_args(argv)
    if args.turns < 2:
        parser.error("--turns must be at least 2")
    console.print(f"[dim]machine: {machine()}[/]")
    summary = table("summary", "#", "benchmark", "measured", "goal", "verdict")
    section_replay_cost(3 if args.quick else 7, 1 if args.quick else 5, summary)
    names = steps()
    which = names if args.all_steps else sorted({names[0], names[-1]})
    section_per_turn(args.turns, 1 if args.quick else 5, which, args.what_if, summary)
    if args.long:
        section_long(names[-1], args.long, summary)
    section_parallel(3 if args.quick else 7, summary)
    section_tokens(args.turns, summary)
    if args.suite:
        section_suite(summary)
    else:
        summary.add_row("5", "test suite (`pytest`)", "not run (add --suite)", f"<= {suite.GOAL:.0f} s", "")
    if args.server:
        section_server(100 if args.quick else 2000, 1 if args.quick else server_load.WRK_ROUNDS, summary)
    console.print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
