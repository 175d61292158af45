"""What a student sees fits an 80-column terminal: every step's default replay and its --help.

Each step's main() runs in this process on an 80-column console, with COLUMNS=80 as a terminal of that
width sets it (argparse's help reads it), so the check costs no interpreter start per step; the
README's own command, `python s01_agent_loop.py`, runs as a reader starts it in test_readme.py. Only
the model's own text may be wider, and rich wraps even that.
"""

import ast
import json
import os
import tempfile
from types import SimpleNamespace

from workbook import paths, scratch

import pytest
from conftest import ROOT, STEPS, main_in_process
from rich.cells import cell_len

COLUMNS = 80


def model_texts(step: str) -> list[str]:
    """Every text the step's default fixture has the model write, whitespace made single spaces."""
    module = paths.step_file(step).read_text()
    default = module.split('DEFAULT_FIXTURE = "', 1)[1].split('"', 1)[0]
    raw = (ROOT / default).read_text()
    texts = [block["text"] for block in _blocks(json.loads(raw))]
    return [" ".join(text.split()) for text in texts]


def _blocks(fixture: dict):
    for exchange in fixture["exchanges"]:
        response = exchange["response"]
        body = response.get("body") if isinstance(response.get("body"), dict) else {}
        yield from (b for b in body.get("content", []) if b.get("type") == "text")
        for event in response.get("stream", []):
            delta = event.get("data", {}).get("delta", {}) if isinstance(event.get("data"), dict) else {}
            if delta.get("type") == "text_delta":
                yield {"text": delta["text"]}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict:
    """(step, "run" or "help") -> what it printed at COLUMNS=80. TMPDIR is short, as /tmp is, so that
    the paths a run prints are the length a reader's would be."""
    short = tempfile.mkdtemp(dir="/tmp" if os.path.isdir("/tmp") else None)
    runs = tmp_path_factory.mktemp("runs")
    done = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", str(COLUMNS))
        patch.setenv("TMPDIR", short)
        patch.setattr(tempfile, "tempdir", short)
        for step in STEPS:
            for kind, argv in (("run", []), ("help", ["--help"])):
                code, done[step, kind] = main_in_process(patch, runs, step, *argv, width=COLUMNS)
                assert code == 0, done[step, kind]
    return done


def too_wide(text: str, model_said: list[str] = ()) -> list[str]:
    lines = [line for line in text.splitlines() if cell_len(line) > COLUMNS]
    said = " ".join(model_said)
    return [line for line in lines if " ".join(line.removeprefix("model: ").split()) not in said]


@pytest.mark.parametrize("step", STEPS)
def test_the_default_replay_fits_80_columns(outputs, step):
    wide = too_wide(outputs[step, "run"], model_texts(step))
    assert not wide, f"{step}: {len(wide)} lines over {COLUMNS} columns, e.g. {wide[0]!r}"


@pytest.mark.parametrize("step", STEPS)
def test_help_fits_80_columns(outputs, step):
    wide = too_wide(outputs[step, "help"])
    assert not wide, f"{step} --help: {len(wide)} lines over {COLUMNS} columns, e.g. {wide[0]!r}"


def diagram(step: str) -> str:
    """The loop diagram at the top of a step's docstring: its paragraphs drawn indented, as drawn."""
    doc = ast.get_docstring(ast.parse(paths.step_file(step).read_text()), clean=False)
    drawn = [p for p in doc.split("\n\n") if p.startswith("    ")]
    assert drawn, f"{step}: no indented diagram in the docstring"
    return "\n\n".join(drawn)


@pytest.mark.parametrize("step", STEPS)
def test_help_shows_the_loop_diagram_as_drawn(outputs, step):
    assert diagram(step) in outputs[step, "help"], f"{step} --help does not show its loop diagram"


@pytest.mark.parametrize("step", STEPS)
def test_the_docstring_fits_78_columns_so_help_can_show_it_as_written(step):
    doc = ast.get_docstring(ast.parse(paths.step_file(step).read_text()), clean=False)
    wide = [line for line in doc.splitlines() if cell_len(line) > COLUMNS - 2]  # argparse keeps 2 free
    assert not wide, f"{step}: {len(wide)} docstring lines over {COLUMNS - 2} columns, e.g. {wide[0]!r}"


