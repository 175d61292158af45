"""s05: the loop knows when to stop — each limit named, checked before the call it would pay for, the
repeat brake and flip-flops held back, every stop named and the conversation saved, the cost summary.

Behaviour tests run against every step from s05 on (later steps inherit it). The fixture replays run the
step's main() as a reader would; live tests go over real HTTP to a stand-in for the API.
"""

import io
import json
import re

from workbook import prices, scratch
from workbook.api import contract
from workbook.replay import fixtures
from workbook.replay import transport as replay

import anthropic
import pytest
from conftest import ROOT, STEPS, load_step
from rich.console import Console
from standin import StandIn, message, scripted, text, tool_use

STEPS_FROM = [s for s in STEPS if s >= "s05"]
FIXTURES = ROOT / "fixtures"


@pytest.fixture(params=STEPS_FROM)
def step(request, monkeypatch):
    """The step module under test, its console made quiet: s05, and every later step."""
    module = load_step(request.param)
    monkeypatch.setattr(module, "console", Console(file=io.StringIO(), width=100))
    return module


def usage(input_tokens=0, output_tokens=0, written=None, read=None) -> anthropic.types.Usage:
    return anthropic.types.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
    )


def reply(used: anthropic.types.Usage) -> anthropic.types.Message:
    return anthropic.types.Message.model_validate(
        message([text("ok")], "tool_use") | {"usage": used.to_dict()}
    )


def fixture_file(name: str) -> str:
    """s05's fixtures by their short name; s04_repeated_call (named for the step it was first written
    for) is the repeat brake's."""
    return "s04_repeated_call.json" if name == "repeated_call" else f"s05_{name}.json"


def fixture(name: str) -> dict:
    return fixtures.load_fixture(FIXTURES / fixture_file(name))


def unstreamed(step, settings):
    """Settings as a reader of this recording must run them: a later step's stream turned off (s05's
    recordings wait for each reply whole, as s05 does)."""
    if hasattr(settings, "stream"):
        settings.stream = False
    return settings


def replay_loop(step, name: str, strict: bool = True, **limits):
    """Replay a fixture through the step's own agent_loop; (turns, budget, transport, messages)."""
    recorded = fixture(name)
    client, transport = replay.replay_client(recorded, fixture_file(name), strict, max_retries=0)
    budget = step.Budget(**limits)
    messages = [{"role": "user", "content": recorded["task"]}]
    workspace = scratch.copy_workspace(recorded["workspace"])
    audit = workspace.parent / "audit.jsonl"
    settings = unstreamed(step, step.Settings(workspace, audit=audit, budget=budget))
    turns = step.agent_loop(client, messages, settings)
    return turns, budget, transport, messages


# -- what a run costs ------------------------------------------------------------------------------


def test_cost_is_input_and_output_at_the_models_price_per_million(step):
    assert prices.PRICES["claude-sonnet-5"] == (3.00, 15.00) and prices.PRICES_AS_OF  # dated
    assert step.cost(usage(1_000_000, 0)) == pytest.approx(3.00)
    assert step.cost(usage(0, 1_000_000)) == pytest.approx(15.00)
    assert step.cost(usage(1000, 100)) == pytest.approx(0.0045)  # 1000 x $3 + 100 x $15, per million


def test_one_hour_cache_writes_cost_double(step):
    split = anthropic.types.Usage(
        input_tokens=0,
        output_tokens=0,
        cache_creation_input_tokens=3_000_000,
        cache_creation={"ephemeral_5m_input_tokens": 1_000_000, "ephemeral_1h_input_tokens": 2_000_000},
    )
    assert step.cost(split) == pytest.approx(1 * 3.75 + 2 * 6.00)


def test_the_default_token_budget_is_the_articles_200000(step):
    assert step.MAX_TOKENS_TOTAL == 200_000 and step.Budget().max_tokens_total == 200_000


def test_cache_writes_cost_a_quarter_more_and_cache_reads_a_tenth(step):
    assert step.cost(usage(0, 0, written=1_000_000)) == pytest.approx(3.75)
    assert step.cost(usage(0, 0, read=1_000_000)) == pytest.approx(0.30)
    both = usage(1000, 500, written=2000, read=50_000)
    assert step.cost(both) == pytest.approx((1000 * 3 + 2000 * 3.75 + 50_000 * 0.3 + 500 * 15) / 1e6)
    budget = step.Budget()
    budget.spend(reply(both))
    assert budget.rows[0].tokens_in == 53_000  # every input token counts toward the budgets, cached or not
    assert budget.tokens == 53_500


