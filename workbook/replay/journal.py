"""A recording's journal: one line per exchange, appended as a live run goes, made the fixture at its end.

Rewriting the whole fixture after every exchange made recording quadratic in time and in size. Now
`--record F.json` appends each completed exchange to `F.json.journal`, beside the fixture, as one JSON
line (its request stored as what is new since the one before: workbook/replay/request_delta.py), written
through to the operating system at once, so a `kill -9` loses no completed exchange. At the end of
the run (a normal end, an error, a Ctrl-C, a budget stop) the journal becomes `F.json` atomically and
is removed. A killed run's journal loads as a fixture as it is: `--replay F.json.journal`, or
`python -m workbook check F.json.journal`.

Line 1 holds the fixture's fields but its exchanges; each line after it holds one exchange. Each line
is scrubbed of secrets before it is written: the journal is a file on disk too.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from workbook.api.contract import response_problems
from workbook.errors import FixtureError, WorkbookError
from workbook.files import parse_json
from workbook.replay.request_delta import delta_of
from workbook.scrub import dumps, scrub_stream

SUFFIX = ".journal"
HINT = "a recording's journal is written by --record; re-record it"


def journal_of(fixture_path: Path) -> Path:
    """Where a recording to `fixture_path` keeps its journal: beside it, in the folder the user named."""
    return fixture_path.with_name(fixture_path.name + SUFFIX)


def is_journal(path) -> bool:
    return str(path).endswith(SUFFIX)


class Journal:
    """The journal of one recording: `append` each completed exchange, `close` at the end.

    The file is created at the first exchange (a run that records nothing leaves no file), with the
    fixture's fields from `header()` asked for then, when the run knows them all (s02's environment)."""

    def __init__(self, path: Path, header: Callable[[], dict], sync: bool = False):
        self.path, self.header, self.sync = path, header, sync  # sync: fsync each line (see benchmarks)
        self.file = None
        self.previous: dict | None = None  # the last request written: the next one is stored against it
        self.count = 0  # exchanges written

    def append(self, exchange: dict) -> None:
        """Write one completed exchange; one whose response is cut short (a stream ended mid-event)
        is left out, as it would not load."""
        response = exchange["response"]
        if not isinstance(response, dict) or response_problems(response):
            return
        request = exchange["request"]
        line = delta_of(self.previous, request) | {"response": scrubbed(response), "match": "structure"}
        if self.file is None:  # the header goes in the same write as the first exchange
            self.file = _create(self.path)
            self._write(self.header(), line)
        else:
            self._write(line)
        self.previous, self.count = request, self.count + 1

    def _write(self, *values: dict) -> None:
        # dumps scrubs: every secret this process holds, also as JSON escapes it, before the line is written
        text = "".join(dumps(value, ensure_ascii=False) + "\n" for value in values)  # split secrets too
        self.file.write(text.encode("utf-8"))
        self.file.flush()  # to the operating system: what a kill -9 cannot take back
        if self.sync:
            os.fsync(self.file.fileno())

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _create(path: Path):
    """A new regular file at `path`, never through a link planted there (O_NOFOLLOW, O_EXCL): the
    journal is written in the folder the user named, and nowhere else."""
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise WorkbookError(f"{path}: not a regular file — remove it, then record again")
    path.unlink(missing_ok=True)  # a leftover journal: --record checked it was meant to go (--force)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o666), "wb")


def scrubbed(response: dict) -> dict:
    """A response with the secrets removed from what its stream's deltas add up to (see scrub_stream);
    whole strings are scrubbed with the line."""
    if isinstance(response.get("stream"), list):
        return response | {"stream": scrub_stream(response["stream"])}
    return response


def read_journal(path, raw: bytes) -> dict:
    """A journal's lines as one fixture (its exchanges still in their stored form, for the loader to
    rebuild and check). A last line without its newline is what a kill -9 mid-write leaves: dropped."""
    complete = raw[: raw.rfind(b"\n") + 1]  # what follows the last newline is torn: its write never ended
    lines = complete.split(b"\n")[:-1]
    if not lines:
        raise FixtureError(f"{path}: an empty journal — the recording stopped before its first exchange")
    values = []
    for n, line in enumerate(lines, start=1):
        value = parse_json(f"{path}, line {n}", line, "journal line", HINT)
        if not isinstance(value, dict):
            raise FixtureError(f"{path}, line {n}: must be a JSON object — {HINT}")
        values.append(value)
    header, exchanges = values[0], values[1:]
    if "exchanges" in header:
        raise FixtureError(f"{path}, line 1: holds the fixture's fields, not `exchanges` — {HINT}")
    return header | {"exchanges": exchanges}
