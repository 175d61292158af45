"""6. The classroom server under a class's load: requests/s and latency, against two bare floors.

    python -m bench.server_load              1, 50 and 200 students, plus connect storms and a big request
    python -m bench.server_load --quick      fewer requests per student
    python -m bench.server_load --root DIR   the server of another checkout (before -> after), same clients

The server runs as a teacher runs it, `python -m workbook serve fixtures/s01_hello_agent.json --port 0`
with default flags (a whole class from one machine, as on a lab server), in a process of its own. Each
student is a thread here, on one kept-alive HTTP/1.1 connection, sending the s01 recording's two
requests in turn (turn 1, turn 2, then turn 1 again: a restart) and timing each answer. Two floors
answer one fixed JSON reply with keep-alive, each in a process of its own and driven by the same
clients: the threaded http.server (`python -m bench.server_load floor`), what a teacher would pick
instead, and a raw asyncio protocol (`... floor-asyncio`), the least an event loop in Python can do.
When wrk (a load generator written in C: `apt-get install wrk`) is installed, it drives the server and
both floors too, the same way (keep-alive, the s01 recording's first request, one API key per
connection's turn), so the client's own cost does not cap what is measured. The extra rows are what a
class does to a server: everyone connecting at once, one student's 17 MB request while another keeps
working, and what a held thread costs in memory for the body that made it.

Loopback only; every loop is bounded in requests and in seconds. Benchmarks print; no test asserts a
timing (tests/classroom/test_replay_server.py runs this on tiny inputs).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIXTURE = ROOT / "fixtures" / "s01_hello_agent.json"
STUDENTS = (1, 50, 200)
WRK_SECONDS = 5
WRK_ROUNDS = 3  # wrk runs per server and class size: the median is reported
REQUESTS = 2000  # per class size, shared among its students (at least 4 each)
STORMS = (50, 200)  # connections opened at once
BIG_MB = 17  # legal: the API's limit is 32 MB
TOO_BIG_MB = 40
TIME_LIMIT = 30.0  # seconds, for any one measurement
HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
# One class of students, the same names in every measurement against one server: a class, not a stream
# of new ones from one machine (which the server's caps per address would refuse past 300)
HEAVY, LIGHT = "student000", "student001"


def turns() -> list[bytes]:
    """The bodies of the s01 recording's requests, as a student's SDK loop sends them (compact JSON)."""
    fixture = json.loads(FIXTURE.read_text())
    return [json.dumps(e["request"], separators=(",", ":")).encode() for e in fixture["exchanges"]]


# -- the servers, each in a process of its own ---------------------------------------------------------


@contextmanager
def server(argv: list[str], cwd: Path = ROOT):
    """Start a server process that prints its URL on its first line; yield the URL; stop it after."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = Url(re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline()).group(0))
        url.pid = proc.pid
        drain = threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True)
        drain.start()  # the teacher's log, one line per request, read and dropped
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


NAN = float("nan")


