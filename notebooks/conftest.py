"""The notebooks under nbval: their kernels' temp files in a folder of their own, as tests/conftest.py does
for the tests.

A replay keeps its last runs' files (audit log, trace, saved conversation) under $TMPDIR/workbook-<uid>,
and sweeps older ones. nbval's cells are not test functions, so no fixture runs for them: TMPDIR is set
when this file is collected, before any kernel starts (a kernel inherits it), and the folder is removed
when the process ends. A test run then never sweeps a reader's kept runs, and never sees them.
(The repo's root may hold only the six steps, so this lives here.)
"""

import atexit
import os
import shutil
import tempfile

FOLDER = tempfile.mkdtemp(prefix="workbook-notebook-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = FOLDER
atexit.register(shutil.rmtree, FOLDER, ignore_errors=True)
