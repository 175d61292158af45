"""workbook/audit.py: s02's audit log, one JSON line per tool call (s02's gate decides what it holds:
tests/steps/test_s02_tools.py)."""

import json
from types import SimpleNamespace

from workbook import audit

BLOCK = SimpleNamespace(id="toolu_1", name="bash", input={"command": "ls"})


def test_each_call_is_one_line_saying_what_was_asked_what_was_decided_and_how_it_went(tmp_path, monkeypatch):
    log = tmp_path / "audit.jsonl"
    monkeypatch.setattr(audit.time, "monotonic", lambda: 10.25)
    audit.log_call(log, BLOCK, "allowed", "a.txt\nb.txt\n", False, started=10.0)
    audit.log_call(log, BLOCK, "denied", "", True, started=10.25)
    first, second = [json.loads(line) for line in log.read_text().splitlines()]
    assert first == {
        "id": "toolu_1",
        "tool": "bash",
        "input": {"command": "ls"},
        "decision": "allowed",
        "ms": 250,
        "chars": 12,
        "is_error": False,
    }
    assert (second["decision"], second["ms"], second["chars"], second["is_error"]) == ("denied", 0, 0, True)


def test_with_no_audit_log_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    audit.log_call(None, BLOCK, "allowed", "out", False, started=0.0)
    assert list(tmp_path.iterdir()) == []


def test_the_key_this_process_holds_is_scrubbed_before_a_call_is_written(tmp_path, monkeypatch):
    log = tmp_path / "audit.jsonl"
    key = "sk-ant-api03-" + "A" * 93 + "AA"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    asked = SimpleNamespace(id="toolu_2", name="bash", input={"command": f"curl -H 'x-api-key: {key}'"})
    audit.log_call(log, asked, "allowed", f"echo {key}", False, started=0.0)
    written = json.loads(log.read_text())
    assert key not in log.read_text() and written["input"]["command"].startswith("curl -H 'x-api-key: ")
