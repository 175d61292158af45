"""The long replay's recordings: s06's own requests, stored as a fixture is, replayed beside the bare loop."""

from workbook.replay import fixtures

import pytest

from bench import common, long_replay


def test_a_recording_is_a_fixture_of_the_asked_length_that_s06_and_the_bare_loop_replay_to_its_end(tmp_path):
    path = long_replay.made(4, tmp_path)
    exchanges = fixtures.load_fixture(path)["exchanges"]
    assert [len(e["request"]["messages"]) for e in exchanges] == [1, 3, 5, 7]
    replay, floor = common.side_by_side(long_replay.commands(path), common.offline_env(TMPDIR=str(tmp_path)))
    assert (replay["rc"], floor["rc"]) == (0, 0), (replay["last"], floor["last"])


def test_per_extra_turn_the_replay_and_its_floor_are_paired_round_by_round(monkeypatch):
    cpu = {
        ("replay", 2): [1.0, 1.0],
        ("replay", 4): [1.4, 1.2],
        ("floor", 2): [1.0, 1.0],
        ("floor", 4): [1.1, 1.1],
    }

    def side_by_side(argvs, env):
        turns = 2 if "long_2" in argvs[0][3] else 4
        return [{"cpu": cpu[(who, turns)].pop(0), "peak_mb": 5.0, "rc": 0} for who in ("replay", "floor")]

    monkeypatch.setattr(long_replay, "made", lambda n, folder: folder / f"long_{n}.json")  # no recording
    monkeypatch.setattr(long_replay, "side_by_side", side_by_side)
    result = long_replay.measure(turns=4, rounds=2, short=2)
    assert result["replay_ms"] == pytest.approx(150.0) and result["floor_ms"] == pytest.approx(50.0)
    assert result["ratio"] == pytest.approx(3.0)  # the rounds: 200/50 and 100/50
    assert "3.00x" in long_replay.report(result)[0]
