"""`python -m workbook` lists its commands, and every command's --help fits an 80-column terminal.

Each command's help is printed by cli.main() in this process (one interpreter start with the SDK is
about 2 s of CPU); one test types the command as a teacher does, `python -m workbook`, and sees the
same output, exit code included."""

import subprocess
import sys
from types import SimpleNamespace

from workbook import cli

import pytest
from conftest import ROOT, exit_code, offline_env

WIDTH = 80
WIDE = "200"  # a terminal that claims to be very wide: the help must fit 80 columns whatever $COLUMNS says


@pytest.fixture
def run(capsys, monkeypatch):
    """`python -m workbook ARGV`, as cli.main(ARGV) in this process with $COLUMNS wide: its exit code
    (a SystemExit, argparse's --help, becomes its code) and what it printed to stdout and stderr."""
    monkeypatch.setenv("COLUMNS", WIDE)

    def run(*argv: str) -> SimpleNamespace:
        try:
            code = cli.main(list(argv))
        except SystemExit as stop:
            code = exit_code(stop, sys.stderr)
        out, err = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)

    return run


def widest(text: str) -> tuple[int, str]:
    return max((len(line), line) for line in text.splitlines())


def test_the_command_a_teacher_types_prints_what_main_prints_and_exits_0(run):
    env = {**offline_env(), "COLUMNS": WIDE}
    done = subprocess.run(
        [sys.executable, "-m", "workbook"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == run().stdout and done.stderr == ""


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]], ids=["bare", "--help", "-h"])
def test_python_m_workbook_lists_every_command_with_exit_0(argv, run):
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(cli.COMMANDS)
    assert widest(done.stdout)[0] <= WIDTH, widest(done.stdout)


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_commands_help_fits_80_columns_and_exits_0(command, run):
    done = run(command, "--help")
    assert done.returncode == 0, done.stderr
    assert command in done.stdout  # its own help, not the list of commands
    width, line = widest(done.stdout)
    assert width <= WIDTH, f"{command} --help is {width} columns wide: {line!r}"


def test_a_command_that_does_not_exist_is_refused_with_the_list(run):
    done = run("serv")
    assert done.returncode == 2
    assert "no command 'serv'" in done.stderr and "  serve " in done.stderr
