"""The classroom server under a class's load, against a threaded http.server, both driven by wrk.

    python -m bench.server_load              50 and 200 students, ROUNDS runs of SECONDS s each
    python -m bench.server_load --quick      one run of each

The server runs as a teacher runs it, `python -m workbook serve fixtures/s01_hello_agent.json --port 0`,
with default flags, in a process of its own. The floor, what a teacher would pick instead, is the
standard library's ThreadingHTTPServer answering the recording's first reply to every request, with
keep-alive (`python -m bench.server_load floor`). wrk (a load generator written in C, so the client's
own cost does not cap the figure: `apt-get install wrk`) keeps one connection per student, each
request the s01 recording's first, each connection's student a key of its own.

Goals: at 200 students no non-2xx reply or socket error and a p99 under P99_MS; at 50 students at
least RATIO_GOAL times the floor's requests per second. Loopback only; every run bounded in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.common import ROOT

FIXTURE = "fixtures/s01_hello_agent.json"
STUDENTS = (50, 200)
SECONDS = 5
ROUNDS = 3  # wrk runs per server and class size: the median is reported
P99_MS = 100
RATIO_GOAL = 0.5


def recording() -> list[dict]:
    return json.loads((ROOT / FIXTURE).read_text())["exchanges"]


# -- the servers, each in a process of its own ---------------------------------------------------------


@contextmanager
def server(argv: list[str]):
    """Start a server process that prints its URL on its first line; yield the URL; stop it after."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline()).group(0)
        drain = threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True)
        drain.start()  # the teacher's log, one line per request, read and dropped
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


SERVERS = {
    "replay": ["-m", "workbook", "serve", FIXTURE, "--port", "0"],
    "threaded": ["-m", "bench.server_load", "floor"],
}


class FloorHandler(BaseHTTPRequestHandler):
    """Read the body, answer one fixed JSON reply in one write, keep the connection."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    reply = b"{}"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        head = (
            f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(self.reply)}\r\n\r\n"
        )
        self.wfile.write(head.encode() + self.reply)

    def log_message(self, format, *args):
        pass


class FloorServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # as the replay server's: the floor must not drop a class connecting either


def floor_main() -> None:
    FloorHandler.reply = json.dumps(recording()[0]["response"]["body"]).encode()
    httpd = FloorServer(("127.0.0.1", 0), FloorHandler)
    print(f"floor listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


# -- wrk ------------------------------------------------------------------------------------------------

WRK_SCRIPT = """
local students = tonumber(os.getenv("STUDENTS") or "1")
local n = 0
request = function()
  n = n + 1
  local headers = {}
  headers["content-type"] = "application/json"
  headers["anthropic-version"] = "2023-06-01"
  headers["x-api-key"] = "student" .. (n % students)
  return wrk.format("POST", "/v1/messages", headers, BODY)
end
"""
# For a check of the machinery, not a measurement: wrk waits this long before each request.
WRK_PAUSE = """
delay = function()
  return PAUSE_MS
end
"""


def wrk(url: str, students: int, seconds: int = SECONDS, pause_ms: int = 0) -> dict:
    """wrk with one kept-alive connection per student: requests/s, p50 and p99 in ms, non-2xx replies
    and socket errors. `pause_ms`: a pause before each request (WRK_PAUSE)."""
    body = json.dumps(recording()[0]["request"], separators=(",", ":"))
    script = WRK_SCRIPT.replace("BODY", json.dumps(body))
    if pause_ms:
        script += WRK_PAUSE.replace("PAUSE_MS", str(int(pause_ms)))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script)
    try:
        argv = ["wrk", f"-t{min(2, students)}", f"-c{students}", f"-d{seconds}s", "--latency", "-s", lua.name]
        env = os.environ | {"STUDENTS": str(students)}
        done = subprocess.run([*argv, url], capture_output=True, text=True, env=env, timeout=seconds + 30)
    finally:
        os.unlink(lua.name)
    return read_wrk(done.stdout) | {"students": students}


def read_wrk(text: str) -> dict:
    """The figures of wrk's report: requests/s, the 50th and 99th percentile latencies, the errors."""

    def ms(label: str) -> float:
        found = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if not found:
            return float("nan")
        return float(found.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[found.group(2)]

    per_s = re.search(r"Requests/sec:\s+([\d.]+)", text)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "per_s": float(per_s.group(1)) if per_s else float("nan"),
        "p50": ms("50%"),
        "p99": ms("99%"),
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": sum(int(x) for x in sockets.groups()) if sockets else 0,
    }


def measure(
    students=STUDENTS, rounds: int = ROUNDS, seconds: int = SECONDS, servers=tuple(SERVERS), pause_ms: int = 0
) -> list[dict]:
    """Each server under wrk at each class size, the rounds interleaved server by server: the median of
    requests/s and latencies, the sum of errors, per server and class size."""
    runs: dict[tuple[str, int], list[dict]] = {}
    for _ in range(rounds):
        for name in servers:
            with server(SERVERS[name]) as url:
                for n in students:
                    runs.setdefault((name, n), []).append(wrk(url, n, seconds, pause_ms))
    rows = []
    for (name, n), results in runs.items():
        row = {"server": name, "students": n, "rounds": len(results)}
        row |= {k: statistics.median(r[k] for r in results) for k in ("per_s", "p50", "p99")}
        row |= {k: sum(r[k] for r in results) for k in ("non_2xx", "socket_errors")}
        rows.append(row)
    return rows


def verdicts(rows: list[dict]) -> list[str]:
    """The goals, one line each, from measure's rows."""
    by = {(r["server"], r["students"]): r for r in rows}
    lines = []
    if ("replay", 200) in by:
        r = by[("replay", 200)]
        lines.append(
            f"200 students: {r['non_2xx']} non-2xx, {r['socket_errors']} socket errors (goal 0), "
            f"p99 {r['p99']:.1f} ms (goal < {P99_MS} ms)"
        )
    if ("replay", 50) in by and ("threaded", 50) in by:
        ratio = by[("replay", 50)]["per_s"] / by[("threaded", 50)]["per_s"]
        lines.append(
            f"50 students: {ratio:.2f}x the threaded http.server's requests/s (goal >= {RATIO_GOAL}x)"
        )
    return lines


def report(rows: list[dict]) -> list[str]:
    rounds = max((r["rounds"] for r in rows), default=0)
    lines = [f"wrk, median of {rounds} runs of {SECONDS} s (keep-alive, a connection per student):"]
    lines.append("server     students  requests/s  p50 ms   p99 ms  non-2xx  socket errors")
    for r in sorted(rows, key=lambda r: (r["students"], r["server"])):
        lines.append(
            f"{r['server']:<10} {r['students']:>8}  {r['per_s']:>10.0f}  {r['p50']:>6.2f}  {r['p99']:>7.2f}  "
            f"{r['non_2xx']:>7}  {r['socket_errors']:>13}"
        )
    return lines + verdicts(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", nargs="?", choices=["floor"], help="`floor`: the threaded floor server alone")
    parser.add_argument("--quick", action="store_true", help="one run of each, not three")
    args = parser.parse_args(argv)
    if args.what == "floor":
        floor_main()
        return 0
    if not shutil.which("wrk"):
        print("wrk is not installed (apt-get install wrk): nothing measured")
        return 1
    print("\n".join(report(measure(rounds=1 if args.quick else ROUNDS))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
