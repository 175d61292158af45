"""`python -m workbook`: the teacher's and fixture author's command line (see workbook/cli.py)."""

import os
import sys

from workbook import lazy

lazy.install()  # the SDK loads when a command first uses it: `--help` answers without it (workbook/lazy.py)

from workbook.cli import main  # noqa: E402

try:
    code = main(sys.argv[1:])
    if sys.stdout:  # stepdiff lets go of a closed pipe by setting it to None
        sys.stdout.flush()
except BrokenPipeError:  # `| head` stopped reading: not an error of ours
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
    code = 0
sys.exit(code)
