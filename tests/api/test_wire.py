"""The wire format: a recorded response as the bytes the SDK reads, and the headers a recording keeps."""

import copy
import json

from workbook.api import wire
from workbook.replay import fixtures

from conftest import ROOT
from student_requests import BODY1

S01 = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
MESSAGE = S01["exchanges"][0]["response"]["body"]


def test_a_message_and_its_events_are_the_same_message():
    events = wire.message_to_events(MESSAGE)
    assert [e["event"] for e in events][:2] == ["message_start", "content_block_start"]
    assert wire.events_to_message(events) == MESSAGE


def test_the_message_a_recorded_response_delivers_streamed_or_not():
    streamed = {"status": 200, "stream": wire.message_to_events(MESSAGE)}
    whole = {"status": 200, "body": MESSAGE}
    assert wire.recorded_message(streamed) == wire.recorded_message(whole) == MESSAGE
    assert wire.stop_reason(streamed) == wire.stop_reason(whole) == MESSAGE["stop_reason"]
    overloaded = {"status": 529, "body": {"type": "error", "error": {"type": "overloaded_error"}}}
    assert wire.recorded_message(overloaded) is None and wire.stop_reason({"error": "connect"}) is None


def test_a_recording_keeps_only_the_headers_a_client_reads():
    kept = ["request-id", "Retry-After", "retry-after-ms", "x-should-retry", "content-type"]
    assert all(wire.is_read_header(name) for name in kept + ["anthropic-ratelimit-requests-remaining"])
    assert not any(wire.is_read_header(n) for n in ["content-length", "set-cookie", "x-api-key", "a\nb"])


def test_a_reply_converts_a_recording_to_the_form_the_request_asked_for():
    response = {"status": 200, "headers": {"request-id": "req_1"}, "body": copy.deepcopy(MESSAGE)}
    streamed = wire.http_response(response, stream=True)
    assert (
        streamed.headers["content-type"] == "text/event-stream" and b"event: message_stop" in streamed.content
    )
    plain = wire.http_response({"status": 200, "stream": wire.message_to_events(MESSAGE)}, stream=False)
    assert json.loads(plain.content) == MESSAGE


def test_message_to_events_and_back_is_the_same_message():
    thinking = {"type": "thinking", "thinking": "let me look at the files first", "signature": "sig=="}
    message = BODY1 | {"content": [thinking, {"type": "text", "text": "Listing… ✓"}, *BODY1["content"]]}
    events = wire.message_to_events(message)
    assert [e["event"] for e in events][:2] == ["message_start", "content_block_start"]
    assert [e["event"] for e in events][-2:] == ["message_delta", "message_stop"]
    assert wire.events_to_message(events) == message


def sse(kind: str, **data) -> dict:
    return {"event": kind, "data": {"type": kind, **data}}


def test_events_to_message_reads_a_stream_as_the_api_sends_it():
    start = BODY1 | {"content": [], "stop_reason": None, "usage": {"input_tokens": 114, "output_tokens": 1}}
    tool = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}
    events = [
        sse("message_start", message=start),
        sse("ping"),
        sse("content_block_start", index=0, content_block=tool),
        *[
            sse("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": piece})
            for piece in ("", '{"command": "l', 's"}')
        ],
        sse("content_block_stop", index=0),
        sse(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 40},
        ),
        sse("message_stop"),
    ]
    message = wire.events_to_message(events)
    assert message["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
    ]
    assert (message["stop_reason"], message["usage"]) == (
        "tool_use",
        {"input_tokens": 114, "output_tokens": 40},
    )
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert wire.events_to_message([*events[:3], {"event": "error", "data": error}]) == error
