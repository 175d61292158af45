"""The red team's corpus (issue 23), replayed through `check`, `trust`, `rebuild` and every step
in-process: every hostile fixture or flag ends in one line and an exit code, never a traceback."""

import copy
import json
import os

from workbook import cli
from workbook.replay import fixtures, request_delta

import pytest
from conftest import ROOT, STEPS

DEFAULT = {  # each step's own fixture, as the corpus's base
    "s01_agent_loop": "s01_hello_agent.json",
    "s02_tools": "s02_fix_divide_by_zero.json",
    "s03_errors": "s03_fix_with_retry.json",
    "s04_parallel": "s04_read_many.json",
    "s05_budget": "s05_max_steps.json",
    "s06_recovery": "s06_escalation.json",
    "s07_really_done": "s06_stop_hook.json",
    "s08_full_context": "s06_prompt_too_long_collapse.json",
    "s09_keep_the_work": "s05_resume.json",
    "s10_trace": "s05_resume.json",
    "s11_handoff": "s05_handoff.json",
}
WRITE_TARGETS = ["/dev/full", "/proc/version", "{tmp}/missing/dir/x.json", "{tmp}", "{tmp}/fifo"]
ESCAPES = "\x1b]52;c;ZXZpbA==\x07\x1b]0;title\x07\x1b[2J"


def hostile_fixtures(step: str) -> dict:
    """name -> a fixture a stranger might send for this step."""
    base = fixtures.load_fixture(ROOT / "fixtures" / DEFAULT[step])
    escaped = copy.deepcopy(base) | {"task": "hi " + ESCAPES, "description": ESCAPES}
    for exchange in escaped["exchanges"]:
        for block in (exchange["response"].get("body") or {}).get("content", []):
            if block.get("type") == "text":
                block["text"] += ESCAPES
    deep = copy.deepcopy(base) | {"task": "[" * 5000}
    shapes = {"escapes": escaped, "deep_task": deep, "not_a_fixture": [1, 2, 3], "empty": {}}
    return shapes | hostile_deltas(base)


def hostile_deltas(base: dict) -> dict:
    """name -> the fixture stored as deltas (each request as what is new since the one before), broken."""
    stored = base | {"exchanges": request_delta.stored_exchanges(base["exchanges"])}
    first = {k: v for k, v in stored["exchanges"][0].items() if k != "request"}
    broken_first = [first | {"request_delta": {"messages_kept": 0, "messages_added": []}}]
    deltas = {  # the second exchange's request_delta
        "delta_kept_huge": {"messages_kept": 10**30, "messages_added": []},
        "delta_kept_string": {"messages_kept": "all", "messages_added": []},
        "delta_added_object": {"messages_kept": 0, "messages_added": {"role": "user"}},
        "delta_set_messages": {"messages_kept": 0, "messages_added": [], "set": {"messages": "x"}},
        "delta_unset_twice": {"messages_kept": 0, "messages_added": [], "unset": ["model", "model"]},
        "delta_not_an_object": None,
        "delta_escapes": {"messages_kept": 0, "messages_added": [], ESCAPES: 1},
    }
    shapes = {"delta_first": stored | {"exchanges": broken_first + stored["exchanges"][1:]}}
    for name, delta in deltas.items():
        second = {"request_delta": delta, "response": stored["exchanges"][0]["response"]}
        shapes[name] = stored | {"exchanges": [stored["exchanges"][0], second]}
    return shapes


def one_line_or_none(out: str) -> None:
    assert "Traceback" not in out, out[-2000:]
    assert "\x1b]" not in out and "\x1b[2J" not in out, "a control sequence reached the terminal"


