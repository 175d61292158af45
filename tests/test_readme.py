"""The README's step table tells the truth: every step listed exists, with the sizes it really has."""

import re

from conftest import ROOT, STEPS

from workbook import stepdiff

ROWS = re.findall(r"^\| \[(s0\d)_\w+\.py\]\(.*?\| ([^|]+) \|$", (ROOT / "README.md").read_text(), re.M)


def test_the_step_table_lists_every_step_that_exists():
    assert [step for step, _ in ROWS] == [name[:3] for name in STEPS]


def test_sizes_match_stepdiff():
    scripts = stepdiff.scripts()
    steps = sorted(scripts)
    for i, (step, size) in enumerate(ROWS):
        script = scripts[step]
        want = f"{len(script.read_text().splitlines())}, loop {len(stepdiff.loop_source(script))}"
        if i:
            want += " (+{} −{})".format(*stepdiff.stat(scripts[steps[i - 1]], script))
        assert size.strip() == want, f"README says {size.strip()} for {step}: run stepdiff --stat"
