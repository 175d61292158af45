"""Record mode: the real network, each exchange appended to a journal that becomes a fixture at the end."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from workbook.api.contract import Requests, exchange_problems
from workbook.api.wire import is_read_header
from workbook.errors import FixtureError, WorkbookError, one_line
from workbook.files import read_bytes, write_json
from workbook.replay.journal import Journal, read_journal
from workbook.replay.request_delta import rebuilt_exchanges, stored_exchanges
from workbook.scrub import public_endpoint

import anthropic
import httpx2


class _TeeStream(httpx2.SyncByteStream):
    """Passes a streamed body through unchanged while keeping a copy for the fixture."""

    def __init__(self, stream, on_done):
        self.stream, self.on_done, self.chunks = stream, on_done, []

    def __iter__(self):
        for chunk in self.stream:
            self.chunks.append(chunk)
            yield chunk

    def close(self):
        self.stream.close()
        self.on_done(b"".join(self.chunks))


class RecordingTransport(httpx2.BaseTransport):
    """Sends requests to the real API and hands each completed exchange (request body and response)
    to `on_exchange`: record mode appends it to the run's journal (workbook/replay/journal.py).

    Only the request body is kept: never the request headers, so the API key cannot leak. Nothing is
    kept here once handed on: a long run's memory does not grow with every request it sent.
    """

    def __init__(self, inner: httpx2.BaseTransport | None = None, on_exchange=None):
        self.inner = inner or httpx2.HTTPTransport()
        self.on_exchange = on_exchange  # called with each exchange as it completes
        self.save_error: str | None = None  # the last failure of on_exchange, reported at the end

    def _completed(self, exchange: dict) -> None:
        if self.on_exchange:
            try:
                self.on_exchange(exchange)
            except (WorkbookError, OSError) as err:  # a full disk must not stop the live run mid-turn
                self.save_error = one_line(err)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = {"request": json.loads(request.read() or b"{}")}
        try:
            response = self.inner.handle_request(request)
        except httpx2.TimeoutException:
            exchange["response"] = {"error": "timeout"}
            self._completed(exchange)
            raise
        except httpx2.TransportError:
            exchange["response"] = {"error": "connect"}
            self._completed(exchange)
            raise
        headers = {k: v for k, v in response.headers.items() if is_read_header(k)}
        exchange["response"] = {"status": response.status_code, "headers": headers}

        def done(raw: bytes) -> None:
            exchange["response"].update(_parse_body(raw, headers))
            self._completed(exchange)

        tee = _TeeStream(response.stream, done)
        return httpx2.Response(response.status_code, headers=response.headers, stream=tee)


def _parse_body(raw: bytes, headers: dict) -> dict:
    """A recorded body as fixture JSON: SSE becomes a list of events, JSON stays JSON."""
    if "text/event-stream" in headers.get("content-type", ""):
        events = []
        for chunk in raw.decode("utf-8", errors="replace").split("\n\n"):
            fields = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
            try:  # a stream cut off mid-event (Ctrl-C) ends at the last whole event
                events.append({"event": fields.get("event", "message"), "data": json.loads(fields["data"])})
            except (KeyError, ValueError):
                continue
        return {"stream": events}
    try:
        return {"body": json.loads(raw or b"null")}
    except json.JSONDecodeError:
        return {
            "body": {"type": "error", "error": {"type": "unparsed", "message": raw.decode(errors="replace")}}
        }


class Recording(Protocol):
    """What a recording reads of its run (workbook/launch.py's Run, which imports this module)."""

    script: str
    task: str
    model: str
    fixture_path: Path
    environment: dict | None
    transport: RecordingTransport


def recording_header(run: Recording) -> dict:
    """A recording's fields but its exchanges, with provenance `recorded`: the endpoint without its
    userinfo or query (every other secret is scrubbed as the journal's lines are written)."""
    header = {
        "script": run.script,
        "scenario": run.fixture_path.stem,
        "description": f"A live run of {run.script}: {run.task}",
        "provenance": "recorded",
        "recorded": {
            "date": datetime.now(UTC).date().isoformat(),
            "model": run.model,
            "sdk": f"anthropic {anthropic.__version__}",
            "endpoint": public_endpoint(os.environ.get("ANTHROPIC_BASE_URL")),
        },
        "task": run.task,
        "workspace": "",
        "match": "structure",  # live tool output (dates, sizes) differs between machines
    }
    if run.environment:  # s02's system prompt names the folder and the date: its replay sends the same
        header["environment"] = run.environment
    return header


def save_recording(run: Recording, journal: Journal) -> str:
    """At the end of a recording, whatever ended it: its journal becomes the fixture, atomically, and is
    removed. Only whole exchanges are kept (one the API would refuse, or cut short, would not load)."""
    journal.close()
    if not journal.count:
        why = run.transport.save_error or "no exchange with the API completed"
        return f"nothing recorded: {why} ({run.fixture_path} not written)"
    try:
        return _journal_to_fixture(run, journal)
    except (WorkbookError, OSError) as err:
        kept = f"the exchanges so far are in {journal.path}, which loads as a fixture"
        raise WorkbookError(f"{one_line(err)} — {kept}") from None


def _journal_to_fixture(run: Recording, journal: Journal) -> str:
    loaded = read_journal(journal.path, read_bytes(journal.path, "fixture"))
    exchanges, problem = rebuilt_exchanges(loaded["exchanges"])
    if problem:
        raise FixtureError(f"{journal.path}: {problem}")
    requests = Requests()  # each request judged on what it adds to the one before
    whole = [exchange for exchange in exchanges if not exchange_problems(exchange, requests)]
    if not whole:
        journal.remove()
        return f"nothing recorded: no exchange the API would accept ({run.fixture_path} not written)"
    write_json(run.fixture_path, loaded | {"exchanges": stored_exchanges(whole)})  # scrubbed as written
    journal.remove()
    lost = f"; the journal missed some: {run.transport.save_error}" if run.transport.save_error else ""
    return f"recorded {len(whole)} exchanges to {run.fixture_path}{lost}"
