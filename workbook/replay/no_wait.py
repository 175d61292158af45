"""A replay never waits: the SDK's own retries (s01 and s02 leave them on) go at once in replay.

A recording has no clock. Live, the SDK waits before each retry as retry-after asks, or by its own
backoff; in a replay that would only spend the reader's time: three recorded 529s with
`retry-after: 60` made s02 sleep 121 s. The recorded wait still reaches whoever reads the headers
(s03's own retry layer shows it, and does not spend it either).
"""

from __future__ import annotations

import anthropic


class ReplayAnthropic(anthropic.Anthropic):
    """The SDK's client, for a replay: the same in every way but the wait before its own retries."""

    def _calculate_retry_timeout(self, *args, **kwargs) -> float:
        return 0.0