def test_a_model_missing_from_the_price_table_is_priced_as_the_default(step):
    assert step.cost(usage(1000, 100), "some-other-model") == step.cost(usage(1000, 100))


def test_the_cost_warning_comes_once_when_the_threshold_is_passed(step):
    budget = step.Budget(max_cost=0.01)
    assert budget.spend(reply(usage(1000, 100))) is None  # $0.0045, 45%
    warning = budget.spend(reply(usage(1000, 100)))  # $0.0090, 90%
    assert warning == "about $0.0090 spent, 90% of --max-cost $0.01"
    assert budget.spend(reply(usage(10, 1))) is None and budget.exceeded() == ""


@pytest.mark.parametrize(
    "limits, spent, reason",
    [
        ({"max_steps": 2}, [usage(10, 1)] * 2, "max steps: 2 model calls made (--max-steps 2)"),
        ({"max_tokens_total": 100}, [usage(60, 10)] * 2, "token budget: 140 tokens in and out"),
        ({"max_input_tokens": 500}, [usage(100, 1, read=400)], "input limit: the last request sent 500"),
        ({"max_cost": 0.005}, [usage(1000, 100)] * 2, "cost limit: about $0.0090 spent (--max-cost $0.005)"),
    ],
)
def test_each_limit_stops_the_run_with_its_flag_in_the_reason(step, limits, spent, reason):
    budget = step.Budget(**limits)
    for used in spent[:-1]:
        budget.spend(reply(used))
        assert budget.exceeded() == ""
    budget.spend(reply(spent[-1]))
    assert budget.exceeded().startswith(reason)
    flag = "--" + next(iter(limits)).replace("_", "-")
    assert flag in budget.exceeded()


# -- each limit stops the replayed run at the right turn -------------------------------------------


def test_max_steps_stops_after_the_last_allowed_call_with_its_tools_answered(step):
    turns, budget, transport, messages = replay_loop(step, "max_steps", max_steps=3)
    assert len(turns) == 3 == transport.cursor
    assert budget.reason == "max steps: 3 model calls made (--max-steps 3)"
    assert messages[-1]["role"] == "user" and contract.api_rule_problems(step.plain(messages)) == []


@pytest.mark.parametrize(
    "limits, calls, reason",
    [  # the token_budget fixture's turns use (in, out): (439, 52) (1010, 59) (1639, 62) (2187, 67)
        ({"max_tokens_total": 5000}, 4, "token budget: 5,515 tokens in and out (--max-tokens-total 5,000)"),
        ({"max_tokens_total": 3261}, 3, "token budget: 3,261 tokens"),
        ({"max_tokens_total": 3262}, 4, "token budget: 5,515 tokens"),
        ({"max_input_tokens": 1500}, 3, "input limit: the last request sent 1,639 input tokens"),
        ({"max_cost": 0.01}, 3, "cost limit: about $0.0119 spent (--max-cost $0.01)"),
        ({"max_steps": 1}, 1, "max steps: 1 model calls made"),
    ],
)
def test_each_limit_stops_the_growing_run_at_the_turn_it_is_reached(step, limits, calls, reason):
    turns, budget, transport, messages = replay_loop(step, "token_budget", strict=False, **limits)
    assert len(turns) == calls == transport.cursor
    assert budget.reason.startswith(reason)
    assert contract.api_rule_problems(step.plain(messages)) == []


def test_the_token_budget_fixture_warns_about_cost_before_the_token_budget_stops_it(step):
    turns, budget, transport, _ = replay_loop(step, "token_budget", max_tokens_total=5000, max_cost=0.024)
    assert len(turns) == 4 and budget.warned and budget.reason.startswith("token budget")
    assert [row[1] for row in budget.rows] == [439, 1010, 1639, 2187]  # input grows: history is resent
    assert budget.cost == pytest.approx(0.0194, abs=5e-5) and budget.cost < 0.024


# -- the repeat brake ------------------------------------------------------------------------------


