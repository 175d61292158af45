"""workbook/grade.py: the graded ladder. Each step climbs it up to its own rung, a loop written outside the
workbook (plain Python, JavaScript) is graded the same way, and a failing rung names the loop's
first mistake in the student's terms."""

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, STEPS, offline_env

from workbook import classroom, compare, fixtures, grade

LOOPS = ROOT / "tests" / "grade_loops"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    """The steps (s03 on) print their retry waits instead of sleeping them; the grader passes env on."""
    monkeypatch.setenv("WORKBOOK_NO_SLEEP", "1")


def graded(capsys, *argv: str) -> tuple[int, dict]:
    """grade.main(--json, argv) in-process: the exit code and each rung's row by name."""
    code = grade.main(["--json", *argv])
    rows = json.loads(capsys.readouterr().out)["rungs"]
    assert all(set(row) == {"name", "step", "passed", "reason"} for row in rows)
    return code, {row["name"]: row for row in rows}


def failures(rows: dict) -> dict:
    return {name: row["reason"] for name, row in rows.items() if not row["passed"]}


def rungs_up_to(step: str) -> list[str]:
    return [r.name for r in grade.RUNGS if r.step <= step]


# -- the ladder is the workbook's progression ------------------------------------------------------


@pytest.fixture(scope="module")
def ladder() -> dict[str, dict[str, grade.Result]]:
    """Every step graded on every rung up to its own, all at once (34 runs share the cores)."""
    runs = [(step, rung) for step in STEPS for rung in grade.RUNGS if rung.step <= step[:3]]
    command = {step: [sys.executable, str(ROOT / f"{step}.py")] for step in STEPS}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = pool.map(lambda run: grade.grade_rung(run[1], command[run[0]], grade.DEFAULT_TIMEOUT), runs)
        graded_runs = list(zip(runs, results))
    return {step: {rung.name: result for (s, rung), result in graded_runs if s == step} for step in STEPS}


@pytest.mark.parametrize("step", STEPS)
def test_each_step_passes_every_rung_up_to_its_own(step, ladder):
    assert list(ladder[step]) == rungs_up_to(step[:3])
    assert {name: r.reason for name, r in ladder[step].items() if not r.passed} == {}


def test_the_last_step_is_graded_on_every_rung():
    last = STEPS[-1][:3]
    assert rungs_up_to(last) == [r.name for r in grade.RUNGS]
    assert {r.step for r in grade.RUNGS} == {s[:3] for s in STEPS}, "every step has at least one rung"


# -- loops written outside the workbook ------------------------------------------------------------


def test_a_plain_python_loop_with_the_sdk_passes_the_loop_errors_retries_and_parallel_rungs(capsys):
    only = "loop,tool-errors,retries,parallel"
    code, rows = graded(capsys, "--only", only, "--", sys.executable, str(LOOPS / "plain_loop.py"))
    assert list(rows) == only.split(",")
    assert failures(rows) == {} and code == 0


@needs_node
def test_a_javascript_loop_with_fetch_climbs_to_s04_and_stops_at_s05(capsys):
    code, rows = graded(capsys, "--only", "s01,s02,s03,s04,s05", "--", NODE, str(LOOPS / "agent_loop.js"))
    assert failures(rows) == {
        "repeat-brake": "your loop was still calling the model after 8 turns of the same repeated call; "
        "it must notice the repetition and stop by itself"
    }
    assert code == 1


def test_the_classic_bug_fails_rung_one_naming_the_missing_assistant_turn(tmp_path):
    """Through the real command line, from the repo root: stdout is one JSON object, the exit code 1.
    The buggy loop is plain_loop.py without its one line that appends the assistant's reply."""
    plain = (LOOPS / "plain_loop.py").read_text()
    append = '        messages.append({"role": "assistant", "content": response.content})\n'
    assert plain.count(append) == 1
    buggy = tmp_path / "forgets_reply.py"
    buggy.write_text(plain.replace(append, ""))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbook",
            "grade",
            "--json",
            "--only",
            "loop",
            "--",
            sys.executable,
            str(buggy),
        ],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    [row] = json.loads(done.stdout)["rungs"]
    assert row["name"] == "loop" and row["passed"] is False
    assert row["reason"] == (
        "turn 2: your loop did not append the assistant's reply; messages[1] should be the assistant turn "
        "with 1 text block and 1 tool_use block"
    )


# -- a failing rung names the first mistake (variants of the JavaScript loop: quick to start) -------


def js_variant(tmp_path: Path, old: str, new: str) -> str:
    """agent_loop.js with one line changed: a student's mistake, made on purpose."""
    source = (LOOPS / "agent_loop.js").read_text()
    assert old in source
    variant = tmp_path / "variant.js"
    variant.write_text(source.replace(old, new))
    return str(variant)


