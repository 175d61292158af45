"""Secrets stay home: tools get no API key, and what the workbook writes or prints holds none."""

import json
import os

from workbook import scrub

import pytest

import s01_agent_loop as s01
import s03_errors as s03


def test_tools_get_no_anthropic_variable(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-1")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-secret-2")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://u:p@example.com")
    monkeypatch.setenv("HOME_FOR_TOOLS", "kept")
    env = scrub.tool_environment()
    assert not [name for name in env if name.startswith("ANTHROPIC_")]
    assert env["HOME_FOR_TOOLS"] == "kept" and env.get("PATH") == os.environ.get("PATH")


@pytest.mark.parametrize("run_bash", [s01.run_bash, s03.run_bash], ids=["s01", "s03-s06"])
def test_bash_runs_without_the_key(run_bash, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-in-a-tool-1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://u:pw-never-in-a-tool@example.com")
    output = run_bash("env; echo key=$ANTHROPIC_API_KEY", tmp_path)
    assert "never-in-a-tool" not in output and "ANTHROPIC_" not in output and "PATH=" in output


def test_scrub_removes_every_credential_at_any_depth(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-1234")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://alice:hunter2hunter2@proxy.example/v1?token=abc")
    dirty = {"a": ["env: ANTHROPIC_API_KEY=sk-ant-secret-1234", {"sk-ant-secret-1234": 1}], "n": 3}
    clean = json.dumps(scrub.scrub_secrets(dirty))
    assert "sk-ant-secret-1234" not in clean and '"n": 3' in clean
    assert "hunter2hunter2" not in scrub.scrub_secrets("see https://alice:hunter2hunter2@proxy.example/")


def test_a_plain_endpoint_and_a_bare_user_are_not_secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
    kept = {"endpoint": "https://api.anthropic.com", "remote": "ssh://git@github.com/o/r"}
    assert scrub.scrub_secrets(kept) == kept


def test_an_endpoint_is_kept_without_userinfo_or_query():
    assert (
        scrub.public_endpoint("https://u:pw@host.example:8443/v1?key=s#f") == "https://host.example:8443/v1"
    )
    assert scrub.public_endpoint(None) == "https://api.anthropic.com"
