"""grade.py — the graded ladder: any loop, in any language, walked up the workbook's recordings.

    python -m workbook grade [--json] [--only RUNG] [--timeout S] -- CMD [ARGS...]

Each rung is one recording (fixtures/grade_*.json) that tests one step's mechanism from outside
the program. For each rung the grader starts a private classroom replay server (workbook/server.py)
on a free loopback port, copies the rung's workspace into a fresh temp folder, and runs
`CMD ARGS... "<the rung's task>"` there, with the task also in AGENT_TASK, ANTHROPIC_BASE_URL
pointing at that server, ANTHROPIC_API_KEY set to a stand-in (a real key in the teacher's
environment is never passed on), stdin closed and a timeout.

A rung passes when the program walked the whole recording (or, for a rung about stopping, stopped
within its bounds), no request broke the API's rules, the assistant's replies went back verbatim,
and the rung's own checks hold. Matching is by shape, as in the classroom: a student's tools,
prompts and model name are their own. The ladder is the workbook's progression: step sN passes
every rung of s01...sN. Exit 0 only when every rung graded passes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from workbook import classroom, compare, errors, fixtures, paths, scratch, server, wire

DEFAULT_TIMEOUT = 60.0  # seconds per rung; retry waits in the rungs are tiny (retry-after 0, 20 ms)
STUDENT = "grader"  # the API key the program gets: the replay server's name for this student
RUNNING: set[subprocess.Popen] = set()  # the programs being graded right now: Ctrl-C ends them all


class GradeError(errors.WorkbookError):
    """Bad input to the grader itself (no command, an unknown rung): one line, exit 2."""


@dataclass(frozen=True)
class Rung:
    """One recording, what it checks in one line, and how its run must end."""

    name: str
    step: str
    fixture: str  # a file under fixtures/, without .json
    checks: str
    least: int | None = None  # fewest requests to pass (default: all); more than recorded never passes
    exit: str = "zero"  # how the program must exit: "zero", "nonzero" or "any"
    must_fail: dict = field(default_factory=dict)  # tool_use id -> why its tool_result needs is_error


RUNGS = [
    Rung(
        "loop",
        "s01",
        "grade_s01_loop",
        "every tool_use answered, each reply appended verbatim, stop at end_turn",
    ),
    Rung(
        "tool-errors",
        "s02",
        "grade_s02_tool_errors",
        "an unknown tool and a bad input come back as is_error tool_results, and the loop goes on",
        must_fail={
            "toolu_01GradeS02Unknown": "asks for word_count, a tool that does not exist",
            "toolu_01GradeS02BadInput": "calls bash without its required `command`",
        },
    ),
    Rung(
        "retries",
        "s03",
        "grade_s03_retries",
        "a 529, a 429 (retry-after) and a dropped connection are each retried",
    ),
    Rung("no-retry-400", "s03", "grade_s03_no_retry_400", "a 400 is never sent again", exit="any"),
    Rung(
        "bad-key",
        "s03",
        "grade_s03_bad_key",
        "a refused key (401) stops the program with a non-zero exit",
        exit="nonzero",
    ),
    Rung(
        "gives-up",
        "s03",
        "grade_s03_gives_up",
        "a 529 that never clears is retried, then given up within 8 attempts, with a non-zero exit",
        least=2,
        exit="nonzero",
    ),
    Rung(
        "parallel",
        "s04",
        "grade_s04_parallel",
        "4 tool_use blocks in one turn: 4 tool_results in one message, in order",
    ),
    Rung(
        "repeat-brake",
        "s05",
        "grade_s05_repeat_brake",
        "the same call asked for without end: the loop stops by itself within 8 turns",
        least=2,
        exit="any",
    ),
    Rung(
        "cut-tool-use",
        "s06",
        "grade_s06_cut_tool_use",
        "a reply cut off by max_tokens inside a tool_use is never run",
    ),
    Rung(
        "pause-turn",
        "s06",
        "grade_s06_pause_turn",
        "a pause_turn reply is sent back unchanged, with no new user message",
    ),
]


@dataclass
class Seen:
    """One request as the replay server answered it: the turn it was, the body, the mistake if any."""

    turn: int
    body: object
    mistake: str | None


@dataclass
class Outcome:
    """What a rung's run left behind: the requests in order, the exit code, the last words printed."""

    seen: list[Seen]
    code: int | None  # None: stopped by the timeout
    last_line: str
    server_log: list[str]


