"""The long replay's recordings: s06's own requests, stored as a fixture is, replayed beside the bare loop."""

from workbook.replay import fixtures

import pytest

from bench import long_replay


def test_a_recording_is_a_valid_fixture_of_the_asked_length(tmp_path):
    fixture = fixtures.load_fixture(long_replay.made(4, tmp_path))
    exchanges = fixture["exchanges"]
    assert len(exchanges) == 4 and fixture["script"] == "s06_recovery"
    assert [len(e["request"]["messages"]) for e in exchanges] == [1, 3, 5, 7]


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

    monkeypatch.setattr(long_replay, "made", lambda n, folder: folder / f"long_{n}.json")
    monkeypatch.setattr(long_replay, "side_by_side", side_by_side)
    result = long_replay.measure(turns=4, rounds=2, short=2)
    assert result["replay_ms"] == pytest.approx(150.0) and result["floor_ms"] == pytest.approx(50.0)
    assert result["ratio"] == pytest.approx(3.0)  # the rounds: 200/50 and 100/50
    assert "3.00x" in long_replay.report(result)[0]


def test_a_short_long_replay_runs_end_to_end():
    result = long_replay.measure(turns=4, rounds=1, short=2)
    assert result["turns"] == 4 and result["peak_mb"] > 10  # both replays ended well: no RuntimeError
