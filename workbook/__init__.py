"""workbook — everything the six steps stand on that is not a lesson.

The steps (s01_agent_loop.py ... s06_recovery.py, at the repo's root) import what they need from
here; notebooks and tests use the in-process interface:

    from workbook import replay_client, load_fixture, copy_workspace

and teachers the command line: `python -m workbook` lists its commands.

Importing the package sets a Ctrl-C hook before anything slow loads (the SDK takes a second or
so), so a step is covered from the moment it imports workbook. The public names load lazily, for
the same reason: `python -m workbook --help` needs no SDK. When the running script is a step, the
SDK itself loads on first use (workbook/lazy.py): `python sNN_x.py --help` needs none of it either.
"""

import atexit
import gc
import os
import re
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


def _running_a_step() -> bool:
    """Whether this process is `python sNN_x.py`: the script that imported us is a step."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return re.fullmatch(r"s\d\d_\w+\.py", os.path.basename(main)) is not None


# A step imports the SDK next. Its `import anthropic` makes an empty module that loads on first use
# (workbook/lazy.py), so `--help` or a mistyped flag answers without the SDK; a run loads it where it
# starts, in step_cli.run_step. Loading it makes hundreds of thousands of objects that live until
# exit. Collecting while they are made finds nothing to free and costs about a third of the import, so
# the collector stays off until launch.start has them all, freezes them and turns it back on
# (docs/benchmarks.md).
if _running_a_step():
    from workbook import lazy

    lazy.install()
    gc.disable()

PUBLIC = {  # name -> the module that holds it
    "replay_client": "workbook.replay",
    "load_fixture": "workbook.fixtures",
    "copy_workspace": "workbook.scratch",
}
__all__ = list(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'workbook' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(PUBLIC[name]), name)
