"""A replay never waits: the SDK's own retries (s01 and s02 leave them on) go at once in replay.

A recording has no clock. Live, the SDK waits before each retry as retry-after asks, or by its own
backoff; in a replay that would only spend the reader's time: three recorded 529s with
`retry-after: 60` made s02 sleep 121 s. The recorded wait still reaches whoever reads the headers
(s03's own retry layer shows it, and does not spend it either).

The client stays the SDK's own `anthropic.Anthropic` (a notebook shows that it is): only this one
client's wait is set to none, by an attribute of its own in place of the SDK's method.
"""

from __future__ import annotations

import anthropic


def never_waits(client: anthropic.Anthropic) -> anthropic.Anthropic:
    """`client`, its retries made at once (a copy from `with_options` waits again, as the SDK does)."""
    client._calculate_retry_timeout = no_wait
    return client


def no_wait(*args, **kwargs) -> float:
    """The SDK's pause before a retry, in seconds: none, in replay."""
    return 0.0
