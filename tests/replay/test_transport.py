"""The in-process replay: the real SDK over an httpx transport that plays a fixture, so the SDK's own
retries, parsing and streaming run as they would live."""

import copy

from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT


def good():
    return copy.deepcopy(fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json"))


def test_a_recorded_529_is_retried_by_the_sdk_itself():
    fixture = good()
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    first = fixture["exchanges"][0]
    fixture["exchanges"].insert(
        0, {"request": first["request"], "response": {"status": 529, "body": overloaded}}
    )
    client, transport = replay.replay_client(fixture, "t", max_retries=1)
    client = client.with_options(timeout=5)
    response = client.messages.create(**{k: v for k, v in first["request"].items()})
    assert response.stop_reason == "tool_use" and transport.cursor == 2


def test_a_replayed_stream_parses_through_the_sdk():
    fixture = good()
    body = fixture["exchanges"][1]["response"]["body"]
    start = {**body, "content": [], "stop_reason": None}
    events = [
        {"event": "message_start", "data": {"type": "message_start", "message": start}},
        {
            "event": "content_block_start",
            "data": {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        },
        {
            "event": "content_block_delta",
            "data": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Done."},
            },
        },
        {"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}},
        {
            "event": "message_delta",
            "data": {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2},
            },
        },
        {"event": "message_stop", "data": {"type": "message_stop"}},
    ]
    request = {**fixture["exchanges"][0]["request"], "stream": True}
    stream_fixture = {
        **fixture,
        "exchanges": [{"request": request, "response": {"status": 200, "stream": events}}],
    }
    client, _ = replay.replay_client(stream_fixture, "t")
    with client.messages.stream(**{k: v for k, v in request.items() if k != "stream"}) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Done." and final.stop_reason == "end_turn"


def test_a_mismatch_is_not_retried_by_the_sdk():
    client, transport = replay.replay_client(good(), "t", max_retries=3)
    with pytest.raises(replay.ReplayMismatch, match="turn 1: messages\\[0\\].content\\[0\\]: text expected"):
        client.messages.create(model="m", max_tokens=8000, messages=[{"role": "user", "content": "other"}])
    assert len(transport.seen) == 1


def test_a_request_is_compared_with_the_recording_of_its_own_turn():
    fixture = good()
    client, transport = replay.replay_client(fixture, "t")
    first = fixture["exchanges"][0]["request"]
    client.messages.create(**first)
    sent = {**first, "messages": first["messages"]}  # the same opening again, where turn 2 is due
    with pytest.raises(replay.ReplayMismatch, match="turn 2: expected 3 messages, got 1"):
        client.messages.create(**sent)
    assert transport.cursor == 1


def test_a_request_is_judged_and_compared_in_full():
    fixture = good()
    client, transport = replay.replay_client(fixture, "t", max_retries=0)
    first = copy.deepcopy(fixture["exchanges"][0]["request"])
    with pytest.raises(anthropic.BadRequestError, match="foo: Extra inputs are not permitted"):
        client.messages.create(**first, extra_body={"foo": 1})
    first["messages"][0]["content"] = "another task"
    with pytest.raises(replay.ReplayMismatch, match="turn 1: messages\\[0\\].content\\[0\\]: text expected"):
        client.messages.create(**first)
    assert transport.cursor == 0


def test_a_recorded_request_with_a_system_message_is_judged_when_it_is_sent():
    fixture = good()
    system_turn = {"role": "system", "content": "be brief"}
    fixture["exchanges"][0]["request"]["messages"].insert(0, system_turn)  # never messages[0]
    client, _ = replay.replay_client(fixture, "t", max_retries=0)
    with pytest.raises(
        anthropic.BadRequestError,
        match="messages.0.role: a system message must immediately follow a user message",
    ):
        client.messages.create(**fixture["exchanges"][0]["request"])


def test_a_request_that_declares_no_web_search_gets_the_apis_400_instead_of_the_recorded_search():
    paused = fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json")
    request = copy.deepcopy(paused["exchanges"][0]["request"])
    request["tools"] = [t for t in request["tools"] if t["name"] != "web_search"]
    client, transport = replay.replay_client(paused, "s06_pause_turn", match="conversation", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**request)
    message = caught.value.body["error"]["message"]
    assert message.startswith("tools: the recorded reply uses the server tool `web_search`, but this request")
    assert message.endswith(
        "replay of s06_pause_turn, turn 1; the recording differs: the recording's request declares it in "
        '`tools`: {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}; declare it too'
    )
    assert transport.cursor == 0
