"""s04: several tool calls in one turn — reads run together, every other call alone, every id answered.

Concurrency is asserted by structure, never by timing: a threading.Barrier that opens only when all
the reads are inside their handlers at once (run one by one, they would time out on it), a count of
the calls in flight checked inside every write, a chain of events that makes the calls finish in
reverse order. Parametrized over every step from s04 on, so later steps keep the mechanism.
"""

import dataclasses
import io
import json
import random
import re
import threading

from workbook import scratch
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT, STEPS, load_step
from rich.console import Console
from standin import StandIn, message, scripted, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s04"]
FIXTURES = ["s04_read_many.json", "s04_mixed_turn.json", "s04_tool_storm.json"]
WAIT = 10  # seconds a barrier waits before it gives up: only ever reached when the test is failing
WRITES = ("write_file", "edit_file", "bash")


@pytest.fixture(params=STEPS_FROM)
def step(request):
    return load_step(request.param)


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for n in range(12):
        (workspace / f"f{n}.txt").write_text(f"file {n}\n")
    return workspace.resolve()


def block(name: str, tool_id: str | None = None, **tool_input):
    return anthropic.types.ToolUseBlock(
        type="tool_use", id=tool_id or f"toolu_{name}", name=name, input=tool_input
    )


def reads(n: int, start: int = 0) -> list:
    return [block("read_file", f"toolu_r{i}", path=f"f{i}.txt") for i in range(start, start + n)]


def write(n: int, content: str = "new") -> anthropic.types.ToolUseBlock:
    return block("write_file", f"toolu_w{n}", path=f"w{n}.txt", content=content)


def swap_handler(step, monkeypatch, name: str, handler) -> None:
    """Replace one tool's handler in the step's registry (its schema and read_only flag stay)."""
    monkeypatch.setitem(step.REGISTRY, name, dataclasses.replace(step.REGISTRY[name], handler=handler))


class InFlight:
    """Wraps handlers to count the calls running at each moment, and what a write saw on entry."""

    def __init__(self, step, monkeypatch, names=("read_file", "grep", "list_files", *WRITES)):
        self.lock, self.active, self.most = threading.Lock(), 0, 0
        self.write_saw, self.read_saw_write, self.writing = [], [], False
        for name in names:
            swap_handler(step, monkeypatch, name, self.wrap(name, step.REGISTRY[name].handler))

    def wrap(self, name, handler):
        def wrapped(workspace, **kw):
            with self.lock:
                self.active += 1
                self.most = max(self.most, self.active)
                if name in WRITES:
                    self.write_saw.append(self.active)
                    self.writing = True
                else:
                    self.read_saw_write.append(self.writing)
            try:
                if name in WRITES:  # give a wrongly parallel runner the time to start something beside it
                    threading.Event().wait(0.02)
                return handler(workspace, **kw)
            finally:
                with self.lock:
                    self.active -= 1
                    self.writing = self.writing and name not in WRITES

        return wrapped


def run_tools(step, calls: list, workspace, **settings) -> list[dict]:
    """The step's run_tools on these calls, under Settings(workspace, **settings): the results only."""
    results, _timeline = step.run_tools(calls, step.Settings(workspace, **settings))
    return results


def answered_once_in_order(blocks, results) -> bool:
    return [r["tool_use_id"] for r in results] == [b.id for b in blocks] and all(
        r["type"] == "tool_result" for r in results
    )


# -- grouping: runs of reads together, every other call alone ---------------------------------------


def test_consecutive_reads_share_a_group_and_any_other_call_stands_alone(step):
    calls = [
        *reads(2),
        write(0),
        block("grep", pattern="x"),
        block("list_files"),
        block("bash", command="ls"),
        block("edit_file", path="a", old_text="a", new_text="b"),
        write(1),
        block("no_such_tool"),
        *reads(1),
    ]
    assert step.plan(calls) == [[0, 1], [2], [3, 4], [5], [6], [7], [8], [9]]


def test_bash_is_never_treated_as_a_read(step):
    assert not step.reads_only(block("bash", command="cat f0.txt"))
    assert step.plan([*reads(1), block("bash", command="cat f0.txt"), *reads(1, 1)]) == [[0], [1], [2]]


# -- reads overlap; writes overlap nothing -----------------------------------------------------------


