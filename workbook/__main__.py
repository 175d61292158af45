"""`python -m workbook`: the teacher's and fixture author's command line (see workbook/cli.py)."""

import os
import sys

from workbook.cli import main

try:
    code = main(sys.argv[1:])
    if sys.stdout:  # stepdiff lets go of a closed pipe by setting it to None
        sys.stdout.flush()
except BrokenPipeError:  # `| head` stopped reading: not an error of ours
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
    code = 0
sys.exit(code)
