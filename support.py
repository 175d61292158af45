"""support.py — what every step uses but none teaches: the terminal, starting a run, the files a run keeps.

Not a step. The steps import it so that each one can hold only its mechanism and its loop:
- the one `console` every step prints to (a notebook or a test swaps it once, here);
- what the reader sees: turn headers, tool output, the summary, s04's timeline, s05's streamed text;
- `run_step()`: start a run (live, replay or record), print its banner, turn what escapes into one line;
- the files a run leaves: the audit/trace/conversation folder, the saved conversation, the trace
  (JSON lines) and a trace turned back into a fixture.
"""

import argparse
import errno
import json
import math
import os
import stat
import sys
import time
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from pathlib import Path

import anthropic
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import replay

console = Console(highlight=False)
RUNS = replay.ROOT / "runs"  # live runs keep their audit log, trace and conversation in runs/<time>-<step>/


# -- the terminal ----------------------------------------------------------------------------------


def tool_result(tool_use_id: str, content: str, is_error: bool = False) -> dict:
    """One tool_result block, as the next user message carries it."""
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


def say(text: str, style: str = "dim") -> None:
    """One line of plain text (never read as markup), in a style. console.out, not print: no markup,
    wrapping or pretty-printing to work out, which costs a turn more than the rest of its output."""
    console.out(text, style=style, highlight=False)


def error(label: str, text: str) -> None:
    """The one line a run ends with when something stops it: `label: what happened and what to do`."""
    console.print(f"[red]{label}:[/] {escape(text)}", soft_wrap=True)


@cache
def spinner(on: Console):
    """One spinner for a whole run (a new one every turn costs more than the turn itself)."""
    return on.status("waiting for the model…")


@contextmanager
def waiting(turn: int, streamed: bool = False):
    """While the model answers: a streamed turn opens with its rule (its text then prints as it comes);
    a whole one shows the spinner, at a terminal only."""
    if streamed:
        console.rule(f"turn {turn}")
        yield
        return
    status = spinner(console) if console.is_terminal else None
    if status:
        status.start()
    try:
        yield
    finally:
        if status:
            status.stop()


def show_turn(turn: int, response: anthropic.types.Message, streamed: bool = False) -> None:
    """One turn: the model's text (unless it was streamed as it came), then the stop reason and tokens."""
    if not streamed:
        console.rule(f"turn {turn}")
        for block in response.content:
            if block.type == "text":
                console.print(f"[bold]model:[/] {escape(block.text)}")
    tokens = f"tokens in {response.usage.input_tokens} / out {response.usage.output_tokens}"
    say(f"stop_reason={response.stop_reason}  {tokens}")


def show_tool(block, output: str, limit: int = 400) -> None:
    """A tool call as it would look in a terminal, its output shortened to stay readable."""
    command = block.input.get("command") if isinstance(block.input, dict) else None
    say(f"$ {command}" if command else f"{block.name} {block.input}", "cyan")
    shown = output if len(output) <= limit else output[:limit] + f"… ({len(output) - limit} more chars)"
    if all(cell_len(line) <= console.width for line in shown.splitlines()):
        console.out(shown, highlight=False)  # nothing to wrap: the cheap way (rich's print costs ~0.3 ms)
    else:
        console.print(shown, markup=False)


def show_summary(turns: list) -> None:
    """A table of every turn: how it ended and what it cost."""
    rows = [(r.stop_reason, r.usage.input_tokens, r.usage.output_tokens) for r in turns]
    table = Table(title="summary")
    for column in ("turn", "stop_reason", "tokens in", "tokens out"):
        table.add_column(column)
    for n, (stop_reason, tokens_in, tokens_out) in enumerate(rows, 1):
        table.add_row(str(n), stop_reason, str(tokens_in), str(tokens_out))
    table.add_row("total", "", str(sum(r[1] for r in rows)), str(sum(r[2] for r in rows)))
    console.print(table)


def show_budget(budget) -> None:
    """s05's summary: every turn with its tokens and estimated cost, then why the loop ended."""
    table = Table(title="summary")
    for column in ("turn", "stop_reason", "tokens in", "tokens out", "cost (est.)"):
        table.add_column(column, justify="left" if column == "stop_reason" else "right")
    for n, (stop_reason, tokens_in, tokens_out, dollars) in enumerate(budget.rows, 1):
        table.add_row(str(n), stop_reason, f"{tokens_in:,}", f"{tokens_out:,}", f"${dollars:.4f}")
    tokens_in, tokens_out = sum(row[1] for row in budget.rows), sum(row[2] for row in budget.rows)
    table.add_row("total", "", f"{tokens_in:,}", f"{tokens_out:,}", f"${budget.cost:.4f}")
    console.print(table)
    console.print(f"[bold]ended:[/] {escape(budget.reason)}")


