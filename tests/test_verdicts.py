"""A fixture's exchanges are judged once: a pass is remembered by the fixture's bytes and the judge's
code (workbook/verdicts.py), and anything else is judged again."""

import json
import shutil

import pytest
from conftest import ROOT

from workbook import fixture_commands, fixtures, shapes, verdicts
from workbook.errors import FixtureError

FIXTURE = ROOT / "fixtures" / "s01_hello_agent.json"


@pytest.fixture
def judged(monkeypatch, tmp_path):
    """A cache folder of this test's own, and a count of the exchanges each load judged."""
    monkeypatch.setattr(shapes, "cache_file", lambda name, kind="bin": tmp_path / "cache" / f"{name}.{kind}")
    seen = []
    real = fixtures.exchange_problems

    def counting(exchange, chain):
        seen.append(exchange)
        return real(exchange, chain)

    monkeypatch.setattr(fixtures, "exchange_problems", counting)
    verdicts._judge.cache_clear()  # worked out under this test's cache folder, whose name is part of it
    yield seen
    verdicts._judge.cache_clear()


def copy_of(fixture, tmp_path, edit=None):
    """The fixture copied under tmp_path (edited by `edit(dict)` first, if given)."""
    path = tmp_path / fixture.name
    if edit is None:
        shutil.copy(fixture, path)
        return path
    data = json.loads(fixture.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))
    return path


def test_a_fixture_that_passed_is_not_judged_again(judged, tmp_path):
    path = copy_of(FIXTURE, tmp_path)
    first = fixtures.load_fixture(path)
    assert len(judged) == len(first["exchanges"]) > 0
    judged.clear()
    assert fixtures.load_fixture(path) == first  # the same fixture, requests rebuilt in full
    assert judged == []


def test_changed_bytes_are_judged_again(judged, tmp_path):
    fixtures.load_fixture(copy_of(FIXTURE, tmp_path))
    judged.clear()
    path = copy_of(FIXTURE, tmp_path, edit=lambda data: data.update(description="another description"))
    fixtures.load_fixture(path)
    assert judged


def test_a_changed_judge_judges_again(judged, tmp_path, monkeypatch):
    path = copy_of(FIXTURE, tmp_path)
    fixtures.load_fixture(path)
    judged.clear()
    package = tmp_path / "package"
    package.mkdir()
    for module in verdicts.PACKAGE.glob("*.py"):
        shutil.copy(module, package)
    monkeypatch.setattr(verdicts, "PACKAGE", package)
    verdicts._judge.cache_clear()
    fixtures.load_fixture(path)
    assert judged == []  # the same code, copied: the same judge
    (package / "contract.py").write_text((package / "contract.py").read_text() + "\n# a rule changed\n")
    verdicts._judge.cache_clear()
    fixtures.load_fixture(path)
    assert judged  # any module's source is part of the key
    judges = list((tmp_path / "cache" / "passed").iterdir())
    assert judges == [verdicts._judge_folder()]  # the older judge's passes went when this one's came
    assert verdicts.passed_before(path.read_bytes(), "fixture")


def test_a_fixture_with_a_problem_is_never_remembered(judged, tmp_path):
    def break_it(data):
        data["exchanges"][0]["request"]["max_tokens"] = "many"

    path = copy_of(FIXTURE, tmp_path, edit=break_it)
    for _ in range(2):
        with pytest.raises(FixtureError, match="max_tokens"):
            fixtures.load_fixture(path)
    assert not verdicts.passed_before(path.read_bytes(), "fixture")


def test_the_fields_around_the_exchanges_are_checked_every_time(judged, tmp_path, monkeypatch):
    """A pass covers the exchanges only: the workspace a fixture names is a folder that may have gone."""
    path = copy_of(FIXTURE, tmp_path)
    fixtures.load_fixture(path)
    monkeypatch.setattr(fixtures, "workspace_problem", lambda name: f"no folder named {name!r}")
    with pytest.raises(FixtureError, match="no folder named"):
        fixtures.load_fixture(path)


def test_the_authors_check_judges_every_time(judged, tmp_path, capsys):
    path = copy_of(FIXTURE, tmp_path)
    fixtures.load_fixture(path)
    judged.clear()
    assert fixture_commands.run_on("check", str(path)) == 0
    assert judged and "ok" in capsys.readouterr().out


def test_a_cache_that_cannot_be_written_only_means_judging_again(judged, tmp_path):
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    path = copy_of(FIXTURE, tmp_path)
    for _ in range(2):
        judged.clear()
        assert fixtures.load_fixture(path)["exchanges"]
        assert judged
