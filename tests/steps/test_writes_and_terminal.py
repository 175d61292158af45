"""Writes go only to regular files in folders that exist; leftovers are swept; the terminal shows text,
never obeys it (issue 23)."""

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from workbook import display, errors, files, scratch

import pytest
from conftest import ROOT
from rich.console import Console

HOSTILE_TEXT = "before\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned title\x07\x1b[2J\x1b[31mafter"


@pytest.mark.parametrize("flag", ["--save", "--trace"])
@pytest.mark.parametrize("where", ["/dev/full", "fifo", "missing/dir/c.json", "folder", "/proc/version"])
def test_save_and_trace_refuse_what_is_not_a_file_in_one_line(run_main, tmp_path, flag, where):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    target = where if where.startswith("/") else str(tmp_path / where)
    before = sorted(tmp_path.rglob("*"))
    code, out = run_main("s10_trace", flag, target)
    assert code == 1 and "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert target in out
    assert sorted(tmp_path.rglob("*")) == before and not Path("/nonexistent").exists()
    assert Path("/dev/full").is_char_device()


def test_record_refuses_a_device_in_one_line(run_main):
    code, out = run_main("s01_agent_loop", "--record", "/dev/full", "--force", "hi", ANTHROPIC_API_KEY="k")
    assert code == 1 and len(out.strip().splitlines()) == 1 and "not a regular file" in out
    assert Path("/dev/full").is_char_device()


def test_write_atomic_never_replaces_a_device_or_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for target in ("/dev/full", tmp_path / "fifo"):
        with pytest.raises(errors.WorkbookError, match="not a regular file"):
            files.write_atomic(target, "x")
    assert Path("/dev/full").is_char_device() and (tmp_path / "fifo").is_fifo()


KILLED_SAVE = """
import os, sys, fcntl, tempfile
sys.path.insert(0, {root!r})
fd, temp = tempfile.mkstemp(prefix=".c.json.", suffix=".tmp", dir={folder!r})
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"half a sav")
print(temp, flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_killed_saves_temp_file_is_swept_by_the_next_save(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", KILLED_SAVE.format(root=str(ROOT), folder=str(tmp_path))],
        capture_output=True,
        text=True,
    )
    stray = Path(done.stdout.strip())
    assert stray.exists()
    live = tmp_path / ".c.json.live.tmp"
    with open(live, "wb") as held:  # a save in progress holds its temp file locked: it stays
        import fcntl

        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        files.write_atomic(tmp_path / "c.json", "{}")
        assert live.exists()
    assert not stray.exists() and (tmp_path / "c.json").read_text() == "{}"


def test_a_killed_saves_temp_file_is_swept_when_the_next_run_starts(run_main, tmp_path):
    saved = tmp_path / "c.json"
    stray = tmp_path / ".c.json.k1ll3d.tmp"  # what `kill -9` during a save leaves: nothing holds it
    stray.write_bytes(b"half a conversation")
    # A run that stops before it saves anything (its fixture is missing): the sweep was at the start.
    code, out = run_main(
        "s09_keep_the_work", "--save", str(saved), "--replay", str(tmp_path / "missing.json")
    )
    assert code == 1 and "no such fixture" in out
    assert not stray.exists() and not saved.exists()


def test_fallback_roots_of_ended_processes_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    uid = os.getuid()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"workbook-{uid}-{dead.stdout.strip()}-abcd"
    mine = tmp_path / f"workbook-{uid}-{os.getpid()}-efgh"
    stale.mkdir(), mine.mkdir()
    scratch.sweep_fallbacks(uid)
    assert not stale.exists() and mine.exists()


def test_a_long_lived_process_keeps_only_its_newest_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = []
    for _ in range(scratch.KEPT_RUNS + 5):
        folder = scratch.new_run_folder()
        (folder / "audit.jsonl").write_text("{}\n")
        os.utime(folder, (len(made), len(made)))  # in the order they were made
        made.append(folder)
    kept = [folder for folder in made if folder.exists()]
    assert len(kept) <= scratch.KEPT_RUNS + 1 and made[-1] in kept and made[0] not in kept


def test_the_terminal_gets_no_control_sequence_from_a_fixture_or_a_model(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=out, force_terminal=True, width=120))
    display.say(HOSTILE_TEXT)
    display.error("error", HOSTILE_TEXT)

    class Block:
        name, input = "bash", {"command": HOSTILE_TEXT}

    display.show_tool(Block(), HOSTILE_TEXT)
    shown = out.getvalue()
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x07" not in shown
    assert "beforepwned" not in shown and "before" in shown and "after" in shown


def test_the_terminal_shows_the_models_words_as_it_wrote_them():
    said = "done :fire: [fixed] 1,000 tests :thumbs_up:"

    class Text:
        type, text = "text", said

    class Usage:
        input_tokens, output_tokens = 10, 2

    class Reply:
        content, stop_reason, usage = [Text()], "end_turn", Usage()

    with display.console.capture() as captured:  # the console every step prints on, as it is set up
        display.show_turn(Reply())
        display.say(said)
        display.error("error", said)
    lines = [line for line in captured.get().splitlines() if ":fire:" in line]
    assert len(lines) == 3 and all(said in line for line in lines), captured.get()


def summary_of(monkeypatch, show, runs) -> str:
    """What a summary table prints for `runs`, on an 80-column console."""
    out = io.StringIO()
    monkeypatch.setattr(display, "console", Console(file=out, width=80))
    show(runs)
    return out.getvalue()


class Usage:
    def __init__(self, tokens_in):
        self.input_tokens, self.output_tokens = tokens_in, 1


class Turn:
    def __init__(self, n):
        self.stop_reason, self.usage = "tool_use", Usage(n)


class Spent:
    def __init__(self, turns):
        self.rows = [("tool_use", n, 1, 0.001) for n in range(1, turns + 1)]
        self.cost, self.reason = 0.001 * turns, "the model ended its turn"


@pytest.mark.parametrize("show", ["summary", "budget"])
def test_a_long_runs_summary_shows_its_ends_and_counts_the_rest(monkeypatch, show):
    def table(turns):
        if show == "summary":
            return summary_of(monkeypatch, display.show_summary, [Turn(n) for n in range(1, turns + 1)])
        return summary_of(monkeypatch, display.show_budget, Spent(turns))

    def turn_column(text):  # the first column of each body row (the header row is drawn with ┃)
        return [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]

    longest_whole = 2 * display.SUMMARY_ENDS + 1
    whole = table(longest_whole)
    assert turn_column(whole) == [str(n) for n in range(1, longest_whole + 1)] + ["total"]
    long = table(1000)
    expected = [str(n) for n in range(1, 11)] + ["…"] + [str(n) for n in range(991, 1001)] + ["total"]
    assert turn_column(long) == expected
    assert ("980 more calls" if show == "budget" else "980 more turns") in long
    assert ("500,500" if show == "budget" else "500500") in long  # the total is every turn's