class Url(str):
    """A server's URL, and the process that serves it (`pid`), whose CPU time cpu_seconds reads."""

    pid = 0


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a process has used so far; NaN where /proc cannot tell (not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def replay_server(root: Path = ROOT):
    """The classroom server as a teacher starts it, with default flags, from this checkout or another."""
    return server(["-m", "workbook", "serve", str(FIXTURE.relative_to(ROOT)), "--port", "0"], cwd=root)


def floor_server(kind: str = "floor"):
    """`floor` (threaded http.server) or `floor-asyncio` (a raw asyncio protocol)."""
    return server(["-m", "bench.server_load", kind])


class FloorHandler(BaseHTTPRequestHandler):
    """The least an HTTP/1.1 server can do: read the body, answer one fixed JSON reply in one write."""

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
    request_queue_size = 1024  # as the replay server's: the floor must not drop a storm either


def floor_main() -> None:
    fixture = json.loads(FIXTURE.read_text())
    FloorHandler.reply = json.dumps(fixture["exchanges"][0]["response"]["body"]).encode()
    httpd = FloorServer(("127.0.0.1", 0), FloorHandler)
    print(f"floor listening on http://127.0.0.1:{httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


class AsyncioFloor(asyncio.Protocol):
    """The least an asyncio server can do: find each request's end by its content-length, answer one
    fixed reply. No timeouts, no checks, no log: a bound nothing in Python gets under."""

    reply = b""

    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data: bytes):
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(self.reply)


def asyncio_floor_main() -> None:
    fixture = json.loads(FIXTURE.read_text())
    body = json.dumps(fixture["exchanges"][0]["response"]["body"]).encode()
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    AsyncioFloor.reply = head.encode() + body

    async def serve():
        listening = await asyncio.get_running_loop().create_server(AsyncioFloor, "127.0.0.1", 0, backlog=1024)
        print(f"floor listening on http://127.0.0.1:{listening.sockets[0].getsockname()[1]}", flush=True)
        await listening.serve_forever()

    asyncio.run(serve())


# -- the students ----------------------------------------------------------------------------------------


def connect(url: str) -> http.client.HTTPConnection:
    host, port = url.split("//")[1].split(":")
    return http.client.HTTPConnection(host, int(port), timeout=TIME_LIMIT)


def ask(conn: http.client.HTTPConnection, body: bytes, student: str) -> int:
    conn.request("POST", "/v1/messages", body, HEADERS | {"x-api-key": student})
    response = conn.getresponse()
    response.read()
    return response.status


def student(url: str, name: str, n: int, bodies: list[bytes], start: threading.Barrier, out: dict) -> None:
    """One student on one kept-alive connection: n requests, each timed; errors counted, not raised."""
    latencies, errors, statuses = [], [], set()
    try:
        conn = connect(url)
        start.wait()
        deadline = time.monotonic() + TIME_LIMIT
        for i in range(n):
            if time.monotonic() > deadline:
                errors.append("time limit")
                break
            began = time.perf_counter()
            statuses.add(ask(conn, bodies[i % len(bodies)], name))
            latencies.append(time.perf_counter() - began)
        conn.close()
    except (OSError, http.client.HTTPException, threading.BrokenBarrierError) as err:
        errors.append(type(err).__name__)
    out[name] = {"latencies": latencies, "errors": errors, "statuses": statuses}


def load(url: str, students: int, requests: int) -> dict:
    """`students` at once, `requests` shared among them: requests/s, p50 and p99 in ms, errors."""
    each = max(4, requests // students)
    bodies, out = turns(), {}
    start = threading.Barrier(students + 1, timeout=TIME_LIMIT)
    threads = [
        threading.Thread(target=student, args=(url, f"student{i:03d}", each, bodies, start, out))
        for i in range(students)
    ]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join(TIME_LIMIT + 5)
    wall = time.perf_counter() - began
    latencies = sorted(x for r in out.values() for x in r["latencies"])
    return {
        "students": students,
        "requests": len(latencies),
        "per_s": len(latencies) / wall if wall else float("nan"),
        "p50": percentile(latencies, 50) * 1000,
        "p99": percentile(latencies, 99) * 1000,
        "errors": sum(len(r["errors"]) for r in out.values()),
        "statuses": sorted({s for r in out.values() for s in r["statuses"]}),
    }


# -- wrk: the same load from a client written in C ------------------------------------------------------

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
# Added for a check of the machinery rather than a measurement: wrk waits this long before each request
# of a connection, so that a second of wrk costs the server a few requests' CPU, not a core-second.
WRK_PAUSE = """
delay = function()
  return PAUSE_MS
end
"""


def wrk(url: str, students: int, seconds: int = WRK_SECONDS, pause_ms: int = 0) -> dict:
    """wrk with one kept-alive connection per student, each request the s01 recording's first (the
    student starts over each time, a 200 every time): requests/s, p50 and p99 in ms, non-2xx replies,
    and the server's CPU µs per request (when `url` names its process: a figure the machine's other
    load moves less than it moves requests/s). `pause_ms`: a pause before each request (WRK_PAUSE)."""
    script = WRK_SCRIPT.replace("BODY", json.dumps(turns()[0].decode()))
    if pause_ms:
        script += WRK_PAUSE.replace("PAUSE_MS", str(int(pause_ms)))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(script)
    try:
        argv = ["wrk", f"-t{min(2, students)}", f"-c{students}", f"-d{seconds}s", "--latency", "-s", lua.name]
        env = os.environ | {"STUDENTS": str(students)}
        used = cpu_seconds(getattr(url, "pid", 0))
        done = subprocess.run([*argv, url], capture_output=True, text=True, env=env, timeout=seconds + 30)
        used = cpu_seconds(getattr(url, "pid", 0)) - used
    finally:
        os.unlink(lua.name)
    result = read_wrk(done.stdout) | {"students": students}
    answered = result["per_s"] * seconds
    return result | {"cpu_us": used / answered * 1e6 if answered else float("nan")}


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


def wrk_levels(
    students=STUDENTS,
    rounds: int = WRK_ROUNDS,
    root: Path = ROOT,
    seconds: int = WRK_SECONDS,
    servers=("replay", "threaded", "asyncio"),
    pause_ms: int = 0,
) -> list:
    """Each server under wrk at each class size, rounds interleaved server by server: medians of each."""
    runs: dict[tuple[str, int], list[dict]] = {}
    starts = {"replay": lambda: replay_server(root), "threaded": floor_server, "asyncio": asyncio_floor}
    servers = {name: starts[name] for name in servers}
    for _ in range(rounds):
        for name, start in servers.items():
            with start() as url:
                for n in students:
                    runs.setdefault((name, n), []).append(wrk(url, n, seconds, pause_ms))
    rows = []
    for (name, n), results in runs.items():
        row = {"server": name, "students": n, "rounds": len(results)}
        row |= {k: statistics.median(r[k] for r in results) for k in ("per_s", "p50", "p99", "cpu_us")}
        row |= {k: sum(r[k] for r in results) for k in ("non_2xx", "socket_errors")}
        rows.append(row)
    return rows


def asyncio_floor():
    return floor_server("floor-asyncio")


# -- what a held thread costs ----------------------------------------------------------------------------


# -- a long conversation: each request judged on what it adds, or whole ------------------------------


def long_fixture(turns: int) -> dict:
    """A `turns`-turn recording built from s01's first turn: each turn three tool calls (ids of its
    own) and their results, the last turn's reply an end_turn."""
    first = json.loads(FIXTURE.read_text())["exchanges"]
    request, reply = first[0]["request"], first[0]["response"]["body"]
    results = first[1]["request"]["messages"][2]
    exchanges, messages = [], list(request["messages"])
    for k in range(turns):
        body = json.loads(json.dumps(reply).replace("toolu_01", f"toolu_{k:04d}"))
        body["id"] = f"msg_{k:04d}"
        if k == turns - 1:
            body["content"], body["stop_reason"] = [{"type": "text", "text": "done"}], "end_turn"
        exchanges.append(
            {"request": request | {"messages": list(messages)}, "response": {"status": 200, "body": body}}
        )
        answered = json.loads(json.dumps(results).replace("toolu_01", f"toolu_{k:04d}"))
        messages += [{"role": "assistant", "content": body["content"]}, answered]
    return {"exchanges": exchanges}


def long_conversation(turns: int = 100, last: int = 10, reps: int = 5) -> dict:
    """CPU µs the server spends on a student's request (parse, judge, reply; no HTTP) in the last `last`
    turns of a `turns`-turn conversation: each judged on what it adds to the student's last request, as
    the server does, and each judged whole (the request's size not given: nothing kept), alternately."""
    import io

    from workbook.classroom.server import parse_json
    from workbook.classroom.students import Classroom

    fixture = long_fixture(turns)
    bodies = [json.dumps(e["request"], separators=(",", ":")).encode() for e in fixture["exchanges"]]
    headers = {"anthropic-version": "2023-06-01"}
    spent = {"remembered": [], "whole": []}
    for rep in range(reps + 1):  # the first, unmeasured, builds the contract's checks
        rooms = {way: Classroom({"long": fixture}, out=io.StringIO()) for way in spent}
        for n, raw in enumerate(bodies):
            for way, room in rooms.items():  # turn by turn, one way then the other: the same load on both
                began = time.thread_time()
                reply = room.answer(
                    f"s{rep}", parse_json(raw), None, headers, len(raw) if way == "remembered" else None
                )
                if rep and n >= turns - last:
                    spent[way].append(time.thread_time() - began)
                assert reply.status == 200, reply.body
    us = {way: statistics.mean(times) * 1e6 for way, times in spent.items()}
    return {"turns": turns, "bytes": len(bodies[-1]), **us, "ratio": us["whole"] / us["remembered"]}


def held_memory(megabytes: int = 4) -> dict:
    """Memory still held (tracemalloc) after a `thread: create` whose body is `megabytes` long, per byte
    of that body: what the server keeps for the thread, and nothing else."""
    from workbook.api import threads, wire

    body = json.loads(big_request(megabytes)) | {"thread": {"type": "create"}}
    raw = json.dumps(body).encode()
    fixture = json.loads(FIXTURE.read_text())
    reply = wire.recorded_message(fixture["exchanges"][1]["response"])
    gc.collect()
    tracemalloc.start()
    try:
        held = threads.Threads(ledger=threads.Ledger())
        request, thread = held.expand(json.loads(raw))
        held.hold(thread, request, reply)
        del request, thread
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return {"body_mb": len(raw) / 2**20, "held_mb": kept / 2**20, "ratio": kept / len(raw)}


def percentile(values: list[float], p: int) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]


def storm(url: str, n: int) -> dict:
    """n students connecting at the same moment, one request each: how many were dropped, the slowest."""
    start = threading.Barrier(n + 1, timeout=TIME_LIMIT)
    bodies, out = turns()[:1], {}
    threads = [
        threading.Thread(target=student, args=(url, f"student{i:03d}", 1, bodies, start, out))
        for i in range(n)
    ]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join(TIME_LIMIT + 5)
    latencies = [x for r in out.values() for x in r["latencies"]]
    dropped = sum(1 for r in out.values() if r["errors"]) + (n - len(out))
    return {"n": n, "dropped": dropped, "slowest": max(latencies, default=float("nan")) * 1000}


def big_request(megabytes: int) -> bytes:
    """Turn 2 with a tool's output `megabytes` long, as many small text blocks: legal (under 32 MB),
    the recording's shape, and the costliest kind of body to parse and check, block by block."""
    request = json.loads(turns()[1])
    line = {"type": "text", "text": "x" * 100}
    blocks = megabytes * 1024 * 1024 // len(json.dumps(line))
    request["messages"][-1]["content"][0]["content"] = [line] * blocks
    return json.dumps(request).encode()


def stall(url: str, megabytes: int = BIG_MB, rounds: int = 3) -> dict:
    """One student sends a big request `rounds` times while another keeps asking: the other's slowest."""
    big, (small, _) = big_request(megabytes), turns()
    done, out = threading.Event(), {"big": []}

    def heavy():
        conn = connect(url)
        for _ in range(rounds):
            ask(conn, small, HEAVY)  # turn 1, so the big turn 2 is the recording's next
            began = time.perf_counter()
            out["big"].append((ask(conn, big, HEAVY), time.perf_counter() - began))
        conn.close()
        done.set()

    conn = connect(url)
    ask(conn, small, LIGHT)  # connected and warm before the big requests start
    latencies, deadline = [], time.monotonic() + TIME_LIMIT
    thread = threading.Thread(target=heavy)
    thread.start()
    while not done.is_set() and time.monotonic() < deadline:
        began = time.perf_counter()
        ask(conn, small, LIGHT)
        latencies.append(time.perf_counter() - began)
    thread.join(TIME_LIMIT)
    conn.close()
    return {
        "megabytes": megabytes,
        "big": [status for status, _ in out["big"]],
        "big_ms": statistics.median(t for _, t in out["big"]) * 1000 if out["big"] else float("nan"),
        "other_requests": len(latencies),
        "other_p50": percentile(latencies, 50) * 1000,
        "other_max": max(latencies, default=float("nan")) * 1000,
    }


def too_large(url: str, megabytes: int = TOO_BIG_MB) -> dict:
    """Headers claiming a body of `megabytes`, and no body sent: the answer, and how long it took."""
    with socket.create_connection(url.split("//")[1].split(":"), timeout=TIME_LIMIT) as sock:
        began = time.perf_counter()
        sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nhost: bench\r\nx-api-key: student002\r\n"
            b"anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % (megabytes * 1024 * 1024)
        )
        try:
            first = sock.recv(65536).split(b"\r\n", 1)[0].decode(errors="replace")
        except OSError as err:
            first = f"no answer ({type(err).__name__})"
        return {"megabytes": megabytes, "answer": first, "ms": (time.perf_counter() - began) * 1000}


