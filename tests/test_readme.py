"""The README's step table tells the truth: every step listed exists, with the diff size it really has."""

import re

from conftest import ROOT, STEPS

import stepdiff

ROWS = re.findall(r"^\| \[(s0\d)_\w+\.py\]\(.*?\| ([^|]+) \|$", (ROOT / "README.md").read_text(), re.M)


def test_the_step_table_lists_every_step_that_exists():
    assert [step for step, _ in ROWS] == [name[:3] for name in STEPS]


def test_lines_added_match_stepdiff():
    scripts = stepdiff.scripts()
    steps = sorted(scripts)
    for (step, size), before in zip(ROWS[1:], steps):
        added, removed = stepdiff.stat(scripts[before], scripts[step])
        assert size.strip() == f"+{added} −{removed}", (
            f"README says {size.strip()} for {step}: run stepdiff --stat"
        )
