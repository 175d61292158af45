"""workbook/api/compaction.py: a compaction request answered as the API answers it, with a block that
carries the messages it stands for, put back when the block is sent again, and refused when it comes
back changed. The tool runner's own compaction, over a thread, is in test_threads.py."""

import base64
import functools
import zlib

from workbook.api import compaction
from workbook.api.contract import Problem
from workbook.replay import transport as replay

import anthropic
import pytest
from thread_clients import MODEL, S01, answers_to, s01_client, serving

HISTORY = [
    {"role": "user", "content": "fix the test"},
    {"role": "assistant", "content": [{"type": "text", "text": "Looking."}]},
]


@pytest.fixture
def server():
    """A replay server for the fixtures on a free loopback port."""
    with serving() as served:
        yield served


@pytest.fixture(params=["in-process", "server"])
def client_for(request, server):
    """A client on s01's fixture, in process (conversation matching) or through the server."""
    return functools.partial(s01_client, request.param, server)


def compaction_of_turn_2(client, **extra):
    """A bare compaction request on s01's conversation after turn 1 (the task, the reply, its results)."""
    first = client.messages.create(
        model=MODEL, max_tokens=100, messages=[{"role": "user", "content": S01["task"]}]
    )
    history = [{"role": "user", "content": S01["task"]}, first.to_param() | {"role": "assistant"}]
    history += answers_to(first)
    return client.beta.messages.create(
        model=MODEL, max_tokens=100, messages=history, compaction={"type": "summarize"}, **extra
    )


def test_a_bare_compaction_request_gets_a_block_to_carry_on_from(client_for):
    client = client_for()
    summary = compaction_of_turn_2(client, betas=[compaction.BETA])
    assert summary.stop_reason == "compaction" and [b.type for b in summary.content] == ["compaction"]
    assert "recording holds no summary" in summary.content[0].content
    carried_on = client.beta.messages.create(
        model=MODEL, max_tokens=100, messages=[summary.to_param()], betas=[compaction.BETA]
    )
    assert carried_on.content[0].text == S01["exchanges"][1]["response"]["body"]["content"][0]["text"]


def test_a_compaction_block_changed_on_the_way_back_is_refused(client_for):
    client = client_for()
    block = compaction_of_turn_2(client, betas=[compaction.BETA]).content[0].to_dict()
    edited = {"role": "assistant", "content": [block | {"content": "my own summary"}]}
    with pytest.raises((anthropic.BadRequestError, replay.ReplayMismatch), match="send it back unchanged"):
        client.beta.messages.create(model=MODEL, max_tokens=100, messages=[edited], betas=[compaction.BETA])


def test_a_compaction_request_without_its_beta_is_refused_naming_it(client_for):
    with pytest.raises((anthropic.BadRequestError, replay.ReplayMismatch)) as caught:
        compaction_of_turn_2(client_for())
    assert f"compaction: requires the beta header `anthropic-beta: {compaction.BETA}`" in str(caught.value)


def test_a_block_that_unpacks_past_the_request_limit_is_not_unpacked():
    bomb = base64.b64encode(zlib.compress(b"[" + b" " * (compaction.MOST_BYTES + 1) + b"]")).decode()
    assert compaction.unpack(compaction.MARK + bomb) is None
    assert compaction.unpack(compaction.MARK + "not base64!") is None


# -- the module itself -------------------------------------------------------------------------------


def block_of(answered: dict) -> dict:
    [block] = answered["content"]
    return block


def test_only_a_request_that_carries_compaction_asks_for_one():
    assert compaction.is_request({"compaction": {"type": "summarize"}})
    assert not compaction.is_request({"messages": HISTORY})
    assert not compaction.is_request({"compaction": None})


def test_the_answer_is_one_compaction_block_that_stands_for_the_messages_sent():
    answered = compaction.answer({"model": "claude-sonnet-5"}, HISTORY)
    assert (answered["stop_reason"], answered["model"]) == ("compaction", "claude-sonnet-5")
    block = block_of(answered)
    assert block["type"] == "compaction" and block["encrypted_content"].startswith(compaction.MARK)
    assert "The 2 messages before this point" in block["content"]
    assert compaction.unpack(block["encrypted_content"]) == HISTORY
    assert compaction.answer({"model": 7}, HISTORY)["model"] == "replay"  # no model of the request's own


def test_a_block_sent_first_is_put_back_as_its_messages_and_what_followed_it_is_kept():
    block = block_of(compaction.answer({}, HISTORY))
    after = {"type": "text", "text": "Carrying on."}
    sent = [{"role": "assistant", "content": [block, after]}, {"role": "user", "content": "go on"}]
    assert compaction.expand(sent) == [
        *HISTORY,
        {"role": "assistant", "content": [after]},
        {"role": "user", "content": "go on"},
    ]
    alone = [{"role": "assistant", "content": [block]}]
    assert compaction.expand(alone) == HISTORY


def test_a_conversation_without_a_block_of_ours_is_left_as_it_is():
    assert compaction.expand(HISTORY) is HISTORY
    foreign = {"type": "compaction", "content": "the API's", "encrypted_content": "opaque"}
    sent = [{"role": "assistant", "content": [foreign]}]
    assert compaction.expand(sent) is sent  # not ours: the replay cannot read it, and does not try
    later = [HISTORY[0], {"role": "assistant", "content": [block_of(compaction.answer({}, HISTORY))]}]
    assert compaction.expand(later) is later  # only the first message is looked at
    assert compaction.expand([]) == []


@pytest.mark.parametrize("field", ["content", "encrypted_content", "signature"])
def test_a_block_changed_in_any_field_is_a_problem_naming_where_it_is(field):
    block = block_of(compaction.answer({}, HISTORY))
    changed = block | {field: block[field] + "x"}
    found = compaction.expand([{"role": "assistant", "content": [{"type": "text", "text": "hi"}, changed]}])
    assert isinstance(found, Problem)
    assert found.path == "messages.0.content.1" and "send it back unchanged" in found.text


def test_a_block_that_does_not_unpack_to_messages_is_not_unpacked():
    def packed(value: bytes) -> str:
        return compaction.MARK + base64.b64encode(zlib.compress(value)).decode()

    assert compaction.unpack(packed(b'{"role": "user"}')) is None  # not a list
    assert compaction.unpack(packed(b'["user"]')) is None  # a list, but not of messages
    assert compaction.unpack(packed(b"not json")) is None
    assert compaction.unpack(packed(b'[{"role": "user", "content": "x"}]')) == [
        {"role": "user", "content": "x"}
    ]
