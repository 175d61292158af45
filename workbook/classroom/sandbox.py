"""sandbox — running a stranger's program for the grader: it sees only what it needs, it is
bounded, and nothing it started is left running when its rung ends.

With bubblewrap (Debian: `apt-get install bubblewrap`), each rung's program runs in a sandbox of its
own (kind "bwrap"), and runs side by side with others:
  - the system's programs and libraries (/usr, /etc...), the project and the interpreters the command
    names, read-only; the project without its .git, .env and runs/; nothing else of the machine: no
    home folder, no /run, no host /tmp, so no ssh agent, D-Bus or docker socket;
  - the rung's folder (its workspace, an empty HOME, a TMPDIR) in a tmpfs of RUNG_DISK bytes, and /tmp
    in one of TMP_DISK; the rest of the file system cannot be written;
  - its own PID namespace (it cannot see or signal the grader, nor read its /proc), its own network
    holding only a loopback: the keeper relays one port of it to a Unix socket that only this run's
    sandbox can see, and the grader caps the connections it carries (no hoarding the rung's server);
  - no capabilities, its own session, everything killed when the rung ends.

Without bubblewrap, `--sandbox auto` (the default) refuses in one line that says to install it;
`--sandbox off` is the teacher saying to run each program with their own rights, one at a time. (A
Landlock fallback was retired in issue 47: every finding against it was another rule a teacher had to
trust; docs/faults.md says why.)

In either case the keeper (workbook/classroom/keeper.py) bounds memory, file size, open files and processes,
and kills whatever the program started, `setsid` daemons included, when its rung ends. The program sees
only the environment variables in ENVIRONMENT, and the grader keeps only the head and the tail of what
it prints (KEPT_OUTPUT).
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

from workbook import capture, errors, paths, processes, scratch, scrub
from workbook.classroom import keeper
from workbook.classroom.keeper import carry

KEEPER = Path(__file__).with_name("keeper.py")
SANDBOX_MODES = ("auto", "required", "off")
# What reaches the student's program from the teacher's shell: the rest (API keys of every kind,
# cloud credentials, ANTHROPIC_CUSTOM_HEADERS that the SDK would send) stays behind.
PASSED_ON = ("PATH", "LANG", "TERM", "TZ", "NO_COLOR", "WORKBOOK_NO_SLEEP")
PASSED_ON_PREFIXES = ("LC_",)
# Claude Code refuses --dangerously-skip-permissions as root unless IS_SANDBOX=1 says it runs in a
# sandbox: a machine it cannot harm. Bubblewrap's is one (a throwaway file system, no network but the
# rung's server, no capabilities, its own processes), so the grader says so there. Under Landlock or
# no sandbox the program keeps root's capabilities on the teacher's machine: it is not said, and the
# teacher's own IS_SANDBOX is never passed on (docs/teaching.md, "Grading Claude Code as root").
SANDBOXED = {"IS_SANDBOX": "1"}
STOP_GRACE = 5.0  # seconds the keeper gets to kill what the program started, after a timeout
RELAY_PORT = 8765  # inside the sandbox's own network, the replay server's port: any port is free there
KEPT_OUTPUT = 64_000  # bytes of a program's output the grader keeps: its head and its tail
RUNG_DISK = 256 << 20  # bytes: the tmpfs of the rung's folder in bubblewrap (workspace, home, temp files)
TMP_DISK = 64 << 20  # bytes: /tmp, and the project's runs/, in bubblewrap
SHM_DISK = 16 << 20  # bytes: /dev/shm (the rest of /dev is read-only)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")  # read-only for programs
HIDDEN = (".git", ".env", ".netrc", ".npmrc", ".pypirc", "runs")  # of the project, never shown (.env.* too)
SEED, RELAY = "/run/seed", "/run/relay"  # in bubblewrap: the rung's folder as copied, and the relay's socket


class SandboxError(errors.WorkbookError):
    """No sandbox that --sandbox allows can be made here: one line, exit 2."""


@dataclass(frozen=True)
class Sandbox:
    """How programs are run: kind "bwrap" or "none" (--sandbox off); the bwrap to use; how, in words (the
    report says it); and one line for the teacher before grading starts (None: nothing to say)."""

    kind: str = "none"
    bwrap: str | None = None
    how: str = "no sandbox (--sandbox off): each program ran with your rights"
    notice: str | None = None
    why: str = "--sandbox off"  # why not bwrap, in a few words (the report's sandbox column)

    @property
    def side_by_side(self) -> bool:
        """Only bubblewrap keeps programs apart from each other: the others run one at a time."""
        return self.kind == "bwrap"

    def report(self) -> dict:
        return {"kind": self.kind, "how": self.how}


@dataclass
class Run:
    """One program run: what to run, where, against which server, for how long."""

    argv: list[str]
    folder: Path  # the rung's temp folder: its workspace, home/ (HOME) and tmp/ (TMPDIR)
    workspace: Path
    server_url: str  # the rung's replay server, http://127.0.0.1:PORT
    student: str  # the stand-in API key: the server's name for this run
    timeout: float


def prepare(run: Run) -> None:
    """The rung's folder gets an empty home and temp folder beside its workspace."""
    for name in ("home", "tmp"):
        (run.folder / name).mkdir(exist_ok=True)


