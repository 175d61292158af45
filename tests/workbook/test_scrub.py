"""Secrets stay home: tools get no API key, and what the workbook writes or prints holds none."""

import base64
import json
import os
import shutil
import subprocess
import sys

from workbook import display, scrub
from workbook.api import wire

import pytest
from conftest import ROOT, offline_env
from rich.console import Console
from standin import StandIn, message, scripted, text, tool_use

import s01_agent_loop as s01
import s02_tools as s02


def test_tools_get_no_anthropic_variable(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-1")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-secret-2")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://u:p@example.com")
    monkeypatch.setenv("HOME_FOR_TOOLS", "not on the allowlist")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = scrub.tool_environment()
    assert not [name for name in env if name.startswith("ANTHROPIC_")] and "HOME_FOR_TOOLS" not in env
    assert env["LANG"] == "C.UTF-8" and env.get("PATH") == os.environ.get("PATH")


def bash_of_s02(command, workspace):
    return s02.bash(workspace, command)


@pytest.mark.parametrize("run_bash", [s01.run_bash, bash_of_s02], ids=["s01", "s02-s06"])
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


# -- from the red-team round (issue 39) ----------------------------------------

KEY = "sk-ant-api03-teacher-key-0123456789abcdefXYZ"
TOKEN = "ghp_teacherGitHubToken0123456789abcdef"


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)


def leaks(text_: str) -> list[str]:
    """Each form of KEY or TOKEN that `text_` still holds."""
    return [form for secret in (KEY, TOKEN) for form in {secret, *scrub.encoded(secret)} if form in text_]


