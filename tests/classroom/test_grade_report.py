"""The grader's report (workbook/classroom/grade.py, reasons.py): how each program ran (in bwrap, or not
and why), a crash told in the program's own words, the stdin hint only for a program that read stdin,
and s06's rung, where a streamed tool_use's input arrives in pieces."""

import sys

from workbook import paths, replay_client
from workbook.api.wire import events_to_message
from workbook.classroom import grade, ladder
from workbook.classroom import reasons as reasons
from workbook.classroom.sandbox import Sandbox
from workbook.replay import fixtures

import anthropic
import pytest
from grading import (
    LOOPS,
    NODE,
    PYTHON,
    graded,
    needs_bwrap,
    needs_node,
    no_waiting,  # noqa: F401  (autouse: the steps print their waits, not sleep them)
)

# -- how each program ran ----------------------------------------------------------------------------


def test_a_program_run_without_a_sandbox_says_so_and_why_in_the_json(capsys):
    code, rows = graded(capsys, "--only", "loop", "--sandbox", "off", "--", PYTHON, "-c", "print('hi')")
    assert rows["loop"]["sandbox"] == "none: --sandbox off"


@needs_bwrap
def test_a_program_run_in_bwrap_says_so_in_the_json_and_in_the_table(capsys, monkeypatch):
    code, rows = graded(capsys, "--only", "loop", "--sandbox", "required", "--", PYTHON, "-c", "print('hi')")
    assert rows["loop"]["sandbox"] == "bwrap"
    monkeypatch.setenv("COLUMNS", "250")  # one line per row
    grade.main(["--only", "loop", "--sandbox", "required", "--", PYTHON, "-c", "print('hi')"])
    header, row = [line for line in capsys.readouterr().out.splitlines() if "rung" in line or "loop" in line][
        :2
    ]
    assert header.split("┃")[-2].strip() == "sandbox" and row.split("│")[-2].strip() == "bwrap"


def test_the_sandbox_in_words_names_why_there_is_none():
    assert ladder.sandbox_words(Sandbox("bwrap", "/usr/bin/bwrap")) == "bwrap"
    assert ladder.sandbox_words(Sandbox()) == "none: --sandbox off"


# -- a crash, in the program's own words (reasons.crash_line: test_reasons.py) ----------------------


@needs_node
def test_a_javascript_program_that_crashes_is_told_by_its_own_error_line(capsys):
    crash = "function main() { throw new TypeError('no task given') }\nmain()\n"
    code, rows = graded(capsys, "--only", "loop", "--", NODE, "-e", crash)
    reason = rows["loop"]["reason"]
    assert "(exit 1: TypeError: no task given (at [eval]:1))" in reason and "Node.js v" not in reason


# -- the stdin hint: only for a program that read stdin -------------------------------------------------


def test_a_program_that_never_read_stdin_is_not_told_about_stdin(capsys):
    code, rows = graded(capsys, "--only", "loop", "--", PYTHON, "-c", "import sys; sys.exit('no key?')")
    assert "stdin" not in rows["loop"]["reason"]
    assert rows["loop"]["reason"].endswith(
        "the grader sets ANTHROPIC_BASE_URL to its replay server and gives the task as the last argument "
        "and in AGENT_TASK"
    )


def test_a_program_that_says_it_wanted_stdin_is_told_it_is_closed(capsys):
    wants = "import sys; sys.exit('Error: Input must be provided either through stdin or as an argument')"
    code, rows = graded(capsys, "--only", "loop", "--", PYTHON, "-c", wants)
    assert rows["loop"]["reason"].endswith(
        "your program read stdin, but stdin is closed when graded: read the task from the last argument "
        "or from AGENT_TASK"
    )


# -- s06's rung: a streamed tool_use, its input in pieces ------------------------------------------------

STREAMED = next(r for r in ladder.RUNGS if r.name == "streamed-input")


def test_s06_has_its_rung_and_it_streams_its_replies():
    assert STREAMED.step == "s06" and STREAMED.stream and STREAMED.fixture == "grade_s06_streamed_tool_input"
    fixture = fixtures.load_fixture(paths.ROOT / "fixtures" / f"{STREAMED.fixture}.json")
    first = fixture["exchanges"][0]["response"]["stream"]
    pieces = [
        e["data"]["delta"]["partial_json"] for e in first if e["data"].get("delta", {}).get("partial_json")
    ]
    assert len(pieces) == 4 and any(p.endswith("\\") for p in pieces)  # one cut inside an escape


