"""A stranger's fixture, written by a test: the project's own with a change, what the loader and the
command line say of it, and a run started from flags as a step starts one."""

import contextlib
import copy
import io
import json
from argparse import Namespace

from workbook import cli, errors, launch
from workbook.replay import fixtures

import pytest
from conftest import ROOT

HELLO = ROOT / "fixtures" / "s01_hello_agent.json"
BUDGET = ROOT / "fixtures" / "s05_max_steps.json"
KEEP = ROOT / "fixtures" / "s05_resume.json"  # s09_keep_the_work's: its flags include --resume
STOP_HOOK = ROOT / "fixtures" / "s06_stop_hook.json"


def fixture(path=HELLO, **changes) -> dict:
    loaded = copy.deepcopy(fixtures.load_fixture(path))
    loaded.update(changes)
    return loaded


def refused(tmp_path, value, *words) -> str:
    """`value` written as a fixture is refused by the loader and by `check`, each in one line."""
    path = tmp_path / "f.json"
    path.write_text(value if isinstance(value, str) else json.dumps(value))
    with pytest.raises(errors.FixtureError) as caught:
        fixtures.load_fixture(path)
    line = str(caught.value)
    assert "\n" not in line and str(path) in line
    for word in words:
        assert word in line, line
    return line


def check(*argv) -> tuple[int, str]:
    """`python -m workbook ARGV`, run in this process (as the command line runs it): exit code and
    everything printed. tests/workbook/test_package.py starts the real command line once."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        code = cli.main(list(argv))
    return code, printed.getvalue()


def start(*argv, script="s02_tools", **env):
    """launch.start as a step calls it, from these flags (and a task), with no API key unless given."""
    args = Namespace(
        task=None,
        replay=None,
        record=None,
        force=False,
        model=None,
        workspace=None,
        default_fixture="fixtures/s01_hello_agent.json",
    )
    it = iter(argv)
    for flag in it:
        if flag.startswith("--"):
            setattr(args, flag[2:], True if flag == "--force" else next(it))
        else:
            args.task = flag
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ANTHROPIC_API_KEY", raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        return launch.start(args, "claude-sonnet-5", script)
