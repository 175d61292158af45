"""keeper — the graded program's parent: it sets the program's bounds, and nothing the program
starts outlives its rung.

    python keeper.py [--seed FROM TO] [--relay SOCKET PORT] [--cwd FOLDER] -- PROGRAM [ARGS...]

The grader starts this small script (the standard library and psutil, through workbook/processes.py,
so it starts in milliseconds), and it starts the program. It makes itself a *child subreaper* (Linux
prctl): whatever the program starts and abandons, even a `setsid` daemon that forked twice, is handed
to the keeper instead of to init. So when the program ends, or the grader asks it to stop (SIGTERM),
the keeper finds every process left below it, kills them all, and only then exits with the program's
exit code.

Before it starts the program, the keeper bounds what it may use (LIMITS: memory, file size, open
files, processes; a watchdog ends a program that runs more than PROCESSES at once, which the rlimit
cannot do for root), and:
  --seed FROM TO       copies the rung's folder (its workspace) into TO, a size-bounded tmpfs;
  --relay SOCKET PORT  inside bubblewrap's network of its own (only a loopback), listens on PORT and
                       carries each connection to SOCKET, the grader's Unix socket for this run alone.
The sandbox itself is bubblewrap's (workbook/classroom/sandbox.py); the keeper runs inside it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script, isolated (python -I: sandbox.keeper_argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the project, for workbook.processes
from workbook import processes  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
MEMORY_BYTES = 2 << 30  # each process's data (RLIMIT_DATA: not RLIMIT_AS, which node's WebAssembly outgrows)
TOTAL_MEMORY = 4 << 30  # all its processes' resident memory together, shared memory too: the watchdog's
FILE_BYTES = 64 << 20  # the largest file it may write
OPEN_FILES = 1024
PROCESSES = 256  # processes (threads too) at once: RLIMIT_NPROC where it binds, and the watchdog
WATCH_EVERY = 0.2  # s between the watchdog's counts
CONNECTIONS = 16  # connections one run may hold open to its server through the relay at once
KILLED_BY_WATCHDOG = 125


def libc():
    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Orphans below this process come to it, not to init (Linux only; elsewhere a no-op)."""
    try:
        libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def kill_everything_below(me: int) -> None:
    """SIGKILL every descendant, reap them, and look again until none is left (a fork mid-kill is
    found on the next pass: its orphaned children come to us, the subreaper)."""
    for _ in range(100):
        left = processes.below(me)
        if not left:
            return
        processes.kill(left)
        reap()


def reap() -> None:
    """Collect every child that has ended, so none stays a zombie in the list."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# -- the relay: the program's one way out, to its own server -----------------------------------------


def pump(source: socket.socket, sink: socket.socket, done=None) -> None:
    """Copy bytes one way until either side closes, then close both (and call `done`, if given)."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()
        if done:
            done()


def carry(client: socket.socket, connect, slots: threading.BoundedSemaphore | None = None) -> None:
    """One connection, carried to a fresh connection made by `connect()`, both ways at once. With
    `slots`, a connection beyond them is closed at once: a program cannot hoard its server's sockets."""
    if slots is not None and not slots.acquire(blocking=False):
        client.close()
        return
    try:
        upstream = connect()
    except OSError:
        client.close()
        if slots is not None:
            slots.release()
        return
    done = slots.release if slots is not None else None  # the way in ends: the slot is free again
    threading.Thread(target=pump, args=(client, upstream, done), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client), daemon=True).start()


