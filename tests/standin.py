"""A stand-in for the Messages API on 127.0.0.1, for testing live mode over real HTTP.

The scripts talk to it exactly as they would to the real API (through ANTHROPIC_BASE_URL), so live
mode is exercised end to end — the SDK, its HTTP client, real sockets — without a key or network.
A test gives it a `brain`: a function from the request body (and how many requests came before)
to a reply. Every request it receives is kept, with its headers, for the test to check.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from workbook.api import contract, wire


@dataclass
class Reply:
    """What the stand-in answers: a status, headers and a JSON body, or SSE events; `delay` first."""

    body: dict | None = None
    status: int = 200
    headers: dict = field(default_factory=dict)
    events: list | None = None
    delay: float = 0.0


def message(
    content: list, stop_reason: str = "end_turn", input_tokens: int = 10, output_tokens: int = 5
) -> dict:
    """A Messages API response body."""
    return wire.message_body(content, stop_reason, "msg_standin", usage=(input_tokens, output_tokens))


def tool_use(tool_id: str, name: str, tool_input: dict) -> dict:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def api_error(status: int, kind: str, text_: str, **headers) -> Reply:
    """An error reply in the API's own shape."""
    body = {"type": "error", "error": {"type": kind, "message": text_}}
    return Reply(body=body, status=status, headers=headers)


class StandIn:
    """A threaded HTTP server answering POST /v1/messages from `brain(body, n) -> Reply | dict`."""

    def __init__(self, brain):
        self.brain = brain
        self.requests: list[dict] = []  # {"body": ..., "headers": ...} in arrival order
        self.rule_problems: list[str] = []  # API-rule violations seen in any request
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict, headers: dict) -> Reply:
        n = len(self.requests)
        self.requests.append({"body": body, "headers": headers})
        self.rule_problems += [
            f"request {n + 1}: {p}" for p in contract.api_rule_problems(body.get("messages", []))
        ]
        reply = self.brain(body, n)
        reply = reply if isinstance(reply, Reply) else Reply(body=reply)
        if body.get("stream") and reply.status == 200 and reply.events is None:  # as the API does:
            reply.events = wire.message_to_events(reply.body)  # a streaming request gets SSE
        return reply

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                reply = standin.answer(json.loads(raw or b"{}"), headers)
                time.sleep(reply.delay)
                if reply.events is not None:
                    payload, kind = wire.sse_bytes(reply.events), "text/event-stream"
                else:
                    payload, kind = json.dumps(reply.body).encode(), "application/json"
                self.send_response(reply.status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (e.g. Ctrl-C): nothing left to tell it

            def log_message(self, *args):
                pass  # keep test output clean

        return Handler


def scripted(*replies):
    """A brain that answers the n-th request with the n-th reply, and fails loudly past the end."""

    def brain(body, n):
        if n >= len(replies):
            return api_error(400, "invalid_request_error", f"stand-in: no reply scripted for request {n + 1}")
        reply = replies[n]
        return reply(body) if callable(reply) else reply

    return brain
