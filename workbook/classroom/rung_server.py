"""A rung's replay server in a process of its own, under an address-space limit.

The grader serves each rung's recording to the programs it grades. Those programs are strangers' code,
and the server parses and judges whatever they send: in the grader's own process, one 3 MB request
took it to 2 GB (red team five). So the server runs here, in a child process whose address space the
kernel caps (RLIMIT_AS, MEMORY bytes): a request that would take more fails there, as a 500 to the
program or the child's end, and the grader's process never holds it.

The child tells the grader what it saw, one JSON line per event on its stdout:
  {"url": ...}             once, when it listens;
  {"log": line}            each line of the server's log;
  {"seen": {...}}          each request, as workbook/classroom/reasons.py's Seen, its body dropped
                           when the request was a mistake larger than KEPT_BODY_BYTES (the words stay);
  {"sync": token}          the answer to a `token` line on its stdin: everything seen before is sent.
The grader reads them with workbook/api/json_text.py, whose cost per byte is bounded.

Run (by the grader): python -m workbook.classroom.rung_server FIXTURE_NAME
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import threading

from workbook import paths
from workbook.api import json_text
from workbook.classroom import reasons, students

MEMORY = 1024 * 2**20  # the child's address space: about 100 MB at start; a few 32 MB bodies fit
KEPT_BODY_BYTES = 2**20  # a mistaken request bigger than this reaches the grader without its body


# -- the child ---------------------------------------------------------------------------------------


class Lines:
    """The child's stdout: one JSON line per event, whole, whichever thread writes it."""

    def __init__(self, stream):
        self.stream, self.lock = stream, threading.Lock()

    def send(self, **event) -> None:
        line = json.dumps(event) + "\n"
        with self.lock:
            self.stream.write(line)
            self.stream.flush()

    def write(self, text: str) -> None:  # the server's log
        for line in text.splitlines():
            if line.strip():
                self.send(log=line)

    def flush(self) -> None:
        pass


def seen_of(name, turn, body, reply, mistake, headers) -> reasons.Seen:
    """One request as the grader judges it (see RungServer.observe, of old in workbook/classroom/grade.py)."""
    fallback = mistake is not None and students.is_thread_fallback(mistake)
    if mistake is not None and len(json.dumps(body)) > KEPT_BODY_BYTES:
        body = None  # reasons.py explains a mistake from its words when the body is gone
    return reasons.Seen(
        turn,
        body,
        None if mistake is None else str(mistake),
        retry_count(headers),
        tuple(h.strip() for h in headers.get("x-stainless-helper", "").split(",") if h.strip()),
        fallback,
        reply is not None and reply.side,
    )


def retry_count(headers: dict) -> int:
    """x-stainless-retry-count as a number: how many times the SDK had already sent this request."""
    value = headers.get("x-stainless-retry-count", "0")
    return int(value) if value.isdigit() else 0


def child(name: str) -> int:
    """Serve one rung's recording, under MEMORY, until the grader closes stdin."""
    from workbook.classroom import server
    from workbook.replay import fixtures

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    lines = Lines(sys.stdout)
    fixture = fixtures.load_fixture(paths.ROOT / "fixtures" / f"{name}.json")
    http = server.ReplayServer({name: fixture}, students.LOOPBACK, 0, out=lines)

    def observe(student, name, turn, body, reply, mistake, headers) -> None:
        lines.send(
            seen={"student": student} | dataclasses.asdict(seen_of(name, turn, body, reply, mistake, headers))
        )

    http.classroom.observer = observe
    threading.Thread(target=http.serve_forever, daemon=True).start()
    lines.send(url=http.url)
    for token in sys.stdin:  # the grader asks: all seen so far is sent before the answer
        lines.send(sync=token.strip())
    http.shutdown()
    return 0


# -- the grader's side -------------------------------------------------------------------------------


class RungServer:
    """One rung's recording, served from a child process on a free loopback port to every program graded
    on it at once. Each run sends its own stand-in key; the child's lines go to the run that sent it."""

    def __init__(self, name: str, fixture: dict):
        self.fixture, self.log = fixture, LogLines()
        self.runs: dict[str, list[reasons.Seen]] = {}  # student -> the requests of that run
        self.synced: dict[str, threading.Event] = {}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workbook.classroom.rung_server", name],
            cwd=paths.ROOT,
            env=os.environ | {"MALLOC_ARENA_MAX": "2"},  # each thread's malloc arena would reserve 64 MB
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        first = self.proc.stdout.readline()
        if not first:
            raise RuntimeError(f"the replay server for {name} did not start")
        self.url = json_text.loads(first.encode())["url"]
        threading.Thread(target=self.read, daemon=True).start()

    def read(self) -> None:
        for line in self.proc.stdout:
            event = json_text.loads(line.encode())
            if "seen" in event:
                self.observe(event["seen"])
            elif "log" in event:
                self.log.write(event["log"])
            elif "sync" in event:
                self.synced.pop(event["sync"]).set()
        self.log.write("-  -  the rung's replay server stopped (out of memory?)")
        for waiting in list(self.synced.values()):  # nothing more will come
            waiting.set()

    def observe(self, seen: dict) -> None:
        runs = self.runs.get(seen.pop("student"))
        if runs is not None:  # else a key no run of ours was given
            runs.append(reasons.Seen(**seen | {"helpers": tuple(seen["helpers"])}))

    def settle(self) -> None:
        """Wait until every request the child saw so far has reached its run's list."""
        token = os.urandom(8).hex()
        done = self.synced[token] = threading.Event()
        try:
            self.proc.stdin.write(token + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):  # the child is gone: what it sent is all there is
            return
        done.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LogLines:
    """The replay server's log, kept (not printed): the grader quotes it when nothing else explains."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines += [line for line in text.splitlines() if line.strip()]

    def flush(self) -> None:
        pass

    def of(self, student: str) -> list[str]:
        """The lines about one student (the log's second column is the student's name)."""
        return [line for line in self.lines if line.split()[1:2] == [student]]


if __name__ == "__main__":
    sys.exit(child(sys.argv[1]))
