"""workbook/display.py's printable(): whatever a stranger's fixture or a model says reaches the terminal
with no control sequence (OSC incl. OSC 52, CSI, C1, bidi overrides and isolates) and no secret of the
process's; the s04-s06 timeline's tool names go through it too (issue 39: raw OSC 52 reached the terminal
through a tool name)."""

import io
from types import SimpleNamespace

from workbook import display
from workbook.timeline import Timed

import pytest
from conftest import ROOT
from rich.console import Console

HOSTILE = (
    "a\x1b]52;c;ZXZpbA==\x07b\x1b]0;title\x1b\\c\x1b[2Jd\x1b[31me\x9b31mf\x9d8;;x\x9cg"
    "\u202eh\u2066i\u2069j\u200fk\x00l\rm\x08n"
)


def test_printable_leaves_nothing_a_terminal_would_obey():
    shown = display.printable(HOSTILE)
    assert not [c for c in shown if c in "\x1b\x07\x9b\x9c\x9d\x00\r\x08" or c in "\u202e\u2066\u2069\u200f"]
    assert shown.startswith("ab") and "title" not in shown and shown.endswith("mn")


def test_printable_keeps_text_tabs_newlines_and_other_scripts():
    text = "第一行\tcolumn\nsecond line: naïve café, עברית"
    assert display.printable(text) == text


def test_printable_removes_a_secret_of_the_process(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_teacherGitHubToken0123456789")
    assert "ghp_teacher" not in display.printable("token: ghp_teacherGitHubToken0123456789")


def test_the_timeline_shows_a_hostile_tool_name_as_plain_text(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(
        display, "console", Console(file=out, width=80, force_terminal=False, highlight=False)
    )
    name = "\x1b]52;c;ZXZpbA==\x07read\u202efile"
    calls = [
        Timed(0, SimpleNamespace(name=name, input={"path": "a.py"}), 1, 0.0, 0.5),
        Timed(1, SimpleNamespace(name="grep", input={"pattern": "\x1b[2Jx"}), 1, 0.0, 0.4),
    ]
    display.show_timeline(calls)
    shown = out.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "readfile a.py" in shown and "grep x" in shown


@pytest.mark.parametrize("text", ["[bold]not markup[/]", "[y/N]", "[/oops]"])
def test_a_model_line_with_markup_is_shown_as_written(text, monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(
        display, "console", Console(file=out, width=80, force_terminal=False, highlight=False)
    )
    display.show_model_line("model: " + text)
    display.error("stopped", text)
    assert out.getvalue().count(text) == 2


def test_display_only_displays():
    """No function in display.py spends the budget, writes the trace or changes what it is given (an
    append to the turns, the recovery log or the conversation): that is lesson logic, and a reader must
    find it in the step that teaches it (s06's count_turn and log_transition once hid here)."""
    import ast

    tree = ast.parse((ROOT / "workbook" / "display.py").read_text())
    found = []
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        given = {arg.arg for arg in function.args.args + function.args.kwonlyargs}
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            what = call.func
            if not isinstance(what, ast.Attribute):
                continue
            owner = what.value
            spends = what.attr == "spend"
            traces = what.attr == "write" and isinstance(owner, ast.Attribute) and owner.attr == "trace"
            mutates = what.attr in ("append", "extend", "insert") and (
                isinstance(owner, ast.Attribute) or (isinstance(owner, ast.Name) and owner.id in given)
            )
            if spends or traces or mutates:
                found.append(f"{function.name}: {ast.unparse(call)}")
    assert found == []


# -- red team five: a saved message or a note longer than a screen is cut, with a mark ---------------


def test_a_hand_over_message_of_megabytes_prints_one_screen_and_counts_the_rest(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=out, width=80, color_system=None))
    opening = "a line of the saved run\n" * 200_000  # 4.8 MB: it printed 50,062 lines
    display.show_handoff("runs/x/conversation.json", 12, opening)
    shown = out.getvalue().splitlines()
    assert len(shown) < display.SCREEN_LINES + 10
    assert shown[-1].startswith("… ") and shown[-1].endswith("more characters not shown")
    assert "Traceback" not in out.getvalue()


def screen_of(monkeypatch, show) -> str:
    out = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=out, width=80, color_system=None))
    show()
    return out.getvalue()