@dataclass
class Result:
    """One row of the report."""

    rung: Rung
    passed: bool
    reason: str


# -- running one rung ------------------------------------------------------------------------------


class LogLines:
    """The replay server's log, kept (not printed): the grader quotes it when nothing else explains."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.lines += [line for line in text.splitlines() if line.strip()]

    def flush(self) -> None:
        pass


def run_rung(rung: Rung, fixture: dict, command: list[str], timeout: float) -> Outcome:
    """Serve the rung's recording on a free loopback port and run the program against it once."""
    seen, log = [], LogLines()
    rung_server = server.ReplayServer({rung.fixture: fixture}, classroom.LOOPBACK, 0, out=log)
    rung_server.classroom.observer = lambda student, name, turn, body, reply, mistake: seen.append(
        Seen(turn, body, None if mistake is None else str(mistake))
    )
    threading.Thread(target=rung_server.serve_forever, daemon=True).start()
    workspace = scratch.copy_workspace(fixture["workspace"])
    try:
        code, last_line = run_program([*command, fixture["task"]], workspace, rung_server.url, timeout)
    finally:
        rung_server.shutdown()
        rung_server.server_close()
        shutil.rmtree(workspace.parent, ignore_errors=True)
    return Outcome(seen, code, last_line, log.lines)