def serve_relay(listener: socket.socket, connect, slots=None) -> None:
    """Accept forever (a daemon thread): each connection is carried by `carry`."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # the listener was closed: the run is over
        carry(client, connect, slots)


def start_relay(unix_path: str, port: int) -> None:
    """Listen on this network's loopback and carry each connection to the grader's Unix socket."""
    listener = socket.create_server(("127.0.0.1", port))

    def connect() -> socket.socket:
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(unix_path)
        return upstream

    slots = threading.BoundedSemaphore(CONNECTIONS)
    threading.Thread(target=serve_relay, args=(listener, connect, slots), daemon=True).start()


# -- bounds ----------------------------------------------------------------------------------------


def set_limits(shared_count: bool) -> None:
    """Memory, file size, open files and processes, for this process and all it starts. Outside a user
    namespace of its own (`shared_count`) RLIMIT_NPROC counts all the user's tasks: PROCESSES more, then."""
    most = PROCESSES + (processes.threads_of_user(os.getuid()) if shared_count else 0)
    for kind, value in (
        (resource.RLIMIT_DATA, MEMORY_BYTES),
        (resource.RLIMIT_FSIZE, FILE_BYTES),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
        (resource.RLIMIT_NPROC, most),
        (resource.RLIMIT_CORE, 0),
    ):
        _, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass  # a lower hard limit stays as it is


def too_much(me: int) -> str | None:
    """What the program has outgrown, in words, or None: more processes than PROCESSES, or more memory
    all together than TOTAL_MEMORY, its memfds and /dev/shm files counted too (RLIMIT_NPROC does not
    bind root; RLIMIT_DATA counts no shared memory)."""
    running = processes.below(me)
    if len(running) > PROCESSES:
        return f"more than {PROCESSES} processes at once"
    if processes.resident(running) + processes.shared_memory(running) > TOTAL_MEMORY:
        return f"more than {TOTAL_MEMORY >> 30} GiB of memory"
    return None


def watch(me: int, stopped: list[str]) -> None:
    """The watchdog: a program that outgrows its bounds (too_much) is stopped, all of it; `stopped`
    says why, for main() to print once the program has gone."""
    while True:
        time.sleep(WATCH_EVERY)
        try:
            problem = too_much(me)
        except OSError:
            continue
        if problem:
            stopped.append(problem)  # first: main() wakes as soon as the program is killed
            kill_everything_below(me)
            return


def seed(source: str, target: str) -> None:
    """The rung's folder (its workspace, an empty home and temp folder) copied into the tmpfs at `target`."""
    shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)


# -- the run ---------------------------------------------------------------------------------------


def exit_code(returncode: int) -> int:
    """A program killed by signal N exits as a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def options_of(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    split = argv.index("--")
    options, words = {}, argv[:split]
    arity = {"--seed": 2, "--relay": 2, "--cwd": 1}
    while words:
        flag = words.pop(0)
        options[flag], words = words[: arity[flag]], words[arity[flag] :]
    return options, argv[split + 1 :]


def main(argv: list[str]) -> int:
    options, program = options_of(argv)
    become_subreaper()
    me = os.getpid()

    def stop(signum, frame):  # the grader's timeout: everything below us goes, then we do
        kill_everything_below(me)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        if "--seed" in options:
            seed(*options["--seed"])
        if "--relay" in options:
            start_relay(options["--relay"][0], int(options["--relay"][1]))
        set_limits(shared_count="--relay" not in options)  # --relay: bubblewrap's user namespace
    except (OSError, ValueError, KeyError, TypeError, shutil.Error) as err:
        print(f"error: the grader cannot confine the program here: {err}", file=sys.stderr)
        return 125
    stopped: list[str] = []
    threading.Thread(target=watch, args=(me, stopped), daemon=True).start()
    cwd = options.get("--cwd", [None])[0]
    try:
        child = subprocess.Popen(program, stdin=subprocess.DEVNULL, cwd=cwd)
    except OSError as err:
        print(f"error: cannot start {program[0]}: {err.strerror}", file=sys.stderr)
        return 126
    code = exit_code(child.wait())
    kill_everything_below(me)
    if stopped:
        print(f"stopped by the grader: {stopped[0]}", file=sys.stderr)
        return KILLED_BY_WATCHDOG
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
