"""grade_sandbox — running a stranger's program for the grader: a sandbox, an allowlisted environment,
and nothing left running when its rung ends.

A student's program is a stranger's program. With bubblewrap installed (Debian: `apt-get install
bubblewrap`), each rung's program runs in a sandbox:
  - its own PID namespace: it cannot see the grader, nor signal it (`/proc/$PPID` is the keeper);
  - the whole file system read-only (the project included); only the rung's temp folder is writable;
  - its own network, holding only a loopback: the keeper relays one port of it to the rung's server;
  - no capabilities, its own session, and everything in it killed when the rung ends.

Without bubblewrap (`--sandbox off`, or `auto` on a machine without it) the program runs with the
teacher's rights; the keeper (workbook/classroom/keeper.py) still kills whatever it started, `setsid`
daemons included, when its rung ends.

Either way the program sees only the environment variables in ENVIRONMENT.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from workbook import errors, paths, scratch
from workbook.classroom.keeper import carry

KEEPER = Path(__file__).with_name("keeper.py")
SANDBOX_MODES = ("auto", "required", "off")
# What reaches the student's program from the teacher's shell: the rest (API keys of every kind,
# cloud credentials, ANTHROPIC_CUSTOM_HEADERS that the SDK would send) stays behind.
PASSED_ON = ("PATH", "LANG", "TERM", "TZ", "NO_COLOR", "WORKBOOK_NO_SLEEP")
PASSED_ON_PREFIXES = ("LC_",)
STOP_GRACE = 5.0  # seconds the keeper gets to kill what the program started, after a timeout
RELAY_PORT = 8765  # inside the sandbox's own network, the replay server's port: any port is free there


class SandboxError(errors.WorkbookError):
    """--sandbox required, and no sandbox can be made here: one line, exit 2."""


@dataclass(frozen=True)
class Sandbox:
    """How programs are run: the bwrap to use (None: unsandboxed), and why, for one line of notice."""

    bwrap: str | None
    notice: str | None = None


@dataclass
class Run:
    """One program run: what to run, where, against which server, for how long."""

    argv: list[str]
    folder: Path  # the rung's temp folder: HOME and TMPDIR; the workspace is a folder in it
    workspace: Path
    server_url: str  # the rung's replay server, http://127.0.0.1:PORT
    student: str  # the stand-in API key: the server's name for this run
    timeout: float


def environment(run: Run, url: str) -> dict[str, str]:
    """The program's whole environment: an allowlist from the teacher's shell, then the rung's own."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if name in PASSED_ON or name.startswith(PASSED_ON_PREFIXES)
    }
    return kept | {
        "HOME": str(run.folder),
        "PWD": str(run.workspace),
        "TMPDIR": str(run.folder),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": run.student,
        "AGENT_TASK": run.argv[-1],
        "PYTHONDONTWRITEBYTECODE": "1",  # the project is read-only in the sandbox: no __pycache__ tries
    }


def choose(mode: str) -> Sandbox:
    """The sandbox for --sandbox MODE: bwrap when it is here and works; `required` without it fails."""
    if mode == "off":
        return Sandbox(None)
    bwrap = shutil.which("bwrap")
    problem = "bubblewrap (bwrap) is not installed" if bwrap is None else probe(bwrap)
    if problem is None:
        return Sandbox(bwrap)
    if mode == "required":
        raise SandboxError(f"--sandbox required, but {problem}: apt-get install bubblewrap, or --sandbox off")
    return Sandbox(
        None,
        f"note: {problem}: the graded programs run unsandboxed, with your rights "
        "(apt-get install bubblewrap, or --sandbox off to say so yourself)",
    )