def run_program(argv: list[str], workspace: Path, url: str, timeout: float) -> tuple[int | None, str]:
    """The program in the workspace, stdin closed, in its own process group (a timeout ends all of it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY")}
    env |= {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": STUDENT, "AGENT_TASK": argv[-1]}
    proc = subprocess.Popen(
        argv,
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    RUNNING.add(proc)
    try:
        output, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        end(proc)
        output, _ = proc.communicate()
        code = None
    finally:
        RUNNING.discard(proc)
    return code, last_line(output.decode("utf-8", errors="replace"))


def end(proc: subprocess.Popen) -> None:
    """Kill a graded program and everything it started (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it had already finished


def last_line(output: str) -> str:
    """The last thing the program printed, in one short line (terminal colours removed)."""
    lines = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", line).strip() for line in output.splitlines()]
    lines = [line for line in lines if re.search(r"\w", line)]  # not a table's border
    return lines[-1][:160] if lines else ""


# -- judging a run ---------------------------------------------------------------------------------


def judge(rung: Rung, fixture: dict, out: Outcome) -> str | None:
    """The first mistake of the run, in the student's terms; None when the rung passes."""
    exchanges = fixture["exchanges"]
    least = rung.least or len(exchanges)
    reached = 0  # the last recorded turn the program got an answer for
    for n, request in enumerate(out.seen, 1):
        if request.mistake is not None and request.turn <= len(exchanges):
            return explain_mistake(request, exchanges)
        if request.mistake is not None or request.turn <= reached:  # past the end, or started over
            return asked_too_often(exchanges, reached, n) if reached >= least else started_over(reached)
        problem = reply_not_verbatim(request, exchanges) or error_not_returned(rung, request)
        if problem:
            return problem
        reached = request.turn
    if out.code is None:
        return f"your program did not finish in time; it had reached turn {reached} of {len(exchanges)}"
    if reached < least:
        return stopped_early(exchanges, reached, out)
    return wrong_exit(rung, exchanges, out)


def explain_mistake(request: Seen, exchanges: list) -> str:
    """A request the server refused: say what the loop did wrong, in the student's terms if we can."""
    recorded = exchanges[request.turn - 1]["request"]["messages"]
    sent = request.body.get("messages") if isinstance(request.body, dict) else None
    hint = shape_hint(recorded, sent, exchanges, request.turn) if isinstance(sent, list) else None
    return f"turn {request.turn}: {hint or request.mistake}"


def shape_hint(recorded: list, sent: list, exchanges: list, turn: int) -> str | None:
    """The loop's usual mistakes, named: a reply or results not appended, results out of order..."""
    try:
        want, got = compare.normalize_messages(recorded), compare.normalize_messages(sent)
    except (AttributeError, TypeError):
        return None  # malformed messages: the server's own message says which
    for k, expected in enumerate(want):
        if k >= len(got) or got[k]["role"] != expected["role"]:
            if expected["role"] == "assistant":
                return (
                    f"your loop did not append the assistant's reply; messages[{k}] should be the assistant "
                    f"turn with {blocks_in_words(expected['content'])}"
                )
            return (
                f"your loop did not send the tool results; messages[{k}] should be the user turn with "
                f"{blocks_in_words(expected['content'])}, one per tool_use in messages[{k - 1}]"
            )
        order = results_order(expected, got[k])
        if order:
            return f"messages[{k}]: {order}"
    if len(got) > len(want):
        return extra_messages(exchanges, turn, len(want))
    return None


def blocks_in_words(content: list) -> str:
    """[text, tool_use, tool_use] -> "1 text block and 2 tool_use blocks"."""
    kinds = [block.get("type", "?") for block in content]
    counts = {kind: kinds.count(kind) for kind in kinds}
    words = [f"{n} {kind} block" + ("s" if n > 1 else "") for kind, n in counts.items()]
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


def results_order(expected: dict, got: dict) -> str | None:
    """Tool results all there but in another order than the tool_use blocks asked."""
    want = [b.get("tool_use_id") for b in expected["content"] if b.get("type") == "tool_result"]
    have = [b.get("tool_use_id") for b in got["content"] if b.get("type") == "tool_result"]
    if want and sorted(want) == sorted(have) and want != have:
        return (
            f"the tool_results come in the order {', '.join(have)}; answer in the order of the tool_use "
            f"blocks: {', '.join(want)}"
        )
    return None


def extra_messages(exchanges: list, turn: int, expected: int) -> str:
    """The loop sent more than the recording holds: what it should have done after the last reply."""
    stop = stop_reason(exchanges[turn - 2]["response"]) if turn > 1 else None
    if stop == "max_tokens":
        return (
            f"turn {turn - 1}'s reply was cut off by max_tokens inside a tool_use, and your loop ran it or "
            "sent it back; a cut tool_use is incomplete: send the same request again, without the cut "
            "reply, with a larger max_tokens"
        )
    if stop == "pause_turn":
        return (
            "after a pause_turn, send the conversation back with the paused assistant turn last; "
            "do not add a user message"
        )
    return (
        f"your request holds more messages than the recording's {expected}: "
        "append only the reply and its results"
    )


def stop_reason(response: dict) -> str | None:
    """A recorded response's stop_reason (None for an error or a dropped connection)."""
    if response.get("status") != 200:
        return None
    body = wire.events_to_message(response["stream"]) if "stream" in response else response["body"]
    return body.get("stop_reason")


def reply_not_verbatim(request: Seen, exchanges: list) -> str | None:
    """Every assistant turn the loop sends back must be the reply as it came (None values aside)."""
    recorded = compare.normalize_messages(exchanges[request.turn - 1]["request"]["messages"])
    sent = compare.normalize_messages(request.body["messages"])
    for i, (want, got) in enumerate(zip(recorded, sent)):
        if want["role"] != "assistant":
            continue
        for j, (a, b) in enumerate(zip(want["content"], got["content"])):
            if without_nulls(a) != without_nulls(b):
                field_name = next((k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)), "?")
                return (
                    f"turn {request.turn}: messages[{i}].content[{j}] ({a.get('type')}) is not the reply "
                    f"as it came: its {field_name} differs; append response.content unchanged"
                )
    return None


