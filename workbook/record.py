"""Record mode: the real network, with every exchange kept and saved as a fixture."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anthropic
import httpx2

from workbook.contract import exchange_problems
from workbook.errors import WorkbookError, one_line
from workbook.files import write_json
from workbook.scrub import public_endpoint

if TYPE_CHECKING:  # for the annotations only: launch imports this module
    from workbook.launch import Run

KEPT_RESPONSE_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-should-retry", "request-id")


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
    """Sends requests to the real API and keeps each request body and response for the fixture.

    Only the request body is kept: never the request headers, so the API key cannot leak.
    """

    def __init__(self, inner: httpx2.BaseTransport | None = None, on_exchange=None):
        self.inner = inner or httpx2.HTTPTransport()
        self.exchanges: list[dict] = []
        self.on_exchange = on_exchange  # called after each exchange completes (record mode saves then)
        self.save_error: str | None = None  # the last failure of on_exchange, reported at the end

    def _completed(self) -> None:
        if self.on_exchange:
            try:
                self.on_exchange()
            except (WorkbookError, OSError) as err:  # a full disk must not stop the live run mid-turn
                self.save_error = one_line(err)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = {"request": json.loads(request.read() or b"{}")}
        self.exchanges.append(exchange)
        try:
            response = self.inner.handle_request(request)
        except httpx2.TimeoutException:
            exchange["response"] = {"error": "timeout"}
            self._completed()
            raise
        except httpx2.TransportError:
            exchange["response"] = {"error": "connect"}
            self._completed()
            raise
        headers = {k: v for k, v in response.headers.items() if k.lower() in KEPT_RESPONSE_HEADERS}
        exchange["response"] = {"status": response.status_code, "headers": headers}

        def done(raw: bytes) -> None:
            exchange["response"].update(_parse_body(raw, headers))
            self._completed()

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


def save_recording(run: Run) -> str:
    """Write a live run as a fixture with provenance `recorded`: the endpoint without its userinfo or
    query, every secret this process holds scrubbed, atomically. Called after every exchange."""
    done = [e for e in run.transport.exchanges if not exchange_problems(e)]  # whole ones: the file loads
    if not done:
        return f"nothing recorded: no exchange with the API completed ({run.fixture_path} not written)"
    fixture = {
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
        "exchanges": [dict(e, match="structure") for e in done],
    }
    if run.environment:  # s02's system prompt names the folder and the date: its replay sends the same
        fixture["environment"] = run.environment
    write_json(run.fixture_path, fixture)
    return f"recorded {len(done)} exchanges to {run.fixture_path}"