@pytest.mark.parametrize("n", [2, 4, 8])
def test_reads_in_one_turn_are_inside_their_handlers_at_the_same_time(step, ws, monkeypatch, n):
    everyone_in = threading.Barrier(n, timeout=WAIT)  # opens only when all n reads wait on it at once

    def read_at_the_barrier(workspace, path):
        everyone_in.wait()  # run one by one, the first read would wait here alone and time out
        return f"read {path}"

    swap_handler(step, monkeypatch, "read_file", read_at_the_barrier)
    calls = reads(n)
    results = run_tools(step, calls, ws)
    assert [(r["content"], r["is_error"]) for r in results] == [(f"read f{i}.txt", False) for i in range(n)]
    assert not everyone_in.broken


def test_no_write_overlaps_another_call(step, ws, monkeypatch):
    flight = InFlight(step, monkeypatch)
    calls = [*reads(3), write(0), *reads(2, 3), write(1), write(2), block("grep", pattern="file"), write(3)]
    results = run_tools(step, calls, ws)
    assert answered_once_in_order(calls, results) and not any(r["is_error"] for r in results)
    assert flight.write_saw == [1, 1, 1, 1]  # each write was the only call in flight when it started
    assert not any(flight.read_saw_write)  # and no read started while a write was running


def test_a_read_after_two_writes_sees_what_the_second_one_wrote(step, ws):
    second = block("write_file", "toolu_w0b", path="w0.txt", content="after")
    calls = [*reads(1), write(0, "before"), second, block("read_file", "toolu_after", path="w0.txt")]
    assert run_tools(step, calls, ws)[-1]["content"] == "after"


def test_the_pool_is_bounded(step, ws, monkeypatch):
    flight = InFlight(step, monkeypatch, names=("read_file",))
    calls = reads(step.MAX_TOOLS_PER_TURN)
    assert step.MAX_PARALLEL < len(calls)
    run_tools(step, calls, ws)
    assert 1 <= flight.most <= step.MAX_PARALLEL


# -- answers: one per id, in the order asked, whatever order they finished in --------------------------


def test_results_keep_tool_use_order_when_calls_finish_in_reverse(step, ws, monkeypatch):
    n = 6
    finished = {i: threading.Event() for i in range(n)}  # read i may finish only after read i + 1
    order = []

    def read_in_reverse(workspace, path):
        i = int(path[1:-4])
        if i + 1 < n:
            assert finished[i + 1].wait(WAIT), "the reads did not run together"
        order.append(i)
        finished[i].set()
        return (workspace / path).read_text()

    swap_handler(step, monkeypatch, "read_file", read_in_reverse)
    calls = reads(n)
    results = run_tools(step, calls, ws)
    assert order == [5, 4, 3, 2, 1, 0]
    assert answered_once_in_order(calls, results)
    assert [r["content"] for r in results] == [f"file {i}\n" for i in range(n)]


def test_every_id_is_answered_once_even_when_handlers_raise(step, ws, monkeypatch):
    def broken(kind):
        def handler(workspace, **kw):
            if kw.get("path") in ("f1.txt", "w0.txt"):
                raise kind("the disk is on fire")
            return "fine"

        return handler

    swap_handler(step, monkeypatch, "read_file", broken(RuntimeError))
    swap_handler(step, monkeypatch, "write_file", broken(OSError))
    calls = [*reads(3), write(0), write(1), *reads(2, 3)]
    results = run_tools(step, calls, ws)
    assert answered_once_in_order(calls, results)
    assert [r["is_error"] for r in results] == [False, True, False, True, False, False, False]
    assert "the disk is on fire" in results[1]["content"] and "the disk is on fire" in results[3]["content"]


def test_a_refused_call_inside_a_group_of_reads_is_answered_too(step, ws):
    calls = [
        *reads(1),
        block("read_file", "toolu_bad", file="f1.txt"),
        block("read_file", "toolu_out", path="../x"),
    ]
    results = run_tools(step, calls, ws)
    assert answered_once_in_order(calls, results)
    assert [r["is_error"] for r in results] == [False, True, True]


# -- the tool-storm cap --------------------------------------------------------------------------------


def test_calls_past_the_cap_are_answered_with_an_error_and_not_run(step, ws, monkeypatch):
    flight = InFlight(step, monkeypatch)
    cap = step.MAX_TOOLS_PER_TURN
    calls = [*reads(cap), write(0), write(1), block("bash", "toolu_b", command="touch made")]
    results = run_tools(step, calls, ws, audit=ws.parent / "audit.jsonl")
    assert answered_once_in_order(calls, results)
    assert not any(r["is_error"] for r in results[:cap])
    for r in results[cap:]:
        assert (
            r["is_error"]
            and f"asked for {cap + 3} tool calls" in r["content"]
            and f"at most {cap}" in r["content"]
        )
    assert len(flight.write_saw) + len(flight.read_saw_write) == cap  # the excess never reached a handler
    assert not (ws / "w0.txt").exists() and not (ws / "made").exists()
    audit = [json.loads(line) for line in (ws.parent / "audit.jsonl").read_text().splitlines()]
    assert sorted(line["id"] for line in audit) == sorted(b.id for b in calls)  # the refusals are logged too


