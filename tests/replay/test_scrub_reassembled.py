"""Secrets are scrubbed from what is reassembled, not only from what is stored whole (issue 23)."""

import json

from workbook import scrub
from workbook.api import wire
from workbook.replay import journal

KEY = "sk-ant-api03-split-across-deltas-0123456789"


def streamed_tool_use(pieces: list[str]) -> list[dict]:
    """A tool_use streamed as the API does: its input JSON in a few tokens per delta."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": []}
    message |= {"stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
    events = [{"event": "message_start", "data": {"type": "message_start", "message": message}}]
    block = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}
    events.append(
        {
            "event": "content_block_start",
            "data": {"type": "content_block_start", "index": 0, "content_block": block},
        }
    )
    for piece in pieces:
        delta = {"type": "input_json_delta", "partial_json": piece}
        events.append(
            {
                "event": "content_block_delta",
                "data": {"type": "content_block_delta", "index": 0, "delta": delta},
            }
        )
    events.append({"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}})
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    }
    events += [
        {"event": "message_delta", "data": end},
        {"event": "message_stop", "data": {"type": "message_stop"}},
    ]
    return events


def test_a_key_split_across_input_json_deltas_is_scrubbed_and_the_stream_stays_valid(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    events = streamed_tool_use(['{"command": "echo sk-ant', "-api03-split-across", '-deltas-0123456789"}'])
    clean = scrub.scrub_stream(events)
    assert "split-across" not in json.dumps(clean) and "-deltas-" not in json.dumps(clean)
    block = wire.events_to_message(clean)["content"][0]
    assert block["input"] == {"command": "echo [secret removed]"}


def test_a_key_split_across_text_deltas_is_scrubbed(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    events = streamed_tool_use([])
    events[1]["data"]["content_block"] = {"type": "text", "text": ""}
    pieces = ["the key is sk-", "ant-api03-split", "-across-deltas-0123456789, done"]
    events[2:2] = [
        {
            "event": "content_block_delta",
            "data": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
        }
        for p in pieces
    ]
    clean = scrub.scrub_stream(events)
    assert wire.events_to_message(clean)["content"][0]["text"] == "the key is [secret removed], done"


def test_a_stream_with_no_secret_is_left_as_it_is(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    events = streamed_tool_use(['{"command": ', '"ls"}'])
    assert scrub.scrub_stream(events) is events


def test_a_recorded_response_is_scrubbed_across_its_deltas(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    response = {
        "status": 200,
        "stream": streamed_tool_use(['{"command": "echo ' + KEY[:10], KEY[10:] + '"}']),
    }
    assert KEY[10:] not in json.dumps(journal.scrubbed(response))


def test_custom_header_values_and_token_urls_are_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Api-Key: hdr-secret-value-1\nX-Team: team-token-abc")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://tok3n-only-credential-99@proxy.example:8080/v1")
    text = "hdr-secret-value-1 team-token-abc tok3n-only-credential-99 http://tok3n-only-credential-99@proxy.example"
    scrubbed = scrub.scrub_secrets(text)
    assert "hdr-secret" not in scrubbed and "team-token" not in scrubbed and "tok3n" not in scrubbed
    assert "ghp_abcdefghijklmnop" not in scrub.scrub_secrets("see https://ghp_abcdefghijklmnop@github.com/x")
    assert (
        scrub.public_endpoint("http://tok3n-only-credential-99@proxy.example:8080/v1")
        == "http://proxy.example:8080/v1"
    )


def test_a_key_shaped_model_name_is_redacted_for_the_log():
    said = scrub.redact_keys("replay:sk-ant-api03-AbCdEf0123456789_xyz")
    assert said == "replay:[key removed]"
    assert scrub.redact_keys("claude-sonnet-5") == "claude-sonnet-5"
