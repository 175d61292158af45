"""The Player answers one request from a recording: the contract first, then the comparison, then the
recorded answer; it notices the end, advances, and holds threads."""

import copy

from workbook.api import contract
from workbook.api.compare import Match
from workbook.replay import fixtures
from workbook.replay.player import Differs, Ended, Played, Player, Refused

import pytest
from conftest import ROOT

S01 = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
RETRY = fixtures.load_fixture(ROOT / "fixtures" / "s03_overloaded_then_ok.json")


def sent(turn: int, fixture: dict = S01) -> dict:
    """What a faithful loop sends at `turn` (from 1): the recording's request, as parsed JSON."""
    return copy.deepcopy(fixture["exchanges"][turn - 1]["request"])


def test_a_request_like_the_recording_gets_the_recorded_answer_and_moves_on():
    player = Player(S01)
    played = player.play(sent(1))
    assert isinstance(played, Played) and played.turn == 1 and player.served == 1
    assert played.response is S01["exchanges"][0]["response"] and played.stream is False
    streaming = Player(S01, Match.CONVERSATION).play(sent(1) | {"stream": True})
    assert streaming.stream is True  # served as SSE, whichever way it was recorded


def test_the_contract_comes_first_and_a_refused_request_does_not_move_the_player():
    player = Player(S01)
    with pytest.raises(Refused) as caught:
        player.play(sent(1) | {"foo": 1})
    assert (
        str(caught.value.problems[0]) == "foo: Extra inputs are not permitted" and caught.value.diff is None
    )
    assert player.served == 0
    broken = sent(2)
    broken["messages"].pop()  # the tool results dropped: a rule the API keeps, and a difference too
    player.play(sent(1))
    with pytest.raises(Refused) as caught:
        player.play(broken)
    assert "`tool_use` ids were found without" in str(caught.value.problems[0])
    assert caught.value.turn == 2 and caught.value.diff.startswith("expected 3 messages, got 2")
    assert player.served == 1


def test_a_request_the_api_would_take_but_not_the_recorded_one_differs():
    player = Player(S01)
    other = sent(1)
    other["messages"][0]["content"] = "another task"
    with pytest.raises(Differs) as caught:
        player.play(other)
    assert caught.value.turn == 1 and "text expected" in caught.value.diff
    with pytest.raises(Differs) as caught:  # a loop of one's own: its own words, but the recorded task
        Player(S01, Match.CONVERSATION).play(other)
    assert caught.value.diff.startswith("messages[0]: your first user turn does not carry the recorded task")
    assert Player(S01, None).play(other).turn == 1  # no comparison: a script of responses


def test_the_recorded_task_may_come_with_a_clients_own_text_blocks_around_it():
    reminded = sent(1)
    task = reminded["messages"][0]["content"]
    reminded["messages"][0]["content"] = [
        {"type": "text", "text": "<system-reminder>be careful</system-reminder>"},
        {"type": "text", "text": f"  {task}\n", "cache_control": {"type": "ephemeral"}},
    ]
    assert Player(S01, Match.CONVERSATION).play(reminded).turn == 1


def test_a_request_after_the_last_turn_is_the_end_of_the_recording():
    player = Player(S01)
    for turn in (1, 2):
        player.play(sent(turn))
    again = sent(2)
    again["messages"] += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "more?"}]
    with pytest.raises(Ended) as caught:
        player.play(again)
    assert caught.value.turn == 3 and caught.value.messages[-1]["content"] == "more?"


def test_a_restartable_player_starts_over_on_a_first_turn_request():
    player = Player(S01, Match.CONVERSATION, restartable=True)
    player.play(sent(1))
    played = player.play(sent(1))
    assert played.restarted and played.turn == 1 and player.restarts == 1
    steps_own = Player(S01)  # a step's own replay never starts over: it differs from turn 2
    steps_own.play(sent(1))
    with pytest.raises(Differs):
        steps_own.play(sent(1))