def test_a_turn_at_the_cap_runs_every_call(step, ws):
    results = run_tools(step, reads(step.MAX_TOOLS_PER_TURN), ws)
    assert not any(r["is_error"] for r in results)


# -- the permission gate: only a call that runs alone can ask a person -------------------------------


def test_only_calls_running_alone_ask_and_always_from_the_main_thread(step, ws, monkeypatch):
    flight = InFlight(step, monkeypatch)
    asked = []

    def ask_person(call, danger, why):
        asked.append((call.name, threading.current_thread() is threading.main_thread(), flight.active))
        return True

    calls = [*reads(2), write(0), *reads(3, 2), block("bash", command="echo hi"), write(1), *reads(2, 5)]
    results = run_tools(step, calls, ws, permission="ask", ask=ask_person)
    assert not any(r["is_error"] for r in results)
    assert asked == [("write_file", True, 0), ("bash", True, 0), ("write_file", True, 0)]


def test_ask_mode_reads_answers_from_a_real_stdin_in_order(step, ws, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("y\nn\n"))
    monkeypatch.setattr(step, "console", Console(file=io.StringIO(), force_terminal=False))
    calls = [*reads(2), write(0), *reads(2, 2), write(1)]
    results = run_tools(step, calls, ws, permission="ask", ask=step.ask_person)  # the keyboard's person
    assert [r["is_error"] for r in results] == [False, False, False, False, False, True]
    assert (ws / "w0.txt").exists() and not (ws / "w1.txt").exists()


# -- what the reader sees: the groups and the time each call took, never sent to the model ---------------


def test_the_timeline_records_each_calls_group_and_the_results_hold_no_timing(step, ws):
    calls = [*reads(2), write(0), *reads(1, 2)]
    results, timeline = step.run_tools(calls, step.Settings(ws, read_latency=0.01))
    assert sorted((t.index, t.group) for t in timeline) == [(0, 1), (1, 1), (2, 2), (3, 3)]
    assert all(t.ended >= t.started for t in timeline)
    assert results == run_tools(step, calls, ws)  # with or without latency: the same answers, word for word


def test_the_turn_shows_which_calls_ran_together(step, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, force_terminal=False, width=120))
    fixture = fixtures.load_fixture(ROOT / "fixtures" / "s04_mixed_turn.json")
    client, _ = replay.replay_client(fixture, "s04_mixed_turn.json", strict=False)
    settings = step.Settings(scratch.copy_workspace("inventory"))
    step.agent_loop(client, [{"role": "user", "content": fixture["task"]}], settings)
    shown = out.getvalue()
    assert "by group (a group's reads run together" in shown
    rows = [(1, "read_file inventory/__init__.py"), (1, r"grep 1\.0\.0"), (2, "edit_file"), (3, "read_file")]
    for group, call in rows:
        assert re.search(rf"^ g{group} +{re.escape(call)} ", shown, re.MULTILINE), f"group {group}: {call}"
    assert "group 2: edit_file inventory/__init__.py, alone" in shown


# -- the fixtures, replayed ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURES)
def test_the_fixture_replays_through_its_script(name, run_main):
    """`python SCRIPT.py --replay F --read-latency 0`, as its main() runs it (in-process: the output and
    exit code are the same, without an interpreter start and an SDK import)."""
    fixture = fixtures.load_fixture(ROOT / "fixtures" / name)
    code, out = run_main(fixture["script"], "--replay", f"fixtures/{name}", "--read-latency", "0")
    assert code == 0, out
    assert f"offline replay of fixtures/{name}" in out and "end_turn" in out
    assert "by group (a group's reads run together" in out


def replay_in_process(step, name: str):
    fixture = fixtures.load_fixture(ROOT / "fixtures" / name)
    client, transport = replay.replay_client(fixture, name, strict=False)  # later steps may word things anew
    workspace = scratch.copy_workspace(fixture["workspace"])
    with_console = Console(file=io.StringIO(), force_terminal=False)
    saved, step.console = step.console, with_console
    try:
        step.agent_loop(client, [{"role": "user", "content": fixture["task"]}], step.Settings(workspace))
    finally:
        step.console = saved
    return transport.seen, workspace