def longest_pause(work, tick: float = 0.0005) -> float:
    """Run `work` while another thread ticks every `tick` s: the longest that thread waited, in ms."""
    gaps, stop = [0.0], threading.Event()

    def ticker():
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(tick)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=ticker)
    thread.start()
    time.sleep(0.02)
    try:
        work()
    finally:
        stop.set()
        thread.join()
    return max(gaps) * 1000


PARSES = ("json.loads", "parse_json")


def parse_pause(variant: str, megabytes: int = BIG_MB) -> float:
    """In a process set up as the server is (its modules, the fixture loaded): the longest pause of
    another thread while one big body is parsed by `variant`, one of PARSES."""

    from workbook.classroom import server as classroom_server

    classroom_server.load_fixtures([str(FIXTURE)])
    raw = big_request(megabytes)
    parse = json.loads if variant == "json.loads" else classroom_server.parse_json
    return longest_pause(lambda: parse(raw))


def parse_pauses(megabytes: int = BIG_MB, reps: int = 3) -> dict:
    """parse_pause of each variant, each in a fresh process, `reps` times interleaved: the worst of each.

    A fresh process each time, because whether a parse meets a full collection of everything the
    imports left depends on what came before it: the server's first big request meets one.
    """
    worst = dict.fromkeys(PARSES, 0.0)
    for _ in range(reps):
        for variant in PARSES:
            argv = [
                sys.executable,
                "-m",
                "bench.server_load",
                "pause",
                variant,
                "--megabytes",
                str(megabytes),
            ]
            done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
            worst[variant] = max(worst[variant], float(done.stdout.strip() or "nan"))
    return {"megabytes": megabytes, "reps": reps} | worst