def block(name="read_file", tool_input=None, tool_id="toolu_x"):
    tool_input = {"path": "a.txt"} if tool_input is None else tool_input
    return anthropic.types.ToolUseBlock(type="tool_use", id=tool_id, name=name, input=tool_input)


def result(content="same", is_error=False):
    return {"type": "tool_result", "tool_use_id": "toolu_x", "content": content, "is_error": is_error}


def run_turns(brake, turns):
    """Each turn: a list of (block, result content); returns what the brake said for every call
    (None: it ran) and gives it the results of the calls it let run."""
    said = []
    for calls in turns:
        held = brake.hold_back([b for b, _ in calls])
        brake.remember([b for b, _ in calls], [result(content, b.id in held) for b, content in calls])
        said += [held.get(b.id) for b, _ in calls]
    return said


def test_two_identical_calls_both_run_and_the_third_is_refused(step):
    brake = step.RepeatBrake()
    said = run_turns(brake, [[(block(), "same")], [(block(), "same")], [(block(), "same")]])
    assert said[:2] == [None, None]
    assert "not run" in said[2] and "Change approach" in said[2] and not brake.stop


def test_asking_again_after_the_refusal_stops_the_run(step):
    brake = step.RepeatBrake()
    said = run_turns(brake, [[(block(), "same")]] * 4)
    assert said[3].startswith("error: not run") and brake.stop.startswith("repeated call: read_file")


