"""The pause a server asks for before a retry, read from its headers (s03's retry layer honours it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime


def server_wait(headers, now: Callable[[], float] = time.time) -> float | None:
    """The pause the server asked for, read as the SDK reads it: retry-after-ms, else retry-after
    (seconds, else an HTTP date); the first that reads as a time decides. None when it asked for no
    pause above 0 (`retry-after: 0`, a date in the past, `retry-after-ms: 0`): the SDK honours only a
    pause above 0, and backs off otherwise; so does s03."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        seconds = read_seconds(headers.get(name), scale, now if name == "retry-after" else None)
        if seconds is not None:
            return seconds if seconds > 0 else None  # 0, below 0 or nan: no pause asked; back off
    return None


def read_seconds(value: str | None, scale: float, now: Callable[[], float] | None) -> float | None:
    """A header's value in seconds: a number times `scale`, or (when `now` is given) an HTTP date's
    distance from now; None when it is missing or unreadable."""
    if value is None:
        return None
    try:
        return float(value) * scale
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(value).timestamp() - now() if now else None
    except (TypeError, ValueError):
        return None
