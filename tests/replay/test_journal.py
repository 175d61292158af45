"""A recording's journal: one line per exchange, written through as the run goes, read back as a fixture."""

import json

from workbook import errors
from workbook.replay import fixtures, journal, request_delta

import pytest
from conftest import ROOT


def test_a_journal_torn_mid_line_loads_what_came_before(tmp_path):
    source = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    path = tmp_path / "rec.json.journal"
    header = {k: v for k, v in source.items() if k != "exchanges"}
    lines = [header, *request_delta.stored_exchanges(source["exchanges"])]
    text_ = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_text(text_ + '{"request_delta": {"messages_ke')  # a kill -9 mid-write
    assert fixtures.load_fixture(path)["exchanges"] == source["exchanges"]


def test_each_exchange_is_one_line_and_the_header_comes_with_the_first(tmp_path):
    source = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    path, asked = tmp_path / "rec.json.journal", []
    kept = journal.Journal(path, lambda: asked.append(1) or {"script": "s01_agent_loop"})
    assert not path.exists()  # nothing recorded, no file
    for exchange in source["exchanges"]:
        kept.append(exchange)
    kept.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + len(source["exchanges"]) and asked == [1] and kept.count == 2
    assert "request_delta" in json.loads(lines[2])  # the second request stored as what it adds


def test_a_response_cut_short_is_left_out(tmp_path):
    kept = journal.Journal(tmp_path / "rec.json.journal", dict)
    kept.append({"request": {"messages": []}, "response": {"status": 200, "stream": []}})
    assert kept.count == 0 and not (tmp_path / "rec.json.journal").exists()


def test_a_journal_is_never_written_through_a_planted_link(tmp_path):
    target, path = tmp_path / "elsewhere.txt", tmp_path / "rec.json.journal"
    target.write_text("keep")
    path.symlink_to(target)
    source = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    with pytest.raises(errors.WorkbookError, match="not a regular file"):
        journal.Journal(path, dict).append(source["exchanges"][0])
    assert target.read_text() == "keep"
