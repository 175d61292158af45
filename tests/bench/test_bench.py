"""The benchmarks run on tiny inputs and return sane structures. Smoke tests only: no timing is asserted."""

import dataclasses
import gc
import os
import sys
import tempfile
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workbook.api import compare
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import httpx2
import pytest

from bench import common, parallel, per_turn, replay_cost, suite, tokens, whatif


@pytest.fixture(scope="module")
def long_fixture() -> dict:
    return per_turn.make_long_fixture(5)


def test_long_fixture_is_a_valid_fixture_of_the_asked_length(long_fixture):
    assert fixtures.fixture_problems(long_fixture) == []
    exchanges = long_fixture["exchanges"]
    assert [len(e["request"]["messages"]) for e in exchanges] == [1, 3, 5, 7, 9]
    assert [e["response"]["body"]["stop_reason"] for e in exchanges] == ["tool_use"] * 4 + ["end_turn"]


def test_long_fixture_usage_is_the_size_of_the_request_actually_sent(long_fixture):
    for exchange in long_fixture["exchanges"]:
        assert exchange["response"]["body"]["usage"]["input_tokens"] == per_turn.estimate_tokens(
            exchange["request"]
        )
    used = tokens.per_turn_tokens(long_fixture)
    assert used == sorted(used) and len(set(used)) == len(used)  # resending the history: it only grows


def test_long_fixture_replays_strictly_through_s01_with_its_tool_stubbed(long_fixture):
    run = per_turn.loop_run("s01_agent_loop", long_fixture)
    assert len(run["stamps"]) == len(long_fixture["exchanges"]) + 1
    assert len(run["checks"]) == len(long_fixture["exchanges"])
    assert run["stubbed"]
    assert {"transport", "SDK", "tools"} <= set(run["categories"])


def test_per_turn_measure_reports_every_window_and_category(long_fixture):
    result = per_turn.measure("s01_agent_loop", reps=1, windows=2, fixture=long_fixture)
    assert [w["turns"] for w in result["windows"]] == ["1-2", "3-4", "5-5"]
    assert result["turns"] == 5 and result["tool_stubbed"]
    assert "rest of the loop" in result["categories"]
    numbers = [result[k] for k in ("floor", "loop", "overhead", "wall_overhead", "transport", "gc_loop")]
    assert all(isinstance(x, float) for x in numbers)


def scripted_client(model: per_turn.ScriptedModel) -> anthropic.Anthropic:
    http = anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(model))
    return anthropic.Anthropic(api_key="bench", http_client=http, max_retries=0)


def test_unlimited_budget_puts_every_max_limit_out_of_reach():
    @dataclasses.dataclass
    class Budget:
        max_steps: int = 50
        max_cost: float = 5.0
        model: str = "m"

    budget = per_turn.unlimited(Budget)
    assert budget.max_steps > 10**9 and budget.max_cost > 10**9 and budget.model == "m"


def test_gc_pauses_counts_full_collections():
    with common.gc_pauses() as totals:
        gc.collect()
    assert totals[1] == 1 and isinstance(totals[0], float)


def test_scripted_model_answers_prompt_too_long_above_its_context_limit():
    model = per_turn.ScriptedModel(per_turn.scripted_responses(2), context_limit=10)
    with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
        scripted_client(model).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x" * 200}]
        )
    assert model.exchanges[0]["response"]["status"] == 400


def test_scripted_model_streams_when_asked():
    model = per_turn.ScriptedModel(per_turn.scripted_responses(2))
    with scripted_client(model).messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}]
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].type == "tool_use" and message.content[0].input == {"command": "true 1"}
    assert "stream" in model.exchanges[0]["response"]


def test_scripted_model_answers_a_request_without_tools_in_text_and_keeps_its_turns():
    model = per_turn.ScriptedModel(per_turn.scripted_responses(2))
    client = scripted_client(model)
    ask = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "sum up"}]}
    summary = client.messages.create(**ask, tool_choice={"type": "none"})
    assert summary.content[0].type == "text" and model.served == 0  # s06's compaction is not a turn
    assert client.messages.create(**ask).content[0].input == {"command": "true 1"}


