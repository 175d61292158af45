"""Files the workbook writes are written whole: a kill -9 mid-save leaves the old file or the new one."""

import subprocess

from workbook import errors, files

import pytest
from conftest import ROOT, offline_env
from saver import small_program, wait_for_saves

WRITER = """
import sys
from workbook import files
path = sys.argv[1]
for n in range(10**6):
    files.write_atomic(path, (b"A" if n % 2 else b"B") * 30_000_000)
"""


def test_kill_9_during_a_save_leaves_a_whole_file(tmp_path):
    target = tmp_path / "conversation.json"
    target.write_bytes(b"A" * 30_000_000)
    proc = subprocess.Popen(small_program(WRITER, str(target)), cwd=ROOT, env=offline_env())
    wait_for_saves(proc, target, 1)  # killed while it writes the next one
    assert proc.poll() is None, "the writer was still writing when killed"
    proc.kill()
    proc.wait()
    data = target.read_bytes()
    assert len(data) == 30_000_000 and data.count(data[:1]) == len(data)


def test_write_atomic_refuses_a_folder(tmp_path):
    with pytest.raises(errors.WorkbookError, match="is a folder"):
        files.write_atomic(tmp_path, "x")