def label(block, limit: int = 44) -> str:
    """A call in a few words: its tool and the first line of its first input."""
    first = next(iter(block.input.values()), "") if isinstance(block.input, dict) else ""
    return f"{block.name} {(str(first).splitlines() or [''])[0]}"[:limit]


TIMELINE_RESOLUTION = 0.005  # s: a turn shorter than this is drawn by group, not by time


def show_timeline(timeline: list, width: int | None = None) -> None:
    """Which calls ran together and how long each took: one line per call, its bar on the turn's time
    axis, fitted to the terminal; then, per group, whether its calls really overlapped. A turn of one
    call has nothing to compare, so it shows none."""
    if len(timeline) < 2:
        return
    calls = sorted(timeline, key=lambda t: t.index)
    names = [label(t.block, 36) for t in calls]
    name_width = max(map(len, names))
    bar_width = max(10, (width or console.width) - name_width - 20)  # " g1  name  12345 ms  |bar|"
    start, end = min(t.started for t in calls), max(t.ended for t in calls)
    timed = end - start >= TIMELINE_RESOLUTION  # else the bars could only show noise: draw groups
    groups = sorted({t.group for t in calls})
    axis = "bars: time" if timed else "too quick to time: by group"
    console.print(f"tool calls this turn: same group = ran together ({axis})", style="dim")
    for t, name in zip(calls, names):
        if timed:
            scale = bar_width / (end - start)
            left, length = round((t.started - start) * scale), max(1, round((t.ended - t.started) * scale))
        else:
            slot = bar_width // len(groups)
            left, length = slot * groups.index(t.group), max(1, slot - 1)
        bar = (" " * left + "█" * length)[:bar_width].ljust(bar_width)
        ms = (t.ended - t.started) * 1000
        console.print(
            f" g{t.group:<2} {name:<{name_width}}  {ms:5.0f} ms  |{bar}|", markup=False, highlight=False
        )
    for group in groups:
        console.print(
            f"   group {group}: {together([t for t in calls if t.group == group], timed)}", style="dim"
        )


def together(calls: list, timed: bool) -> str:
    """One group in words: alone, ran together (their times overlap), or one after another."""
    if len(calls) == 1:
        return f"{label(calls[0].block, 36)}, alone"
    if not timed:
        return f"{len(calls)} reads sent to the thread pool together (each too quick to time)"
    most = at_once(calls)
    if most == 1:
        return f"{len(calls)} reads ran one after another (never two at once)"
    return f"{len(calls)} reads ran together, up to {most} at once"


def at_once(calls: list) -> int:
    """The most calls running at the same moment (an end and a start at one instant do not overlap)."""
    events = sorted([(t.started, 1) for t in calls] + [(t.ended, -1) for t in calls])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def show_tools(calls: list, results: list[dict], timeline: list) -> None:
    """s04 on: each call with its answer, in tool_use order, then the timeline of what ran together."""
    for block, result in zip(calls, results):
        show_tool(block, result["content"])
    show_timeline(timeline)


def show_context(transition: str, before: int, after: int, path: Path | None) -> None:
    """s06: what collapse or compaction made of the context, on screen and in the trace."""
    trace(path, "context", transition=transition, before=before, after=after)
    say(f"context {before:,} → {after:,} characters")


def show_event(event) -> None:
    """s05: one streamed event as the reader sees it: text at once, a tool call once its input is whole."""
    if event.type == "content_block_start" and event.content_block.type == "text":
        console.out("model: ", style="bold", end="", highlight=False)
    elif event.type == "text":
        console.out(event.text, end="", highlight=False)
    elif event.type == "content_block_stop" and event.content_block.type == "text":
        console.out("")
    elif event.type == "content_block_stop" and event.content_block.type == "tool_use":
        block = event.content_block
        say(f"asks for {block.name} {json.dumps(block.input)}")


def show_spend(budget, warning: str | None) -> None:
    """s05: what the run has spent so far, and the cost warning the first time it applies."""
    say(f"run so far: {budget.tokens:,} tokens, about ${budget.cost:.4f}")
    if warning:
        console.print(f"[yellow]cost warning:[/] {escape(warning)}")


# -- starting a run --------------------------------------------------------------------------------