def without_the_models_words(lines: list[str]) -> list[str]:
    """The screen without what the model wrote: from each `model:` line to its turn's stop_reason line."""
    kept, in_words = [], False
    for line in lines:
        in_words = (in_words or line.startswith("model: ")) and not line.startswith("stop_reason=")
        if not in_words:
            kept.append(line)
    return kept


@pytest.mark.parametrize("step", STEPS)
def test_each_tool_call_is_shown_once_on_one_line(outputs, step):
    text = outputs[step, "run"]
    shown = "\n".join(without_the_models_words(text.splitlines()))
    assert "asks for" not in shown and "{'" not in text, f"{step}: a call shown as JSON or a Python repr"
    calls = [
        line
        for line in text.splitlines()
        if line.startswith(("$ ", "read_file ", "write_file ", "edit_file "))
    ]
    assert calls, f"{step}: no tool call shown"


def test_an_edit_shows_its_old_and_new_text_as_a_small_diff(outputs):
    run = outputs["s02_tools", "run"]  # turn 3: the fix, an edit of utils.py
    edit = run[run.index("edit_file utils.py") :]
    assert edit.startswith("edit_file utils.py\n  +    if not numbers:\n  +        return 0.0\n")
    assert "(115 chars)" not in run  # the change is shown, not counted


def test_a_long_write_shows_its_first_lines_and_counts_the_rest():
    from workbook import display

    lines = display.diff_lines("", "\n".join(f"line {n}" for n in range(30)), width=COLUMNS)
    assert len(lines) == display.DIFF_LINES and lines[0] == "  +line 0"
    assert lines[-1] == "   … (23 more changed lines)"


def test_a_short_file_read_is_shown_whole(outputs):
    run = outputs["s02_tools", "run"]  # turn 2: utils.py, whose last line is the bug
    read = run[run.index("read_file utils.py") : run.index("read_file test_utils.py")]
    assert "return sum(numbers) / len(numbers)" in read and "more lines" not in read


def test_an_abridged_fixture_says_so_in_its_banner(outputs):
    banner = outputs["s06_recovery", "run"].split("\ntask:")[0]
    assert "(scripted)" in banner and "abridged" in banner


def test_the_resume_hint_is_a_live_command_when_no_recording_goes_on_from_the_run(outputs):
    text = outputs["s09_keep_the_work", "run"]
    hint = text.split("continue it live with a new instruction (set ANTHROPIC_API_KEY first):", 1)[1]
    command = hint.replace("\\\n", " ").split()
    assert command[:4] == ["python", "-m", "workbook.later.s09_keep_the_work", "--resume"]
    assert command[4].endswith("conversation.json") and command[5] == '"new' and "or offline" not in text
    # a replay's copy is tidied away with its run folder: the hint says when, and how to keep one
    kept = f"  (this copy goes after {scratch.KEPT_RUNS} more runs; --save FILE keeps one where you choose)"
    assert hint.splitlines()[4] == kept


# -- what the student is shown is what was sent: the model's input, and every word of an error -------


def test_a_tool_line_shows_the_input_the_model_sent_not_what_it_meant(outputs):
    run = outputs["s02_tools", "run"]  # turn 1: the model asks for read_file with {"file_path": ...}
    assert 'read_file {"file_path": "utils.py"}' in run
    assert "list_files {}" in run  # no argument at all: shown as such, not as a blank


def test_an_error_sent_to_the_model_is_shown_whole_wrapped_to_the_width(outputs):
    run = outputs["s02_tools", "run"]
    said = " ".join(run.split())  # wrapped over lines: the words, in order
    assert 'input must contain [\'path\'] properties. It takes {"path": {"type": "string"}}' in said
    assert "and no person gave one. Do without it, or leave it to the user." in said
    assert "…" not in run[run.index("error: invalid input") : run.index("turn 2")]


@pytest.mark.parametrize("step", [s for s in STEPS if s >= "s05"])
def test_a_run_says_once_why_it_stopped(outputs, step):
    run = outputs[step, "run"]
    assert run.count("run ended:") == 1 and "stopped:" not in run