def probe(bwrap: str) -> str | None:
    """Why bwrap cannot make our sandbox here (a container without user namespaces...), or None."""
    argv = [bwrap, *namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bubblewrap does not start ({err})"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return f"bubblewrap cannot make a sandbox here ({said[:120]})"
    return None


def namespaces() -> list[str]:
    """New namespaces of every kind (user where allowed), no capabilities, a session of its own."""
    return ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def bwrap_argv(bwrap: str, run: Run) -> list[str]:
    """The sandbox around the keeper: everything read-only but the rung's folder, own /proc and /dev.

    The workbook's steps keep a live run's files in the project's runs/: inside the sandbox that is
    the rung folder's runs/, so a step graded writes there and the project stays untouched."""
    folder = str(run.folder)
    project_runs, rung_runs = paths.ROOT / "runs", run.folder / "runs"
    project_runs.mkdir(exist_ok=True)  # a mount point must exist: the sandbox's root is read-only
    rung_runs.mkdir(exist_ok=True)
    return [
        bwrap,
        *namespaces(),
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--bind", folder, folder,
        "--bind", str(rung_runs), str(project_runs),
        "--chdir", str(run.workspace),
        "--",
    ]  # fmt: skip


def keeper_argv(relay: list[str]) -> list[str]:
    """The keeper, by the grader's own interpreter, isolated (-I) and without site packages (-S)."""
    return [sys.executable, "-I", "-S", str(KEEPER), *relay, "--"]


def run_program(run: Run, sandbox: Sandbox, running: set) -> tuple[int | None, str]:
    """Run the program to its end or its timeout; its exit code (None: timed out) and its output."""
    relay = None
    if sandbox.bwrap:
        relay = UnixRelay(run.server_url)
        url = f"http://127.0.0.1:{RELAY_PORT}"
        argv = bwrap_argv(sandbox.bwrap, run) + keeper_argv(["--relay", str(relay.path), str(RELAY_PORT)])
    else:
        url, argv = run.server_url, keeper_argv([])
    try:
        proc = subprocess.Popen(
            argv + run.argv,
            cwd=run.workspace,
            env=environment(run, url),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as err:
        if relay:
            relay.close()
        return 126, f"cannot start {run.argv[0]}: {err.strerror}"
    running.add(proc)
    try:
        output, _ = proc.communicate(timeout=run.timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        stop(proc)
        output, _ = proc.communicate()
        code = None
    finally:
        running.discard(proc)
        end_session(proc.pid)
        if relay:
            relay.close()
    return code, output.decode("utf-8", errors="replace")


def stop(proc: subprocess.Popen) -> None:
    """Ask the keeper to end the program and all it started; if it cannot (it was killed), kill its group."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # it had already finished


def end_session(sid: int) -> None:
    """Whatever is left of the run's session (the keeper's, started with start_new_session): killed.
    The keeper normally leaves nothing; this covers a program that killed its keeper."""
    for pid in session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def session_members(sid: int) -> list[int]:
    """The processes whose session id is `sid` (field 6 of /proc/PID/stat)."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                if int(fields[3]) == sid:
                    members.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return members


SOCKET_FOLDER_CHARS = 64  # a Unix socket's whole path is at most 107 bytes on Linux


class UnixRelay:
    """A Unix socket, each connection carried to the rung's replay server.

    The sandboxed program's network holds only its own loopback; the keeper relays it here. The
    socket lives in a folder of its own, outside the rung's folder: the sandbox sees it read-only
    (connecting needs no write access), so the program cannot remove or replace it."""

    def __init__(self, server_url: str):
        host, port = server_url.removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))
        root = scratch.scratch_root()
        if len(str(root)) > SOCKET_FOLDER_CHARS:  # a deep $TMPDIR: the socket's path would not fit
            root = Path("/tmp")
        self.folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-relay-", dir=root))
        self.path = self.folder / "api.sock"
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(self.path))
        self.listener.listen(64)
        self.closed = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.closed:  # the wake-up call from close(): the run is over
                client.close()
                return
            carry(client, self.connect)

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address)

    def close(self) -> None:
        """Stop accepting: a blocked accept() does not notice a close, so call it once to wake it."""
        self.closed = True
        try:
            with socket.socket(socket.AF_UNIX) as wake:
                wake.connect(str(self.path))
        except OSError:
            pass
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)