def without_nulls(value):
    """A block with null fields dropped at any depth: a client may leave out what the API sent as null."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def error_not_returned(rung: Rung, request: Seen) -> str | None:
    """The rung's calls that cannot succeed must come back to the model with is_error: true."""
    for message in request.body["messages"]:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            why = rung.must_fail.get(block.get("tool_use_id")) if isinstance(block, dict) else None
            if why and block.get("is_error") is not True:
                return (
                    f"turn {request.turn}: the call {block['tool_use_id']} {why}, but your tool_result for "
                    "it has no is_error: true; send a failure back as an error result so the model can "
                    "correct itself"
                )
    return None


def started_over(reached: int) -> str:
    """A request holding the first message alone, mid-way: the loop lost its history."""
    return (
        f"turn {reached + 1}: your program sent the first message alone again, so the conversation started "
        "over; keep the whole history in messages"
    )


def asked_too_often(exchanges: list, reached: int, requests: int) -> str:
    """A request past the recording's end: what the program should have done instead."""
    last = exchanges[reached - 1]["response"]
    status = last.get("status")
    if status in (400, 401, 403, 404, 413):
        return (
            f"turn {reached}: the API answered {status} and your program sent the request again; a {status} "
            "fails the same way every time: stop with a clear message"
        )
    if "error" in last or status != 200:  # a recorded failure it kept retrying
        return f"your program kept retrying: {requests} attempts, where this rung allows at most {reached}"
    stop = stop_reason(last)
    if stop == "tool_use":
        return (
            f"your loop was still calling the model after {reached} turns of the same repeated call; "
            "it must notice the repetition and stop by itself"
        )
    return (
        f"turn {reached}: the reply's stop_reason was {stop}, but your loop asked again; "
        "stop when it is not tool_use"
    )


def stopped_early(exchanges: list, reached: int, out: Outcome) -> str:
    """The program ended (or was refused) before the recording did: what it met last, and its last words."""
    said = f" (exit {out.code}" + (f": {out.last_line}" if out.last_line else "") + ")"
    if not out.seen:
        logged = re.search(r"\b[1-5]\d\d\b.*", out.server_log[-1]) if out.server_log else None
        heard = f"; the server logged: {logged.group(0)}" if logged else ""
        return f"your program sent no request the replay server could answer{said}{heard}"
    response = exchanges[reached - 1]["response"]
    if "error" in response:
        met = "the connection dropped without an answer"
    elif response.get("status") != 200:
        kind = response["body"].get("error", {}).get("type", "an error")
        met = f"the API answered {response['status']} ({kind})"
    else:
        met = f"the reply's stop_reason was {stop_reason(response)}"
    todo = {
        "tool_use": "run the tools and send their results",
        "max_tokens": "send the request again with a larger max_tokens",
        "pause_turn": "send the paused turn back unchanged so the model can finish",
    }.get(stop_reason(response) or "", "retry it, waiting as retry-after asks")
    return f"turn {reached} of {len(exchanges)}: {met} and your program stopped{said}; {todo}"


def wrong_exit(rung: Rung, exchanges: list, out: Outcome) -> str | None:
    """The exit code the rung asks for: 0 after a finished task, non-zero after a failure it cannot fix."""
    if rung.exit == "zero" and out.code != 0:
        return (
            f"your program walked all {len(exchanges)} turns but exited with code {out.code}: {out.last_line}"
        )
    if rung.exit == "nonzero" and out.code == 0:
        return (
            "your program stopped but exited with code 0; a run that failed must end with a non-zero exit "
            "so scripts and CI see it"
        )
    return None


def passed_reason(rung: Rung, out: Outcome) -> str:
    """What a passing run did, in a few words."""
    turns = max((s.turn for s in out.seen), default=0)
    if rung.least:
        return f"stopped by itself after {turns} requests (exit {out.code})"
    return f"walked the whole recording: {turns} turn{'s' * (turns != 1)} (exit {out.code})"


def grade_rung(rung: Rung, command: list[str], timeout: float) -> Result:
    """Run the command on one rung and judge the run."""
    fixture = fixtures.load_fixture(paths.ROOT / "fixtures" / f"{rung.fixture}.json")
    outcome = run_rung(rung, fixture, command, timeout)
    problem = judge(rung, fixture, outcome)
    return Result(rung, problem is None, problem or passed_reason(rung, outcome))