def test_refusals_take_their_places_among_the_results_in_tool_use_order(step, tmp_path):
    brake = step.RepeatBrake()
    run_turns(brake, [[(block(tool_id="a"), "x")], [(block(tool_id="b"), "x")]])
    calls = [block(tool_id="c"), block("list_files", {}, "d"), block("grep", {"pattern": "x"}, "e")]
    held = brake.hold_back(calls)
    answers = {block_id: (error, True) for block_id, error in held.items()}  # as the loop gives them
    results, _ = step.run_tools(calls, step.Settings(tmp_path), answers)
    assert list(held) == ["c"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [("c", True), ("d", False), ("e", False)]


def test_the_same_call_with_a_new_result_each_time_is_not_a_repeat(step):
    brake = step.RepeatBrake()  # e.g. polling a log that grows
    said = run_turns(brake, [[(block(), f"{n} lines")] for n in range(5)])
    assert said == [None] * 5 and not brake.stop


def test_another_call_in_between_breaks_the_run_of_repeats(step):
    brake = step.RepeatBrake()
    other = block("list_files", {})
    said = run_turns(brake, [[(block(), "x")], [(block(), "x")], [(other, "a.txt")], [(block(), "x")]])
    assert said == [None] * 4


def test_a_turns_calls_are_judged_against_the_turns_before_not_each_other(step):
    brake = step.RepeatBrake()
    same = [block(tool_id="a"), block(tool_id="b"), block(tool_id="c")]
    assert brake.hold_back(same) == {}  # no result is known yet: nothing to call a repeat
    brake.remember(same, [result("same")] * 3)
    later = block(tool_id="d")
    assert brake.hold_back([later])["d"].startswith("error: not run")


def test_different_input_is_a_different_call(step):
    brake = step.RepeatBrake()
    said = run_turns(brake, [[(block(tool_input={"path": f"{n}.txt"}), "x")] for n in range(4)])
    assert said == [None] * 4


def test_the_repeated_call_fixture_reads_twice_refuses_the_third_and_stops_on_the_fourth(step):
    turns, budget, transport, messages = replay_loop(step, "repeated_call")
    assert len(turns) == 4 == transport.cursor
    results = [m["content"][0] for m in messages if m["role"] == "user" and isinstance(m["content"], list)]
    assert [r["is_error"] for r in results] == [False, False, True, True]
    config = (FIXTURES / "workspace" / "notes_app" / "app" / "config.toml").read_text()
    assert results[0]["content"] == results[1]["content"] == config
    assert "Change approach" in results[2]["content"]
    assert budget.reason.startswith('repeated call: read_file {"path": "app/config.toml"} asked for again')


# -- flip-flops: an edit or a write that undoes itself, again -----------------------------------------------


def call(name: str, tool_id: str, **tool_input):
    return anthropic.types.ToolUseBlock(type="tool_use", id=tool_id, name=name, input=tool_input)


class Turns:
    """A brake over a real workspace: each call is its own turn, run as the loop runs it (held back, or
    run and its result remembered), so the files really change."""

    def __init__(self, step, workspace, permission="all"):
        self.step, self.settings = step, step.Settings(workspace, permission=permission)
        self.brake = step.RepeatBrake()

    def said(self, asked) -> str | None:
        """What the brake answered this call with (None: it ran)."""
        held = self.brake.hold_back([asked])
        results, _ = self.step.run_tools([asked], self.settings, held)
        self.brake.remember([asked], results)
        return held.get(asked.id)


def edit(n: int, old: str, new: str, path: str = "a.py"):
    return call("edit_file", f"toolu_e{n}", path=path, old_text=old, new_text=new)


def write(n: int, content: str, path: str = "a.txt"):
    return call("write_file", f"toolu_w{n}", path=path, content=content)


def test_an_edit_that_flips_a_file_back_again_is_refused(step, tmp_path):
    (tmp_path / "a.py").write_text("x = A\n")
    turns = Turns(step, tmp_path)
    assert turns.said(edit(1, "A", "B")) is None
    assert turns.said(edit(2, "B", "A")) is None  # one undo is a change of mind, allowed
    assert "the edits are going in circles" in turns.said(edit(3, "A", "B"))
    assert (tmp_path / "a.py").read_text() == "x = A\n"  # held back: never run
    assert turns.said(edit(4, "A", "A")) is None  # a no-op edit undoes nothing


def test_a_change_counts_once_it_has_run(step):
    brake = step.RepeatBrake()  # asked for, never run (nothing remembered): no change was made
    edits = [edit(n, old, new) for n, (old, new) in enumerate(("AB", "BA", "AB"))]
    assert [brake.hold_back([asked]).get(asked.id) for asked in edits] == [None] * 3


def test_writes_back_and_forth_over_a_file_already_there_are_held_back_at_the_fourth(step, tmp_path):
    (tmp_path / "a.txt").write_text("A")  # the brake never reads it: the writes alone are compared
    turns = Turns(step, tmp_path)
    said = [turns.said(write(n, content)) for n, content in enumerate("BABA")]
    assert said[:3] == [None] * 3 and "the writes are going in circles" in said[3]


def test_an_edit_and_a_write_are_not_compared(step, tmp_path):
    (tmp_path / "a.py").write_text("x = A")
    turns = Turns(step, tmp_path)
    said = [
        turns.said(edit(1, "A", "B")),
        turns.said(write(2, "x = A", path="a.py")),  # the edit undone, by a write
        turns.said(edit(3, "A", "B")),  # the edits alone: A -> B twice, no undo between
    ]
    assert said == [None] * 3


def test_a_path_that_is_not_text_is_never_a_change(step):
    brake = step.RepeatBrake()
    odd = call("write_file", "toolu_odd", path=["a.txt"], content="A")  # execute() refuses it, after
    assert brake.hold_back([odd]) == {}
    brake.remember([odd], [result("error: invalid input", True)])


def test_a_change_that_failed_changed_nothing_so_it_is_not_in_the_history(step, tmp_path):
    (tmp_path / "a.py").write_text("x = A")
    turns = Turns(step, tmp_path)
    said = [
        turns.said(edit(1, "A", "B")),
        turns.said(edit(2, "Z", "A")),  # fails: no Z in the file, which stays B
        turns.said(edit(3, "B", "A")),  # the one undo
        turns.said(edit(4, "A", "B")),
    ]
    assert said[:3] == [None] * 3 and "going in circles" in said[3]


def test_a_write_held_back_changes_nothing_so_the_next_write_is_judged_by_the_file_as_it_is(step, tmp_path):
    turns = Turns(step, tmp_path)
    said = [turns.said(write(n, content)) for n, content in enumerate("ABABA")]
    assert said[3] and said[4] is None  # the fourth (B) was held back: A is what the file holds, a no-op
    assert (tmp_path / "a.txt").read_text() == "A"


def test_the_flip_flop_fixture_is_stopped_at_the_third_edit():
    step = load_step("s05_budget")  # the brake's own step, which waits for each reply whole
    recorded = fixtures.load_fixture(ROOT / "fixtures" / "s04_edit_flip_flop.json")
    client, transport = replay.replay_client(recorded, "s04_edit_flip_flop.json", max_retries=0)
    workspace = scratch.copy_workspace("divide_by_zero")
    before = (workspace / "utils.py").read_text()
    step.agent_loop(client, [{"role": "user", "content": recorded["task"]}], step.Settings(workspace))
    refusal = transport.seen[3]["messages"][-1]["content"][0]
    assert refusal["is_error"] and "going in circles" in refusal["content"]
    assert (workspace / "utils.py").read_text() == before  # A -> B -> A, and the third edit never ran


def test_a_file_written_back_and_forth_is_held_back_at_the_fourth_write(step, tmp_path):
    turns = Turns(step, tmp_path)
    assert [turns.said(write(n, c)) for n, c in enumerate("ABA")] == [None] * 3  # one way back: allowed
    assert turns.said(write(4, "A", path="b.txt")) is None  # another file has its own history
    refusal = turns.said(write(5, "B"))
    assert refusal.startswith("error: not run: this write redoes") and "going in circles" in refusal


def test_writes_that_move_on_are_not_a_flip_flop(step, tmp_path):
    turns = Turns(step, tmp_path)
    assert [turns.said(write(n, c)) for n, c in enumerate("ABAC")] == [None] * 4


def test_the_write_flip_flop_fixture_is_held_back_at_the_fourth_write(step):
    recorded = fixtures.load_fixture(ROOT / "fixtures" / "s04_write_flip_flop.json")
    client, transport = replay.replay_client(recorded, "s04_write_flip_flop.json", max_retries=0)
    workspace = scratch.copy_workspace("notes_app")
    settings = step.Settings(workspace)
    if hasattr(settings, "stream"):
        settings.stream = False  # recorded from s04's loop, which waits for each reply whole
    step.agent_loop(client, [{"role": "user", "content": recorded["task"]}], settings)
    assert transport.cursor == len(recorded["exchanges"])  # the run ended where the recording does
    answers = [m["content"][0] for m in transport.seen[-1]["messages"] if m["role"] == "user"][1:]
    assert [a["is_error"] for a in answers] == [False, False, False, True]
    assert "the writes are going in circles" in answers[-1]["content"]
    assert "max_note_chars = 3000" in (workspace / "app" / "config.toml").read_text()  # A, B, A: not B


def test_live_a_model_writing_a_file_back_and_forth_is_held_back(step, tmp_path, monkeypatch):
    ws = tmp_path / "workspace"
    ws.mkdir()
    writes = [
        tool_use(f"toolu_{n}", "write_file", {"path": "f0.txt", "content": c}) for n, c in enumerate("ABAB")
    ]
    replies = [message([call], "tool_use") for call in writes]
    with StandIn(scripted(*replies, message([text("I kept changing my mind.")]))) as api:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
        monkeypatch.setattr(step, "RUNS", ws.parent / "runs")
        monkeypatch.setattr(step, "console", Console(file=io.StringIO(), force_terminal=False))
        assert step.main(["settle f0.txt", "--workspace", str(ws), "--permission", "auto"]) == 0
    assert api.rule_problems == [] and len(api.requests) == 5
    fourth = api.requests[4]["body"]["messages"][-1]["content"][0]
    assert fourth["is_error"] and "the writes are going in circles" in fourth["content"]
    assert (ws / "f0.txt").read_text() == "A"


# -- the script, as a reader runs it ---------------------------------------------------------------


REPLAYED_BY_S05 = sorted(  # the recordings whose `script` is s05's
    p.stem for p in FIXTURES.glob("s0*.json") if fixtures.load_fixture(p)["script"] == "s05_budget"
)
REPLAYS = {  # fixture -> how the run ends
    "s05_max_steps": "run ended: max steps: 3 model calls made (--max-steps 3)",
    "s05_brake_then_limit": "run ended: max steps: 5 model calls made (--max-steps 5)",
    "s05_token_budget": "run ended: token budget: 5,515 tokens in and out (--max-tokens-total 5,000)",
    "s04_repeated_call": "run ended: repeated call: read_file",
    "s04_write_flip_flop": "run ended: the model ended its turn (stop_reason end_turn)",
    "s04_edit_flip_flop": "run ended: the model ended its turn (stop_reason end_turn)",
}


def test_every_fixture_s05_replays_has_a_replay_test():
    assert sorted(REPLAYS) == REPLAYED_BY_S05


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_each_fixture_replays_with_its_own_flags_and_ends_for_its_reason(script, name):
    code, out = script("--replay", f"fixtures/{name}.json")
    assert code == 0 and "Traceback" not in out, out
    assert REPLAYS[name] in out
    assert "cost (est.)" in out and "conversation saved:" in out


def test_the_token_budget_replay_shows_the_cost_warning_and_the_summary_total(script):
    code, out = script("--replay", "fixtures/s05_token_budget.json")
    assert "cost warning: about $0.0194 spent, 81% of --max-cost $0.024" in out
    assert re.search(r"total\s*│\s*│\s*5,275\s*│\s*240\s*│\s*\$0\.0194", out)


def test_the_default_replay_shows_the_brake_then_a_limit_stopping_the_run_and_the_work_saved(monkeypatch):
    s05 = load_step("s05_budget")
    out = io.StringIO()
    monkeypatch.setattr(s05, "console", Console(file=out, width=200))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(ROOT)
    assert s05.main([]) == 0
    said = out.getvalue()
    assert "offline replay of fixtures/s05_brake_then_limit.json" in said
    assert "the fixture sets --max-steps 5" in said
    held = said.index("error: not run: this is the same read_file call with the same input 3 times in a row")
    changed = said.index("model: Right: reading api.md again gives nothing new.")
    limit = said.index("run ended: max steps: 5 model calls made (--max-steps 5)")
    assert held < changed < limit < said.index("conversation saved:")


def test_a_reader_who_lifts_the_limit_sees_the_recording_run_out(script):
    code, out = script("--replay", "fixtures/s05_max_steps.json", "--max-steps", "10")
    assert code == 1 and "the loop did not stop when the recording did" in out


def test_help_names_every_limit(step, capsys):
    with pytest.raises(SystemExit) as done:
        step.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and step.DEFAULT_FIXTURE in out
    for flag in ("--max-steps", "--max-tokens-total", "--max-input-tokens", "--max-cost"):
        assert flag in out


# -- live, over real HTTP: a model that repeats itself and runs long is stopped --------------------


@pytest.fixture
def live(step, tmp_path, monkeypatch):
    """Run `step.main` live against a stand-in with this brain; (exit code, requests, output, saved)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    out = io.StringIO()
    monkeypatch.setattr(step, "console", Console(file=out, width=200))
    monkeypatch.setattr(step, "RUNS", tmp_path / "runs")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("WORKBOOK_NO_SLEEP", "1")
    monkeypatch.delenv("MODEL_ID", raising=False)

    def run(brain, *flags, task="do it"):
        with StandIn(brain) as api:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
            argv = [task] if task else []
            code = step.main([*argv, "--workspace", str(workspace), *flags])
        assert not api.rule_problems
        [saved] = (tmp_path / "runs").glob("*/conversation.json")  # the run's own folder, in runs/
        return code, api.requests, out.getvalue(), json.loads(saved.read_text())

    return run


def test_live_a_model_that_repeats_itself_is_refused_then_stopped(live):
    def same_read(body, n):
        return message([tool_use(f"toolu_{n}", "read_file", {"path": "notes.txt"})], "tool_use")

    code, requests, out, saved = live(same_read)
    assert code == 0 and len(requests) == 4
    results = [m["content"][0] for m in saved if m["role"] == "user" and isinstance(m["content"], list)]
    assert [r["is_error"] for r in results] == [False, False, True, True]
    assert 'run ended: repeated call: read_file {"path": "notes.txt"}' in out


def test_live_a_model_that_runs_long_is_stopped_by_max_steps(live):
    def wanders(body, n):
        return message([tool_use(f"toolu_{n}", "grep", {"pattern": f"line {n}"})], "tool_use")

    code, requests, out, saved = live(wanders, "--max-steps", "5")
    assert code == 0 and len(requests) == 5
    assert "run ended: max steps: 5 model calls made (--max-steps 5)" in out
    assert contract.api_rule_problems(saved) == [] and len(saved) == 11


def test_live_a_growing_conversation_is_stopped_by_the_token_budget_with_cache_tokens_counted(live):
    def grows(body, n):
        reply = message([tool_use(f"toolu_{n}", "list_files", {"glob": f"{n}/*"})], "tool_use", 1000, 100)
        reply["usage"] |= {"cache_read_input_tokens": 20_000 * (n + 1), "cache_creation_input_tokens": 5000}
        return reply

    code, requests, out, _ = live(grows, "--max-tokens-total", "100000")
    # in + out per call: 26,100, 46,100, 66,100 -> 138,300 after three: the fourth is never sent
    assert code == 0 and len(requests) == 3
    assert "run ended: token budget: 138,300 tokens in and out (--max-tokens-total 100,000)" in out


def test_live_one_huge_request_is_stopped_by_the_input_limit(live):
    sizes = (900, 5000, 10)
    replies = [
        message([tool_use(f"t{n}", "list_files", {})], "tool_use", size, 10) for n, size in enumerate(sizes)
    ]
    code, requests, out, _ = live(scripted(*replies), "--max-input-tokens", "4000")
    assert code == 0 and len(requests) == 2
    assert "run ended: input limit: the last request sent 5,000 input tokens" in out


def test_live_the_cost_cap_warns_then_stops(live):
    def pricey(body, n):  # 100k in, 2k out: $0.33 a call
        return message([tool_use(f"toolu_{n}", "list_files", {"glob": f"{n}"})], "tool_use", 100_000, 2000)

    code, requests, out, _ = live(pricey, "--max-cost", "1", "--max-tokens-total", "1000000")
    assert code == 0 and len(requests) == 4  # $0.99 after three calls is under $1; $1.32 after four
    assert (
        out.count("cost warning:") == 1 and "cost warning: about $0.9900 spent, 99% of --max-cost $1" in out
    )
    assert "run ended: cost limit: about $1.3200 spent (--max-cost $1)" in out


def test_the_help_names_the_budgets_own_defaults(step, capsys):
    """The limit flags leave a limit not given to Budget's default; --help names those defaults."""
    with pytest.raises(SystemExit):
        step.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    budget = step.Budget()
    assert f"model calls (default {budget.max_steps})" in out
    assert f"tokens in + out (default {budget.max_tokens_total:,})" in out
    assert f"input, one request (default {budget.max_input_tokens:,})" in out
    assert f"warned at 80% (default {budget.max_cost:.2f})" in out


def test_a_write_the_gate_refused_does_not_count_as_a_change(step, tmp_path):
    """Writes B, A, B over an A on disk, each refused by the gate (--permission deny): the file never
    changed, so the third is no circle."""
    (tmp_path / "a.txt").write_text("A")
    turns = Turns(step, tmp_path, permission="deny")
    said = [turns.said(write(n, content)) for n, content in enumerate("BAB")]
    assert said == [None, None, None]


def test_calls_past_the_cap_are_told_how_many_the_turn_asked_for_held_ones_included(step, tmp_path):
    brake = step.RepeatBrake()
    run_turns(brake, [[(block(tool_id="a"), "x")], [(block(tool_id="b"), "x")]])
    calls = [block(tool_id="c"), *(block("grep", {"pattern": f"p{n}"}, f"g{n}") for n in range(11))]
    held = brake.hold_back(calls)  # the first: a third identical read
    results, _ = step.run_tools(calls, step.Settings(tmp_path), held)
    assert list(held) == ["c"] and results[-1]["is_error"]
    assert "this turn asked for 12 tool calls" in results[-1]["content"]


def test_a_call_held_back_has_its_line_in_the_audit_log(step, tmp_path):
    """s02's audit log has a line for every call: one the brake answers instead of running too."""
    (tmp_path / "a.txt").write_text("x")
    settings = step.Settings(tmp_path, permission="all", audit=tmp_path / "audit.jsonl")
    brake = step.RepeatBrake()
    for n in range(3):
        asked = call("read_file", f"toolu_r{n}", path="a.txt")
        held = brake.hold_back([asked])
        results, _ = step.run_tools([asked], settings, held)
        brake.remember([asked], results)
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(line["id"], line["decision"]) for line in lines] == [
        ("toolu_r0", "read-only"),
        ("toolu_r1", "read-only"),
        ("toolu_r2", "held back"),
    ]
    assert lines[2]["is_error"] and lines[2]["chars"] == len(results[0]["content"])
