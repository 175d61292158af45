"""Benchmarks of the workbook's performance goals (docs/benchmarks.md), each measured side by side with
what a user would pick instead:

    python bench/run.py            every figure but the suite's
    python bench/run.py --suite    also the suite's time (slow)

replay_cost: a step's default replay against the bare replay loop (bare_replay.py); long_replay: a
1,000-turn s06 replay against the same loop, per extra turn, and its peak memory; server_load: the
classroom server under wrk against a threaded http.server; suite: the README's test command.
Benchmarks print figures; nothing here asserts a timing.
"""
