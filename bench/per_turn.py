"""2. Per-turn overhead: a long generated fixture replayed by a step's own agent_loop, in process.

What is measured is what the workbook adds per turn beyond the SDK's own call. Two runs of the same
fixture, alternated:

- floor: the least any loop must do with the real SDK — `client.messages.create` with the whole
  history (the SDK builds and serialises the request and parses the reply), append the reply, append
  the recorded tool results — over a bare transport that only hands back the next response;
- loop: the step's `agent_loop` over replay's strict ReplayTransport as a replay builds it (a request
  that is the recording's own bytes answered as recorded, any other parsed, checked against the API's
  contract and compared with the recording by its Player),
  with its rich output rendered to memory and the tool stubbed (the first real call's output is
  reused), so tool time does not count.

overhead per turn = (loop - floor) / turns, also per window of turns to show how it grows (the SDK
serialises the whole history every turn; anything else linear in the history would show here too).
Both runs are measured alike: the same process, the same SDK client settings, a collection before
each, and neither freezes or switches off the collector (a reader's loop would not).
Figures are this process's CPU time, best of the runs (on a shared machine, other people's work
inflates wall time and only ever adds); the wall-time overhead is reported beside it.

`make_long_fixture(turns, step)` builds the fixture (reusable by any step, e.g. s06): `turns - 1`
turns of one bash tool_use each, then an end_turn. Like `python -m workbook rebuild`, the requests are
the ones
the step's loop really sends, captured in one lenient run; each response's usage.input_tokens is
estimated as chars/4 of the request that produced it, so steps that budget on usage see real growth.
With `context_limit`, a request over that many (estimated) tokens is answered with the API's 400
"prompt is too long", as s06's collapse expects.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbook.api import contract, wire
from workbook.replay import fixtures
from workbook.replay import transport as replay
from workbook.replay.player import Player

import anthropic
import httpx2

from bench.common import gc_pauses, load_step, owner, quiet, replaced, timing
from bench.whatif import applied

TASK = "Run the command once per turn until you have run it enough times, then say done."
NO_OP = "true {n}"  # the per-turn benchmark's command: {n} makes each call's input differ
STUB_TARGETS = ("run_bash",)  # the step's tool handler, looked up by global name in its module
LOOP_KWARGS: dict[str, dict] = {}  # extra fields for a step's Settings, e.g. {"s06_recovery": {...}}
BUDGET = "Budget"  # s05's limits object (agent_loop's `budget`): built with every max_* field unlimited


def estimate_tokens(body) -> int:
    """Tokens estimated as chars/4 of the JSON (the usual rule of thumb; no tokenizer offline)."""
    return len(json.dumps(body, ensure_ascii=False)) // 4


def _message(n: int, content: list, stop_reason: str) -> dict:
    return {
        "id": f"msg_bench_{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": max(1, estimate_tokens(content))},
    }


def scripted_responses(turns: int, command: str = NO_OP) -> list[dict]:
    """`turns - 1` turns of one bash tool_use (inputs differ: no repeated-call brake fires), then end_turn."""
    calls = [
        _message(
            n,
            [
                {
                    "type": "tool_use",
                    "id": f"toolu_bench_{n:04d}",
                    "name": "bash",
                    "input": {"command": command.format(n=n)},
                }
            ],
            "tool_use",
        )
        for n in range(1, turns)
    ]
    return calls + [
        _message(turns, [{"type": "text", "text": f"Done: ran it {turns - 1} times."}], "end_turn")
    ]


@dataclass
class ScriptedModel:
    """A transport that answers each request with the next scripted response, as `rebuild` does.

    Checks the API's rules on every request, fills usage.input_tokens from the request actually sent,
    streams when asked, and keeps every (request, response) pair as a fixture exchange. A request over
    `context_limit` tokens gets the API's 400 "prompt is too long"; one that forbids tools
    (tool_choice none, as s06 asks for a summary) gets a short text answer instead of the next turn.
    """

    responses: list[dict]
    context_limit: int | None = None
    exchanges: list[dict] = field(default_factory=list)
    served: int = 0  # scripted turns answered so far

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content or b"{}")
        problems = contract.request_problems(body)
        if problems:
            where = f"long fixture, request {len(self.exchanges) + 1}"
            raise replay.ReplayMismatch(f"{where}: the API would reject this request — {problems[0]}")
        tokens = estimate_tokens(body)
        if self.context_limit and tokens > self.context_limit:
            message = f"prompt is too long: {tokens} tokens > {self.context_limit} maximum"
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
            return self._answer(body, {"status": 400, "headers": JSON, "body": error})
        if (body.get("tool_choice") or {}).get("type") == "none":
            summary = [{"type": "text", "text": f"Summary: the command ran {self.served} times so far."}]
            message = _message(0, summary, "end_turn") | {"id": f"msg_bench_summary_{len(self.exchanges)}"}
        elif self.served < len(self.responses):
            message = json.loads(json.dumps(self.responses[self.served]))
            self.served += 1
        else:
            raise replay.ReplayExhausted(f"the loop sent more than {len(self.responses)} requests")
        message["usage"]["input_tokens"] = tokens
        if body.get("stream"):
            stream = wire.message_to_events(message)
            return self._answer(body, {"status": 200, "headers": SSE, "stream": stream})
        return self._answer(body, {"status": 200, "headers": JSON, "body": message})

    def _answer(self, body: dict, response: dict) -> httpx2.Response:
        self.exchanges.append({"request": body, "response": response})
        share_history(self.exchanges[-2:])  # as they come: memory stays linear while generating too
        return wire.http_response(response)


JSON = {"content-type": "application/json"}
SSE = {"content-type": "text/event-stream"}


class _Memo:
    """A tool handler stand-in: runs the real handler once, then returns that output for every call."""

    def __init__(self, real):
        self.real, self.calls, self.output = real, 0, None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.output is None:
            self.output = self.real(*args, **kwargs)
        return self.output


def run_loop(
    module,
    http_client,
    workspace: Path,
    turns: int,
    console_class=None,
    permission: str | None = None,
    messages: list | None = None,
) -> _Memo | None:
    """Run the step's agent_loop on TASK with the given HTTP client, quiet and with its tool stubbed.
    `permission` (s02 on): e.g. "all" for a command s02's auto mode would refuse, as a user who trusts it.
    The loop takes `module.Settings(workspace, ...)`: LOOP_KWARGS and `permission` set its fields, and
    from s05 on its budget is out of reach (the benchmark measures; it must not be stopped)."""
    client = anthropic.Anthropic(api_key="bench", http_client=http_client, max_retries=0)
    options = dict(LOOP_KWARGS.get(module.__name__, {}))
    fields = {f.name for f in dataclasses.fields(module.Settings)}
    if permission and "permission" in fields:
        options["permission"] = permission
    if "budget" in fields and "budget" not in options and hasattr(module, BUDGET):
        options["budget"] = unlimited(getattr(module, BUDGET))
    settings = module.Settings(workspace, **options)
    home, target = stub_target(module)
    memo = _Memo(getattr(home, target))
    with quiet(module, console_class), replaced(home, target, memo):
        messages = [{"role": "user", "content": TASK}] if messages is None else messages
        module.agent_loop(client, messages, settings)
    return memo


def stub_target(module) -> tuple:
    """Where the step finds its bash handler when a call runs: s02's dispatch map entry from s02 on,
    else s01's run_bash (looked up by global name)."""
    registry = getattr(owner(module.__name__, "REGISTRY"), "REGISTRY", None)
    if registry and "bash" in registry:
        return registry["bash"], "handler"
    return owner(module.__name__, STUB_TARGETS[0]), STUB_TARGETS[0]


