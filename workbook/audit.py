"""The audit log s02 keeps: one JSON line per tool call, written in one piece."""

from __future__ import annotations

import time
from pathlib import Path

from workbook import tracing


def log_call(audit: Path | None, block, decision: str, output: str, is_error: bool, started: float) -> None:
    """One JSON line per call in the audit log: what was asked, what the gate decided, how it went."""
    if audit:
        line = {"id": block.id, "tool": block.name, "input": block.input, "decision": decision}
        line |= {"ms": round((time.monotonic() - started) * 1000), "chars": len(output), "is_error": is_error}
        tracing.append_line(audit, line)  # one write, the key scrubbed: a crash leaves no half line