def environment(run: Run, url: str, kind: str = "none") -> dict[str, str]:
    """The program's whole environment: an allowlist from the teacher's shell, then the rung's own, and
    in bubblewrap IS_SANDBOX (see SANDBOXED)."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if name in PASSED_ON or name.startswith(PASSED_ON_PREFIXES)
    }
    # `python -m MODULE` finds MODULE from the folder it is typed in, here the grader's; the program
    # itself starts in the rung's workspace (`-m workbook.later.s07_really_done`, from the repo's root)
    kept |= {"PYTHONPATH": os.getcwd()} if run.argv[1:2] == ["-m"] else {}
    return (
        kept
        | {
            "HOME": str(run.folder / "home"),
            "PWD": str(run.workspace),
            "TMPDIR": str(run.folder / "tmp"),
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": run.student,
            "AGENT_TASK": run.argv[-1],
            "PYTHONDONTWRITEBYTECODE": "1",  # the project is read-only in the sandbox: no __pycache__ tries
        }
        | (SANDBOXED if kind == "bwrap" else {})
    )


# -- which sandbox -----------------------------------------------------------------------------------


def choose(mode: str) -> Sandbox:
    """The sandbox for --sandbox MODE: bubblewrap, the one sandbox the grader stands on; `auto` and
    `required` without it refuse in one line, saying how to install it. `off` runs with the teacher's
    rights (the grader then at least makes itself non-dumpable: hide_from_programs)."""
    if mode == "off":
        return Sandbox()
    bwrap, problem = find_bwrap()
    if problem is None:
        return Sandbox("bwrap", bwrap, "bubblewrap: each program saw only the system, the project read-only "
                       "and its own folder, with no network but its own server")  # fmt: skip
    raise SandboxError(
        f"--sandbox {mode}, but {problem}: apt-get install bubblewrap (Linux), or give --sandbox off to "
        "grade with your own rights"
    )


def find_bwrap() -> tuple[str | None, str | None]:
    """bwrap's path, and why it cannot make our sandbox here (None when it can)."""
    bwrap = shutil.which("bwrap")
    return bwrap, "bubblewrap (bwrap) is not installed" if bwrap is None else probe(bwrap)


def probe(bwrap: str) -> str | None:
    """Why bwrap cannot make our sandbox here (a container without user namespaces...), or None."""
    argv = [bwrap, *namespaces(), *system_binds(), "--size", "1048576", "--tmpfs", "/tmp", "--", "true"]
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


# -- what a program may see ------------------------------------------------------------------------


def system_binds() -> list[str]:
    """The system's programs, libraries and settings, read-only (a merged /usr's links as links)."""
    binds = []
    for path in SYSTEM:
        if os.path.islink(path):
            binds += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            binds += ["--ro-bind", path, path]
    return binds


def project_entries() -> list[Path]:
    """The project's top-level files and folders a program may read: all but HIDDEN and .env.*."""
    try:
        entries = sorted(paths.ROOT.iterdir())
    except OSError:
        return []
    return [e for e in entries if e.name not in HIDDEN and not e.name.startswith(".env.")]


def too_broad(folder: Path) -> bool:
    """A folder that holds more than one program's files: /, a top-level one, a home, the project's
    parents, the scratch root. A file there is shown alone, not with its folder."""
    home = Path(os.path.expanduser("~"))
    broad = {Path("/"), home, Path(tempfile.gettempdir()), scratch.scratch_root()}
    return (
        len(folder.parts) <= 2
        or folder in broad
        or folder in paths.ROOT.parents
        or folder == paths.ROOT
        or folder in home.parents
    )


def shown(path: str | Path) -> list[Path]:
    """What to show of a program, an interpreter or a file a command names: the prefix it lives in (a
    venv, a node install: the folder above bin/), else its folder, else (a broad folder) the file alone."""
    path = Path(os.path.abspath(path))
    folder = path.parent if path.is_file() or not path.exists() else path
    prefix = folder.parent if folder.name == "bin" else folder
    for candidate in (prefix, folder):
        if not too_broad(candidate):
            return [candidate]
    return [path]


def interpreter(program: str) -> list[str]:
    """A script's interpreter, from its #! line (`/usr/bin/env python3` found on PATH), or none."""
    try:
        with open(program, "rb") as file:
            line = file.readline(256)
    except OSError:
        return []
    words = line[2:].decode(errors="replace").split() if line.startswith(b"#!") else []
    if words and os.path.basename(words[0]) == "env":
        words = [shutil.which(w) or w for w in words[1:] if not w.startswith("-")][:1]
    return words[:1]


