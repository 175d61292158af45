"""`python -m workbook`: the teacher's and fixture author's command line (see workbook/cli.py)."""

import sys

from workbook.cli import main

sys.exit(main(sys.argv[1:]))