def unlimited(budget_class):
    """A step's budget with every max_* limit out of reach: the benchmark measures, it must not be stopped."""
    fields = dataclasses.fields(budget_class) if dataclasses.is_dataclass(budget_class) else []
    huge = {f.name: type(f.default)(10**12) for f in fields if f.name.startswith("max_")}
    return budget_class(**{name: value for name, value in huge.items() if isinstance(value, int | float)})


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def make_long_fixture(
    turns: int = 200,
    step: str = "s01_agent_loop",
    context_limit: int | None = None,
    command: str = NO_OP,
    permission: str | None = None,
) -> dict:
    """A scripted fixture of `turns` model turns whose requests are the ones `step`'s loop sends."""
    module = load_step(step)
    model = ScriptedModel(scripted_responses(turns, command), context_limit)
    http = anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(model))
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        run_loop(module, http, Path(tmp), turns, permission=permission)
    return {
        "script": step,
        "scenario": f"long_{turns}",
        "description": f"Generated by bench/per_turn.py: {turns - 1} turns of one no-op bash call, then end.",
        "provenance": "scripted",
        "provenance_note": "Generated in memory; usage.input_tokens is chars/4 of each request's JSON.",
        "task": TASK,
        "workspace": "",
        "exchanges": model.exchanges,
    }


