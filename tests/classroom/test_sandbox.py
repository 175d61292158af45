"""workbook/classroom/sandbox.py and keeper.py against a stranger's program: each attack of the fourth
red-team round (issue 39) is run as a graded program in bubblewrap (the one sandbox the grader stands on
since issue 47 retired the Landlock fallback), and fails safely: the program sees no file, socket or
process of the teacher's, cannot write the project, is bounded in memory (memfds too), processes, disk
and output, cannot reach or starve another program's server, and no secret reaches the report."""

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from workbook.classroom import grade, keeper, ladder, sandbox

import pytest
from conftest import ROOT
from grading import PLAIN, PYTHON, no_waiting  # noqa: F401  (autouse)
from system_tools import needs

SECRET = "sk-ant-api03-teacher-only-0123456789abcdef"
KINDS = [pytest.param("bwrap", marks=needs("bwrap"))]


@pytest.fixture
def teacher(monkeypatch):
    """The teacher's shell holds a key."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)


def graded_program(capsys, monkeypatch, kind: str, source: str, *args: str, timeout: str = "30") -> dict:
    """`source` written to a student's folder and graded on the first rung in the sandbox `kind`: the
    JSON report (its one row as "row")."""
    folder = Path(tempfile.mkdtemp(prefix="student-"))
    program = folder / "attack.py"
    program.write_text(source)
    code = grade.main(["--json", "--only", "loop", "--timeout", timeout, "--", PYTHON, str(program), *args])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert code == 1 and SECRET not in out + err
    return report | {"row": report["rungs"][0]}


def last_words(report: dict) -> str:
    """What the program printed last, as the reason quotes it."""
    return report["row"]["reason"].split("(exit ", 1)[1]


@pytest.mark.parametrize("kind", KINDS)
def test_the_report_says_how_each_program_ran(kind, teacher, capsys, monkeypatch):
    report = graded_program(capsys, monkeypatch, kind, "print('hello')")
    assert report["sandbox"]["kind"] == kind
    assert "bubblewrap" in report["sandbox"]["how"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_file_in_the_teachers_home_cannot_be_read(kind, teacher, capsys, monkeypatch, tmp_path):
    home = tmp_path / "teacher_home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text(SECRET)
    key.chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    source = (
        "import os\n"
        f"try: print('READ ' + open({str(key)!r}).read())\n"
        "except OSError as e: print('DENIED', e.strerror)\n"
    )
    report = graded_program(capsys, monkeypatch, kind, source)
    assert last_words(report).startswith("0: DENIED")


@pytest.mark.parametrize("kind", KINDS)
def test_no_socket_of_the_teachers_is_reachable(kind, teacher, capsys, monkeypatch):
    """An ssh agent's socket by its path, and a D-Bus-like abstract one."""
    folder = Path(tempfile.mkdtemp(prefix="agent-", dir="/tmp"))
    path, abstract = folder / "agent.sock", f"\0workbook-test-bus-{os.getpid()}"
    listeners = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)]
    listeners[0].bind(str(path))
    listeners[1].bind(abstract)
    for listener in listeners:
        listener.listen(4)
    source = (
        "import socket\n"
        "said = []\n"
        f"for address in ({str(path)!r}, {abstract!r}):\n"
        "    try:\n"
        "        socket.socket(socket.AF_UNIX).connect(address); said.append('CONNECTED')\n"
        "    except OSError as e: said.append('DENIED')\n"
        "print(' '.join(said))\n"
    )
    try:
        report = graded_program(capsys, monkeypatch, kind, source)
    finally:
        for listener in listeners:
            listener.close()
        path.unlink()
        folder.rmdir()
    assert last_words(report).startswith("0: DENIED DENIED")


@pytest.mark.parametrize("kind", KINDS)
def test_the_graders_environment_cannot_be_read_from_proc(kind, teacher, capsys, monkeypatch):
    """The program walks up its parents and then every process, reading each /proc/PID/environ."""
    source = (
        "import os\n"
        "found, read = False, 0\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try: environ = open(f'/proc/{pid}/environ', 'rb').read()\n"
        "    except OSError: continue\n"
        "    read += 1\n"
        f"    found = found or {SECRET.encode()!r} in environ\n"
        "print('FOUND' if found else 'NOT FOUND')\n"
    )
    report = graded_program(capsys, monkeypatch, kind, source)
    assert last_words(report).startswith("0: NOT FOUND")


@pytest.mark.parametrize("kind", KINDS)
def test_the_trust_list_and_the_steps_cannot_be_written(kind, teacher, capsys, monkeypatch):
    trusted, step = ROOT / "fixtures" / "TRUSTED", ROOT / "s01_agent_loop.py"
    before = trusted.read_bytes(), step.read_bytes()
    source = (
        "said = []\n"
        f"for path in ({str(trusted)!r}, {str(step)!r}):\n"
        "    try:\n"
        "        with open(path, 'a') as f: f.write('# tampered\\n')\n"
        "        said.append('WROTE')\n"
        "    except OSError: said.append('DENIED')\n"
        "print(' '.join(said))\n"
    )
    report = graded_program(capsys, monkeypatch, kind, source)
    assert last_words(report).startswith("0: DENIED DENIED")
    assert (trusted.read_bytes(), step.read_bytes()) == before


