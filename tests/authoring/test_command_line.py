"""`python -m workbook` lists its commands, and every command's --help fits an 80-column terminal."""

import subprocess
import sys

from workbook import cli

import pytest
from conftest import ROOT, offline_env

WIDTH = 80


def run(*argv: str) -> subprocess.CompletedProcess:
    """`python -m workbook ARGV` as a teacher types it, in a terminal that claims to be very wide: the
    help must fit 80 columns whatever $COLUMNS says."""
    env = {**offline_env(), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "workbook", *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )


def widest(text: str) -> tuple[int, str]:
    return max((len(line), line) for line in text.splitlines())


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]], ids=["bare", "--help", "-h"])
def test_python_m_workbook_lists_every_command_with_exit_0(argv):
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(cli.COMMANDS)
    assert widest(done.stdout)[0] <= WIDTH, widest(done.stdout)


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_commands_help_fits_80_columns_and_exits_0(command):
    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    assert command in done.stdout  # its own help, not the list of commands
    width, line = widest(done.stdout)
    assert width <= WIDTH, f"{command} --help is {width} columns wide: {line!r}"


def test_a_command_that_does_not_exist_is_refused_with_the_list():
    done = run("serv")
    assert done.returncode == 2
    assert "no command 'serv'" in done.stderr and "  serve " in done.stderr