# -- command line ----------------------------------------------------------------------------------


def pick_rungs(only: list[str]) -> list[Rung]:
    """The rungs asked for: by name (loop), by step (s03: all of its rungs), comma lists allowed."""
    wanted = [word.strip() for words in only for word in words.split(",") if word.strip()]
    for word in wanted:
        if not any(word in (r.name, r.step) for r in RUNGS):
            names = ", ".join(r.name for r in RUNGS)
            raise GradeError(f"no rung {word!r}: give a step (s01-s06) or one of {names}")
    return [r for r in RUNGS if not wanted or r.name in wanted or r.step in wanted]


def resolve(command: list[str]) -> list[str]:
    """The command with its program found and its file arguments made absolute: it runs in a temp folder."""
    if not command:
        raise GradeError(
            "no command to grade: put it after --, e.g. `python -m workbook grade -- python my_loop.py`"
        )
    program = command[0]
    if os.sep in program or (os.altsep and os.altsep in program):
        found = os.path.abspath(program) if Path(program).is_file() else None  # not resolve(): a venv's
        # python is a symlink, and following it would leave the venv (and its packages) behind
    else:
        found = shutil.which(program)
    if not found:
        raise GradeError(f"{program}: command not found — give a program on PATH or a path to one")
    args = [
        os.path.abspath(a) if a and not a.startswith("-") and Path(a).exists() else a for a in command[1:]
    ]
    return [found, *args]


class Parser(argparse.ArgumentParser):
    """argparse, with its errors raised as GradeError (one line) instead of printed with the usage."""

    def error(self, message):  # one line, not argparse's usage block
        raise GradeError(
            f"{message} — usage: python -m workbook grade [--json] [--only RUNG] -- CMD [ARGS...]"
        )


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The grader's own flags (before --) and the command to grade (after it)."""
    split = argv.index("--") if "--" in argv else len(argv)
    rungs = "\n".join(f"  {r.step} {r.name:<13} {r.checks}" for r in RUNGS)
    parser = Parser(
        prog="python -m workbook grade",
        usage="%(prog)s [--json] [--only RUNG] [--timeout S] -- CMD [ARGS...]",
        description=__doc__.split("\n\n")[2],
        epilog=f"rungs (--only takes a rung or a step):\n{rungs}\n\nTeachers: docs/teaching.md, Grading.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--only", action="append", default=[], metavar="RUNG", help="a rung or a step (s03)")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per rung (default 60)"
    )
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def show(results: list[Result], command: list[str]) -> None:
    """The report as a table: rung, step, what it checks, pass or FAIL, and why."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"grading: {' '.join(command)}", show_lines=True)
    for column in ("step", "rung", "checks", "result", "reason"):
        table.add_column(column, overflow="fold")
    for r in results:
        verdict = "[green]pass[/]" if r.passed else "[red]FAIL[/]"
        table.add_row(r.rung.step, r.rung.name, r.rung.checks, verdict, r.reason)
    console = Console(highlight=False)
    console.print(table)
    passed = sum(r.passed for r in results)
    console.print(f"{passed} of {len(results)} rungs passed")


def main(argv: list[str]) -> int:
    """Grade the command on the rungs asked for; print the table (or JSON); 0 only if all pass."""
    try:
        args, command = parse(argv)
        rungs, command = pick_rungs(args.only), resolve(command)
    except GradeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))  # rungs run side by side
    try:
        results = list(pool.map(lambda rung: grade_rung(rung, command, args.timeout), rungs))
    except KeyboardInterrupt:
        for proc in list(RUNNING):
            end(proc)
        print("interrupted: the programs being graded were stopped", file=sys.stderr)
        return 130
    finally:
        pool.shutdown(cancel_futures=True)
    if args.json:
        rows = [
            {"name": r.rung.name, "step": r.rung.step, "passed": r.passed, "reason": r.reason}
            for r in results
        ]
        print(json.dumps({"rungs": rows}, ensure_ascii=False))
    else:
        show(results, command)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