def share_history(exchanges: list[dict]) -> None:
    """Each recorded request's messages share the ones the previous request already held, as a fixture
    stored as what is new since the previous exchange is rebuilt on load: memory linear in the turns,
    where a full copy per request (each parsed on its own) grows with their square."""
    previous: list = []
    for exchange in exchanges:
        messages = exchange["request"].get("messages")
        if isinstance(messages, list) and messages[: len(previous)] == previous:
            exchange["request"]["messages"] = previous + messages[len(previous) :]
        previous = exchange["request"].get("messages") or []


# -- the two runs ------------------------------------------------------------------------------------

CPU = time.process_time  # per-turn figures are this process's CPU time: steady on a busy machine


class _TimedReplay(replay.ReplayTransport):
    """replay's strict transport, noting when each request arrives and how long its checks take (CPU)."""

    stamps: list
    checks: list

    def __call__(self, request):
        start = CPU()
        self.stamps.append(start)
        try:
            return super().__call__(request)
        finally:
            self.checks.append(CPU() - start)


def loop_run(step: str, fixture: dict, what_if: str | None = None) -> dict:
    """One run of the step's loop over replay's strict transport: per-turn stamps, checks, categories."""
    module = load_step(step)
    assert not fixtures.fixture_problems(fixture)  # what load_fixture checks
    transport = _TimedReplay(Player(fixture), "long fixture", checked=True)  # as launch builds it
    transport.stamps, transport.checks = [], []
    messages = [{"role": "user", "content": TASK}]
    turns = len(fixture["exchanges"])
    gc.collect()  # every run starts with no collection owed by the one before
    with (
        tempfile.TemporaryDirectory(prefix="bench-") as tmp,
        applied(what_if),
        gc_pauses(CPU) as gc_time,
    ):
        wall = time.perf_counter()
        with timing(module, timer=CPU) as clock:
            memo = run_loop(module, transport.http_client(), Path(tmp), turns, messages=messages)
        end, wall = CPU(), time.perf_counter() - wall
    return {
        "stamps": transport.stamps + [end],
        "wall": wall,
        "checks": transport.checks,
        "categories": clock.totals,
        "gc": gc_time[0],
        "full_gc": gc_time[1],
        "stubbed": bool(memo and memo.calls),
        # how the loop keeps a reply: SDK objects (re-serialised by the SDK every turn) or plain dicts
        "plain_replies": len(messages) > 1 and all(isinstance(b, dict) for b in messages[1]["content"]),
    }


def floor_run(fixture: dict, plain_replies: bool = False) -> dict:
    """The least a loop must do with the SDK, over a transport that only serves the next response."""
    exchanges, cursor, stamps = fixture["exchanges"], [0], []

    def serve(request):
        stamps.append(CPU())
        cursor[0] += 1
        return wire.http_response(exchanges[cursor[0] - 1]["response"])

    http = anthropic.DefaultHttpxClient(transport=httpx2.MockTransport(serve))
    client = anthropic.Anthropic(api_key="bench", http_client=http, max_retries=0)
    first = exchanges[0]["request"]
    options = {k: v for k, v in first.items() if k not in ("messages", "stream")}
    messages = [first["messages"][0]]
    gc.collect()
    with gc_pauses(CPU) as gc_time:
        wall = time.perf_counter()
        for n, exchange in enumerate(exchanges):
            if exchange["request"].get("stream"):
                with client.messages.stream(**options, messages=messages) as stream:
                    response = stream.get_final_message()
            else:
                response = client.messages.create(**options, messages=messages)
            # the reply kept as the step keeps it: the SDK serialises SDK objects anew every turn
            content = (
                [b.to_dict(mode="json") for b in response.content] if plain_replies else response.content
            )
            messages.append({"role": "assistant", "content": content})
            if n + 1 < len(exchanges):
                messages.append(exchanges[n + 1]["request"]["messages"][-1])  # the recorded tool results
        end, wall = CPU(), time.perf_counter() - wall
    return {"stamps": stamps + [end], "wall": wall, "gc": gc_time[0], "full_gc": gc_time[1]}