def test_tools_get_only_the_allowlist(monkeypatch):
    for name, value in {
        "GITHUB_TOKEN": TOKEN,
        "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
        "SOME_VENDOR_THING": "anything at all",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }.items():
        monkeypatch.setenv(name, value)
    env = scrub.tool_environment()
    assert not {"GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "SOME_VENDOR_THING"} & set(env)
    assert "DBUS_SESSION_BUS_ADDRESS" not in env
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8" and env["PATH"] == os.environ["PATH"]


@pytest.mark.parametrize(
    "name",
    [
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "OPENAI_APIKEY",
        "MY_SECRET",
    ],
)
def test_a_variable_named_like_a_credential_is_a_secret(name, monkeypatch):
    monkeypatch.setenv(name, "value-of-a-credential-42")
    assert "value-of-a-credential-42" in scrub.credential_values() and scrub.looks_secret(name)


def test_a_name_that_only_looks_close_is_not(monkeypatch):
    monkeypatch.setenv("AUTHOR_NAME", "Grace Hopper")
    monkeypatch.setenv("KEYBOARD_LAYOUT", "dvorak-programmer")
    assert "Grace Hopper" not in scrub.credential_values()
    assert "dvorak-programmer" not in scrub.credential_values()


def test_a_password_in_any_url_is_a_secret(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://app:hunter2hunter2@db.example/prod")
    assert "hunter2hunter2" not in scrub.scrub_secrets("connecting with hunter2hunter2")


@pytest.mark.parametrize("before", ["", "x", "xy", "HOME=/root\0", "LANG=C\0PATH=/bin\0"])
def test_a_secret_in_base64_is_scrubbed_wherever_it_starts(before, secrets):
    """A tool that prints `base64 /proc/$PPID/environ`: the key starts at any offset, modulo 3."""
    blob = f"{before}ANTHROPIC_API_KEY={KEY}\0GITHUB_TOKEN={TOKEN}\0TERM=xterm\0".encode()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        printed = encode(blob).decode()
        clean = scrub.scrub_secrets(printed)
        assert not leaks(clean) and "[secret removed]" in clean
        assert KEY.encode() not in base64.b64decode(
            clean.replace("[secret removed]", "") + "==", altchars=b"-_"
        )


def test_a_secret_in_hex_is_scrubbed(secrets):
    assert not leaks(scrub.scrub_secrets(f"dump: {KEY.encode().hex()} {TOKEN.encode().hex().upper()}"))


def test_a_secret_split_across_text_blocks_is_scrubbed_from_each(secrets):
    content = [
        {"type": "text", "text": "the key is " + KEY[:11]},
        {"type": "text", "text": KEY[11:] + " and the token " + TOKEN[:5]},
        {"type": "text", "text": TOKEN[5:]},
        {"type": "tool_use", "id": "t", "name": "bash", "input": {"command": "ls"}},
    ]
    clean = scrub.scrub_secrets({"role": "assistant", "content": content})["content"]
    joined = "".join(block.get("text", "") for block in clean)
    assert len(clean) == 4 and all(block["text"] for block in clean[:3]) and clean[3] == content[3]
    assert not leaks(joined) and KEY[:11] not in joined and TOKEN[5:] not in joined
    assert clean[0]["text"].startswith("the key is ") and "and the token" in clean[1]["text"]
    written = scrub.dumps({"messages": [{"role": "assistant", "content": content}]})
    assert not leaks(written) and KEY[11:] not in written


def test_a_secret_split_across_streamed_text_blocks_is_scrubbed_and_the_stream_stays_valid(secrets):
    body = message([text("first " + KEY[:20]), text(KEY[20:] + " last")])
    clean = scrub.scrub_stream(wire.message_to_events(body))
    blocks = wire.events_to_message(clean)["content"]
    assert [b["type"] for b in blocks] == ["text", "text"] and all(b["text"] for b in blocks)
    assert KEY[:20] not in blocks[0]["text"] and KEY[20:] not in blocks[1]["text"]


def test_a_key_in_an_error_body_is_not_printed(secrets, monkeypatch):
    out = Console(width=200, force_terminal=False, record=True)
    monkeypatch.setattr(display, "console", out)
    display.error("error", f"Error code: 401 - {{'error': {{'message': 'invalid x-api-key {KEY}'}}}}")
    display.say(f"token {TOKEN} and someone's sk-ant-api03-stranger-0123456789")
    shown = out.export_text()
    assert not leaks(shown) and "sk-ant-api03-stranger" not in shown and "[secret removed]" in shown


def test_a_live_run_writes_no_secret_in_any_form_anywhere(tmp_path):
    """s09 live against a stand-in, in a process of its own (its /proc/PID/environ is what a tool can
    read): a tool prints the step's environment in base64, hex and plain, and the model echoes the key
    split across two text blocks. The recording, the trace, the saved conversation, the audit log and
    the terminal hold none of it."""
    command = (
        "base64 -w0 /proc/$PPID/environ; echo; od -An -tx1 /proc/$PPID/environ | tr -d ' \\n'; echo; "
        "tr '\\0' '\\n' < /proc/$PPID/environ | grep -e KEY -e TOKEN; env | grep -c TOKEN"
    )
    brain = scripted(
        message([tool_use("toolu_env", "bash", {"command": command})], "tool_use"),
        message([text("I found " + KEY[:15]), text(KEY[15:] + f" and {TOKEN}")]),
    )
    files = {name: tmp_path / name for name in ("recorded.json", "trace.jsonl", "saved.json")}
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    runs_before = set((ROOT / "runs").glob("*"))
    with StandIn(brain) as api:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "workbook.later.s10_trace",
                "--record",
                str(files["recorded.json"]),
                "--trace",
            ]
            + [str(files["trace.jsonl"]), "--save", str(files["saved.json"]), "--permission", "all"]
            + ["--workspace", str(workspace), "print the environment"],
            cwd=ROOT,
            env=offline_env(ANTHROPIC_API_KEY=KEY, GITHUB_TOKEN=TOKEN, ANTHROPIC_BASE_URL=api.url),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    result = api.requests[1]["body"]["messages"][2]["content"][0]["content"]
    assert "GITHUB_TOKEN=[secret removed]" in result and not leaks(result)  # read, and not shown the model
    written = {name: path.read_text() for name, path in files.items()}
    for folder in set((ROOT / "runs").glob("*")) - runs_before:  # the live run's own folder: its audit log
        written |= {f"{folder.name}/{p.name}": p.read_text() for p in folder.iterdir() if p.is_file()}
        shutil.rmtree(folder)
    assert any("audit" in name for name in written)
    for name, content in {**written, "terminal": done.stdout + done.stderr}.items():
        assert not leaks(content), name
    assert json.loads(written["saved.json"]) and json.loads(written["recorded.json"])  # still JSON
