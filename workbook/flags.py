"""Flag values every command line of the workbook reads the same way."""

from __future__ import annotations

import argparse
import math


def seconds(most: float, what: str = "seconds", zero: bool = True):
    """An argparse `type` for a number of seconds, finite, from 0 (or above 0: zero=False) to `most`:
    nan, inf and 1e309 are refused in one line that names `what` the flag is."""
    least = "from 0" if zero else "more than 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
        if not math.isfinite(value) or value > most or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}: give seconds, {least} to {most:g}")
        return value

    return parse