def test_the_s06_rungs_streams_read_by_the_sdk_are_the_messages_they_add_up_to():
    """The exact wire format: the SDK's own SSE parser puts the four pieces together into the input."""
    fixture = fixtures.load_fixture(paths.ROOT / "fixtures" / f"{STREAMED.fixture}.json")
    request = {"model": "claude-sonnet-5", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]}
    replies = []
    for exchange in fixture["exchanges"]:
        client, _ = replay_client({"exchanges": [exchange], "task": "", "workspace": ""}, strict=False)
        with client.messages.stream(**request) as stream:
            replies.append(stream.get_final_message())
        expected = anthropic.types.Message.model_validate(events_to_message(exchange["response"]["stream"]))
        assert replies[-1].to_dict(exclude_none=True) == expected.to_dict(exclude_none=True)
    assert replies[0].content[1].input == {"command": 'grep -c "" notes.txt README.md'}


@needs_node
def test_a_loop_that_does_not_stream_fails_the_s06_rung_and_is_told_to_ask_for_the_stream(capsys):
    code, rows = graded(capsys, "--only", "streamed-input", "--", NODE, str(LOOPS / "agent_loop.js"))
    assert code == 1 and rows["streamed-input"]["reason"] == (
        "turn 1: this rung's replies stream, but your request did not ask for the stream (stream: true); "
        "stream the reply and put each tool_use's input together from its input_json_delta pieces (s06)"
    )


@needs_node
def test_a_loop_that_reads_the_stream_by_hand_climbs_to_the_s06_rung(capsys):
    code, rows = graded(capsys, "--only", "s01,s02,streamed-input", "--", NODE, str(LOOPS / "stream_loop.js"))
    assert code == 0, {name: row["reason"] for name, row in rows.items()}


@needs_node
def test_a_streaming_loop_that_drops_the_input_pieces_fails_the_s06_rung_naming_them(tmp_path, capsys):
    source = (LOOPS / "stream_loop.js").read_text()
    parse = (
        '    else if (event.type === "content_block_stop" && event.index in json)\n'
        "      message.content[event.index].input = JSON.parse(json[event.index]);\n"
    )
    assert source.count(parse) == 1
    variant = tmp_path / "keeps_the_empty_input.js"
    variant.write_text(source.replace(parse, ""))  # the input stays the {} of content_block_start
    code, rows = graded(capsys, "--only", "streamed-input", "--", NODE, str(variant))
    assert rows["streamed-input"]["reason"] == (
        "turn 2: messages[1].content[1] (tool_use) is not the reply as it came: its input differs; "
        "a streamed tool_use's input is all of its input_json_delta pieces, put together"
    )


def test_a_tool_result_without_the_commands_output_fails_the_s06_rung():
    fixture = fixtures.load_fixture(paths.ROOT / "fixtures" / f"{STREAMED.fixture}.json")
    sent = fixture["exchanges"][1]["request"]
    ran_nothing = {"type": "tool_result", "tool_use_id": "toolu_01GradeS05Count", "content": "(no output)"}
    body = sent | {"messages": sent["messages"][:2] + [{"role": "user", "content": [ran_nothing]}]}
    seen = [reasons.Seen(1, fixture["exchanges"][0]["request"], None), reasons.Seen(2, body, None)]
    verdict = reasons.judge(STREAMED, fixture, reasons.Outcome(seen, 0, "", []))
    assert verdict.problem == (
        "turn 2: your tool_result for toolu_01GradeS05Count holds \"(no output)\", not 'notes.txt:1', which "
        "the command prints when it runs: run the whole command the tool_use's input holds, and send back "
        "what it printed"
    )


@pytest.mark.parametrize("step", ["s01_agent_loop", "s04_parallel"])
def test_an_earlier_step_that_does_not_stream_is_told_so_on_the_s06_rung(step, capsys):
    """s06 is where replies start to stream: the steps before it wait for each reply whole."""
    code, rows = graded(
        capsys, "--only", "streamed-input", "--", sys.executable, str(paths.ROOT / f"{step}.py")
    )
    assert code == 1 and rows["streamed-input"]["reason"].startswith(
        "turn 1: this rung's replies stream, but your request did not ask for the stream (stream: true)"
    )