def measure(
    requests: int = REQUESTS,
    students=STUDENTS,
    storms=STORMS,
    big_mb: int = BIG_MB,
    root: Path = ROOT,
    pause_reps: int = 3,
    wrk_rounds: int = WRK_ROUNDS,
    long_turns: int = 100,
) -> dict:
    """Every figure of this benchmark: the floors and the server at each class size (the Python
    client, then wrk if installed), storms, stall, 413, a held thread's memory, parse pauses."""
    result = {"levels": [], "storms": []}
    floors = {}
    for kind in ("floor", "floor-asyncio"):
        with floor_server(kind) as url:
            load(url, 1, 20)  # warm, as the server is below
            floors[kind] = {n: load(url, n, requests) for n in students}
    with replay_server(root) as url:
        load(url, 1, 20)  # warm: imports done, first replies built
        for n in students:
            level = load(url, n, requests)
            level["floor_per_s"] = floors["floor"][n]["per_s"]
            level["floor_p50"] = floors["floor"][n]["p50"]
            level["floor_p99"] = floors["floor"][n]["p99"]
            level["asyncio_per_s"] = floors["floor-asyncio"][n]["per_s"]
            level["ratio"] = level["per_s"] / floors["floor"][n]["per_s"]
            result["levels"].append(level)
        result["storms"] = [storm(url, n) for n in storms]
        result["stall"] = stall(url, big_mb)
        result["too_large"] = too_large(url)
    result["wrk"] = wrk_levels(students, wrk_rounds, root) if wrk_rounds and shutil.which("wrk") else None
    result["held"] = held_memory()
    result["long"] = long_conversation(long_turns, last=min(10, long_turns))
    result["pauses"] = parse_pauses(big_mb, pause_reps) if pause_reps else None
    return result


