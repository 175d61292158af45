"""notebook_view shows every request a loop sent the same way in every notebook: `REQUEST n`,
`messages: k` with how the list changed since the request before, one line per block, ids shortened,
no line wider than 200 characters. And it draws the token charts."""

import contextlib
import io
import json

from workbook import notebook_view as view
from workbook.api import wire
from workbook.replay import fixtures
from workbook.replay import transport as replay

import pytest
from conftest import ROOT

FIXTURES = sorted((ROOT / "fixtures").glob("s0*.json"))


def fixture(name: str) -> dict:
    return fixtures.load_fixture(ROOT / "fixtures" / f"{name}.json")


def lines_of(name: str, new_only: bool = False) -> list[str]:
    exchanges = fixture(name)["exchanges"]
    return view.run_lines([e["request"] for e in exchanges], [e["response"] for e in exchanges], new_only)


def request_block(lines: list[str], n: int) -> list[str]:
    """The lines of REQUEST n and RESPONSE n."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"REQUEST {n} "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("REQUEST ")), len(lines))
    return lines[start:end]


# -- the format ------------------------------------------------------------------------------------


def test_each_request_has_a_header_and_its_message_count():
    lines = lines_of("s01_hello_agent")
    assert [line for line in lines if line.startswith("REQUEST")] == [
        "REQUEST 1  model=claude-sonnet-5  max_tokens=8000  tools=[bash]",
        "REQUEST 2  model=claude-sonnet-5  max_tokens=8000  tools=[bash]",
    ]
    assert [line.strip() for line in lines if "messages:" in line] == [
        "messages: 1",
        "messages: 3  (+2 since request 1)",
    ]


def test_one_line_per_block_with_index_and_role_on_the_first():
    second = request_block(lines_of("s01_hello_agent"), 2)
    request = fixture("s01_hello_agent")["exchanges"][1]["request"]
    shown = [line for line in second if line.startswith("  [") or line.startswith("          ")]
    blocks = sum(1 if isinstance(m["content"], str) else len(m["content"]) for m in request["messages"])
    assert len(shown) == blocks == 7
    assert shown[1].startswith("  [1] assistant tool_use     id=toolu_01A8…  bash")
    assert shown[4].startswith("  [2] user      tool_result  for=toolu_01A8…")


def test_the_response_shows_stop_reason_tokens_and_its_blocks():
    first = request_block(lines_of("s01_hello_agent"), 1)
    assert "RESPONSE 1  stop_reason=tool_use  tokens in 114 / out 65" in first
    assert sum(line.startswith("  tool_use ") for line in first) == 3


def test_new_only_says_which_messages_it_leaves_out():
    second = request_block(lines_of("s02_fix_divide_by_zero", new_only=True), 3)
    assert "  messages: 5  (+2 since request 2)" in second
    assert "  … [0]–[2] as in request 2" in second
    assert not any(line.startswith("  [0]") for line in second)


def test_the_system_prompt_is_shown_once_unless_it_changes():
    lines = lines_of("s03_fix_failing_test")
    assert sum(line.startswith("  system: ") for line in lines) == 1


def test_streamed_text_is_shown_as_one_text_not_as_its_deltas():
    third = request_block(lines_of("s05_streamed"), 3)
    assert any(
        'text         "server.py uses four settings: `[server] host` and `port`' in line for line in third
    )


# -- ids -------------------------------------------------------------------------------------------


def test_ids_are_shortened_to_a_prefix():
    assert view.id_names(["toolu_01A8sKd3LmQ7wXe2RtYb9cVn"]) == {
        "toolu_01A8sKd3LmQ7wXe2RtYb9cVn": "toolu_01A8…"
    }


def test_ids_sharing_a_prefix_get_longer_until_they_differ():
    ids = [f"toolu_bench_{n:04d}_{'x' * 10}" for n in range(1, 12)]
    names = view.id_names(ids)
    assert len(set(names.values())) == len(ids)
    assert all(name.endswith("…") and len(name) < len(full) for full, name in names.items())


def test_an_id_looks_the_same_in_every_request_of_a_run():
    lines = lines_of("s06_pause_turn")
    shown = {line.split("id=")[1].split()[0] for line in lines if "server_tool_use id=" in line}
    assert len(shown) == 2  # two server tool calls, each always shown the same way


# -- every way the list changes --------------------------------------------------------------------


def test_a_retry_sends_the_same_messages_again_and_errors_are_shown_as_errors():
    lines = lines_of("s03_overloaded_then_ok")
    assert "RESPONSE 1  529 overloaded_error: Overloaded" in lines
    assert "  messages: 1  (the same messages as request 1: sent again)" in lines
    assert "RESPONSE 4  no answer: the connection failed (connect)" in lines


def test_an_error_inside_a_200_stream_is_named():
    lines = lines_of("s06_overloaded_mid_stream")
    assert "RESPONSE 1  200, then an error event inside the stream: overloaded_error: Overloaded" in lines


def test_a_resumed_conversation_is_called_so():
    first = request_block(lines_of("s05_resume"), 1)
    assert "  messages: 3  (the run starts with 3 messages: a resumed conversation)" in first
    assert any("ERROR" in line and "interrupted by the user" in line for line in first)


def test_collapsed_results_show_as_a_changed_message_with_the_placeholder():
    fourth = request_block(lines_of("s06_prompt_too_long_collapse", new_only=True), 4)
    assert "  messages: 5  ([2] changed since request 3)" in fourth
    assert any("for=toolu_01UN…" in line and '"[collapsed: 3934 characters' in line for line in fourth)


def test_compaction_shows_the_shorter_list_and_the_whole_summary():
    last = request_block(lines_of("s06_collapse_then_compact", new_only=True), 8)
    assert "  messages: 3  (down from 7: rewritten from [0] on)" in last
    summary = fixture("s06_collapse_then_compact")["exchanges"][6]["response"]
    text = wire.events_to_message(summary["stream"])["content"][0]["text"]
    ending = text.split()[-4:]  # far past what one line holds
    assert " ".join(ending) in " ".join(" ".join(last).split())


def test_a_continuation_is_two_new_messages_the_cut_reply_and_the_request_to_go_on():
    third = request_block(lines_of("s06_truncated_text", new_only=True), 3)
    assert "  messages: 3  (+2 since request 2)" in third
    assert any(line.startswith('  [2] user      text         "Your last reply was cut off') for line in third)


def test_a_paused_turn_resumed_extends_the_same_assistant_message():
    third = request_block(lines_of("s06_pause_turn"), 3)
    assert "  messages: 2  ([1] extended since request 2)" in third


# -- readable everywhere ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_no_line_is_wider_than_200_characters(path):
    exchanges = fixtures.load_fixture(path)["exchanges"]
    for new_only in (False, True):
        lines = view.run_lines(
            [e["request"] for e in exchanges], [e["response"] for e in exchanges], new_only
        )
        assert max(map(len, lines)) <= view.WIDTH


def test_huge_inputs_and_results_are_cut_to_one_short_line():
    content = "x = 1\n" * 20_000
    call = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "write_file",
        "input": {"path": "a.py", "content": content},
    }
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}
    messages = [
        {"role": "user", "content": "y" * 50_000},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    request = {"model": "m", "max_tokens": 10, "messages": messages}
    lines = view.request_lines(1, request)
    assert len(lines) == 6 and max(map(len, lines)) <= 160
    assert lines[4].endswith("…") and '{"path": "a.py", "content": "x = 1\\nx = 1' in lines[4]


def test_what_a_transport_saw_with_the_sdks_messages_reads_as_the_recording():
    recorded = fixture("s01_hello_agent")
    client, transport = replay.replay_client(recorded, "s01_hello_agent.json")
    messages = [client.messages.create(**exchange["request"]) for exchange in recorded["exchanges"]]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        view.show_transport(transport)
    assert out.getvalue().splitlines() == lines_of("s01_hello_agent")
    assert view.response_lines(2, messages[1]) == view.response_lines(2, recorded["exchanges"][1]["response"])


def test_a_messages_list_alone_shows_as_in_a_request(capsys):
    request = fixture("s01_hello_agent")["exchanges"][1]["request"]
    view.show_messages(request["messages"])
    shown = capsys.readouterr().out.splitlines()
    assert shown == [line for line in request_block(lines_of("s01_hello_agent"), 2) if line.startswith("   ")
                     or line.startswith("  [")]  # fmt: skip


def test_long_prose_is_wrapped_under_its_label(capsys):
    view.show_wrapped("word " * 60, width=50, prefix="note: ")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 5 and max(map(len, lines)) <= 50
    assert lines[0].startswith("note: word") and lines[1].startswith("      word")


def test_a_steps_map_says_what_it_takes_from_each_earlier_step_and_what_it_adds():
    import s01_agent_loop
    import s03_errors

    lines = view.step_lines(s03_errors)
    assert lines[0] == "s03_errors takes from the steps before it:"
    assert lines[1] == "  s01_agent_loop: MAX_TOKENS, MODEL"
    assert lines[2].startswith("  s02_tools: (the module, as s02), ")
    new, then = " ".join(lines[3:-1]), lines[-1]  # "new:" runs over several lines
    assert new.startswith("new: ") and "call_model" in new and "agent_loop" not in new
    assert then.startswith("then: Settings, agent_loop") and max(map(len, lines)) <= 100
    assert view.step_lines(s01_agent_loop)[1] == "  nothing"


# -- charts ----------------------------------------------------------------------------------------


def test_only_answered_requests_count_as_billed_input():
    responses = [e["response"] for e in fixture("s03_overloaded_then_ok")["exchanges"]]
    assert view.answered_input_tokens(responses) == [764, 844]
    assert view.running_sum([764, 844, 1]) == [764, 1608, 1609]


def test_the_chart_has_a_line_per_series_in_both_panels_and_a_stable_png():
    figure = view.tokens_chart({"plain": [1, 2, 3], "collapsed": [1, 2, 1]}, "title")
    per_turn, total = figure.axes
    assert [list(line.get_ydata()) for line in per_turn.lines] == [[1, 2, 3], [1, 2, 1]]
    assert [list(line.get_ydata()) for line in total.lines] == [[1, 3, 6], [1, 3, 4]]
    with_limit = view.tokens_chart({"collapsed": [1, 2, 1]}, "title", limit=2)
    assert [list(line.get_ydata()) for line in with_limit.axes[0].lines][-1] == [2, 2]  # the dashed limit
    png = view.png(figure)
    assert png.startswith(b"\x89PNG") and png == view.png(figure)
    assert b"Matplotlib version" not in png


def test_a_long_run_resends_its_history_and_collapse_keeps_it_under_the_limit():
    plain = view.long_run(12, "s01_agent_loop")
    steps = [b - a for a, b in zip(plain["tokens"], plain["tokens"][1:])]
    assert len(plain["tokens"]) == 12 and min(steps) > 400  # each request carries every output before it
    assert plain["refused"] == plain["summaries"] == 0
    limit = plain["tokens"][-1] // 2
    collapsed = view.long_run(12, "s08_full_context", context_limit=limit)
    assert max(collapsed["tokens"]) <= limit < max(plain["tokens"]) and collapsed["refused"] >= 1
    assert sum(collapsed["tokens"]) < sum(plain["tokens"])


def test_every_turn_of_a_long_run_really_runs_its_command_in_every_step():
    for step in ("s02_tools", "s06_recovery"):
        tokens = view.long_run(4, step)["tokens"]
        assert min(b - a for a, b in zip(tokens, tokens[1:])) > 400, step  # ~1.9 kB of output a turn


def test_a_tight_limit_makes_s08_compact_as_well():
    run = view.long_run(40, "s08_full_context", context_limit=3000)
    assert run["summaries"] >= 1 and run["refused"] > run["summaries"]
    assert max(run["tokens"]) <= 3000


def test_a_long_run_inside_jupyter_still_prints_nothing(monkeypatch, capsys):
    import rich.console

    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)  # as inside a notebook's kernel
    assert rich.console.Console().is_jupyter and not view.plain_console().is_jupyter
    view.long_run(3, "s01_agent_loop")
    assert capsys.readouterr().out == ""


def test_the_view_reads_fixtures_without_changing_them():
    recorded = fixture("s06_collapse_then_compact")
    before = json.dumps(recorded, sort_keys=True)
    view.run_lines(
        [e["request"] for e in recorded["exchanges"]], [e["response"] for e in recorded["exchanges"]]
    )
    assert json.dumps(recorded, sort_keys=True) == before
