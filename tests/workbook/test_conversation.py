"""The conversation saved for --resume: loaded only when it is one, saved whole, with no secret in it."""

import json
import subprocess

from workbook import conversation, tracing

import pytest
from conftest import ROOT, offline_env
from saver import small_program, wait_for_saves


def test_a_folder_or_a_deep_file_as_resume_is_one_line(run_main, tmp_path):
    (tmp_path / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    for bad in (tmp_path, tmp_path / "deep.json"):
        code, out = run_main("s09_keep_the_work", "--resume", str(bad))
        assert code == 1 and "Traceback" not in out and str(bad) in out.splitlines()[-1], out


SAVER = """
import sys
from workbook import conversation
messages = [{"role": "user", "content": "x" * 300_000} for _ in range(10)]
while True:
    conversation.save_conversation(messages, __import__("pathlib").Path(sys.argv[1]))
"""


@pytest.mark.parametrize("saves", [1, 2, 3])
def test_kill_9_during_a_conversation_save_leaves_it_whole(tmp_path, saves):
    saved = tmp_path / "conversation.json"
    saved.write_text(json.dumps([{"role": "user", "content": "the old one"}]))
    proc = subprocess.Popen(small_program(SAVER, str(saved)), cwd=ROOT, env=offline_env())
    wait_for_saves(proc, saved, saves)  # then killed while it writes the next one
    assert proc.poll() is None
    proc.kill()
    proc.wait()
    assert isinstance(json.loads(saved.read_text()), list)  # the old list or the new one, never a torn one


def test_a_save_replaces_the_file_instead_of_rewriting_it_in_place(tmp_path):
    saved = tmp_path / "conversation.json"
    conversation.save_conversation([{"role": "user", "content": "first"}], saved)
    before = saved.stat().st_ino
    conversation.save_conversation([{"role": "user", "content": "second"}], saved)
    assert saved.stat().st_ino != before  # a new file renamed over the old: never truncated, then written
    assert [p.name for p in tmp_path.iterdir()] == ["conversation.json"]  # no temp file left behind


def test_saves_and_logs_never_hold_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-leaked-in-a-reply-7")
    said = [{"role": "user", "content": "my key is sk-ant-leaked-in-a-reply-7"}]
    conversation.save_conversation(said, tmp_path / "conversation.json")
    tracing.append_line(tmp_path / "trace.jsonl", {"event": "x", "said": said})
    for name in ("conversation.json", "trace.jsonl"):
        assert "sk-ant-leaked-in-a-reply-7" not in (tmp_path / name).read_text()