@needs_node
def test_tool_results_in_any_order_pass_the_parallel_rung(tmp_path, capsys):
    # The API pairs tool_results with tool_uses by id, whatever their order (docs/faults.md, fidelity).
    variant = js_variant(
        tmp_path, "const results = reply.content", "const results = [...reply.content].reverse()"
    )
    code, rows = graded(capsys, "--only", "parallel", "--", NODE, variant)
    assert code == 0 and rows["parallel"]["passed"], rows["parallel"]["reason"]


@needs_node
def test_a_failed_call_sent_back_without_is_error_fails_the_s02_rung(tmp_path, capsys):
    variant = js_variant(tmp_path, "is_error: failed", "is_error: false")
    code, rows = graded(capsys, "--only", "s01,s02", "--", NODE, variant)
    assert rows["loop"]["passed"] and code == 1
    assert rows["tool-errors"]["reason"] == (
        "turn 2: the call toolu_01GradeS02Unknown asks for word_count, a tool that does not exist, but your "
        "tool_result for it has no is_error: true; send a failure back as an error result so the model can "
        "correct itself"
    )


@needs_node
def test_a_reply_edited_before_it_is_appended_fails_rung_one(tmp_path, capsys):
    edited = (
        "content: reply.content.map((b) => (b.type === 'text' ? { ...b, text: b.text.trim() + '!' } : b))"
    )
    variant = js_variant(
        tmp_path, 'role: "assistant", content: reply.content', f'role: "assistant", {edited}'
    )
    code, rows = graded(capsys, "--only", "loop", "--", NODE, variant)
    assert code == 1 and rows["loop"]["reason"] == (
        "turn 2: messages[1].content[0] (text) is not the reply as it came: its text differs; "
        "append response.content unchanged"
    )


@needs_node
def test_retrying_what_cannot_pass_fails_the_400_and_key_rungs(tmp_path, capsys):
    variant = js_variant(tmp_path, "response.status !== 429 && response.status < 500", "false")
    code, rows = graded(capsys, "--only", "no-retry-400,bad-key", "--", NODE, variant)
    assert code == 1 and failures(rows) == {
        "no-retry-400": "turn 2: the API answered 400 and your program sent the request again; a 400 fails "
        "the same way every time: stop with a clear message",
        "bad-key": "turn 1: the API answered 401 and your program sent the request again; a 401 fails "
        "the same way every time: stop with a clear message",
    }


@needs_node
def test_retrying_without_a_bound_or_exiting_0_on_failure_fails_the_s03_rungs(tmp_path, capsys):
    unbounded = js_variant(tmp_path, "const ATTEMPTS = 5;", "const ATTEMPTS = 50;")
    code, rows = graded(capsys, "--only", "gives-up", "--", NODE, unbounded)
    assert code == 1 and rows["gives-up"]["reason"] == (
        "your program kept retrying: 9 attempts, where this rung allows at most 8"
    )
    quiet = js_variant(tmp_path, "process.exit(1)", "process.exit(0)")
    code, rows = graded(capsys, "--only", "bad-key,gives-up", "--", NODE, quiet)
    assert code == 1 and set(failures(rows)) == {"bad-key", "gives-up"}
    assert rows["bad-key"]["reason"].startswith("your program stopped but exited with code 0")


@needs_node
def test_running_a_cut_tool_use_or_answering_a_pause_fails_the_s06_rungs(tmp_path, capsys):
    runs_any_tool_use = js_variant(
        tmp_path, 'reply.stop_reason !== "tool_use"', '!reply.content.some((b) => b.type === "tool_use")'
    )
    code, rows = graded(capsys, "--only", "cut-tool-use", "--", NODE, runs_any_tool_use)
    assert code == 1 and rows["cut-tool-use"]["reason"] == (
        "turn 2: turn 1's reply was cut off by max_tokens inside a tool_use, and your loop ran it or sent it "
        "back; a cut tool_use is incomplete: send the same request again, without the cut reply, with a "
        "larger max_tokens"
    )
    says_continue = js_variant(
        tmp_path,
        'if (reply.stop_reason !== "tool_use") {',
        'if (reply.stop_reason === "pause_turn") {\n'
        '  messages.push({ role: "user", content: "go on" });\n'
        "  continue;\n"
        "}\n"
        'if (reply.stop_reason !== "tool_use") {',
    )
    code, rows = graded(capsys, "--only", "pause-turn", "--", NODE, says_continue)
    assert code == 1 and rows["pause-turn"]["reason"] == (
        "turn 2: after a pause_turn, send the conversation back with the paused assistant turn last; "
        "do not add a user message"
    )


def test_a_program_that_hangs_is_stopped_by_the_timeout(capsys):
    hang = "import time; time.sleep(60)"
    code, rows = graded(capsys, "--only", "loop", "--timeout", "1", "--", sys.executable, "-c", hang)
    assert code == 1
    assert rows["loop"]["reason"] == "your program did not finish in time; it had reached turn 0 of 3"


