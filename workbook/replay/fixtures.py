"""Loading a fixture and checking every field of it before anything uses it."""

from __future__ import annotations

import json
from pathlib import Path

from workbook.api import compare, server_tools
from workbook.api.contract import Requests, exchange_problems
from workbook.environment import environment_problems
from workbook.errors import FixtureError, WorkbookError
from workbook.files import MAX_JSON_DEPTH, json_depth, parse_json, read_bytes
from workbook.paths import STEPS
from workbook.replay import trust
from workbook.replay.fixture_flags import args_problems
from workbook.replay.journal import is_journal, read_journal
from workbook.replay.request_delta import rebuilt_exchanges, stored_exchanges
from workbook.scratch import workspace_problem

HINT = "fix the file or re-record it"
MATCH_PROBLEM = f"must be one of {', '.join(compare.NAMES)}, or absent (strict)"
FIXTURE_FIELDS = ("script", "scenario", "description", "provenance", "task", "workspace", "exchanges")


def load_fixture(path: str | Path) -> trust.LoadedFixture:
    """Read a fixture and check it; any problem raises FixtureError naming the file and the place.
    The dict it returns carries what its bytes vouch for (trust.LoadedFixture); a copy carries nothing."""
    return load_with_bytes(path)[0]


def load_with_bytes(path: str | Path) -> tuple[trust.LoadedFixture, bytes]:
    """The checked fixture and the exact bytes it came from (what trust is judged on)."""
    try:
        raw = read_bytes(path, "fixture")
        fixture = checked_fixture(path, parsed_fixture(path, raw))
    except FixtureError:
        raise
    except WorkbookError as err:
        raise FixtureError(str(err)) from None
    return trust.loaded(fixture, raw), raw  # a trusted fixture's recorded calls go with this loaded dict


def parsed_fixture(path, raw: bytes):
    """A fixture file's JSON, or a recording's journal (`F.json.journal`, one line per exchange) read
    as one fixture: not yet checked, its requests as stored."""
    return read_journal(path, raw) if is_journal(path) else parse_json(path, raw, "fixture", HINT)


def checked_fixture(path, fixture) -> dict:
    """The fixture with every request whole (a recording stores each as a delta of the one before:
    workbook/replay/request_delta.py), checked; the first problem raises FixtureError naming the place."""
    fixture, problems = _checked(fixture)  # read from a file: its nesting was measured
    for problem in problems:
        raise FixtureError(f"{path}: {problem}")
    return fixture


def fixture_problems(fixture) -> list[str]:
    """Everything wrong with a parsed fixture, each naming its place (e.g. `exchanges[2].response`)."""
    if isinstance(fixture, dict) and json_depth(fixture) > MAX_JSON_DEPTH:
        return [f"nested more than {MAX_JSON_DEPTH} levels deep"]
    return _checked(fixture)[1]


def _checked(fixture) -> tuple[dict, list[str]]:
    """The fixture with its requests rebuilt in full, and everything wrong with it. Text is checked on
    the stored form (each string once), the requests once rebuilt (each as the API would see it)."""
    if not isinstance(fixture, dict):
        return fixture, ["the top level must be a JSON object"]
    surrogate = _lone_surrogate(fixture)
    if surrogate:  # JSON's \ud800 escape parses, but no terminal or file can hold it: every print would fail
        return fixture, [f"{surrogate}: holds a lone surrogate (a \\ud800-style escape that is not text)"]
    if isinstance(fixture.get("exchanges"), list):
        exchanges, problem = rebuilt_exchanges(fixture["exchanges"])
        if problem:
            return fixture, [problem]
        fixture = fixture | {"exchanges": exchanges}
    return fixture, _problems(fixture)


def _problems(fixture: dict) -> list[str]:
    problems = [f"missing field `{name}`" for name in FIXTURE_FIELDS if name not in fixture]
    if problems:
        return problems
    problems += _field_problems(fixture)
    if not isinstance(fixture["exchanges"], list) or not fixture["exchanges"]:
        return problems + ["`exchanges` must be a non-empty list"]
    requests = Requests()  # each request judged on what it adds to the one before
    for n, exchange in enumerate(fixture["exchanges"]):
        found = exchange_problems(exchange, requests) or server_tools.recording_problems(exchange)
        problems += [f"exchanges[{n}]{p}" for p in found]
        if isinstance(exchange, dict) and exchange.get("match", "strict") not in compare.NAMES:
            problems.append(f"exchanges[{n}].match: {MATCH_PROBLEM}")
    return problems


def _lone_surrogate(fixture: dict) -> str | None:
    """The place of the first string holding half a surrogate pair, or None (one quick check first)."""
    try:
        json.dumps(_each_string_once(fixture), ensure_ascii=False).encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass
    pending = [("", fixture)]
    while pending:
        place, value = pending.pop(0)
        if isinstance(value, str) and not _encodes(value):
            return place or "the fixture"
        items = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        )
        for key, item in items:
            if isinstance(key, str) and not _encodes(key):
                return f"a key in {place or 'the fixture'}"
            pending.append(
                (f"{place}.{key}".lstrip(".") if isinstance(key, str) else f"{place}[{key}]", item)
            )
    return "the fixture"


def _each_string_once(fixture: dict) -> dict:
    """A fixture built in memory with whole requests sharing their history (a scripted run's, say),
    in the stored form: every string it holds, each history once (serialised whole, the history would
    be written once per turn); anything not of that shape is checked as it is."""
    exchanges = fixture.get("exchanges")
    whole = isinstance(exchanges, list) and all(
        isinstance(e, dict) and isinstance(e.get("request"), dict) and "request_delta" not in e
        for e in exchanges
    )
    return fixture | {"exchanges": stored_exchanges(exchanges)} if whole and len(exchanges) > 1 else fixture


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _field_problems(fixture: dict) -> list[str]:
    """The fields around the exchanges: each of the right type, and none pointing outside the project."""
    problems = []
    for name in ("scenario", "description", "provenance_note"):
        if name in fixture and not isinstance(fixture[name], str):
            problems.append(f"`{name}` must be a string")
    if fixture["provenance"] not in ("recorded", "scripted"):
        problems.append("provenance must be `recorded` or `scripted`")
    if fixture["script"] not in STEPS:
        problems.append(f"`script` must name one of the steps: {', '.join(STEPS)}")
    if not isinstance(fixture["task"], str) or not fixture["task"].strip():
        problems.append("`task` must be a non-empty string")
    problem = workspace_problem(fixture["workspace"])
    if problem:
        problems.append(f"`workspace`: {problem}")
    recorded = fixture.get("recorded", {})
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        problems.append("`recorded` must be an object of strings (date, model, sdk, endpoint)")
    if fixture.get("match", "strict") not in compare.NAMES:
        problems.append(f"`match` {MATCH_PROBLEM}")
    latency = fixture.get("read_latency", 0)
    if not isinstance(latency, int | float) or isinstance(latency, bool) or not 0 <= latency <= 60:
        problems.append("read_latency must be 0 to 60 seconds")
    problems += environment_problems(fixture.get("environment"))
    if fixture["script"] in STEPS:
        problems += [f"`args`: {p}" for p in args_problems(fixture.get("args", []), fixture["script"])]
    return problems
