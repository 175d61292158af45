"""A player that remembers judges each request on what it adds to the last one: its answer to every
request must be exactly the answer of a player that judges each whole. Varied sequences of requests, as
a classroom's students send them (faithful turns, restarts, retries, side requests, threads, broken
histories, numbers where the SDK's types want a boolean), go through both and every answer is compared."""

import copy
import json

from workbook.api import contract
from workbook.api.compare import Match
from workbook.api.threads import BETA as THREADS
from workbook.api.wire import recorded_message
from workbook.classroom.students import Classroom, Limits
from workbook.replay import fixtures
from workbook.replay.player import NotPlayed, Player

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIXTURES = {
    name: fixtures.load_fixture(ROOT / "fixtures" / f"{name}.json")
    for name in (
        "s01_hello_agent",
        "s03_fix_failing_test",
        "s03_overloaded_then_ok",
        "s06_collapse_then_compact",
    )
}
WITH_THREADS = contract.Betas(frozenset({THREADS}))


def blocks(request: dict) -> list[tuple[int, int]]:
    """(message, block) places of the request's content blocks."""
    return [
        (i, j)
        for i, m in enumerate(request["messages"])
        if isinstance(m.get("content"), list)
        for j in range(len(m["content"]))
    ]


def changed(fixture: dict, turn: int, change: str, at: int, served: int) -> tuple[dict, contract.Betas]:
    """The recording's request at `turn` (from 0), changed as `change` says, `at` choosing where."""
    request = copy.deepcopy(fixture["exchanges"][turn]["request"])
    messages, places = request["messages"], blocks(request)
    place = places[at % len(places)] if places else None
    block = messages[place[0]]["content"][place[1]] if place else None
    betas = contract.NO_BETAS
    if change == "drop" and len(messages) > 1:
        messages.pop(at % len(messages))
    elif change == "twice":
        messages.insert(at % len(messages), copy.deepcopy(messages[at % len(messages)]))
    elif change == "system":  # a client's instructions mid-conversation: placed well or not
        messages.insert(at % (len(messages) + 1), {"role": "system", "content": "be brief"})
    elif change == "note":  # a client's own text after the tool results (left out of the comparison)
        messages[-1]["content"] = [
            *(messages[-1]["content"] if place else []),
            {"type": "text", "text": "ok"},
        ]
    elif change == "number" and block is not None:  # 1, 1.0 and true are equal in Python, not to the API
        key = "is_error" if block.get("type") == "tool_result" else "id"
        block[key] = [1, 1.0, 0, True, None][at % 5]
    elif change == "id" and block is not None:
        block["tool_use_id" if "tool_use_id" in block else "id"] = f"toolu_other{at % 3}"
    elif change == "empty":
        messages[at % len(messages)]["content"] = "" if at % 2 else []
    elif change == "role":
        m = messages[at % len(messages)]
        m["role"] = {"user": "assistant", "assistant": "user"}.get(m["role"], "user")
    elif change == "unknown" and block is not None:
        block["colour"] = "red"
    elif change == "side":
        request["max_tokens"] = 1
    elif change == "stream":
        request["stream"] = True
    elif change == "first":  # run the program again: the first request alone
        request = copy.deepcopy(fixture["exchanges"][0]["request"])
    elif change == "thread":  # the whole conversation under a new thread
        request["thread"], betas = {"type": "create"}, WITH_THREADS
    elif change == "continue" and served:  # only what came after the last reply, under its thread
        before = fixture["exchanges"][served - 1]
        kept = len(before["request"]["messages"]) + 1
        reply_id = (recorded_message(before["response"]) or {}).get("id", "msg_not_held")
        request = {k: v for k, v in request.items() if k not in ("system", "tools")}
        request |= {"messages": messages[kept:] or messages[-1:]}
        request["thread"], betas = {"type": "continue", "previous_message_id": reply_id}, WITH_THREADS
    elif change == "unbetaed":
        request["thread"] = {"type": "create"}
    return request, betas


