"""workbook/classroom/grade.py, beyond the ladder itself (test_ladder.py): a loop written in
JavaScript is graded as the workbook's steps are, a failing rung names the loop's first mistake in the
student's terms, and the program runs as a stranger's program: sandboxed, with an allowlisted environment,
nothing it starts outliving its rung."""

import json
import os
import subprocess
import sys
from pathlib import Path

from workbook import cli, processes
from workbook.api import compare, contract
from workbook.api.wire import recorded_message
from workbook.classroom import grade, ladder, reasons, rung_server, sandbox, students
from workbook.replay import fixtures

import pytest
from conftest import ROOT, offline_env
from grading import (
    LOOPS,
    NODE,
    PYTHON,
    SANDBOX_FLAGS,
    failures,
    graded,
    needs_bwrap,
    needs_node,
    no_waiting,  # noqa: F401  (autouse: the steps print their waits, not sleep them)
)


@needs_node
def test_a_javascript_loop_with_fetch_climbs_to_the_parallel_rung_and_stops_at_the_repeat_brake(capsys):
    code, rows = graded(capsys, "--only", "s01,s02,s03,s04,s05", "--", NODE, str(LOOPS / "agent_loop.js"))
    assert failures(rows) == {
        "repeat-brake": "your loop was still calling the model after 8 turns of the same repeated call; "
        "it must notice the repetition and stop by itself"
    }
    assert code == 1


