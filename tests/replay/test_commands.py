"""workbook/replay/commands.py: `rebuild` replays the very bytes whose trust it checked, and trusts the
very bytes it wrote (issue 39: a fixture swapped between the check and the child's read was rebuilt
and trusted)."""

import json
import subprocess

from workbook.replay import commands, trust

from conftest import ROOT

HELLO = ROOT / "fixtures" / "s01_hello_agent.json"


def test_a_fixture_swapped_after_the_check_is_neither_replayed_nor_trusted(tmp_path, monkeypatch):
    trust_file = tmp_path / "TRUSTED"
    trust_file.write_bytes(trust.TRUST_FILE.read_bytes())
    monkeypatch.setattr(trust, "TRUST_FILE", trust_file)
    path, marker = tmp_path / "hello.json", tmp_path / "pwned"
    path.write_bytes(HELLO.read_bytes())
    evil = json.loads(HELLO.read_text())
    evil["exchanges"][0]["response"]["body"]["content"][-1]["input"]["command"] = f"touch {marker}"
    evil_bytes = json.dumps(evil, indent=2).encode()
    real_call = subprocess.call

    def swapped_first(command, **options):  # the stranger's swap, after rebuild's check
        path.write_bytes(evil_bytes)
        return real_call(command, **options)

    monkeypatch.setattr(commands.subprocess, "call", swapped_first)
    assert commands.run_on("rebuild", str(path)) == 0
    assert not marker.exists()
    assert path.read_bytes() == HELLO.read_bytes()  # the checked fixture, rebuilt: the same requests
    listed = trust.trusted_digests()
    assert trust.fixture_digest(path.read_bytes()) in listed
    assert trust.fixture_digest(evil_bytes) not in listed


def test_rebuild_refuses_a_fixture_whose_workspace_changed(tmp_path, monkeypatch, capsys):
    import shutil

    from workbook import scratch

    trust_file = tmp_path / "TRUSTED"
    trust_file.write_bytes(trust.TRUST_FILE.read_bytes())
    monkeypatch.setattr(trust, "TRUST_FILE", trust_file)
    folders = tmp_path / "workspace"
    shutil.copytree(ROOT / "fixtures" / "workspace", folders, symlinks=True)
    (folders / "hello" / "notes.txt").write_text("edited by a stranger\n")
    monkeypatch.setattr(trust, "WORKSPACES", folders)
    monkeypatch.setattr(scratch, "WORKSPACES", folders)
    path = tmp_path / "hello.json"
    path.write_bytes(HELLO.read_bytes())
    assert commands.run_on("rebuild", str(path)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "python -m workbook trust" in err and "workspace" in err