def answer(player: Player, request: dict, betas: contract.Betas) -> tuple:
    """A player's answer, every part of it that a client or the teacher's log can see."""
    body = json.loads(json.dumps(request))  # parsed afresh, as the server parses a stranger's body
    try:
        played = player.play(body, betas)
    except NotPlayed as refused:
        problems = [str(p) for p in getattr(refused, "problems", [])]
        seen = (type(refused).__name__, refused.turn, str(refused), problems, getattr(refused, "diff", None))
    except Exception as refused:  # threads.Refusal: the API's own error for a thread
        seen = (type(refused).__name__, str(refused), getattr(refused, "status", None))
    else:
        seen = ("played", played.turn, played.response, played.stream, played.restarted, played.thread)
        seen += (played.side,)
    return seen, player.served, player.restarts


CHANGES = ["as recorded"] * 6 + ["drop", "twice", "system", "note", "number", "id", "empty", "role"]
CHANGES += ["unknown", "side", "stream", "first", "thread", "continue", "unbetaed"]
STEPS = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from(CHANGES), st.integers(0, 40)), min_size=1, max_size=14
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(FIXTURES)), steps=STEPS, faithful=st.booleans())
def test_a_remembering_player_answers_every_request_as_one_that_judges_it_whole(name, steps, faithful):
    fixture = FIXTURES[name]
    made = dict(match=Match.CONVERSATION, restartable=True, sides=True)
    remembering, whole = Player(fixture, strangers=True, **made), Player(fixture, remembers=False, **made)
    for turn, change, at in steps:
        turn = min(remembering.served, len(fixture["exchanges"]) - 1) if faithful else turn
        request, betas = changed(fixture, turn % len(fixture["exchanges"]), change, at, remembering.served)
        assert answer(remembering, request, betas) == answer(whole, request, betas), (turn, change, at)


def test_a_number_where_the_sdk_wants_a_boolean_is_refused_after_a_request_that_held_the_boolean():
    fixture = FIXTURES["s01_hello_agent"]
    first, second = (copy.deepcopy(e["request"]) for e in fixture["exchanges"])
    second["messages"][2]["content"][0]["is_error"] = False
    again = copy.deepcopy(second)
    again["messages"][2]["content"][0]["is_error"] = 0  # == False in Python; not a boolean to the API
    for strangers in (True, False):
        player = Player(fixture, Match.CONVERSATION, restartable=True, sides=True, strangers=strangers)
        player.play(first)
        player.play(second)  # remembered, with its boolean
        if strangers:  # judged as the API judges it whole
            with pytest.raises(NotPlayed, match="is_error: Input should be a valid boolean"):
                player.play(again)
        else:  # what a remembered request equal to the last would miss: why the classroom's are strangers'
            with pytest.raises(NotPlayed, match="comes after the recording's last turn"):
                player.play(again)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, room=st.sampled_from([10, 2000, 10**6]))
def test_the_classroom_answers_alike_whether_it_remembers_a_students_last_request_or_not(steps, room):
    """`room`: bytes a student's last request may hold to be remembered (10: never, 2000: sometimes)."""
    fixture = FIXTURES["s03_fix_failing_test"]
    remembering = Classroom({"f": fixture}, out=_Lines(), limits=Limits(remembered=room))
    whole = Classroom({"f": fixture}, out=_Lines())
    for turn, change, at in steps:
        served = remembering.cursors[("ann", "f")].served if remembering.cursors else 0
        request, betas = changed(fixture, turn % len(fixture["exchanges"]), change, at, served)
        headers = {"anthropic-beta": ",".join(betas.names)}
        sent = json.dumps(request).encode()
        replies = [
            room_.answer("ann", json.loads(sent), None, headers, size)
            for room_, size in ((remembering, len(sent)), (whole, None))
        ]
        assert [(r.status, r.body, r.events) for r in replies[:1]] == [
            (r.status, r.body, r.events) for r in replies[1:]
        ]
        assert remembering.out.lines[-1][8:] == whole.out.lines[-1][8:]  # the log line, its time left out
        assert remembering.remembered == sum(c.remembered for c in remembering.cursors.values()) <= room


class _Lines:
    def __init__(self):
        self.lines = []

    def write(self, text: str) -> None:
        self.lines.append(text)

    def flush(self) -> None:
        pass
