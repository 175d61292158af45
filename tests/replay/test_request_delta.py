"""A recording stores each request as what is new since the one before, and loads it as whole requests;
a delta from a stranger is checked before anything is built from it."""

import copy
import json

from workbook import cli
from workbook.errors import FixtureError
from workbook.replay import fixtures, request_delta

import pytest
from conftest import ROOT


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "fixtures").glob("*.json")))
def test_every_fixture_stored_as_deltas_loads_as_the_same_whole_requests(name, tmp_path):
    whole = fixtures.load_fixture(ROOT / "fixtures" / name)
    stored = whole | {"exchanges": request_delta.stored_exchanges(whole["exchanges"])}
    path = tmp_path / name
    path.write_text(json.dumps(stored))
    assert fixtures.load_fixture(path)["exchanges"] == whole["exchanges"]


def test_a_delta_says_what_changed_besides_the_messages():
    first = {
        "model": "m",
        "max_tokens": 10,
        "tool_choice": {"type": "auto"},
        "messages": [{"role": "user", "content": "a"}],
    }
    second = {"model": "m", "max_tokens": 64000, "messages": [{"role": "user", "content": "b"}]}
    delta = request_delta.delta_of(first, second)["request_delta"]
    assert delta == {
        "messages_kept": 0,
        "messages_added": second["messages"],
        "set": {"max_tokens": 64000},
        "unset": ["tool_choice"],
    }
    assert request_delta.applied(first, delta) == second


def delta_fixture() -> dict:
    whole = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    return whole | {"exchanges": request_delta.stored_exchanges(whole["exchanges"])}


def _first_as_delta(f):
    f["exchanges"][0] = {"request_delta": {"messages_kept": 0, "messages_added": []}} | {
        k: v for k, v in f["exchanges"][0].items() if k != "request"
    }


HOSTILE_DELTAS = {  # name -> (change to a delta-form fixture, words the one line must hold)
    "first_is_a_delta": (_first_as_delta, "needs a whole `request`"),
    "kept_too_many": (lambda d: d.update(messages_kept=10**9), "messages_kept"),
    "kept_negative": (lambda d: d.update(messages_kept=-1), "messages_kept"),
    "kept_true": (lambda d: d.update(messages_kept=True), "messages_kept"),
    "kept_missing": (lambda d: d.pop("messages_kept"), "messages_kept"),
    "kept_a_float": (lambda d: d.update(messages_kept=1.0), "messages_kept"),
    "added_not_a_list": (lambda d: d.update(messages_added="hi"), "messages_added"),
    "set_messages": (lambda d: d.update(set={"messages": []}), "`messages` changes only"),
    "set_not_an_object": (lambda d: d.update(set=[1]), ".set"),
    "unset_unknown": (lambda d: d.update(unset=["nothing_here"]), "nothing_here"),
    "unset_not_strings": (lambda d: d.update(unset=[{"a": 1}]), ".unset"),
    "unknown_field": (lambda d: d.update(replace_all=True), "replace_all"),
    "empty_messages": (lambda d: d.update(messages_kept=0, messages_added=[]), "messages"),
    "breaks_the_api_rules": (
        lambda d: d.update(
            messages_added=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]
        ),
        "tool_result",
    ),
    "set_bad_max_tokens": (lambda d: d.update(set={"max_tokens": "lots"}), "max_tokens"),
}


def hostile_delta(name: str) -> dict:
    fixture = delta_fixture()
    change, _ = HOSTILE_DELTAS[name]
    if change is _first_as_delta:
        change(fixture)
    else:
        change(fixture["exchanges"][1]["request_delta"])
    return fixture


@pytest.mark.parametrize("name", HOSTILE_DELTAS)
def test_a_delta_that_does_not_apply_is_one_line_naming_its_place(name, tmp_path, capsys):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(hostile_delta(name)))
    with pytest.raises(FixtureError, match=r"exchanges\[[01]\]") as caught:
        fixtures.load_fixture(path)
    assert HOSTILE_DELTAS[name][1] in str(caught.value) and "\n" not in str(caught.value)
    assert cli.main(["check", str(path)]) == 1
    said = capsys.readouterr()
    assert "Traceback" not in said.err and len(said.err.strip().splitlines()) == 1


def test_both_forms_in_one_exchange_are_refused():
    fixture = delta_fixture()
    fixture["exchanges"][1]["request"] = {"model": "m"}
    assert "holds both" in fixtures.fixture_problems(fixture)[0]


def test_a_few_bytes_of_deltas_cannot_rebuild_into_gigabytes():
    fixture = delta_fixture()
    many = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}] * 5_000
    fixture["exchanges"][0]["request"]["messages"] = many + [{"role": "user", "content": "z"}]
    again = fixture["exchanges"][1] | {
        "request_delta": {"messages_kept": len(many) + 1, "messages_added": []}
    }
    fixture["exchanges"] = fixture["exchanges"][:1] + [copy.copy(again) for _ in range(600)]
    assert "over 5,000,000 messages" in fixtures.fixture_problems(fixture)[0]