def test_the_gates_question_shows_the_whole_call_and_its_y_n(monkeypatch):
    import io

    from workbook import asking, display

    from rich.console import Console

    shown = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=shown, width=COLUMNS, force_terminal=False))
    monkeypatch.setattr("builtins.input", lambda prompt="": "n")
    command = "ls -la " + "x" * 400 + "; rm -rf ~/important"
    assert (
        asking.ask_person(
            SimpleNamespace(name="bash", input={"command": command}), "rm -r/-f deletes with no undo"
        )
        is False
    )
    said = "".join(shown.getvalue().split())
    assert "rm-rf~/important" in said and "[y/N]" in said


# -- each step's default replay shows its idea on screen: the line that shows it ------------------------

IDEA_ON_SCREEN = {  # step -> lines, in order, that show its idea happening
    "s01_agent_loop": ["$ echo 'Hello from Agent Loop!' > hello_agent.txt", "stop_reason=end_turn"],
    "s02_tools": ["  error: invalid input for read_file", "model: read_file takes `path`, not `file_path`."],
    "s03_errors": [
        "overloaded (529) — retrying in 0.5 s, attempt 2 of 5",
        "  error: FileNotFoundError: [Errno 2] No such file or directory: 'login.py'",
        "model: No login.py at the top: the tests import it from src/.",
        "rate limited (429) — retrying in 1.0 s (as the server asked), attempt 2 of 5",
    ],
    "s04_parallel": [
        "   group 1: 2 reads ran together",
        "   group 2: edit_file inventory/__init__.py, alone",
    ],
    "s05_budget": [
        "  error: not run: this is the same read_file call with the same input 3 times in",
        "model: Right: reading api.md again gives nothing new.",
        "run ended: max steps: 5 model calls made (--max-steps 5)",
        "conversation saved:",
    ],
    "s06_recovery": [
        "→ escalate  cut at 8000 tokens: reply dropped, sent again with 64000",
        "  never run: its input was cut off, and the reply is dropped and asked for again",
        "stop_reason=tool_use",  # the same request, sent again under turn 1's rule: it fits now
        "→ next_turn  tool_use",
        "──────────────── turn 2 ────",
        "→ done",
    ],
    "s07_really_done": [
        "stop hook: $ sh check.sh",
        "  [exit code 1]",
        "→ hook_retry  stop hook failed (1 of 2 retries)",
        "→ done  end_turn and the stop hook passed",
    ],
    "s08_full_context": [
        "400 prompt is too long: 214560 tokens > 200000 maximum",
        "→ collapse  prompt_too_long: 2 old tool results can be collapsed",
        "→ compact  prompt_too_long: still too long; summarize the older history",
        "turn 5, its summary",
        "turn 5, sent again (compact)",
        "→ done",
    ],
    "s09_keep_the_work": ["its last turn:", "  error: interrupted by the user", "→ done"],
    "s10_trace": [
        "the trace it wrote, one JSON object a line, each in a few words:",
        "  model_call  request 1: 1 new messages sent, reply tool_use",
        "  model_call  request 5: error 400",
        "  context     collapse: 12775 -> 5957 characters",
        "  model_call  request 7: for a summary, 7 messages, reply end_turn",
        "  model_call  request 8: 3 new messages sent, reply end_turn",
        "  stop        the model ended its turn (stop_reason end_turn)",
        "--replay it to run it again, offline:",
    ],
    "s11_handoff": [
        "fresh session: the 10 messages saved in",
        "Files it changed: app/config.toml (3 writes)",
        "  - write_file app/config.toml: error: not run: this write redoes one you",
        "model: Checking the file as it is now.",
        "→ done  end_turn",
    ],
}


@pytest.mark.parametrize("step", STEPS)
def test_the_default_replay_shows_the_steps_idea(outputs, step):
    run, at = outputs[step, "run"], 0
    for line in IDEA_ON_SCREEN[step]:
        found = run.find(line, at)
        assert found >= 0, f"{step}: {line!r} not on screen after position {at}"
        at = found + len(line)
