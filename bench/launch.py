"""Run a step script as `python sNN_x.py` does, with a change from bench/whatif.py applied.

    python -m bench.launch NAME sNN_x.py [args...]     NAME is a what-if, or `none` for the launcher alone

The change is entered and never left, so it lasts to the process's exit, as it would in workbook/launch.py.
"""

import contextlib
import runpy
import sys

from bench.whatif import applied

if __name__ == "__main__":
    name, script, *args = sys.argv[1:]
    changes = contextlib.ExitStack()  # never closed on purpose
    changes.enter_context(applied(None if name == "none" else name))
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")