def measure(
    step: str = "s01_agent_loop",
    turns: int = 200,
    reps: int = 3,
    windows: int = 4,
    what_if: str | None = None,
    fixture: dict | None = None,
) -> dict:
    """Overhead per turn (ms) of the step's loop + replay over the SDK floor, overall and per window.

    Per-turn figures are CPU time of this process (all threads), the best of `reps` runs; `wall` and
    `floor_wall` are the same runs' wall time, for comparison. Also where the loop's time goes per
    turn (exclusive categories: transport, SDK, tools, rendering, spinner, the rest of the loop) and
    the garbage collector's pauses. `what_if` (see bench/whatif.py) applies a replay change not made
    to the loop runs only: the floor is always the plain SDK.
    """
    fixture = fixture or make_long_fixture(turns, step)
    if any(e["response"]["status"] != 200 for e in fixture["exchanges"]):
        raise ValueError("per-turn overhead needs a fixture without error responses")
    n = len(fixture["exchanges"])
    plain = loop_run(step, fixture)["plain_replies"]  # warm-up: first-call costs out of the way
    floor_run(fixture, plain)
    loops, floors = [], []
    for _ in range(reps):
        loops.append(loop_run(step, fixture, what_if))
        floors.append(floor_run(fixture, plain))
    size = max(1, n // windows)
    bounds = [(i, min(n, i + size)) for i in range(0, n, size)]

    def per_turn(runs, a, b):  # best over runs of the mean ms per turn in turns [a, b)
        return min((r["stamps"][b] - r["stamps"][a]) / (b - a) * 1000 for r in runs)

    def checks(a, b):
        return min(sum(r["checks"][a:b]) / (b - a) * 1000 for r in loops)

    rows = [
        {
            "turns": f"{a + 1}-{b}",
            "floor": per_turn(floors, a, b),
            "loop": per_turn(loops, a, b),
            "overhead": per_turn(loops, a, b) - per_turn(floors, a, b),
            "transport": checks(a, b),
        }
        for a, b in bounds
    ]
    best = min(loops, key=lambda r: r["stamps"][-1] - r["stamps"][0])  # the fastest run's categories
    best_floor = min(floors, key=lambda r: r["stamps"][-1] - r["stamps"][0])
    categories = {c: v / n * 1000 for c, v in best["categories"].items()}
    loop_total = per_turn(loops, 0, n)
    categories["rest of the loop"] = loop_total - sum(categories.values())
    return {
        "step": step,
        "turns": n,
        "floor": per_turn(floors, 0, n),
        "loop": loop_total,
        "overhead": loop_total - per_turn(floors, 0, n),
        "wall_overhead": (min(r["wall"] for r in loops) - min(r["wall"] for r in floors)) / n * 1000,
        "transport": checks(0, n),
        "windows": rows,
        "categories": categories,
        "gc_loop": best["gc"] / n * 1000,
        "gc_floor": best_floor["gc"] / n * 1000,
        "full_gc_loop": best["full_gc"],
        "full_gc_floor": best_floor["full_gc"],
        "overhead_without_gc": (
            (best["stamps"][-1] - best["stamps"][0] - best["gc"])
            - (best_floor["stamps"][-1] - best_floor["stamps"][0] - best_floor["gc"])
        )
        / n
        * 1000,
        "tool_stubbed": all(r["stubbed"] for r in loops),
        "fixture": fixture,
    }


def long_run(step: str = "s06_recovery", turns: int = 1000, reps: int = 1, windows: int = 10) -> dict:
    """measure() on a long fixture, plus this process's peak memory (VmHWM) after it: run it in a process
    of its own (`python -m bench.per_turn long STEP TURNS`) so the peak is the run's alone. (Not
    ru_maxrss: Linux carries the forking parent's peak across exec into it.)"""
    result = measure(step, turns, reps, windows)
    result.pop("fixture")
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    result["peak_mb"] = peak_kb / 1024
    return result


def long_run_in_child(step: str = "s06_recovery", turns: int = 1000, reps: int = 1) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.per_turn", "long", step, str(turns), str(reps)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__" and sys.argv[1:2] == ["long"]:
    step, turns, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(long_run(step, turns, reps), default=str))
