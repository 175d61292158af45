"""Starting a step's run: the mode from its flags and the environment, contradictions refused in one
line, and a Ctrl-C while it starts ends it in one line too."""

import importlib
import signal
import subprocess
import sys

from workbook import errors, paths

import anthropic
import pytest
from conftest import ROOT, STEPS, offline_env
from fixture_files import HELLO, start


@pytest.mark.parametrize("step", STEPS)
def test_default_model_is_current_not_deprecated(step):
    from anthropic._data import DEPRECATED_MODELS

    model = importlib.import_module(paths.step_module(step)).MODEL
    assert model not in DEPRECATED_MODELS
    assert model in anthropic.types.Model.__args__[0].__args__, "a model id the installed SDK knows"


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--replay", str(HELLO), "a task"], "--replay runs the fixture's own task"),
        (["--replay", str(HELLO), "--record", "RECORDING", "t"], "give one of them"),
        (["--record", "RECORDING"], "give a task too"),
        (["--force"], "--force only applies to --record"),
        (["--workspace", "."], "--workspace is for a live run"),
    ],
)
def test_conflicting_flags_are_an_error(run_main, tmp_path, argv, said):
    recording = tmp_path / "recording.json"
    argv = [str(recording) if arg == "RECORDING" else arg for arg in argv]
    code, out = run_main("s01_agent_loop", *argv, ANTHROPIC_API_KEY="sk-test-secret")
    assert code == 1 and said in out and len(out.strip().splitlines()) == 1, out
    assert not recording.exists()


@pytest.mark.parametrize("argv", [["--bogus"], ["--rec", "RECORDING", "t"], ["a", "b"]])
def test_a_bad_flag_is_one_line(run_main, tmp_path, argv):
    argv = [str(tmp_path / "recording.json") if arg == "RECORDING" else arg for arg in argv]
    code, out = run_main("s01_agent_loop", *argv)
    assert code == 2 and "error:" in out and len(out.strip().splitlines()) == 1, out


def test_with_a_key_and_no_task_the_default_fixture_replays(run_main):
    code, out = run_main("s01_agent_loop", ANTHROPIC_API_KEY="sk-test-secret")
    assert code == 0, out
    banner = " ".join(out.split("\ntask:")[0].split())  # the banner's lines, before the task
    assert "offline replay of fixtures/s01_hello_agent.json" in banner and "to run live" in banner


def test_record_refuses_to_overwrite_without_force(tmp_path):
    existing = tmp_path / "mine.json"
    existing.write_text("keep me")
    with pytest.raises(errors.WorkbookError, match="--force"):
        start("--record", str(existing), "a task", ANTHROPIC_API_KEY="sk-x")
    assert existing.read_text() == "keep me"


def test_ctrl_c_while_replay_py_starts_is_not_a_traceback():
    # While the SDK loads: on first use, once `check` reads the fixture (workbook/lazy.py). The first
    # `-X importtime` line of its types, not a sleep, says it has begun.
    command = [sys.executable, "-X", "importtime", "-m", "workbook", "check", str(HELLO)]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.Popen(command, cwd=ROOT, env=offline_env(), **pipes)
    for line in proc.stderr:
        if line.rsplit("|", 1)[-1].strip().startswith("anthropic.types"):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in out + err and "interrupted" in err


CTRL_C_WHEN = {  # the moment to press Ctrl-C: the first `-X importtime` line that says it has come
    "imports": lambda module: module == "workbook",  # the Ctrl-C hook is set, the step's imports go on
    "SDK loads": lambda module: module.startswith("anthropic.types"),  # on first use, in main (lazy.py)
}


@pytest.mark.parametrize("when", CTRL_C_WHEN)
@pytest.mark.parametrize("step", ["s02_tools", "s05_budget", "s06_recovery"])
def test_ctrl_c_while_a_step_starts_is_not_a_traceback(step, when):
    # -X importtime reports each module as its import ends: once the workbook package is in, its Ctrl-C
    # hook is set; the SDK loads later, when main first uses it (workbook/lazy.py), and its types are
    # among the first modules it brings. That line, not a sleep, says when to press Ctrl-C.
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    command = [sys.executable, "-X", "importtime", f"{step}.py"]
    proc = subprocess.Popen(command, cwd=ROOT, env=offline_env(), **pipes)
    said = []
    for line in proc.stderr:
        said.append(line)
        if CTRL_C_WHEN[when](line.rsplit("|", 1)[-1].strip()):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = "".join(said) + err
    assert proc.returncode == 130 and "Traceback" not in out + err and "interrupted" in out + err
