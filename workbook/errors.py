"""The workbook's errors: each one prints as one line that says what happened and what to do."""

from __future__ import annotations

from anthropic import AnthropicError


class WorkbookError(AnthropicError):
    """An error meant for the reader: its message is one line saying what happened and what to do.

    It subclasses the SDK's base error so that, raised inside the transport, the SDK passes it
    through untouched instead of wrapping it as a connection error and retrying.
    """


class FixtureError(WorkbookError):
    """A fixture file that cannot be used: not JSON, a missing field, a body that is not a Message."""


class ReplayMismatch(WorkbookError):
    """The loop sent a request that differs from the recorded one, or that the API would reject."""


class ReplayExhausted(WorkbookError):
    """The loop asked for more turns than the fixture holds."""


def one_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines[:3])[:200]