def test_a_program_that_never_asks_is_told_what_the_server_saw(capsys):
    silent = "print('hello')"
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, "-c", silent)
    assert (
        rows["loop"]["reason"]
        == "your program sent no request the replay server could answer (exit 0: hello)"
    )
    headless = (  # a raw request without the anthropic-version header
        "import os, urllib.request as u\n"
        "r = u.Request(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', data=b'{}', "
        "headers={'x-api-key': os.environ['ANTHROPIC_API_KEY']})\n"
        "try: u.urlopen(r)\nexcept Exception as e: print(e)\n"
    )
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, "-c", headless)
    assert rows["loop"]["reason"].endswith("the server logged: 400 no anthropic-version header")


# -- bad input: one line, a non-zero exit, no traceback --------------------------------------------


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "no command to grade: put it after --"),
        (["--"], "no command to grade"),
        (
            ["--only", "s09", "--", "python"],
            "no rung 's09': give a step (s01-s06) or one of loop, tool-errors",
        ),
        (["--", "no-such-program-here"], "no-such-program-here: command not found"),
        (["--", "./missing_loop.py"], "./missing_loop.py: command not found"),
        (["--jsn", "--", "python"], "unrecognized arguments: --jsn"),
        (["--timeout", "soon", "--", "python"], "invalid float value: 'soon'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert grade.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and says in err and err.count("\n") == 1


def test_the_command_line_says_what_is_wrong_without_a_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "workbook", "grade", "--", "no-such-program-here"],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "command not found" in done.stderr


def test_the_table_names_each_rung_its_check_and_the_reason(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one line per row, so the words can be found whole
    code = grade.main(["--only", "loop", "--", sys.executable, "-c", "print('hello')"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and "0 of 1 rungs passed" in out
    assert "sent no request" in out and "every tool_use answered" in out


# -- the rungs themselves --------------------------------------------------------------------------


def test_every_grade_fixture_is_a_rung_and_every_rung_says_in_one_line_what_it_checks():
    on_disk = sorted(p.stem for p in (ROOT / "fixtures").glob("grade_*.json"))
    assert sorted(r.fixture for r in grade.RUNGS) == on_disk
    assert len({r.name for r in grade.RUNGS}) == len(grade.RUNGS)
    for rung in grade.RUNGS:
        assert rung.fixture.startswith(f"grade_{rung.step}_") and "\n" not in rung.checks
        assert len(rung.checks) <= 100


@pytest.mark.parametrize("rung", grade.RUNGS, ids=lambda r: r.name)
def test_each_recording_keeps_the_rule_it_grades_replies_go_back_verbatim(rung):
    fixture = fixtures.load_fixture(ROOT / "fixtures" / f"{rung.fixture}.json")
    assert fixture["provenance"] == "scripted" and "estimates" in fixture["provenance_note"]
    replies = [
        grade.without_nulls(
            compare.normalize_messages([{"role": "assistant", "content": e["response"]["body"]["content"]}])
        )
        for e in fixture["exchanges"]
        if e["response"].get("status") == 200
    ]
    for exchange in fixture["exchanges"]:
        for message in exchange["request"]["messages"]:
            if message["role"] == "assistant":
                assert grade.without_nulls(compare.normalize_messages([message])) in replies


@pytest.mark.parametrize("rung", grade.RUNGS, ids=lambda r: r.name)
def test_each_recording_replays_offline_through_its_own_step(rung, run_main):
    """The rung's step, replaying the rung strictly, sends the recorded requests: the recording is its own."""
    path = f"fixtures/{rung.fixture}.json"
    fixture = fixtures.load_fixture(ROOT / path)
    code, out = run_main(fixture["script"], "--replay", path)
    assert "Traceback" not in out and f"error: {path}" not in out, out
    ends_in_error = fixture["exchanges"][-1]["response"].get("status") != 200
    assert code == (1 if ends_in_error else 0), out


def test_the_classroom_tells_its_observer_each_answer_and_each_mistake():
    fixture = fixtures.load_fixture(ROOT / "fixtures" / "grade_s01_loop.json")
    room = classroom.Classroom({"grade_s01_loop": fixture}, out=grade.LogLines())
    seen = []
    room.observer = lambda *event: seen.append(event)
    first = fixture["exchanges"][0]["request"]
    room.answer("ada", first, None)
    room.answer("ada", {**first, "messages": first["messages"] * 2}, None)
    assert [(who, name, turn, mistake is None) for who, name, turn, _, _, mistake in seen] == [
        ("ada", "grade_s01_loop", 1, True),
        ("ada", "grade_s01_loop", 2, False),
    ]
    # two user messages in a row are one turn to the API: allowed, but not the turn the recording expects
    assert seen[0][3] is first and "turn 2: your request differs from the recording" in str(seen[1][5])