def test_long_fixture_command_is_a_template(tmp_path):
    fixture = per_turn.make_long_fixture(3, command="echo {n}")
    commands = [e["response"]["body"]["content"][0].get("input") for e in fixture["exchanges"][:2]]
    assert commands == [{"command": "echo 1"}, {"command": "echo 2"}]


def test_token_growth_rows_are_cumulative(long_fixture):
    growth = tokens.growth(long_fixture, checkpoints=(1, 3, 5))
    assert [r["turn"] for r in growth["rows"]] == [1, 3, 5]
    used = tokens.per_turn_tokens(long_fixture)
    assert [r["cumulative"] for r in growth["rows"]] == [used[0], sum(used[:3]), sum(used)]
    assert growth["doubling"] > 2  # the second half costs more than the first: the history is resent


def test_clock_charges_nested_time_to_the_inner_category_only():
    ticks = iter(range(100))
    clock = common.Clock(timer=lambda: next(ticks))
    inner = clock.wrap("inner", lambda: None)
    outer = clock.wrap("outer", lambda: inner())
    outer()  # outer starts at 0, inner runs 1..2, outer ends at 3
    assert clock.totals == {"outer": 2, "inner": 1}


def test_clock_charges_a_generator_for_the_time_it_takes_to_produce_each_item():
    ticks = iter(range(100))
    clock = common.Clock(timer=lambda: next(ticks))
    items = list(clock.wrap_iter("stream", lambda: iter("ab"))())
    assert items == ["a", "b"]
    assert clock.totals == {"stream": 3}  # three calls to next (a, b, then the end), one tick each


def test_timing_puts_every_wrapped_function_back(long_fixture):
    import s01_agent_loop

    before = (replay.ReplayTransport.__call__, s01_agent_loop.run_tool, fixtures.load_fixture)
    with common.timing(s01_agent_loop):
        assert replay.ReplayTransport.__call__ is not before[0]
    assert (replay.ReplayTransport.__call__, s01_agent_loop.run_tool, fixtures.load_fixture) == before