def test_a_recorded_retry_is_served_as_a_retry_not_a_restart():
    player = Player(RETRY, Match.CONVERSATION, restartable=True)
    first, retried = player.play(sent(1, RETRY)), player.play(sent(2, RETRY))
    assert first.response["status"] == 529 and sent(1, RETRY) == sent(2, RETRY)  # the same request again
    assert retried.turn == 2 and not retried.restarted and retried.response["status"] == 429


def test_each_request_is_judged_as_the_whole_request_would_be():
    player, messages = Player(S01, None), sent(2)["messages"]
    player.play(sent(1))
    rewritten = sent(2) | {"messages": [messages[0], messages[2]]}  # not an extension of the last one
    with pytest.raises(Refused) as caught:
        player.play(rewritten)
    assert [str(p) for p in caught.value.problems] == [str(p) for p in contract.request_problems(rewritten)]


def test_a_player_that_does_not_remember_keeps_nothing_of_a_request():
    player = Player(S01, Match.CONVERSATION, remembers=False)
    player.play(sent(1))
    assert player.requests.sent.messages == [] and player.requests.whole.messages == []
    remembering = Player(S01)
    remembering.play(sent(1))
    assert remembering.requests.sent.messages == sent(1)["messages"]  # the next is judged on what it adds


def test_a_side_request_uses_no_turn_where_sides_are_taken_and_is_a_turn_where_they_are_not():
    first = copy.deepcopy(S01["exchanges"][0]["request"])
    probe = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]}
    schema = {"type": "json_schema", "schema": {"type": "object"}}
    title = {**first, "tools": [], "output_config": {"format": schema}, "temperature": 1, "stream": True}
    classroom = Player(S01, Match.CONVERSATION, sides=True)
    for side in (probe, title):
        played = classroom.play(side)
        assert (played.side, played.turn, classroom.served) == (True, 0, 0)
        assert played.response["stop_reason"] == "end_turn" and played.stream == (side is title)
    assert classroom.play(first).turn == 1  # the real turn 1 still gets turn 1
    strict = Player(S01, Match.STRICT)  # the in-process replay: every request is a turn, compared in full
    with pytest.raises(Differs):
        strict.play(probe)
    assert strict.served == 0


def test_a_side_request_the_api_would_refuse_is_refused():
    broken = {"model": "m", "max_tokens": 1, "messages": [{"role": "assistant", "content": "hi"}]}
    with pytest.raises(Refused, match="first message must use"):
        Player(S01, Match.CONVERSATION, sides=True).play(broken)


# -- a server tool's result goes only to a request that declared the tool -----------------------------

PAUSED = fixtures.load_fixture(ROOT / "fixtures" / "s06_pause_turn.json")  # web_search, declared


def without_web_search(body: dict) -> dict:
    return body | {"tools": [t for t in body["tools"] if t["name"] != "web_search"]}


@pytest.mark.parametrize("match", [Match.CONVERSATION, None])
def test_the_recorded_search_is_refused_to_a_request_that_declares_no_web_search(match):
    player = Player(PAUSED, match)
    with pytest.raises(Refused) as caught:
        player.play(without_web_search(sent(1, PAUSED)))
    assert str(caught.value.problems[0]) == (
        "tools: the recorded reply uses the server tool `web_search`, but this request does not declare it; "
        "the API runs a server tool only when the request's `tools` declares it"
    )
    assert caught.value.diff == (
        'the recording\'s request declares it in `tools`: {"type": "web_search_20250305", "name": '
        '"web_search", "max_uses": 5}; declare it too'
    )
    assert player.served == 0
    assert player.play(sent(1, PAUSED)).turn == 1  # declared: the recorded answer


def test_a_server_tool_refusal_comes_after_the_comparison():
    player = Player(PAUSED)  # strict: the tools' names are compared first, and say more
    with pytest.raises(Differs) as caught:
        player.play(without_web_search(sent(1, PAUSED)))
    assert caught.value.diff.startswith("tools: expected [")


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures").glob("*.json")), ids=lambda p: p.stem)
def test_every_fixture_still_replays_its_own_requests(path):
    fixture = fixtures.load_fixture(path)
    player = Player(fixture)
    turns = [player.play(copy.deepcopy(e["request"])).turn for e in fixture["exchanges"]]
    assert turns == list(range(1, len(fixture["exchanges"]) + 1))
