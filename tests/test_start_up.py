"""A step starts light: `--help` answers before the SDK loads, and the SDK, loaded on first use
(workbook/lazy.py), is the same module it would have been."""

import importlib
import subprocess
import sys
import threading

import pytest
from conftest import ROOT, STEPS, offline_env

from workbook import lazy

SDK_AT_WORK = ("anthropic._client", "anthropic.types")  # loaded only when the SDK's package code runs


def imported(importtime: str) -> set[str]:
    """The modules a `python -X importtime` run imported, from its report on stderr."""
    return {
        line.rsplit("|", 1)[1].strip() for line in importtime.splitlines() if line.startswith("import time:")
    }


@pytest.mark.parametrize("step", STEPS)
def test_help_answers_without_loading_the_sdk(step, run_main, monkeypatch):
    command = [sys.executable, "-X", "importtime", f"{step}.py", "--help"]
    done = subprocess.run(command, cwd=ROOT, env=offline_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr[-2000:]
    modules = imported(done.stderr)
    assert "workbook.step_cli" in modules and "anthropic" in modules  # the report is read right
    assert not modules & set(SDK_AT_WORK), f"{step} --help loaded {sorted(modules & set(SDK_AT_WORK))}"
    monkeypatch.setattr(sys, "argv", [f"{step}.py"])  # argparse names the program after it
    code, eager = run_main(step, "--help", COLUMNS="120")  # in this process, the SDK imported as usual
    assert code == 0 and done.stdout == eager


def test_flags_that_contradict_each_other_are_told_before_the_sdk_loads():
    command = [
        sys.executable,
        "-X",
        "importtime",
        "s01_agent_loop.py",
        "--replay",
        "a.json",
        "--record",
        "b.json",
    ]
    done = subprocess.run(command, cwd=ROOT, env=offline_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "give one of them" in done.stdout + done.stderr, done.stderr[-2000:]
    assert not imported(done.stderr) & set(SDK_AT_WORK)


def test_a_run_loads_the_sdk_where_it_starts_before_anything_reads_it(tmp_path):
    """step_cli.run_step loads it itself, near the bottom of the stack (workbook/lazy.py's load_now says
    why), rather than at the first read, deep inside launch.start."""
    script = tmp_path / "s99_probe.py"  # a step's name: workbook/__init__.py then defers the SDK
    script.write_text(
        "import sys\n"
        "import workbook.step_cli as step_cli\n"
        "import s01_agent_loop\n"
        "def start(*args, **kwargs):\n"
        "    print(type(sys.modules['anthropic']).__name__)\n"
        "    raise SystemExit(0)\n"
        "step_cli.start = start\n"
        "print(type(sys.modules['anthropic']).__name__)\n"
        "s01_agent_loop.main([])\n"
    )
    env = offline_env(PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["NotYetLoaded", "module"]  # deferred at import, loaded before start


@pytest.mark.parametrize("command", ["check", "serve", "grade"])
def test_the_command_lines_help_answers_without_loading_the_sdk(command):
    argv = [sys.executable, "-X", "importtime", "-m", "workbook", command, "--help"]
    done = subprocess.run(argv, cwd=ROOT, env=offline_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: " in done.stdout, done.stderr[-2000:]
    assert not imported(done.stderr) & set(SDK_AT_WORK)


# -- the lazy module itself, on a package of our own ------------------------------------------------


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A package `lazyprobe` (with a submodule `part`) that counts its runs, imported through
    LazyPackages; removed from sys.modules and sys.meta_path afterwards."""
    package = tmp_path / "lazyprobe"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import lazyprobe_runs\nlazyprobe_runs.count += 1\nlazyprobe_runs.before_end()\nVALUE = 42\n"
    )
    (package / "part.py").write_text("PART = 'only me'\n")
    runs = type(sys)("lazyprobe_runs")
    runs.count, runs.before_end = 0, lambda: None
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "lazyprobe_runs", runs)
    finder = lazy.LazyPackages({"lazyprobe"})
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield runs
    for name in ("lazyprobe", "lazyprobe.part"):
        sys.modules.pop(name, None)


def test_an_import_runs_nothing_until_something_is_read(probe):
    import lazyprobe

    assert lazyprobe.__spec__.name == "lazyprobe" and lazyprobe.__path__  # the import system's reads
    importlib.import_module("lazyprobe")  # a second import reads __spec__ too
    assert probe.count == 0
    assert lazyprobe.VALUE == 42 and probe.count == 1
    assert lazyprobe.VALUE == 42 and probe.count == 1  # once
    assert type(lazyprobe) is type(sys) and sys.modules["lazyprobe"] is lazyprobe  # the ordinary module


def test_importing_a_submodule_runs_only_that_submodule(probe):
    from lazyprobe.part import PART

    assert PART == "only me" and probe.count == 0
    import lazyprobe

    assert lazyprobe.part.PART == "only me" and probe.count == 1


def test_load_now_runs_a_deferred_package_once_and_leaves_any_other_alone(probe):
    import lazyprobe

    lazy.load_now("lazyprobe")
    assert probe.count == 1 and type(lazyprobe) is type(sys)
    lazy.load_now("lazyprobe")  # loaded: nothing to do
    lazy.load_now("json")  # never deferred
    lazy.load_now("not_imported_at_all")
    assert probe.count == 1 and lazyprobe.VALUE == 42


def test_a_missing_name_raises_as_for_any_module(probe):
    import lazyprobe

    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        _ = lazyprobe.nothing


def test_a_load_cut_short_fails_again_on_every_later_read(probe):
    def interrupted():
        raise KeyboardInterrupt

    probe.before_end = interrupted
    import lazyprobe

    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            _ = lazyprobe.VALUE
    assert probe.count == 1  # not run again: half a module is never handed out


def test_a_thread_that_reads_during_the_load_waits_for_the_whole_module(probe):
    started, finish = threading.Event(), threading.Event()

    def slow_end():
        started.set()
        assert finish.wait(60)

    probe.before_end = slow_end
    import lazyprobe

    first = threading.Thread(target=lambda: lazyprobe.VALUE)
    first.start()
    assert started.wait(60)  # the first thread is inside the module's code, VALUE not yet set
    seen = []
    second = threading.Thread(target=lambda: seen.append(lazyprobe.VALUE))
    second.start()
    second.join(0.2)  # blocked on the load (a timeout here only lets the test go on)
    finish.set()
    first.join(60)
    second.join(60)
    assert seen == [42] and probe.count == 1


def test_the_workbook_error_is_the_sdks_error():
    import anthropic

    from workbook.errors import WorkbookError

    assert issubclass(WorkbookError, anthropic.AnthropicError)