def run_step(args, model: str, script: str, body, prepare=None, **client_options) -> int:
    """Start the run the flags ask for, print where it runs and its task, then `body(run)` -> exit code.
    What escapes the body ends the run in one line: a problem for the reader to fix (exit 1), or a
    Ctrl-C before s05 keeps the work (exit 130). `prepare(args)` runs first (s06: a trace to a fixture)."""
    run = None
    try:
        run = replay.start(prepare(args) if prepare else args, model, script, **client_options)
        say(run.banner)
        console.print(f"[bold]task:[/] {escape(run.task)}")
        return body(run)
    except (replay.WorkbookError, anthropic.APIError) as err:
        error("error", str(err))
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/] — stopped before the next turn; s05 adds keeping the work")
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            say(note)


def resume_mode(args, fixture: str, instruction: str):
    """s05's --resume: offline it replays `fixture`; live with no new instruction, it sends `instruction`."""
    if args.resume and not args.replay and not os.environ.get("ANTHROPIC_API_KEY"):
        args.default_fixture = fixture
    elif args.resume and not args.replay and not args.task:
        args.task = instruction
    return args


def limit(text: str) -> int:
    """A limit that is a whole number of at least 1 (0 or -1 would stop a run before it starts)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def dollars(text: str) -> float:
    """A cost cap: a finite number above 0 (nan or inf would turn the cap off, -1 stop at once)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of dollars above 0")
    return value


def count(text: str) -> int:
    """A whole number, 0 or more, for a flag; argparse turns the ValueError into one line."""
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def trace_as_fixture(args):
    """s06's --replay run.jsonl: a trace replays as a fixture, converted first."""
    if args.replay and args.replay.endswith(".jsonl"):
        args.replay = fixture_file(args.replay, "s06_recovery")
    return args


def run_line(run: replay.Run, flags: list) -> dict:
    """The trace's `run` line (s06), before `start`: what a replay of the trace needs besides the
    requests — the task, the workspace, and the flags that change what the loop does."""
    fixture = run.fixture or {}
    where, provenance = fixture.get("workspace", ""), fixture.get("provenance", "recorded")
    return dict(task=run.task, workspace=where, provenance=provenance, args=flags)


def with_fixture_flags(parser, argv: list[str] | None, run: replay.Run):
    """s05 on: in replay, the fixture's own flags (its checked `args`, e.g. --max-steps 3) apply; the
    reader's win. (A --stop-hook among them is a stranger's command: s06 puts it to s02's gate.)"""
    return parser.parse_args([*run.fixture_args, *(sys.argv[1:] if argv is None else argv)])


def streaming(args, run: replay.Run) -> bool:
    """s05 on: stream, unless --no-stream, or a replayed fixture was recorded from a loop that did not."""
    recorded = [e["response"] for e in run.fixture["exchanges"]] if run.fixture else [{"stream": []}]
    return not args.no_stream and any("stream" in response for response in recorded)