@pytest.mark.parametrize("kind", KINDS)
def test_the_projects_dotenv_is_not_read(kind, teacher, capsys, monkeypatch):
    dotenv = ROOT / ".env"
    if dotenv.exists():
        pytest.skip("this checkout has a .env of its own")
    dotenv.write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    source = f"try: print('READ ' + open({str(dotenv)!r}).read())\nexcept OSError as e: print('DENIED')\n"
    try:
        report = graded_program(capsys, monkeypatch, kind, source)
    finally:
        dotenv.unlink()
    assert last_words(report).startswith("0: DENIED")


@pytest.mark.parametrize("kind", KINDS)
def test_memory_is_bounded(kind, teacher, capsys, monkeypatch):
    source = "try: block = bytearray(3 << 30); print('ALLOCATED')\nexcept MemoryError: print('DENIED')\n"
    report = graded_program(capsys, monkeypatch, kind, source)
    assert last_words(report).startswith("0: DENIED")


@pytest.mark.parametrize("kind", KINDS)
def test_a_fork_bomb_is_stopped(kind, teacher, capsys, monkeypatch):
    """RLIMIT_NPROC refuses the forks where it binds (not for root); the keeper's watchdog stops the rest."""
    source = (
        "import os, sys, time\n"
        "made = 0\n"
        "for _ in range(600):\n"
        "    try: pid = os.fork()\n"
        "    except OSError: break\n"
        "    if pid == 0: time.sleep(30); os._exit(0)\n"
        "    made += 1\n"
        "print('FORKED', made, flush=True)\n"
        "time.sleep(5)\n"
    )
    started = time.monotonic()
    report = graded_program(capsys, monkeypatch, kind, source)
    said = last_words(report)
    assert said.startswith("125: stopped by the grader: more than 256 processes") or (
        "FORKED" in said and int(said.split("FORKED ")[1].split(")")[0]) <= keeper.PROCESSES
    )
    assert time.monotonic() - started < 25


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_is_bounded_in_size(kind, teacher, capsys, monkeypatch):
    source = (
        "import os\n"
        "try:\n"
        "    with open(os.path.join(os.environ['HOME'], 'big'), 'wb') as f:\n"
        "        for _ in range(100): f.write(b'x' * (1 << 20))\n"
        "    print('WROTE 100 MB')\n"
        "except OSError as e: print('DENIED', e.strerror)\n"
    )
    report = graded_program(capsys, monkeypatch, kind, source)
    assert last_words(report).startswith("0: DENIED File too large")


@needs("bwrap")
def test_the_disk_a_program_fills_is_bounded(teacher, capsys, monkeypatch):
    source = (
        "import os\n"
        "written = 0\n"
        "try:\n"
        "    for n in range(40):\n"
        "        with open(os.path.join(os.environ['HOME'], f'f{n}'), 'wb') as f:\n"
        "            f.write(b'x' * (32 << 20))\n"
        "        written += 32\n"
        "    print('WROTE', written, 'MB')\n"
        "except OSError as e: print('FULL', e.strerror)\n"
    )
    report = graded_program(capsys, monkeypatch, "bwrap", source)
    assert last_words(report).startswith("0: FULL No space left on device")


@pytest.mark.parametrize("kind", KINDS)
def test_output_keeps_its_head_and_tail_and_costs_no_memory(kind, tmp_path, monkeypatch):
    """300 MB printed: the grader keeps about KEPT_OUTPUT bytes of it, the first line and the last."""
    chosen = sandbox.choose("auto")
    (tmp_path / "workspace").mkdir()
    flood = "import sys\nprint('FIRST')\nsys.stdout.write(('y' * 1023 + '\\n') * 300_000)\nprint('LAST')\n"
    run = sandbox.Run([PYTHON, "-c", flood], tmp_path, tmp_path / "workspace", "http://127.0.0.1:9", "g0", 60)
    code, output = sandbox.run_program(run, chosen, set())
    assert code == 0 and len(output) < sandbox.KEPT_OUTPUT + 200
    assert (
        output.startswith("FIRST\n") and output.endswith("LAST\n") and "bytes cut from the middle" in output
    )


@needs("bwrap")
def test_programs_graded_together_cannot_reach_or_starve_each_other(teacher):
    """One program looks for another's relay socket in the scratch folder and hoards connections to its
    own; the correct program, graded at the same time, still passes."""
    scratch_root = sandbox.scratch.scratch_root()
    hoarder = (
        "import glob, socket, time\n"
        f"others = glob.glob({str(scratch_root)!r} + '/*relay*/api.sock')\n"
        "others += glob.glob('/tmp/**/api.sock', recursive=True)\n"
        "held = []\n"
        "for address in others + ['/run/relay/api.sock'] * 64:\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_UNIX); s.connect(address); held.append(s)\n"
        "    except OSError: pass\n"
        "print('OTHERS', len(others), 'HELD', len(held), flush=True)\n"
        "time.sleep(8)\n"
    )
    folder = Path(tempfile.mkdtemp(prefix="student-"))
    (folder / "hoarder.py").write_text(hoarder)
    rung = grade.pick_rungs(["loop"])[0]
    options = ladder.Options(timeout=30, sandbox=sandbox.choose("auto"))
    results = ladder.grade_runs(
        [(rung, [PYTHON, str(folder / "hoarder.py")]), (rung, [PYTHON, PLAIN])], options
    )
    assert results[1].passed, results[1].reason
    assert "(exit 0: OTHERS 0 HELD" in results[0].reason


