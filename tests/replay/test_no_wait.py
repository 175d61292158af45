"""workbook/replay/no_wait.py: a replay never sleeps (issue 39: three recorded 529s with
`retry-after: 60` made s02, whose SDK retries by itself, sleep 121 s)."""

import copy
import json
import time

from conftest import ROOT

OVERLOADED = ROOT / "fixtures" / "s03_overloaded_then_ok.json"


def three_slow_529s(tmp_path) -> str:
    fixture = json.loads(OVERLOADED.read_text())
    fixture["script"] = "s02_tools"
    overloaded = copy.deepcopy(fixture["exchanges"][0])
    overloaded["response"]["headers"]["retry-after"] = "60"
    fixture["exchanges"] = [copy.deepcopy(overloaded) for _ in range(3)]
    path = tmp_path / "s02_three_slow_529s.json"
    path.write_text(json.dumps(fixture, indent=2))
    return str(path)


def test_the_sdks_own_retries_do_not_wait_in_replay(tmp_path, run_main):
    started = time.monotonic()
    code, out = run_main("s02_tools", "--replay", three_slow_529s(tmp_path))
    assert time.monotonic() - started < 15
    assert code == 1 and "529" in out and "Traceback" not in out


def test_a_replay_that_recovers_after_a_529_answers_at_once(tmp_path):
    from workbook.replay import fixtures
    from workbook.replay.transport import replay_client

    fixture = fixtures.load_fixture(OVERLOADED)
    for exchange in fixture["exchanges"][:2]:  # the two recorded 529s
        exchange["response"]["headers"]["retry-after"] = "60"
    client, transport = replay_client(fixture, "slow", strict=False)
    started = time.monotonic()
    reply = client.messages.create(**fixture["exchanges"][1]["request"])
    assert time.monotonic() - started < 5 and reply.content and transport.cursor == 3  # after two 529s