def test_replay_cost_child_times_a_whole_replay_in_process(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the replay's workspace copy lands here
    ms = replay_cost.child("s01_agent_loop")
    assert {"main", "SDK", "transport", "tools", "rendering", "import rich"} <= set(ms)
    assert all(v >= 0 for v in ms.values())


def test_commands_are_shown_as_a_reader_would_type_them():
    argv = [replay_cost.sys.executable, str(common.ROOT / "s01_agent_loop.py")]
    assert replay_cost.shown(argv) == "python s01_agent_loop.py"


def test_each_step_is_set_beside_the_bare_loop_on_its_own_default_fixture():
    commands = replay_cost.commands(["s01_agent_loop", "s06_recovery"])
    assert list(commands) == ["s01_agent_loop", "s01_agent_loop floor", "s06_recovery", "s06_recovery floor"]
    shown = {name: replay_cost.shown(argv) for name, argv in commands.items()}
    assert shown["s01_agent_loop"] == "python s01_agent_loop.py"
    assert shown["s01_agent_loop floor"] == "python bench/bare_replay.py fixtures/s01_hello_agent.json"
    assert shown["s06_recovery floor"].endswith(replay_cost.default_fixture("s06_recovery"))
    for step in common.steps():
        assert (common.ROOT / replay_cost.default_fixture(step)).is_file()


def test_measure_reports_each_step_against_its_floor(monkeypatch):
    # Cheap stand-ins for both sides: what is tested is the pairing and the ratios, not the figures.
    fake = {"s01_agent_loop": ["-c", "pass"], "s01_agent_loop floor": ["-c", "import json"]}
    monkeypatch.setattr(
        replay_cost,
        "commands",
        lambda names=None: {n: [replay_cost.sys.executable, *a] for n, a in fake.items()},
    )
    result = replay_cost.measure(3, ["s01_agent_loop"])["s01_agent_loop"]
    assert result["error"] == ""
    assert result["ratio_best"] == result["cpu"] / result["floor_cpu"]
    assert result["ratio_median"] == result["cpu_median"] / result["floor_cpu_median"]
    assert result["floor_command"] == 'python -c "import json"'


def fake_side_by_side(started: list, cpu_of):
    """common.side_by_side's stand-in: notes each round's commands in the order started."""

    def side_by_side(argvs, env):
        started.append([argv[-1] for argv in argvs])
        return [{"wall": 0.0, "cpu": cpu_of(argv[-1]), "peak_mb": 1.0, "rc": 0, "last": ""} for argv in argvs]

    return side_by_side


def test_measure_runs_each_step_beside_its_floor_and_takes_the_median_of_the_rounds_ratios(monkeypatch):
    cpu = iter([3.0, 1.0, 2.0, 1.0, 1.0, 1.0, 9.0, 1.0, 2.0, 2.0])  # (step, floor) a round, in this order
    rounds = []

    def in_step_then_floor_order(argv):
        return next(cpu)

    monkeypatch.setattr(replay_cost, "side_by_side", fake_side_by_side(rounds, in_step_then_floor_order))
    monkeypatch.setattr(replay_cost, "commands", lambda names=None: {"s": ["step"], "s floor": ["floor"]})
    result = replay_cost.measure(5, ["s"])["s"]
    # Both start together in every round, and which starts first alternates.
    assert rounds == [["step", "floor"], ["floor", "step"]] * 2 + [["step", "floor"]]
    # The CPU each was given, by who started first: step 3, 1, 1, 1, 2; floor 1, 2, 1, 9, 2.
    assert result["cpu"] == 1.0 and result["floor_cpu"] == 1.0
    assert result["ratio"] == 1.0  # the rounds' ratios: 3, 0.5, 1, 1/9, 1
    assert result["ratio_best"] == 1.0 and result["ratio_median"] == 1.0 / 2.0


def test_measure_can_time_another_checkouts_step_in_the_same_rounds(monkeypatch):
    rounds = []
    monkeypatch.setattr(
        replay_cost, "side_by_side", fake_side_by_side(rounds, lambda arg: 2.0 if "/other/" in arg else 1.0)
    )
    result = replay_cost.measure(2, ["s01_agent_loop"], other="/other")["s01_agent_loop"]
    other_rounds = [r for r in rounds if "/other/s01_agent_loop.py" in r]
    assert len(rounds) == 4 and len(other_rounds) == 2  # each round: the step's pair, then the other's
    assert all(any(a.endswith("s01_hello_agent.json") for a in r) for r in rounds)  # each beside a floor
    assert result["other"]["ratio"] == 2.0 and result["ratio"] == 1.0


def test_side_by_side_starts_the_commands_together_and_times_each():
    # Each opens the same FIFO, one to write, one to read: opening one end waits for the other, so this
    # ends only if the two run at the same time (the alarm fails it otherwise, with no sleep to wait).
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        writer = f"import signal; signal.alarm(20); open({fifo!r}, 'w').write('met')"
        reader = f"import signal; signal.alarm(20); print(open({fifo!r}).read()); 1/0"
        wrote, read = common.side_by_side(
            [[sys.executable, "-c", writer], [sys.executable, "-c", reader]], common.offline_env()
        )
    assert wrote["rc"] == 0 and read["rc"] == 1 and read["last"] == "ZeroDivisionError: division by zero"
    assert all(r["cpu"] > 0 and r["wall"] >= r["cpu"] / 2 and r["peak_mb"] > 1 for r in (wrote, read))


def test_bare_replay_replays_a_default_fixture_to_its_end(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(replay_cost.BARE), "fixtures/s01_hello_agent.json"],
        cwd=common.ROOT,
        env=common.offline_env(TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # its workspace copy is removed


def test_diff_fast_path_gives_the_same_answer_as_the_full_diff(long_fixture):
    recorded = long_fixture["exchanges"][2]["request"]
    changed = dict(recorded, messages=recorded["messages"][:-2])
    with whatif.applied("diff-fast-path"):
        fast = (compare.request_diff(recorded, recorded), compare.request_diff(recorded, changed))
    assert fast == (None, compare.request_diff(recorded, changed)) and fast[1]


def test_unknown_what_if_is_a_one_line_error():
    with pytest.raises(SystemExit, match="unknown --what-if"):
        whatif.applied("nope")


def fake_parallel_step() -> types.ModuleType:
    """A stand-in for s04's tool layer (REGISTRY, execute, run_tools), to check the bench's plumbing."""
    step = types.ModuleType("fake_s04")
    step.console = None
    step.REGISTRY = {"read_file": types.SimpleNamespace(handler=lambda workspace, path: "real")}
    step.execute = lambda block, workspace: (
        step.REGISTRY[block.name].handler(workspace, **block.input),
        False,
    )

    def run_tools(blocks, settings):
        with ThreadPoolExecutor(max_workers=len(blocks)) as pool:
            return list(pool.map(lambda b: step.execute(b, settings.workspace), blocks))

    step.Settings = lambda workspace: types.SimpleNamespace(workspace=workspace)
    step.run_tools = run_tools
    return step


def test_parallel_measure_runs_both_sides_and_puts_the_handler_back():
    step = fake_parallel_step()
    seen = []
    original = step.REGISTRY["read_file"]
    step.execute = lambda block, workspace: seen.append(threading.current_thread().name) or ("x", False)
    rows = parallel.measure(reps=1, sizes=(2, 3), latency=0.001, module=step)
    assert [r["n"] for r in rows] == [2, 3]
    assert all(r["serial"] > 0 and r["parallel"] > 0 and r["goal"] == 0.9 * r["n"] for r in rows)
    assert len(seen) == 2 * (2 + 3)  # every block ran once serially and once through the runner
    assert step.REGISTRY["read_file"] is original


def test_parallel_measure_drives_the_real_s04_runner():
    """The stand-in above checks the plumbing; this calls s04's own run_tools as its signature is today
    (a fake alone once hid that the bench still called it the old way)."""
    rows = parallel.measure(reps=1, sizes=(2,), latency=0.001)
    assert [r["n"] for r in rows] == [2] and rows[0]["serial"] > 0 and rows[0]["parallel"] > 0


def test_parallel_swaps_the_read_handler_for_a_sleeping_one_and_back():
    step = fake_parallel_step()
    block = parallel.read_blocks(1)[0]
    with parallel.slow_reads(step, 0.001):
        assert step.execute(block, None) == ("contents", False)  # the bench's handler, not the step's
    assert step.execute(block, None) == ("real", False)


def test_parallel_says_why_it_cannot_run():
    why = parallel.unavailable()
    assert why is None or why.startswith("n/a (")


def test_suite_command_is_pytest_from_this_environment():
    command = suite.command()
    assert command[-1].endswith("pytest")
    assert Path(command[0]).exists()


def test_suite_reports_the_slowest_tests_pytest_names_and_the_median_run():
    output = "== slowest 3 durations ==\n12.34s setup    tests/a.py::t\n0.50s call tests/b.py::u\n3 passed\n"
    assert suite.slowest_tests(output) == ["12.34s setup    tests/a.py::t", "0.50s call tests/b.py::u"]
    runs = {"walls": [70.0, 50.0, 60.0], "loads": [(0.1, 2.0)] * 3, "cores": 2, "cpu": 99.0}
    text = suite.report(runs | {"wall": 60.0, "summary": "3 passed", "slowest": ["1.00s call a::b"]})
    assert text.startswith("pytest: median 60.0 s wall of 3 run(s) (70.0, 50.0, 60.0 s) on 2 cores")
    assert "load average before→after: 0.1→2.0" in text and text.endswith("    1.00s call a::b")


def test_busy_processes_spin_while_held_and_are_killed_after():
    import os

    with suite.busy_processes(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # alive: no error
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
