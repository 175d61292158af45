"""For every test pytest runs, tests/ and the notebooks under nbval alike: temp files in its own folder.

A replay keeps its last runs' files (audit log, trace, saved conversation) under $TMPDIR/workbook-<uid>,
and sweeps older ones. Tests and notebook kernels use a temp root of their own, so a test run never
sweeps a reader's kept runs, and never sees them.
"""

import os
import tempfile

import pytest


@pytest.fixture(scope="session", autouse=True)
def temp_files_inside_pytests_own_folder(tmp_path_factory):
    """Replayed workspaces (and anything else made with tempfile), here and in the scripts the tests
    start, go under pytest's temp folder, which pytest prunes — not by thousands into /tmp."""
    folder = str(tmp_path_factory.mktemp("tmp"))
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = folder, folder
    yield
    if saved[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[0]
    tempfile.tempdir = saved[1]