def test_the_classic_bug_fails_rung_one_naming_the_missing_assistant_turn(tmp_path, capsys):
    """The buggy loop is plain_loop.py without its one line that appends the assistant's reply. (The
    real command line, one JSON object on stdout and exit code 1, is the tampering test's, below.)"""
    plain = (LOOPS / "plain_loop.py").read_text()
    append = '        messages.append({"role": "assistant", "content": response.content})\n'
    assert plain.count(append) == 1
    buggy = tmp_path / "forgets_reply.py"
    buggy.write_text(plain.replace(append, ""))
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, str(buggy))
    assert code == 1
    [row] = rows.values()
    assert row["name"] == "loop" and row["passed"] is False
    assert row["reason"].startswith(  # the server's words: the API's own
        "turn 2: messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks"
    )
    assert "expected 3 messages, got 2" in row["reason"]
    assert row["reason"].endswith(  # and then the grader's hint
        ". Hint: your loop did not append the assistant's reply; messages[1] should be the assistant turn "
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
        "no-retry-400": "turn 3: the API answered 400 and your program sent the request again; a 400 fails "
        "the same way every time: stop with a clear message",
        "bad-key": "turn 2: the API answered 401 and your program sent the request again; a 401 fails "
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
    assert code == 1 and rows["cut-tool-use"]["reason"].startswith("turn 2: grade_s06_cut_tool_use, turn 2")
    assert rows["cut-tool-use"]["reason"].endswith(
        ". Hint: turn 1's reply was cut off by max_tokens inside a tool_use, and your loop ran it or sent it "
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
    searches = Path(says_continue)  # it declares the rung's server tool, as a loop facing pause_turn does
    searches.write_text(
        searches.read_text().replace("const TOOLS = [\n", f"const TOOLS = [\n  {WEB_SEARCH},\n")
    )
    code, rows = graded(capsys, "--only", "pause-turn", "--", NODE, says_continue)
    assert code == 1 and rows["pause-turn"]["reason"].endswith(
        ". Hint: after a pause_turn, send the conversation back with the paused assistant turn last; "
        "do not add a user message"
    )


WEB_SEARCH = '{ type: "web_search_20250305", name: "web_search" }'


@needs_node
def test_a_loop_that_declares_no_web_search_is_refused_the_recorded_search_on_the_pause_turn_rung(capsys):
    code, rows = graded(capsys, "--only", "pause-turn", "--", NODE, str(LOOPS / "agent_loop.js"))
    reason = rows["pause-turn"]["reason"]
    assert code == 1 and reason.startswith(
        "turn 1: tools: the recorded reply uses the server tool `web_search`, but this request does not "
        "declare it"
    )
    assert 'the recording\'s request declares it in `tools`: {"type": "web_search_20250305"' in reason


def test_a_program_that_hangs_is_stopped_by_the_timeout(capsys):
    hang = "import time; time.sleep(60)"
    code, rows = graded(capsys, "--only", "loop", "--timeout", "1", "--", sys.executable, "-c", hang)
    assert code == 1
    assert rows["loop"]["reason"] == (
        "your program did not finish in time; it had reached turn 0 of 3 (the grader sets ANTHROPIC_BASE_URL "
        "to its replay server and gives the task as the last argument and in AGENT_TASK)"
    )


def test_a_program_that_never_asks_is_told_what_the_server_saw(capsys):
    silent = "print('hello')"
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, "-c", silent)
    assert rows["loop"]["reason"] == (  # it never read stdin: no word of it
        "your program sent no request the replay server could answer (exit 0: hello); the grader sets "
        "ANTHROPIC_BASE_URL to its replay server and gives the task as the last argument and in AGENT_TASK"
    )
    headless = (  # a raw request without the anthropic-version header
        "import os, urllib.request as u\n"
        "r = u.Request(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', data=b'{}', "
        "headers={'x-api-key': os.environ['ANTHROPIC_API_KEY']})\n"
        "try: u.urlopen(r)\nexcept Exception as e: print(e)\n"
    )
    code, rows = graded(capsys, "--only", "loop", "--", sys.executable, "-c", headless)
    assert "the server logged: 400 no anthropic-version header;" in rows["loop"]["reason"]


# -- bad input: one line, a non-zero exit, no traceback --------------------------------------------


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "no command to grade: put it after --"),
        (["--"], "no command to grade"),
        (
            ["--only", "s09", "--", "python"],
            "no rung 's09': give a step (s01-s07) or one of loop, tool-errors",
        ),
        (["--", "no-such-program-here"], "no-such-program-here: command not found"),
        (["--", "./missing_loop.py"], "./missing_loop.py: command not found"),
        (["--jsn", "--", "python"], "unrecognized arguments: --jsn"),
        (["--timeout", "soon", "--", "python"], "invalid float value: 'soon'"),
        (["--timeout", "nan", "--", "python"], "'nan' is not a timeout"),
        (["--timeout", "inf", "--", "python"], "'inf' is not a timeout"),
        (["--timeout", "1e309", "--", "python"], "'1e309' is not a timeout"),
        (["--timeout", "0", "--", "python"], "'0' is not a timeout"),
        (["--sandbox", "maybe", "--", "python"], "invalid choice: 'maybe'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert grade.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and says in err and err.count("\n") == 1


def test_the_command_line_says_what_is_wrong_without_a_traceback(capsys):
    """`python -m workbook grade` as cli.main() runs it (the tampering test below starts the real one)."""
    assert cli.main(["grade", "--", "no-such-program-here"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and "command not found" in err


def test_a_program_without_its_execute_bit_is_one_line_and_exit_2(tmp_path, capsys):
    loop = tmp_path / "loop.py"
    loop.write_text("print('hi')\n")
    loop.chmod(0o644)
    assert grade.main(["--", str(loop)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "loop.py: not executable — `chmod +x" in err


def test_a_request_nested_600_deep_fails_the_rung_in_one_line(capsys):
    nested = (
        "import json, os, urllib.request as u\n"
        "deep = {'type': 'text', 'text': 'x'}\n"
        "for _ in range(600): deep = {'type': 'text', 'text': 'x', 'nested': [deep]}\n"
        "body = {'model': 'm', 'max_tokens': 5, 'messages': [{'role': 'user', 'content': [deep]}]}\n"
        "r = u.Request(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', data=json.dumps(body).encode(), "
        "headers={'x-api-key': os.environ['ANTHROPIC_API_KEY'], 'anthropic-version': '2023-06-01'})\n"
        "try: u.urlopen(r)\nexcept Exception as e: print(e)\n"
    )
    code, rows = graded(capsys, "--only", "loop", "--", PYTHON, "-c", nested)
    assert code == 1 and "\n" not in rows["loop"]["reason"] and "Traceback" not in rows["loop"]["reason"]


def test_the_table_names_each_rung_its_check_and_the_reason(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # one line per row, so the words can be found whole
    code = grade.main(["--only", "loop", *SANDBOX_FLAGS, "--", sys.executable, "-c", "print('hello')"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and "0 of 1 rungs passed" in out
    assert "sent no request" in out and "every tool_use answered" in out


# -- the rungs themselves --------------------------------------------------------------------------


def test_every_grade_fixture_is_a_rung_and_every_rung_says_in_one_line_what_it_checks():
    on_disk = sorted(p.stem for p in (ROOT / "fixtures").glob("grade_*.json"))
    assert sorted(r.fixture for r in ladder.RUNGS) == on_disk
    assert len({r.name for r in ladder.RUNGS}) == len(ladder.RUNGS)
    for rung in ladder.RUNGS:  # a fixture keeps its first name; its `script` says the step it is for now
        script = json.loads((ROOT / "fixtures" / f"{rung.fixture}.json").read_text())["script"]
        assert rung.fixture.startswith("grade_") and script.startswith(f"{rung.step}_")
        assert "\n" not in rung.checks and len(rung.checks) <= 100


@pytest.mark.parametrize("rung", ladder.RUNGS, ids=lambda r: r.name)
def test_each_recording_keeps_the_rule_it_grades_replies_go_back_verbatim(rung):
    fixture = fixtures.load_fixture(ROOT / "fixtures" / f"{rung.fixture}.json")
    assert fixture["provenance"] == "scripted" and "estimates" in fixture["provenance_note"]
    replies = [
        reasons.without_nulls(
            compare.normalize_messages(
                [{"role": "assistant", "content": recorded_message(e["response"])["content"]}]
            )
        )
        for e in fixture["exchanges"]
        if e["response"].get("status") == 200
    ]
    for exchange in fixture["exchanges"]:
        for message in exchange["request"]["messages"]:
            if message["role"] == "assistant":
                assert reasons.without_nulls(compare.normalize_messages([message])) in replies


@pytest.mark.parametrize("rung", ladder.RUNGS, ids=lambda r: r.name)
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
    room = students.Classroom({"grade_s01_loop": fixture}, out=rung_server.LogLines())
    seen = []
    room.observer = lambda *event: seen.append(event)
    first = fixture["exchanges"][0]["request"]
    room.answer("ada", first, None, {"x-stainless-retry-count": "0"})
    room.answer("ada", {**first, "messages": first["messages"] * 2}, None)
    assert [(who, name, turn, mistake is None) for who, name, turn, _, _, mistake, _ in seen] == [
        ("ada", "grade_s01_loop", 1, True),
        ("ada", "grade_s01_loop", 2, False),
    ]
    # two user messages in a row are one turn to the API: allowed, but not the turn the recording expects
    assert seen[0][3] is first and "turn 2: your request differs from the recording" in str(seen[1][5])
    assert seen[0][6] == {"x-stainless-retry-count": "0"} and seen[1][6] == {}


def test_the_thread_fallback_is_not_counted_as_a_mistake_on_the_class_table():
    fixture = fixtures.load_fixture(ROOT / "fixtures" / "grade_s01_loop.json")
    room = students.Classroom({"grade_s01_loop": fixture}, out=rung_server.LogLines())
    first = fixture["exchanges"][0]["request"]
    edits = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    as_the_sdk_sends_it = {"anthropic-beta": contract.THREADS_BETA}  # a thread without it is a plain 400
    thread = {**first, "thread": {"type": "create"}, "context_management": edits}
    assert room.answer("ada", first, None).status == 200  # a name that was never answered keeps no row
    refused = room.answer("ada", thread, None, as_the_sdk_sends_it)
    assert refused.body["error"]["details"]["error_code"] == "thread_unsupported_request"
    prefilled = first["messages"] + [{"role": "assistant", "content": "I will"}]  # a turn too many
    room.answer("ada", {**first, "messages": prefilled}, None)  # a real mistake counts
    [row] = room.status()["students"]
    assert row["requests"] == 3 and row["mistakes"] == 1


# -- what the report says of a program's output ----------------------------------------------------


def test_an_interactive_program_is_told_that_stdin_is_closed_and_where_the_task_is(capsys):
    code, rows = graded(capsys, "--only", "loop", "--", PYTHON, "-c", "input('task? ')")
    assert code == 1 and rows["loop"]["reason"].endswith(
        "(exit 1: EOFError: EOF when reading a line); your program read stdin, but stdin is closed when "
        "graded: read the task from the last argument or from AGENT_TASK"
    )


def test_a_students_markup_and_tables_never_break_or_leak_into_the_report(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    prints = "print('done [/oops] [bold]'); print('│ total │ 782 │ 8000 │'); print('└─────┘')"
    code, rows = graded(capsys, "--only", "loop", "--", PYTHON, "-c", prints)
    reason = rows["loop"]["reason"]
    assert "(exit 0: done [/oops] [bold])" in reason and "│" not in reason and "─" not in reason
    assert (
        grade.main(["--only", "loop", *SANDBOX_FLAGS, "--", PYTHON, "-c", prints]) == 1
    )  # the table, not a MarkupError
    assert "done [/oops] [bold]" in capsys.readouterr().out


# -- a stranger's program --------------------------------------------------------------------------

SECRETS = ("ANTHROPIC_CUSTOM_HEADERS", "ANTHROPIC_ADMIN_KEY", "CLAUDE_API_KEY", "AWS_SECRET_ACCESS_KEY")


@pytest.mark.parametrize("sandbox_flag", [pytest.param("auto", marks=needs_bwrap), "off"])
def test_the_program_sees_only_the_allowlisted_environment(sandbox_flag, capsys, monkeypatch):
    for name in (*SECRETS, "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "sk-ant-teacher-secret")
    monkeypatch.setenv("IS_SANDBOX", "1")  # the teacher's own is never passed on: only bwrap says it
    dump = "import os; print(','.join(sorted(os.environ)))"
    code, rows = graded(capsys, "--only", "loop", "--sandbox", sandbox_flag, "--", PYTHON, "-c", dump)
    names = set(rows["loop"]["reason"].split("(exit 0: ")[1].split(")")[0].split(","))
    given = {
        "AGENT_TASK",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "HOME",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        "PWD",
    }
    if rows["loop"]["sandbox"] == "bwrap":  # a sandbox Claude Code may run as root in
        given.add("IS_SANDBOX")
    assert given <= names
    passed_on = {n for n in names - given if n in sandbox.PASSED_ON or n.startswith("LC_")}
    assert names == given | passed_on, "nothing else from the teacher's shell"


def sleepers(marker: str) -> list[int]:
    """The processes still running `sleep <marker>`."""
    return processes.running(f"sleep {marker}")


LEAVES_SLEEPERS = (
    "import os, subprocess, sys, time\n"
    "mark = sys.argv[1]\n"
    "subprocess.Popen(['sleep', mark])\n"  # same process group
    "subprocess.Popen(['setsid', 'sleep', mark])\n"  # a session of its own
    "if os.fork() == 0:\n"  # a daemon: fork, setsid, fork again, the middle one exits
    "    os.setsid()\n"
    "    if os.fork() == 0: os.execvp('sleep', ['sleep', mark])\n"
    "    os._exit(0)\n"
    "print('three sleepers left behind', flush=True)\n"
    "if sys.argv[2] == 'hang': time.sleep(120)\n"
)


@pytest.mark.parametrize("sandbox_flag", [pytest.param("auto", marks=needs_bwrap), "off"])
@pytest.mark.parametrize("ending", ["exit", "hang"])
def test_no_child_outlives_its_rung(sandbox_flag, ending, tmp_path, capsys):
    marker = str(900000 + os.getpid() % 1000 * 100 + len(sandbox_flag) * 10 + len(ending))
    script = tmp_path / "leaves_sleepers.py"
    script.write_text(LEAVES_SLEEPERS)
    argv = [
        "--only",
        "loop",
        "--sandbox",
        sandbox_flag,
        "--timeout",
        "3",
        "--",
        PYTHON,
        str(script),
        marker,
        ending,
    ]
    code, rows = graded(capsys, *argv)
    assert code == 1 and sleepers(marker) == []
    if ending == "hang":
        assert rows["loop"]["reason"].startswith("your program did not finish in time")


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_without_bubblewrap_auto_and_required_refuse_in_one_line(tmp_path, capsys, monkeypatch, mode):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without bwrap
    assert grade.main(["--only", "loop", "--sandbox", mode, "--", PYTHON, "-c", "print('hi')"]) == 2
    out, refused = capsys.readouterr()
    assert out == "" and refused.count("\n") == 1
    assert refused.startswith(
        f"error: --sandbox {mode}, but bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    )


TAMPERS = (
    "import json, os, signal, sys\n"
    "trusted = sys.argv[1]\n"
    "try:\n"
    "    with open(trusted, 'a') as f: f.write('fixtures/evil.json 0000\\n')\n"
    "except OSError as e: print('cannot write', trusted, e.strerror)\n"
    "fake = json.dumps({'rungs': [{'name': 'loop', 'passed': True}]}) + '\\n'\n"
    "try:\n"
    "    with open(f'/proc/{os.getppid()}/fd/1', 'w') as out: out.write(fake)\n"
    "except OSError as e: print('cannot write to the parent', e.strerror)\n"
    "os.kill(os.getppid(), signal.SIGKILL)\n"
    "print('tampered')\n"
)


@needs_bwrap
def test_a_tampering_program_in_the_sandbox_changes_nothing_and_the_grade_stays_honest():
    trusted = ROOT / "fixtures" / "TRUSTED"
    before = trusted.read_bytes()
    done = subprocess.run(
        [PYTHON, "-m", "workbook", "grade", "--json", "--sandbox", "required", "--only", "loop", "--"]
        + [PYTHON, "-c", TAMPERS, str(trusted)],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert trusted.read_bytes() == before
    assert done.returncode == 1 and done.stdout.count("\n") == 1, done.stdout  # only the grader's report
    [row] = json.loads(done.stdout)["rungs"]
    assert row["passed"] is False and row["reason"].startswith("your program sent no request")
