"""From s02 on every tool is bounded in time and memory (issue 23): output is read while a command runs,
head and tail kept, the rest counted; what the command started ends with it; a regular expression
search stops at its CPU budget. s01's run_bash is the plain subprocess.run a reader would write."""

import subprocess
import sys
import time

from workbook import capture

import anthropic
import pytest
from conftest import ROOT

import s01_agent_loop as s01
import s02_tools as s02

CAT_3000 = """
import sys
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, {root!r})
import s02_tools as s02
workspace = Path({workspace!r})
(workspace / "x").write_bytes(b"y" * (1 << 20) + b"\\n")
command = {{"command": "cat " + "x " * 3000}}
# A ToolUseBlock's fields: execute() reads no more of it, and the SDK stays unloaded.
block = SimpleNamespace(type="tool_use", id="toolu_cat", name="bash", input=command)
output, is_error = s02.execute(block, workspace, "auto")
assert not is_error and "cut from the middle" in output and output.endswith("[exit code 0]"), output[-99:]
# VmHWM, this process's own peak: getrusage's ru_maxrss keeps the peak of the process it was forked
# from (a pytest worker of some 300 MB), since Linux carries it across exec.
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(peak_kb // 1024)
"""


def test_cat_of_a_1_mib_file_3000_times_stays_under_200_mb(tmp_path):
    """The red team's repro: an allowlisted `cat x x ... x` printed 3 GB; captured whole it took 708 MB
    at 200 repeats and a MemoryError at 3,000. The child's own peak RSS is what is measured."""
    code = CAT_3000.format(root=str(ROOT), workspace=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    peak_mb = int(done.stdout.split()[-1])
    assert peak_mb < 200, f"peak RSS {peak_mb} MB"


def bash_of_s01(workspace, command):
    return s01.run_bash(command, workspace)


def test_long_output_keeps_its_head_and_tail_and_counts_the_middle(tmp_path):
    output = s02.bash(tmp_path, "echo first; seq 1 200000; echo last; exit 4")
    assert output.startswith("first") and "last\n[exit code 4]" in output
    assert "bytes cut from the middle" in output and len(output) < capture.KEPT_BYTES + 200


def test_s01_keeps_a_commands_whole_output_as_a_reader_would_write_it(tmp_path):
    output = s01.run_bash("seq 1 200000", tmp_path)
    assert output.startswith("1\n2\n") and output.endswith("200000\n[exit code 0]") and "cut" not in output


@pytest.mark.parametrize("bash", [bash_of_s01, s02.bash], ids=["s01", "s02-s06"])
def test_stdout_and_stderr_both_arrive(bash, tmp_path):
    output = bash(tmp_path, "echo out; echo err >&2; exit 3")
    assert "out" in output and "err" in output and output.endswith("[exit code 3]")


def test_a_timed_out_command_reports_what_it_printed_first(tmp_path, monkeypatch):
    monkeypatch.setattr(s02, "BASH_TIMEOUT", 1)
    with pytest.raises(s02.ToolError, match="timed out after 1 s.*before that:\nstarted"):
        s02.bash(tmp_path, "echo started; sleep 30")


def test_a_background_process_holding_the_pipe_does_not_hold_the_tool(tmp_path):
    started = time.monotonic()
    output = s02.bash(tmp_path, "(sleep 30 &) ; echo done")
    assert output.startswith("done") and time.monotonic() - started < capture.DRAIN_WAIT + 5


def test_nothing_a_command_started_outlives_it(tmp_path):
    marker = tmp_path / "still-running"
    s02.bash(tmp_path, f"(sleep 2; touch {marker}) > /dev/null 2>&1 & echo started")
    process = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True, text=True)
    assert process.stdout == ""  # the background job's group was ended with the call


def test_grep_redos_ends_within_its_timeout_as_an_is_error_result(tmp_path, monkeypatch):
    monkeypatch.setattr(s02, "GREP_CPU_SECONDS", 1.0)
    (tmp_path / "a.txt").write_text("a" * 32 + "!\n")
    started = time.process_time()
    for pattern in ("(a+)+$", "(a|aa)+$"):
        call = anthropic.types.ToolUseBlock(
            type="tool_use", id="toolu_g", name="grep", input={"pattern": pattern}
        )
        output, is_error = s02.execute(call, tmp_path, "auto")
        assert output == "(no matches)" or (is_error and "ends in time" in output), output
    assert time.process_time() - started < 2 * s02.GREP_CPU_SECONDS + 1  # CPU seconds: what the budget counts


def test_grep_output_is_bounded(tmp_path):
    (tmp_path / "many.txt").write_text("match " + "x" * 5000 + "\n" * 1 + ("match\n" * 100_000))
    output = s02.grep(tmp_path.resolve(), "match")
    assert len(output.splitlines()) == s02.MAX_MATCHES and len(output.splitlines()[0]) < 1100


def test_the_kept_head_and_tail_are_exactly_the_outputs_ends_whatever_the_reads_size(tmp_path):
    lines = "".join(f"{n:07d}\n" for n in range(200_000)).encode()  # 1.6 MB: many reads, some partial
    (tmp_path / "lines").write_bytes(lines)
    with capture.Output() as output:
        done = subprocess.Popen(["cat", "lines"], cwd=tmp_path, stdout=output.pipe, stderr=output.pipe)
        output.started()
        done.wait()
    half = capture.KEPT_BYTES // 2
    cut = len(lines) - 2 * half
    expected = f"{lines[:half].decode()}\n… [{cut:,} bytes cut from the middle] …\n{lines[-half:].decode()}"
    assert output.text() == expected