def test_a_relay_carries_at_most_its_connections_at_once():
    server = socket.create_server(("127.0.0.1", 0))
    relay = sandbox.UnixRelay(f"http://127.0.0.1:{server.getsockname()[1]}")
    clients = []
    try:
        for _ in range(keeper.CONNECTIONS + 4):
            client = socket.socket(socket.AF_UNIX)
            client.connect(str(relay.path))
            clients.append(client)
        server.settimeout(5)
        accepted = [server.accept()[0] for _ in range(keeper.CONNECTIONS)]
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()  # the rest were closed by the relay, never carried
        closed = 0
        for client in clients[keeper.CONNECTIONS :]:
            client.settimeout(5)
            closed += client.recv(1) == b""
        assert closed == 4 and len(accepted) == keeper.CONNECTIONS
    finally:
        for client in clients:
            client.close()
        relay.close()
        server.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_reason_quotes_no_secret(kind, teacher, capsys, monkeypatch):
    token = "ghp_teacherGitHubToken0123456789abcdef"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    source = f"print('here: {token} and sk-ant-api03-someone-elses-key-0123'); raise SystemExit(3)\n"
    report = graded_program(capsys, monkeypatch, kind, source)
    reason = report["row"]["reason"]
    assert token not in reason and "sk-ant-api03-someone" not in reason
    assert "[secret removed]" in reason and "[key removed]" in reason


# -- without bubblewrap ----------------------------------------------------------------------------


@pytest.fixture
def no_bubblewrap(monkeypatch):
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: (None, "bubblewrap is hidden by this test"))


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_without_bubblewrap_grading_refuses_in_one_line_naming_the_install(no_bubblewrap, capsys, mode):
    code = grade.main(["--json", "--only", "loop", "--sandbox", mode, "--", PYTHON, "-c", "print('hi')"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "apt-get install bubblewrap" in err and "--sandbox off" in err


def test_with_sandbox_off_the_report_and_the_table_say_the_programs_ran_with_your_rights(
    no_bubblewrap, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "200")
    code = grade.main(["--json", "--only", "loop", "--sandbox", "off", "--", PYTHON, "-c", "print('hi')"])
    assert code == 1 and json.loads(capsys.readouterr().out)["sandbox"] == sandbox.Sandbox().report()
    grade.main(["--only", "loop", "--sandbox", "off", "--", PYTHON, "-c", "print('hi')"])
    assert "programs ran in: no sandbox (--sandbox off)" in capsys.readouterr().out


# -- shared memory: memfds counted against the memory bound ------------------------------------------


def test_the_class_table_and_the_grade_table_strip_control_sequences(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    source = "print('\\x1b]52;c;ZXZpbA==\\x07clip \\u202egnp.exe \\x1b[2J[bold]x[/]')"
    grade.main(["--only", "loop", "--sandbox", "off", "--", PYTHON, "-c", source])
    out = capsys.readouterr().out
    assert "\x1b]52" not in out and "\u202e" not in out and "\x1b[2J" not in out
    assert "clip gnp.exe [bold]x[/]" in out


def test_the_class_table_and_log_show_a_hostile_name_escaped():
    """The classroom server's table and log (a student's name and last result are a stranger's text)."""
    import io

    from workbook.classroom import students
    from workbook.replay import fixtures

    out = io.StringIO()
    hello = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    room = students.Classroom({"hello": hello}, out=out)
    hostile = "\x1b]52;c;ZXZpbA==\x07ev\u202eil"
    room.cursor(hostile, "hello").last = "400 \x1b[2J[bold]boom[/]"
    room.log(hostile, "hello", "turn 1/3", "400 \x1b[2J\u202eoops")
    shown = out.getvalue() + room.table()
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "\\u202e" in shown and "[bold]boom[/]" in shown


def test_a_python_module_is_found_from_the_folder_the_grader_was_started_in(tmp_path, monkeypatch):
    """`python -m workbook.later.s07_really_done`, typed at the repo's root, starts in the rung's
    workspace: the module is looked for where it was typed. No other program gets a PYTHONPATH."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/the/teachers/own")

    def run(*argv: str) -> sandbox.Run:
        return sandbox.Run(list(argv), tmp_path, tmp_path / "workspace", "http://x", "student", 5.0)

    assert sandbox.environment(run("python", "-m", "pkg.mod"), "http://x")["PYTHONPATH"] == str(tmp_path)
    assert "PYTHONPATH" not in sandbox.environment(run("python", "loop.py"), "http://x")
