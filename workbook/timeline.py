"""When each tool call of a turn ran (s04): for the timeline on screen only, never sent to the model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Timed:
    """When one call ran, for the display only: timings never go into a tool_result."""

    index: int  # its place among the turn's tool_use blocks
    block: object
    group: int
    started: float  # time.monotonic()
    ended: float
