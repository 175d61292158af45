"""workbook — everything the six steps stand on that is not a lesson.

The steps (s01_agent_loop.py ... s06_recovery.py, at the repo's root) import what they need from
here; notebooks and tests use the in-process interface:

    from workbook import replay_client, load_fixture, copy_workspace

and teachers the command line: `python -m workbook` lists its commands.

Importing the package sets a Ctrl-C hook before anything slow loads (the SDK takes a second or
so), so a step is covered from the moment it imports workbook.
"""

import atexit
import os
import sys


def _quiet_ctrl_c(kind, value, traceback) -> None:
    """A Ctrl-C that nothing caught (while the SDK loads, say) ends the program in one line, not a
    traceback: exit code 130 as for any interrupted program, after the usual clean-up at exit."""
    if not issubclass(kind, KeyboardInterrupt):
        return sys.__excepthook__(kind, value, traceback)
    print("interrupted", file=sys.stderr, flush=True)
    atexit._run_exitfuncs()
    os._exit(130)


sys.excepthook = _quiet_ctrl_c


PUBLIC = {  # name -> the module that holds it
    "replay_client": "workbook.replay.transport",
    "load_fixture": "workbook.replay.fixtures",
    "copy_workspace": "workbook.scratch",
}
__all__ = list(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'workbook' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(PUBLIC[name]), name)
