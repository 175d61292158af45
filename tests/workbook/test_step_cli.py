"""The flags every step shares: nonsense values are refused by the parser, in one line."""

from workbook.step_cli import recorded_permission

import pytest


@pytest.mark.parametrize("step", ["s05_budget", "s06_recovery"])
@pytest.mark.parametrize(
    "flag, value",
    [
        ("--max-cost", "nan"),
        ("--max-cost", "inf"),
        ("--max-cost", "-1"),
        ("--max-steps", "0"),
        ("--max-steps", "-1"),
    ],
)
def test_nonsense_limits_are_refused_by_the_parser_in_one_line(run_main, step, flag, value):
    code, out = run_main(step, flag, value)
    assert code == 2 and flag in out and len(out.strip().splitlines()) == 1, out


# -- the permission a recording was made under: its fixture says so in its args ----------------------


def test_the_permission_a_recording_needs_is_the_one_its_fixture_sets():
    assert recorded_permission(["--permission", "auto", "--max-steps", "3"]) == "auto"
    assert recorded_permission(["--max-steps=3", "--permission=ask"]) == "ask"
    assert recorded_permission(["--max-steps", "3"]) is None and recorded_permission([]) is None
