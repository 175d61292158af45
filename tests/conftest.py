"""Shared test helpers: the repo on sys.path, running a step script as a reader would (a subprocess),
and running a step's main() in this process (no interpreter start, no SDK import: ~2 s of CPU saved)."""

import atexit
import importlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import system_tools
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from workbook import paths  # noqa: E402  (the repo's root is on sys.path only from here)

# This whole test process, and every notebook kernel nbval starts from it (a kernel inherits the
# environment), keeps its temp files in a folder of its own: a replay sweeps old runs under
# $TMPDIR/workbook-<uid>, and a test run must never sweep, or see, a reader's kept runs. Set when this
# file is collected, before any kernel starts; removed when the process ends. (Each test also gets a
# folder of its own, below.)
SESSION_TMP = tempfile.mkdtemp(prefix="workbook-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = SESSION_TMP
atexit.register(shutil.rmtree, SESSION_TMP, ignore_errors=True)

# A shell starts a background job (`pytest &`, a CI runner's) with SIGINT ignored, and an ignored signal
# stays ignored in every child: the Ctrl-C tests' programs would never see their Ctrl-C. Handled here,
# it is reset to the default in each child, which then takes it as a KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Many tests wait on a program of their own (a signal, a timeout, a graded run) about as long as they
# compute, so two workers a core keep the cores busy (`-n auto` in pyproject.toml).
def pytest_xdist_auto_num_workers(config) -> int:
    return 2 * (os.cpu_count() or 1)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "needs_tool(name): needs a tool beyond Python (tests/system_tools.py)")


def pytest_runtest_setup(item) -> None:
    """A test marked @needs(tool) skips, naming the tool, where the tool is missing (fails under CI)."""
    for mark in item.iter_markers("needs_tool"):
        system_tools.check(mark.args[0])


STEPS = list(paths.STEPS)  # every step: the six at the root, then workbook/later/
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MODEL_ID")  # what picks the mode and model


# What every step shares from the workbook package, searched after the steps themselves.
SHARED = ("workbook.display", "workbook.step_cli", "workbook.conversation", "workbook.tracing")


class Step:
    """A step as its tests see it: what the step defines, else what it uses from the step that introduced
    it (s06's REGISTRY is s05's, its run_tools s04's). Steps import what they inherit, so a test of a
    mechanism, parametrized over every step that has it, reaches the one piece that step really runs.
    Setting a name sets it where it lives: `console` in workbook.display, `RUNS` in
    workbook.step_cli, the rest in its owner."""

    # No instance __dict__: pytest's monkeypatch then takes the value it restores from getattr (the
    # owner's), instead of finding nothing in the instance __dict__ and deleting the owner's on undo.
    __slots__ = ("chain", "__name__")

    def __init__(self, name: str):
        chain = [
            importlib.import_module(paths.step_module(s)) for s in reversed(STEPS[: STEPS.index(name) + 1])
        ]
        chain += [importlib.import_module(module) for module in SHARED]
        object.__setattr__(self, "chain", chain)
        object.__setattr__(self, "__name__", name)

    def owner(self, attr: str):
        return next((m for m in self.chain if attr in vars(m)), self.chain[0])

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # `__dict__` and the like are the Step's own (it has none), no module's
            raise AttributeError(attr)
        return getattr(self.owner(attr), attr)

    def __setattr__(self, attr: str, value) -> None:
        setattr(self.owner(attr), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self.owner(attr), attr)


def load_step(name: str) -> Step:
    return Step(name)


@pytest.fixture
def script(step, monkeypatch):
    """The `step` under test (each module's own fixture) run as a reader runs it, offline: its main() in
    this process, as `script(*argv)` -> (exit code, what it printed)."""
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)

    def run(*argv):
        out = io.StringIO()
        monkeypatch.setattr(step, "console", Console(file=out, width=200))
        return step.main(list(argv)), out.getvalue()

    return run


def offline_env(**extra) -> dict:
    """The environment of a reader with no API key (so scripts replay), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    env.update(COLUMNS="120", PYTHONIOENCODING="utf-8", **extra)
    return env


def run_script(*args, timeout: float = 60, **env) -> subprocess.CompletedProcess:
    """Run `python <args>` from the repo root, as a reader would type it.

    Each run starts an interpreter and imports the SDK (~2 s of CPU): keep it for what needs a process
    of its own (the command a reader types, signals, kill -9); run_main does the rest in-process.
    """
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=offline_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def run_main(monkeypatch, tmp_path):
    """`run_main("s01_agent_loop", *argv, **env) -> (exit code, output)`: the step's main(argv) in-process.

    It is run as `python sNN.py argv` would be from the repo root: no key unless `env` sets one (env
    holds environment variables, e.g. ANTHROPIC_API_KEY=..., ANTHROPIC_BASE_URL=api.url), cwd = the
    repo, a plain 120-column console. The output is everything printed — the step's console, print()
    and argparse, stdout and stderr together, in order — and a SystemExit (--help, a bad flag) becomes
    its exit code. The step's RUNS folder (live audit logs, s02 on) is tmp_path / "runs", not the repo's.
    All of that is put back after each call. Other module-level state is not reset as a new process
    would (s09's INTERRUPT event stays set if a run set it): reset what
    your test's run changes.
    """

    def run(step_name: str, *argv: str, **env: str) -> tuple[int, str]:
        return main_in_process(monkeypatch, tmp_path / "runs", step_name, *argv, **env)

    return run


def main_in_process(
    monkeypatch, runs: Path, step_name: str, *argv: str, cwd: Path = ROOT, width: int = 120, **env: str
) -> tuple[int, str]:
    """What run_main does, for a fixture of any scope: it brings its own monkeypatch and runs folder
    (a module-scoped fixture makes them with pytest.MonkeyPatch.context() and tmp_path_factory), and
    may start the step in another folder than the repo's (the grader starts it in a rung's workspace)
    or on a console of another width (a reader's terminal is often 80 columns)."""
    step = load_step(step_name)
    out = io.StringIO()
    plain = Console(file=out, width=width, force_terminal=False, force_jupyter=False, highlight=False)
    with monkeypatch.context() as patch:
        for name in KEY_VARIABLES:
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        patch.setattr(step, "console", plain)
        patch.setattr(step, "RUNS", runs)
        patch.setattr(sys, "stdout", out)
        patch.setattr(sys, "stderr", out)
        try:
            code = step.main(list(argv))
        except SystemExit as stop:
            code = exit_code(stop, out)
    return code, out.getvalue()


def exit_code(stop: SystemExit, out) -> int:
    """The exit code the interpreter gives a SystemExit, printing its message to `out` as it would."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    out.write(f"{stop.code}\n")
    return 1


@pytest.fixture(scope="session", autouse=True)
def temp_files_inside_pytests_own_folder(tmp_path_factory):
    """Replayed workspaces (and anything else made with tempfile), here and in the scripts the tests
    start, go under pytest's temp folder, which pytest prunes — not by thousands into /tmp."""
    folder = str(tmp_path_factory.mktemp("tmp"))
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = folder, folder
    yield
    if saved[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[0]
    tempfile.tempdir = saved[1]


@pytest.fixture
def root() -> Path:
    return ROOT
