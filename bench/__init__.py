"""Benchmarks for the workbook: each figure a ratio measured side by side in one run.

    python bench/run.py            the whole table (replay cost, per-turn overhead, parallel speedup, tokens)
    python bench/run.py --quick    fewer repetitions
    python bench/run.py --suite    also time the README's test command (`pytest`), which is slow

Modules: common (timing, steps), bare_replay (1's floor), replay_cost (1), per_turn (2, and
make_long_fixture), record_long (2, a 1,000-turn recording), parallel (3), tokens (4), suite (5),
server_load (6), whatif (changes not made), run (the table).
Benchmarks print figures; they never assert timings.
"""