def test_an_edit_the_harness_refused_shows_its_change_below_the_refusal_as_not_made(monkeypatch):
    edit = SimpleNamespace(
        name="edit_file", input={"path": "utils.py", "old_text": "return a / b", "new_text": "return a // b"}
    )
    refusal = "error: not run: this edit redoes one you already undid"
    lines = screen_of(monkeypatch, lambda: display.show_tool(edit, refusal, is_error=True)).splitlines()
    assert lines[1].startswith("  error: not run")
    assert lines[2:] == ["  the change it asked for, not made:", "  -return a / b", "  +return a // b"]


def test_an_edit_that_was_made_shows_its_change_above_its_result(monkeypatch):
    edit = SimpleNamespace(name="edit_file", input={"path": "u.py", "old_text": "a", "new_text": "b"})
    lines = screen_of(monkeypatch, lambda: display.show_tool(edit, "edited u.py: replaced 1 occurrence"))
    assert lines.splitlines()[1:] == ["  -a", "  +b", "  edited u.py: replaced 1 occurrence"]


def test_words_the_harness_sends_the_model_are_shown_whole_and_wrapped(monkeypatch):
    words = "Continue exactly where it stopped. " * 6
    screen = screen_of(monkeypatch, lambda: display.show_prompt("asked to go on", words))
    assert screen.startswith("asked to go on:\n")
    assert max(len(line) for line in screen.splitlines()) <= 80
    assert " ".join(screen.split()[4:]) == words.strip()


def test_a_refused_call_is_marked_so_its_line_never_reads_as_if_it_ran(monkeypatch):
    rm = SimpleNamespace(name="bash", input={"command": "rm -rf __pycache__"})
    refusal = "denied: this command needs a person's yes"
    lines = screen_of(monkeypatch, lambda: display.show_tool(rm, refusal, is_error=True)).splitlines()
    assert lines == ["✗ $ rm -rf __pycache__", f"  {refusal}"]
    ran = screen_of(monkeypatch, lambda: display.show_tool(rm, "(no output)\n[exit code 0]")).splitlines()
    assert ran[0] == "$ rm -rf __pycache__"


def test_a_call_that_just_gave_the_same_result_is_not_shown_twice(monkeypatch):
    read = SimpleNamespace(name="read_file", input={"path": "docs/api.md"})

    def twice_then_another_file():
        display.show_tool(read, "# The HTTP API\nline 2")
        display.show_tool(read, "# The HTTP API\nline 2")
        display.show_tool(read, "# The HTTP API\nline 2, changed")

    lines = screen_of(monkeypatch, twice_then_another_file).splitlines()
    assert lines[3:5] == [
        "read_file docs/api.md",
        "  same output as above, sent to the model again (not printed twice)",
    ]
    assert lines[5:] == ["read_file docs/api.md", "  # The HTTP API", "  line 2, changed"]


def test_a_new_run_forgets_the_last_runs_calls(monkeypatch):
    read = SimpleNamespace(name="read_file", input={"path": "a.md"})

    def two_runs():
        display.show_tool(read, "text")
        with display.waiting(1):
            display.show_tool(read, "text")

    assert "not printed twice" not in screen_of(monkeypatch, two_runs)


def test_a_call_sent_again_within_its_turn_opens_no_rule_of_its_own(monkeypatch):
    def a_turn_and_its_retry():
        with display.waiting(3):
            display.say("first call")
        with display.waiting(None):  # s06's escalate: the same request again, under turn 3's rule
            display.say("sent again")

    screen = screen_of(monkeypatch, a_turn_and_its_retry)
    assert screen.count("turn 3") == 1 and "turn None" not in screen
    assert (
        screen.index("turn 3") < screen.index("the same request, sent again:") < screen.index("sent again\n")
    )