def run_folder(run: replay.Run, script: str) -> Path:
    """Where a run keeps its files: beside a replay's temp workspace (never in the repo), else runs/."""
    folder = (
        run.workspace.parent if run.mode == "replay" else RUNS / f"{datetime.now():%Y%m%d-%H%M%S}-{script}"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def permission_for(flag: str | None, run: replay.Run) -> str:
    """s02's --permission, or its default: ask a person at a terminal in a live run, else auto."""
    return flag or ("ask" if run.mode != "replay" and sys.stdin.isatty() else "auto")


# -- the files a run keeps ---------------------------------------------------------------------------


def plain(value):
    """SDK objects, in lists and dicts at any depth, as the plain JSON the API would send."""
    if isinstance(value, anthropic.BaseModel):
        return value.to_dict(mode="json")
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def save_conversation(messages: list, path: Path) -> Path:
    """The messages list as plain JSON, to read after a stop (and, from s05 on, to resume): written
    whole or not at all (a temp file renamed over the old one), the API key scrubbed."""
    return replay.write_json(path, plain(messages))


def regular_file(target: Path, name: str, max_bytes: float = float("inf")):
    """`target` opened to read if it is a regular file (a FIFO would hang the run, a device never ends)
    of at most `max_bytes`; else an error naming it as the model did (`name`): an is_error result."""
    fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, and fstat refuses it
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", name)
        regular = stat.S_ISREG(info.st_mode)
        raise ValueError(f"{name}: " + (f"over {max_bytes:,.0f} bytes" if regular else "not a regular file"))
    return os.fdopen(fd, "rb")


def read_text(target: Path, name: str, budget: int) -> str:
    """A regular file's text, reading at most `budget` bytes: all of it, or its head and tail."""
    with regular_file(target, name) as file:
        size = os.fstat(file.fileno()).st_size
        if size <= budget:
            return target.read_text(errors="replace")
        head, _, tail = file.read(budget // 2), file.seek(size - budget // 2), file.read(budget // 2)
    cut = f"\n… [{size - budget:,} bytes in the middle not read] …\n"
    return head.decode(errors="replace") + cut + tail.decode(errors="replace")


def repo_path(name: str) -> Path:
    """A file the reader named: as given, or else from the repo root (where the fixtures live)."""
    path = Path(name)
    return path if path.exists() or not (replay.ROOT / name).exists() else replay.ROOT / name


def replay_leniently_unless_recorded(run: replay.Run, messages: list) -> list:
    """A resumed conversation in replay: what was saved depends on when Ctrl-C came, so unless it is
    the one the fixture was recorded from, check each request against the API's rules only."""
    recorded = run.fixture["exchanges"][0]["request"]["messages"] if run.fixture else None
    if recorded and replay.normalize_messages(recorded) != replay.normalize_messages(plain(messages)):
        run.transport.strict = False
        say("note: not the conversation this fixture was recorded from; replaying leniently", "yellow")
    return messages


def load_conversation(path: Path) -> list:
    """A saved conversation, checked against the API's rules; any problem is one line saying what to do
    (a folder or a pipe is refused unread, and so is a file of the wrong shape at any depth)."""
    messages = replay.read_json(path, "saved conversation", "give the path a run printed after its stop")
    problems = replay.messages_problems(messages) or replay.api_rule_problems(messages)
    if problems:
        raise replay.WorkbookError(f"{path}: cannot continue this conversation — {problems[0].lstrip('.')}")
    return messages


# The trace: one JSON object per line, written as it happens (s05); s06 turns traces into fixtures.
#   {"event": "run", "task", "workspace", "provenance", "args"}   s06: what replaying the trace needs
#   {"event": "start", "script", "model", "max_tokens", "system", "tools", "stream", "limits"}
#   {"event": "model_call", "step", "request", "response", "ms", "spent"}   one per model call:
#       request = {"messages_count", "new_from", "new_messages"}: this request's messages are the
#       previous request's messages[:new_from] + new_messages (the first has new_from 0), so with the
#       start line every request body can be rebuilt exactly; response = the final Message as the API
#       returns it; spent = {"tokens", "cost"} for the run so far. A call that failed has
#       "error": {"status", "body", "message"} in place of response.
#   {"event": "tools", "step", "results": [{"tool_use_id", "name", "input", "content", "is_error"}],
#       "ms", "next"}   next: "continue", or "stop" when the loop ends after this turn
#   {"event": "transition", "name", "why"}   s06: what each iteration led to
#   {"event": "stop", "reason", "steps", "tokens", "cost"}   last, unless the process was killed


def trace(path: Path | None, event: str, **fields) -> None:
    """Append one line to the trace (see append_line)."""
    if path is not None:
        append_line(path, {"event": event, **fields})


def append_line(path: Path, value) -> None:
    """One JSON line appended with a single write() and no buffer, every secret scrubbed first: a crash,
    even kill -9, loses nothing written before it and leaves no half line (trace, audit log)."""
    line = replay.scrub_json(json.dumps(plain(value), ensure_ascii=False)) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode(errors="backslashreplace"))  # a lone surrogate the model sent, escaped
    finally:
        os.close(fd)


def trace_start(path: Path | None, script: str, shared: dict, budget, about: dict | None = None) -> None:
    """The first line: what every request of the run shares, and the run's limits. s06 writes a `run`
    line before it (`about`): what replaying the trace needs besides the requests."""
    if about:
        trace(path, "run", **about)
    limits = {
        name: getattr(budget, name)
        for name in ("max_steps", "max_tokens_total", "max_input_tokens", "max_cost")
    }
    trace(path, "start", script=script, **shared, limits=limits)


class Trace:
    """s05's trace as a loop writes it: one line per model call and per turn of tools. It remembers the
    messages its last model_call line sent, so that each line logs only what is new."""

    def __init__(self, path: Path | None):
        self.path, self.logged = path, []

    def call(self, step: int, messages: list, outcome, started: float, budget, **extra) -> None:
        """The line for one model call: what it added to the messages, the reply (or, s06, the error)
        and what the run has spent. `extra`: what this request has that the start line does not."""
        new = next((i for i, (a, b) in enumerate(zip(self.logged, messages)) if a is not b), len(self.logged))
        sent = {"messages_count": len(messages), "new_from": new, "new_messages": messages[new:], **extra}
        spent = {"spent": {"tokens": budget.tokens, "cost": round(budget.cost, 6)}} if budget else {}
        ms = {"ms": round((time.monotonic() - started) * 1000)} if budget else {}
        result = {"error": outcome} if isinstance(outcome, dict) else {"response": outcome}
        trace(self.path, "model_call", step=step, request=sent, **result, **ms, **spent)
        self.logged = list(messages)

    def tools(self, step: int, calls: list, results: list, started: float, stop: str) -> None:
        """The line for one turn's tool calls: what ran, what came back, whether the loop goes on."""
        ran = [result | {"name": block.name, "input": block.input} for block, result in zip(calls, results)]
        ms = round((time.monotonic() - started) * 1000)
        trace(self.path, "tools", step=step, results=ran, ms=ms, next="stop" if stop else "continue")


def trace_error(path: Path | None, step: int, cause: Exception, message: str) -> None:
    """The line for a model call that failed for good: its status and body, when the API sent them."""
    status = getattr(cause, "status_code", None)
    error = {"status": status, "body": getattr(cause, "body", None), "message": message}
    trace(path, "model_call", step=step, error=error)


def trace_to_fixture(path: Path, script: str = "s06_recovery") -> dict:
    """A trace as a fixture: each model_call line becomes an exchange, its request rebuilt from the
    start line and the messages the call added, so any traced run replays offline (`--replay run.jsonl`).
    The tools run again, in the workspace the `run` line names (a fixture's, when the trace came from a
    replay; a live run's folder is not copied: put its files in fixtures/workspace/<name>/ and set
    `workspace`). Live tool output differs from machine to machine, so requests are compared by structure."""
    raw = replay.read_bytes(path, "trace")  # a regular file of sane size, or one line saying why not
    try:
        if replay.text_depth(raw) > replay.MAX_JSON_DEPTH:
            raise ValueError(f"nested more than {replay.MAX_JSON_DEPTH} levels deep")
        lines = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
        return fixture_from_trace(lines, path, script)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:  # not what --trace writes
        raise replay.FixtureError(
            f"{path}: not a JSON-lines trace ({err!r:.120}) — give a file --trace wrote"
        ) from None


def fixture_from_trace(lines: list, path: Path, script: str) -> dict:
    """trace_to_fixture's work, on the trace's parsed lines."""
    runs = [i for i, line in enumerate(lines) if line.get("event") == "run"] or [0]
    lines = lines[runs[-1] :]  # a trace file appended to by several runs: the last one
    start = next((line for line in lines if line.get("event") == "start"), {})
    about = next((line for line in lines if line.get("event") == "run"), {})
    base = {k: start[k] for k in ("model", "max_tokens", "system", "tools") if k in start}
    messages, exchanges = [], []
    for call in (line for line in lines if line.get("event") == "model_call" and "request" in line):
        sent = call["request"]
        messages = messages[: sent["new_from"]] + sent["new_messages"]
        extra = {k: v for k, v in sent.items() if k not in ("messages_count", "new_from", "new_messages")}
        request = base | {"messages": messages, "stream": start.get("stream")} | extra
        request = {k: v for k, v in request.items() if k != "stream" or v}  # a plain call sends no `stream`
        exchanges.append(
            {"request": request, "response": traced_response(call, request), "match": "structure"}
        )
    if not exchanges:
        raise replay.FixtureError(f"{path}: no model calls in this trace — was it written by s05 or s06?")
    return {
        "script": script,
        "scenario": Path(path).stem,
        "description": f"Converted from the trace {Path(path).name} by trace_to_fixture.",
        "provenance": about.get("provenance", "recorded"),
        "task": about.get("task") or exchanges[0]["request"]["messages"][0]["content"],
        "workspace": about.get("workspace", ""),
        "args": about.get("args", []),
        "match": "structure",
        "exchanges": exchanges,
    }


def traced_response(call: dict, request: dict) -> dict:
    """A model_call line's outcome as a fixture response: a Message (streamed if the request was), an
    error event inside a stream, or an HTTP error."""
    error = call.get("error")
    if error is None and request.get("stream"):
        return {"status": 200, "stream": replay.message_to_events(call["response"])}
    if error is None:
        return {"status": 200, "body": call["response"]}
    if error["status"] == 200:  # an error event inside the stream
        return {"status": 200, "stream": [{"event": "error", "data": error["body"]}]}
    return {"status": error["status"], "body": error["body"]}


def fixture_file(trace_file: str, script: str) -> str:
    """s06: convert a trace to a fixture file in a temp folder, for --replay."""
    target = replay.new_run_folder() / (Path(trace_file).stem + ".json")  # removed with the run's copies
    replay.write_json(target, trace_to_fixture(Path(trace_file), script))
    return str(target)
