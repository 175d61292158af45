"""The workbook's errors: each one prints as one line that says what happened and what to do."""

from __future__ import annotations


class WorkbookError(Exception):
    """An error meant for the reader: its message is one line saying what happened and what to do.

    The ones a replay raises inside the SDK's call are the SDK's errors too (workbook/replay/transport.py):
    the rest need nothing of the SDK, so a program that only saves a file does not load it.
    """


class FixtureError(WorkbookError):
    """A fixture file that cannot be used: not JSON, a missing field, a body that is not a Message."""


def one_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines[:3])[:200]