@pytest.fixture
def places(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    return [target.format(tmp=tmp_path) for target in WRITE_TARGETS]


REPLAYED = ("escapes", "deep_task")  # fixtures the loader takes: they replay until their task differs


@pytest.mark.parametrize("step", STEPS)
def test_hostile_fixtures_end_in_one_error_line_and_exit_1(run_main, tmp_path, step):
    for name, fixture in hostile_fixtures(step).items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(fixture))
        code, out = run_main(step, "--replay", str(path))
        one_line_or_none(out)
        lines = out.strip().splitlines()
        assert code == 1 and lines[-1].startswith("error: "), (name, out[-500:])
        assert sum(line.startswith("error: ") for line in lines) == 1, (name, out[-500:])
        assert name in REPLAYED or len(lines) == 1, (name, out[-500:])  # refused as it loads


# The steps that write with a flag: --save from s09 on, --trace from s10 on (workbook/step_cli.py's
# STEP_FLAGS). Each pair must be a flag its step takes: a step without it exits 2, and fails here.
WRITE_FLAGS = [("s09_keep_the_work", "--save"), ("s10_trace", "--save"), ("s10_trace", "--trace")]
WRITE_FLAGS += [("s11_handoff", "--save"), ("s11_handoff", "--trace")]


@pytest.mark.parametrize("step, flag", WRITE_FLAGS)
def test_every_write_flag_at_every_bad_place_is_one_line(run_main, places, step, flag):
    for place in places:
        code, out = run_main(step, flag, place)
        one_line_or_none(out)
        assert code == 1 and len(out.strip().splitlines()) == 1, (flag, place, out)


@pytest.mark.parametrize("step", ["s01_agent_loop", "s06_recovery"])
def test_record_at_every_bad_place_is_one_line(run_main, places, step):
    for place in places:
        code, out = run_main(step, "--record", place, "--force", "task", ANTHROPIC_API_KEY="k")
        one_line_or_none(out)
        assert code == 1 and len(out.strip().splitlines()) == 1, (place, out)


@pytest.mark.parametrize("command", ["check", "trust", "rebuild"])
def test_the_teachers_commands_take_every_hostile_file_in_one_line(
    tmp_path, places, command, capsys, monkeypatch
):
    from workbook.replay import trust

    monkeypatch.setattr(trust, "TRUST_FILE", tmp_path / "TRUSTED")
    paths = list(places)
    for step in ("s01_agent_loop", "s06_recovery"):
        for name, fixture in hostile_fixtures(step).items():
            path = tmp_path / f"{step}-{name}.json"
            path.write_text(json.dumps(fixture))
            paths.append(str(path))
    for path in paths:
        try:
            code = cli.main([command, path])
        except SystemExit as stop:
            code = stop.code
        out = capsys.readouterr()
        one_line_or_none(out.out + out.err)
        loads = command != "rebuild" and path.endswith(tuple(f"-{name}.json" for name in REPLAYED))
        assert len((out.out + out.err).strip().splitlines()) == 1, (path, out)
        assert (code, bool(out.err)) == ((0, False) if loads else (1, True)), (
            path,
            out,
        )  # rebuild: untrusted


CONTRACT_CAUSES = {  # the fixture shapes the contract refuses (tests/api/test_contract.py has the rest)
    "error_body_5": lambda f: f["exchanges"][0].update(response={"status": 500, "body": {"error": 5}}),
    "204_with_body": lambda f: f["exchanges"][0].update(response={"status": 204, "body": {"x": 1}}),
    "lone_surrogate_task": lambda f: f.update(task="\ud800"),
    "long_workspace": lambda f: f.update(workspace="w" * 300),
    "max_steps_5000_digits": lambda f: f.update(args=["--max-steps", "9" * 5000]),
}


@pytest.mark.parametrize("cause", CONTRACT_CAUSES)
def test_contract_causes_are_one_line_too(run_main, tmp_path, cause):
    fixture = copy.deepcopy(fixtures.load_fixture(ROOT / "fixtures" / DEFAULT["s05_budget"]))
    CONTRACT_CAUSES[cause](fixture)
    path = tmp_path / "f.json"
    path.write_text(json.dumps(fixture, ensure_ascii=True))
    code, out = run_main("s05_budget", "--replay", str(path))
    one_line_or_none(out)
    assert code == 1 and len(out.strip().splitlines()) == 1 and out.startswith("error: "), out