def readable(argv: list[str]) -> list[Path]:
    """Beyond the system and the project: the grader's interpreter (the keeper runs on it), the program
    and its interpreter, and the files the command names (grade made them absolute), each with its
    folder or prefix (shown)."""
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.realpath(sys.executable)]
    program = argv[0]
    for path in [program, *interpreter(program)]:
        wanted += [path, os.path.realpath(path)]
    wanted += [arg for arg in argv[1:] if os.path.isabs(arg) and os.path.exists(arg)]
    found: list[Path] = []
    for path in wanted:
        for candidate in shown(path):
            inside_system = any(candidate.is_relative_to(s) for s in SYSTEM)
            inside_project = candidate.is_relative_to(paths.ROOT)
            if not (inside_system or inside_project or candidate in found):
                found.append(candidate)
    return found


def bwrap_argv(bwrap: str, run: Run, relay: UnixRelay) -> list[str]:
    """The sandbox around the keeper (see the module's docstring); it starts in the rung's folder,
    which the keeper fills from SEED. The steps keep a live run's files in the project's runs/: here
    that is a tmpfs, so a graded step writes there and the project stays untouched."""
    argv = [bwrap, *namespaces(), *system_binds(), "--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(SHM_DISK), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += ["--size", str(TMP_DISK), "--tmpfs", "/tmp"]
    for path in [*readable(run.argv), *project_entries()]:
        argv += ["--ro-bind", str(path), str(path)]
    argv += ["--size", str(TMP_DISK), "--tmpfs", str(paths.ROOT / "runs")]
    argv += ["--ro-bind", str(run.folder), SEED, "--size", str(RUNG_DISK), "--tmpfs", str(run.folder)]
    argv += ["--ro-bind", str(relay.folder), RELAY, "--remount-ro", "/", "--chdir", str(run.folder), "--"]
    return argv


def keeper_argv(options: list[str]) -> list[str]:
    """The keeper, by the grader's own interpreter, isolated (-I: no environment variables, no user site,
    not its folder on the path), with the interpreter's packages (psutil)."""
    return [sys.executable, "-I", str(KEEPER), *options, "--"]


# -- running ---------------------------------------------------------------------------------------


def hide_from_programs() -> None:
    """No sandbox: at least the grader's own /proc/PID/environ and memory are closed to the programs
    it runs (workbook/scrub.py's hide_from_tools, which the steps use too)."""
    scrub.hide_from_tools()


def command_for(run: Run, sandbox: Sandbox) -> tuple[list[str], str, UnixRelay | None]:
    """The whole command line for one run, the URL its program is given, and the relay (bwrap only)."""
    where = ["--cwd", str(run.workspace)]
    if sandbox.kind == "bwrap":
        relay = UnixRelay(run.server_url)
        options = ["--seed", SEED, str(run.folder), "--relay", f"{RELAY}/api.sock", str(RELAY_PORT), *where]
        argv = bwrap_argv(sandbox.bwrap, run, relay) + keeper_argv(options)
        return argv + run.argv, f"http://127.0.0.1:{RELAY_PORT}", relay
    return keeper_argv(where) + run.argv, run.server_url, None


def run_program(run: Run, sandbox: Sandbox, running: set) -> tuple[int | None, str]:
    """Run the program to its end or its timeout; its exit code (None: timed out) and its output, the
    head and the tail of it (KEPT_OUTPUT: a program that prints a gigabyte costs the grader nothing)."""
    prepare(run)
    argv, url, relay = command_for(run, sandbox)
    with capture.Output(KEPT_OUTPUT) as output:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=run.workspace,
                env=environment(run, url, sandbox.kind),
                stdin=subprocess.DEVNULL,
                stdout=output.pipe,
                stderr=output.pipe,
                start_new_session=True,
            )
        except OSError as err:
            if relay:
                relay.close()
            return 126, f"cannot start {run.argv[0]}: {err.strerror}"
        output.started()
        running.add(proc)
        try:
            code = proc.wait(timeout=run.timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
            code = None
        finally:
            running.discard(proc)
            end_session(proc.pid)
            if relay:
                relay.close()
        return code, output.text()


def stop(proc: subprocess.Popen) -> None:
    """Ask the keeper to end the program and all it started; if it cannot (it was killed), kill its group."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # it had already finished


def end_session(sid: int) -> None:
    """Whatever is left of the run's session (the keeper's, started with start_new_session): killed.
    The keeper normally leaves nothing; this covers a program that killed its keeper."""
    processes.kill(processes.in_session(sid))


SOCKET_FOLDER_CHARS = 64  # a Unix socket's whole path is at most 107 bytes on Linux


class UnixRelay:
    """A Unix socket, each connection carried to the rung's replay server, at most keeper.CONNECTIONS
    at once (more are closed at once: a program cannot hoard the server a rung shares).

    The sandboxed program's network holds only its own loopback; the keeper relays it here. The
    socket lives in a folder of its own (mode 700), shown read-only in this run's sandbox alone
    (connecting needs no write access): no other program can see it, nor remove or replace it."""

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
        self.slots = threading.BoundedSemaphore(keeper.CONNECTIONS)
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
            carry(client, self.connect, self.slots)

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
