"""The fixture author's commands, `check`, `trust` and `rebuild`: one file at a time, one line each."""

import json
import os
import subprocess

from workbook import cli
from workbook.replay import commands, trust

from conftest import ROOT
from fixture_files import HELLO, check, fixture


def test_the_cli_checks_fixtures(tmp_path):
    assert cli.main(["check", str(ROOT / "fixtures" / "s01_hello_agent.json")]) == 0
    (tmp_path / "bad.json").write_text("[]")
    assert cli.main(["check", str(tmp_path / "bad.json")]) == 1


def test_check_on_a_folder_a_fifo_or_nothing_is_one_line_and_nonzero(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for argv, said in [
        (["check", str(tmp_path)], "is a folder"),
        (["check", str(fifo)], "not a regular file"),
        (["check"], "needs one or more fixture files"),
        (["rebuild"], "needs one or more fixture files"),
        (["trust"], "needs one or more fixture files"),
    ]:
        code, out = check(*argv)
        assert code != 0 and said in out and "Traceback" not in out, (argv, out)
        assert len(out.strip().splitlines()) == 1, out


def test_rebuild_never_runs_a_file_the_fixture_names(tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    hostile = fixture(provenance="scripted", script=str(evil.with_suffix("")))
    (tmp_path / "f.json").write_text(json.dumps(hostile))
    code, out = check("rebuild", str(tmp_path / "f.json"))
    assert code == 1 and "`script` must name one of the steps" in out
    assert not marker.exists()


def test_rebuild_refuses_a_fixture_not_on_the_trust_list(tmp_path):
    (tmp_path / "f.json").write_text(json.dumps(fixture(description="edited by someone")))
    code, out = check("rebuild", str(tmp_path / "f.json"))
    assert code == 1 and "python -m workbook trust" in out and "Traceback" not in out


def test_rebuild_of_a_trusted_fixture_stores_the_same_requests_and_keeps_it_trusted(tmp_path, monkeypatch):
    trust_file = tmp_path / "TRUSTED"
    trust_file.write_bytes(trust.TRUST_FILE.read_bytes())
    monkeypatch.setattr(trust, "TRUST_FILE", trust_file)
    copy_ = tmp_path / "hello.json"
    copy_.write_bytes(HELLO.read_bytes())
    assert cli.main(["rebuild", str(copy_)]) == 0
    assert copy_.read_bytes() == HELLO.read_bytes()  # the script sends what was recorded
    assert trust.is_trusted(copy_.read_bytes()) and str(copy_) in trust_file.read_text()


def test_trust_adds_a_fixture_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(trust, "TRUST_FILE", tmp_path / "TRUSTED")
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(fixture(description="written by me")))
    assert cli.main(["trust", str(mine)]) == 0
    assert trust.is_trusted(mine.read_bytes())
    mine.write_text(json.dumps(fixture(description="changed since")))
    assert not trust.is_trusted(mine.read_bytes())


# -- from the red-team round (issue 39) ----------------------------------------


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