def report(result: dict) -> str:
    """The whole result as the terminal shows it: a line per class size, then what a class does."""
    lines = [
        "Python client (a thread per student):",
        "students  requests  requests/s  threaded floor  asyncio floor  server/threaded  p50 ms  p99 ms  "
        "floor p99  errors",
    ]
    for r in result["levels"]:
        lines.append(
            f"{r['students']:>8}  {r['requests']:>8}  {r['per_s']:>10.0f}  {r['floor_per_s']:>14.0f}  "
            f"{r['asyncio_per_s']:>13.0f}  {r['ratio']:>15.2f}  {r['p50']:>6.2f}  {r['p99']:>6.1f}  "
            f"{r['floor_p99']:>9.1f}  {r['errors']:>6}  statuses {r['statuses']}"
        )
    lines += wrk_report(result.get("wrk"))
    return "\n".join(lines + what_a_class_does(result))


def wrk_report(rows: list | None) -> list[str]:
    if rows is None:
        return ["wrk: not installed (apt-get install wrk), so not measured"]
    rounds = max((r.get("rounds", WRK_ROUNDS) for r in rows), default=WRK_ROUNDS)
    lines = [f"wrk (median of {rounds} runs of {WRK_SECONDS} s each; keep-alive):"]
    lines.append(
        "server        students  requests/s  p50 ms   p99 ms  non-2xx  socket errors  / threaded  CPU µs/req"
    )
    threaded = {r["students"]: r["per_s"] for r in rows if r["server"] == "threaded"}
    for r in sorted(rows, key=lambda r: (r["students"], r["server"])):
        ratio = r["per_s"] / threaded[r["students"]] if threaded.get(r["students"]) else float("nan")
        lines.append(
            f"{r['server']:<13} {r['students']:>8}  {r['per_s']:>10.0f}  {r['p50']:>6.2f}  {r['p99']:>7.2f}  "
            f"{r['non_2xx']:>7}  {r['socket_errors']:>13}  {ratio:>10.2f}  {r.get('cpu_us', NAN):>10.0f}"
        )
    lines.append(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return lines


def what_a_class_does(result: dict) -> list[str]:
    """The storms, the big request and the refused one, a line each."""
    lines = []
    for s in result["storms"]:
        dropped, slowest = s["dropped"], s["slowest"]
        lines.append(
            f"{s['n']} students connecting at once: {dropped} dropped, slowest answer {slowest:.0f} ms"
        )
    st = result["stall"]
    lines.append(
        f"one student's {st['megabytes']} MB request (answers {st['big']}, {st['big_ms']:.0f} ms each): "
        f"another student's {st['other_requests']} requests meanwhile, p50 {st['other_p50']:.2f} ms, "
        f"slowest {st['other_max']:.0f} ms"
    )
    t = result["too_large"]
    lines.append(f"headers claiming {t['megabytes']} MB, no body: {t['answer']!r} after {t['ms']:.1f} ms")
    c = result.get("long")
    if c:
        lines.append(
            f"a request in the last turns of a {c['turns']}-turn conversation ({c['bytes'] // 1024} KB): "
            f"{c['remembered']:.0f} µs judged on what it adds, {c['whole']:.0f} µs judged whole "
            f"({c['ratio']:.1f}x)"
        )
    h = result.get("held")
    if h:
        lines.append(
            f"a held thread: {h['held_mb']:.1f} MB kept for a {h['body_mb']:.1f} MB thread create "
            f"({h['ratio']:.2f}x the body)"
        )
    p = result["pauses"]
    if p is None:
        return lines
    lines.append(
        f"longest pause of other threads while a {p['megabytes']} MB body is parsed (worst of "
        f"{p['reps']}): json.loads {p['json.loads']:.0f} ms, the server's parse_json {p['parse_json']:.0f} ms"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "what",
        nargs="*",
        help="`floor` or `floor-asyncio`: a floor server alone; `pause VARIANT`: one parse_pause",
    )
    parser.add_argument("--megabytes", type=int, default=BIG_MB, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="fewer requests per student")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="serve from this checkout (default: this one)"
    )
    args = parser.parse_args(argv)
    if args.what == ["floor"]:
        floor_main()
        return 0
    if args.what == ["floor-asyncio"]:
        asyncio_floor_main()
        return 0
    if args.what[:1] == ["pause"] and args.what[1:] and args.what[1] in PARSES:
        print(parse_pause(args.what[1], args.megabytes))
        return 0
    if args.what:
        parser.error(f"unknown {' '.join(args.what)!r}: give `floor`, `pause {'|'.join(PARSES)}`, or nothing")
    quick = {"requests": 100, "pause_reps": 1, "wrk_rounds": 1} if args.quick else {}
    if args.root.resolve() != ROOT:  # the parse pauses use this checkout's parse_json: not the other's
        quick["pause_reps"] = 0
    print(report(measure(**quick, root=args.root.resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