def test_mixed_turn_the_read_after_the_edit_sees_the_new_version(step):
    seen, workspace = replay_in_process(step, "s04_mixed_turn.json")
    results = seen[1]["messages"][-1]["content"]
    assert len(results) == 4 and all(r["type"] == "tool_result" for r in results)
    assert '"1.0.0"' in results[0]["content"] and '"1.1.0"' in results[3]["content"]
    assert 'version = "1.1.0"' in (workspace / "pyproject.toml").read_text()


def test_tool_storm_the_excess_is_answered_and_asked_for_again(step):
    seen, _ = replay_in_process(step, "s04_tool_storm.json")
    storm = seen[2]["messages"][-1]["content"]
    assert len(storm) == 12 and [r["is_error"] for r in storm] == [False] * 10 + [True] * 2
    assert "at most 10 run per turn" in storm[11]["content"]
    assert [r["is_error"] for r in seen[3]["messages"][-1]["content"]] == [False, False]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("-1", "'-1' is not a latency: give seconds, from 0 to 60"),
        ("x", "invalid float value: 'x'"),
        ("nan", "'nan' is not a latency: give seconds, from 0 to 60"),
        ("3600", "'3600' is not a latency: give seconds, from 0 to 60"),
    ],
)
def test_a_bad_read_latency_is_a_one_line_error(step, capsys, value, said):
    with pytest.raises(SystemExit) as stop:
        step.main(["--read-latency", value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --read-latency: {said}" in err and err.count("\n") == 1


def test_a_fixture_with_a_bad_read_latency_says_so_in_one_line(step, tmp_path, monkeypatch):
    fixture = json.loads((ROOT / "fixtures" / "s04_read_many.json").read_text())
    (tmp_path / "bad.json").write_text(json.dumps(fixture | {"read_latency": "slow"}))
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, force_terminal=False, width=200))
    assert step.main(["--replay", str(tmp_path / "bad.json")]) == 1
    assert out.getvalue() == f"error: {tmp_path / 'bad.json'}: read_latency must be 0 to 60 seconds\n"


# -- live mode, over real HTTP: turns of mixed reads and writes the tests have not seen ------------------


def random_turn(rng: random.Random, turn: int) -> list[dict]:
    """Between 1 and 13 calls: reads, greps and listings mixed with writes, edits and bash, any order."""
    calls = []
    for i in range(rng.randint(1, 13)):
        tool_id, kind = (
            f"toolu_t{turn}c{i}",
            rng.choice(["read", "read", "read", "grep", "list", "write", "edit", "bash"]),
        )
        target = f"f{rng.randrange(4)}.txt"
        calls.append(
            {
                "read": tool_use(tool_id, "read_file", {"path": target}),
                "grep": tool_use(tool_id, "grep", {"pattern": "file"}),
                "list": tool_use(tool_id, "list_files", {}),
                "write": tool_use(tool_id, "write_file", {"path": target, "content": f"file {turn}.{i}\n"}),
                "edit": tool_use(
                    tool_id, "edit_file", {"path": target, "old_text": "file", "new_text": "file"}
                ),
                "bash": tool_use(tool_id, "bash", {"command": f"cat {target}"}),
            }[kind]
        )
    return calls


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_live_mixed_turns_every_id_answered_once_and_no_write_overlaps(step, ws, monkeypatch, seed):
    flight = InFlight(step, monkeypatch)
    monkeypatch.setattr(step, "RUNS", ws.parent / "runs")
    rng = random.Random(seed)
    turns = [random_turn(rng, t) for t in range(4)]
    replies = [message([text(f"turn {t}"), *calls], "tool_use") for t, calls in enumerate(turns)]
    with StandIn(scripted(*replies, message([text("done")]))) as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setattr(step, "console", Console(file=io.StringIO(), force_terminal=False))
        assert step.main(["mix it up", "--workspace", str(ws), "--permission", "auto"]) == 0
    assert api.rule_problems == [] and len(api.requests) == len(turns) + 1
    for t, calls in enumerate(turns):
        answer = api.requests[t + 1]["body"]["messages"][-1]
        assert answer["role"] == "user"
        assert [r["tool_use_id"] for r in answer["content"]] == [c["id"] for c in calls]
        excess = [r["is_error"] for r in answer["content"][step.MAX_TOOLS_PER_TURN :]]
        assert all(excess)
    assert flight.write_saw and set(flight.write_saw) == {1}
    assert not any(flight.read_saw_write)
