"""The pause a server asks for before a retry, read from its headers (s03's retry layer honours it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime


def server_wait(headers, now: Callable[[], float] = time.time) -> float | None:
    """The pause the server asked for: retry-after-ms, else retry-after (seconds or an HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - now())
            except (TypeError, ValueError):
                continue  # unreadable: fall back to our own backoff
    return None
