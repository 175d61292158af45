"""workbook/flags.py: a seconds flag, refused in one line when it is no number of seconds."""

import argparse

from workbook import flags

import pytest


def test_seconds_in_range_are_taken():
    latency = flags.seconds(60, "a latency")
    assert latency("0") == 0.0 and latency("0.25") == 0.25 and latency("60") == 60.0


@pytest.mark.parametrize("text", ["nan", "inf", "1e309", "-1", "61"])
def test_a_value_out_of_range_or_not_finite_is_refused_naming_the_flag(text):
    with pytest.raises(
        argparse.ArgumentTypeError, match=f"'{text}' is not a latency: give seconds, from 0 to 60"
    ):
        flags.seconds(60, "a latency")(text)


def test_zero_is_refused_where_it_must_be_more():
    timeout = flags.seconds(3600, "a timeout", zero=False)
    assert timeout("0.5") == 0.5
    with pytest.raises(
        argparse.ArgumentTypeError, match="'0' is not a timeout: give seconds, more than 0 to 3600"
    ):
        timeout("0")
    with pytest.raises(argparse.ArgumentTypeError, match="invalid float value: 'soon'"):
        timeout("soon")
