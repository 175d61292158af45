"""s06_recovery.py — Recovery: every turn ends in a named transition, and the loop climbs back.

Adds over s05: `next_transition()` names what each iteration leads to — next_turn, escalate,
continue, collapse, compact, resume_pause, hook_retry, done or fail — shown on screen and written to
the trace. max_tokens: a cut reply is never executed; the same request goes again with max_tokens
64000 (streamed: the SDK refuses that unstreamed), then the partial reply is kept, its tool calls
answered with is_error, and the model asked to go on, at most 3 times. A 400 "prompt is too long":
old tool results collapse to placeholders, then the older history is compacted into a summary, at
most once per turn, never splitting a tool_use from its tool_result. pause_turn: the paused content
goes back unchanged. An error event inside a 200 stream is retried like a 529. --stop-hook CMD must
pass before the loop may stop. A trace replays as a fixture (`--replay run.jsonl`).
Changed from s05: DEFAULT_FIXTURE, call_model, agent_loop, main, trace_call

    user task
        |
        v
    +--------------+  stop_reason  +=========================================+
    | call model   | ------------> | next_transition(): what happens next?   |  new in s06
    +--------------+               +=========================================+
        ^  ^  ^  ^                   | tool_use        -> next_turn: run the tools, send results
        |  |  |  +-------------------| max_tokens      -> escalate to 64k | continue (<= 3) | fail
        |  |  +----------------------| too long (400)  -> collapse | compact (<= 1 a turn) | fail
        |  +-------------------------| pause_turn      -> resume_pause: echo the content unchanged
        +----------------------------| end_turn        -> stop hook fails? hook_retry : done
                                     | refusal         -> done, saying so
Run: python s06_recovery.py            offline replay of its fixture, no key needed
     python s06_recovery.py --replay fixtures/s06_stop_hook.json   (each s06_* fixture is one path)
     python s06_recovery.py --trace run.jsonl "task"   then   --replay run.jsonl
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import anthropic
import fastjsonschema
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import replay

MODEL = "claude-sonnet-5"
SYSTEM = "You are a coding agent. Use the tools to solve tasks in the workspace. Act, don't explain."
MAX_TOKENS = 8000
BASH_TIMEOUT = 30  # seconds; a command that hangs must not hang the loop
TOOLS = [
    {
        "name": "bash",
        "description": "Run a shell command in the workspace. Returns stdout, stderr and the exit code.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "the command to run"}},
            "required": ["command"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file. Paths are relative to the workspace.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "write_file",
        "description": "Create or overwrite a text file, and the folders it needs.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
    {
        "name": "edit_file",
        "description": "Replace old_text, which must occur exactly once in the file, with new_text.",
        "input_schema": {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_text": {"type": "string", "minLength": 1},
                "new_text": {"type": "string"},
            },
            "required": ["path", "old_text", "new_text"],
        },
    },
    {
        "name": "grep",
        "description": "Search files for a regular expression. Returns file:line: text for each match.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "glob": {"type": "string", "default": "**/*"}},
            "required": ["pattern"],
        },
    },
    {
        "name": "list_files",
        "description": "List the files matching a glob pattern such as **/*.py (default: every file).",
        "input_schema": {"type": "object", "properties": {"glob": {"type": "string", "default": "**/*"}}},
    },
]
DEFAULT_FIXTURE = "fixtures/s06_truncated_tool_use.json"

console = Console(highlight=False)


# -- tool handlers ---------------------------------------------------------------------------------


def run_bash(command: str, workspace: Path, timeout: int = BASH_TIMEOUT) -> str:
    """Run one shell command in the workspace; report its output and exit code as text."""
    # s03: a session of its own, so a timeout stops everything the command started (`a & b`, pipes,
    # servers), not just the shell; and no stdin, so a command waiting for input gets EOF, not a hang.
    with subprocess.Popen(
        command,
        shell=True,
        cwd=workspace,
        text=True,
        errors="replace",  # output that is not UTF-8 is still output, not an exception
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as done:
        try:
            stdout, stderr = wait_for(done, timeout)  # s05: a Ctrl-C may cancel it (see wait_for)
        except subprocess.TimeoutExpired:
            os.killpg(done.pid, signal.SIGKILL)  # the whole group: children would keep the pipes open
            raise ToolError(timed_out(timeout, *done.communicate())) from None
        except Cancelled:
            raise ToolError(
                "interrupted by the user: the command was cancelled, its process group killed"
            ) from None
    output = (stdout + stderr).strip() or "(no output)"
    return f"{output}\n[exit code {done.returncode}]"


# -- new in s02: tools as data — handlers, a dispatch map, validation, a sandbox, a permission gate ---

PERMISSIONS = ("ask", "auto", "deny")  # --permission: ask a person, allow, or allow only reads
DANGEROUS = {  # regular expression -> why a person must say yes first, whatever --permission says
    r"\brm\s+-\w*[rRf]": "rm -r/-f deletes with no undo",
    r"\bsudo\b": "sudo acts as root, beyond the workspace",
    r"\bgit\s+push\b": "git push publishes beyond this machine",
    r"\b(curl|wget)\b.*\|\s*(ba|z)?sh\b": "piping a download into a shell runs code nobody has read",
}
MAX_OUTPUT = 10_000  # characters of tool output the model gets; the middle of longer output is cut
RUNS = replay.ROOT / "runs"  # live runs keep their audit log in runs/<time>/


class ToolError(Exception):
    """A refusal or failure the model can correct: it becomes an is_error tool_result."""


def inside(workspace: Path, path: str) -> Path:
    """`path` resolved in the workspace (.., absolute paths, symlinks followed); refused if it leaves."""
    target = (workspace / path).resolve()
    if not target.is_relative_to(workspace):
        raise ToolError(f"{path} is outside the workspace; use a path inside it, relative to it")
    return target


def matching(workspace: Path, glob: str) -> list[Path]:
    """The files a glob matches that really are in the workspace (symlinks out are left out)."""
    if Path(glob).is_absolute() or ".." in Path(glob).parts:
        raise ToolError(f"glob {glob!r} must be relative to the workspace, without ..")
    try:  # pathlib rejects some patterns ("", ".", "a**") with assorted exceptions
        found = list(workspace.glob(glob))
    except (ValueError, IndexError, AttributeError, NotImplementedError):
        raise ToolError(f"glob {glob!r} is not a pattern pathlib accepts; try **/* or *.py") from None
    return sorted(p for p in found if p.is_file() and p.resolve().is_relative_to(workspace))


def bash(workspace: Path, command: str) -> str:
    return run_bash(command, workspace)


def read_file(workspace: Path, path: str) -> str:
    return inside(workspace, path).read_text(errors="replace")


def write_file(workspace: Path, path: str, content: str) -> str:
    target = inside(workspace, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return f"wrote {target.write_text(content)} characters to {path}"


def edit_file(workspace: Path, path: str, old_text: str, new_text: str) -> str:
    """Replace the one occurrence of old_text; none or several is an error, never a guess."""
    target = inside(workspace, path)
    text = target.read_text()
    if text.count(old_text) != 1:
        found = f"occurs {text.count(old_text)} times" if old_text in text else "does not occur"
        raise ToolError(f"old_text {found} in {path}; it must match exactly once (quote more of the file)")
    target.write_text(text.replace(old_text, new_text))
    return f"edited {path}: replaced 1 occurrence"


def grep(workspace: Path, pattern: str, glob: str = "**/*") -> str:
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise ToolError(f"{pattern!r} is not a regular expression: {err}") from None
    return (
        "\n".join(
            f"{file.relative_to(workspace)}:{n}: {line}"
            for file in matching(workspace, glob)
            for n, line in enumerate(file.read_text(errors="replace").splitlines(), 1)
            if regex.search(line)
        )
        or "(no matches)"
    )


def list_files(workspace: Path, glob: str = "**/*") -> str:
    return "\n".join(str(p.relative_to(workspace)) for p in matching(workspace, glob)) or "(no files)"


@dataclass
class Tool:
    """One entry of the dispatch map: what the model is shown, what runs, and whether it only reads."""

    name: str
    description: str
    input_schema: dict
    handler: Callable[..., str]
    read_only: bool

    def __post_init__(self):  # compiled once, at import; unknown fields are refused, not ignored
        schema = {**self.input_schema, "additionalProperties": False}
        self.validate = fastjsonschema.compile(schema, use_default=False)  # never rewrite the model's input


HANDLERS = {"bash": bash, "read_file": read_file, "write_file": write_file, "edit_file": edit_file}
HANDLERS |= {"grep": grep, "list_files": list_files}  # the dispatch map: tool name -> handler
READ_ONLY = {"read_file", "grep", "list_files"}  # these pass the gate (and in s04 run in parallel)
REGISTRY = {
    t["name"]: Tool(**t, handler=HANDLERS[t["name"]], read_only=t["name"] in READ_ONLY) for t in TOOLS
}


def ask_person(tool: Tool, data: dict, danger: str | None) -> bool:
    """A y/n question at the terminal; anything but yes, or no terminal at all, is a no."""
    warning = f" [red]({danger})[/]" if danger else ""
    try:
        answer = console.input(
            f"[yellow]allow[/] {tool.name} {escape(json.dumps(data)[:300])}{warning}? [y/N] "
        )
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def gate(tool: Tool, data: dict, permission: str) -> tuple[str, str | None]:
    """(decision, refusal or None): reads pass; the rest follow --permission; danger needs a yes."""
    danger = next((why for rx, why in DANGEROUS.items() if re.search(rx, data.get("command", ""))), None)
    if tool.read_only:
        return "read-only", None
    if permission == "deny":
        return "denied", "denied: this run allows read-only tools only (--permission deny)"
    if danger and permission == "auto":
        return "denied", (
            f"denied: this command needs a person's yes ({danger}), and this run has nobody to ask "
            "(--permission auto). Do without it, or leave it to the user."
        )
    if permission == "ask" and not ask_person(tool, data, danger):
        return "denied", "denied: the user said no to this call. Do not retry it; do something else."
    return ("approved" if permission == "ask" else "allowed"), None


def admit(block, permission: str) -> tuple[str, str | None]:
    """Everything checked before a tool runs: (decision for the audit log, refusal or None)."""
    tool = REGISTRY.get(block.name)
    if tool is None:
        return "unknown tool", f"error: there is no tool {block.name!r}; the tools are {', '.join(REGISTRY)}"
    try:
        tool.validate(block.input)
    except fastjsonschema.JsonSchemaException as err:
        problem = err.message.replace("data", "input", 1)
        wanted = json.dumps(tool.input_schema.get("properties"))
        return "invalid input", f"error: invalid input for {tool.name}: {problem}. It takes {wanted}"
    return gate(tool, block.input, permission)


def truncate(text: str, limit: int = MAX_OUTPUT) -> str:
    """Keep the head and the tail (where errors and exit codes are), and say how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - 2 * half} characters cut from the middle] …\n{text[-half:]}"


def execute(block, workspace: Path, permission: str = "auto", audit: Path | None = None) -> tuple[str, bool]:
    """One tool call: known? valid? allowed? then its handler. Returns (output, is_error)."""
    started, workspace = time.monotonic(), workspace.resolve()
    stopped = INTERRUPT.is_set()  # s05: after a Ctrl-C nothing new starts, yet every call gets its answer
    decision, refusal = ("interrupted", f"{INTERRUPTED}: not run") if stopped else admit(block, permission)
    output, is_error = refusal, refusal is not None
    if not is_error:
        try:
            output = REGISTRY[block.name].handler(workspace, **block.input)
        except Exception as err:  # s03: whatever a handler raises is a result the model reads
            output, is_error = error_text(err, workspace), True
    output = truncate(output)
    if audit:
        line = {"id": block.id, "tool": block.name, "input": block.input, "decision": decision}
        line |= {"ms": round((time.monotonic() - started) * 1000), "chars": len(output), "is_error": is_error}
        with audit.open("a") as log:
            log.write(json.dumps(line, ensure_ascii=False) + "\n")
    return output, is_error


def audit_path(run: replay.Run) -> Path:
    """The audit log: beside a replay's temp workspace (never in the repo), else in runs/<time>/."""
    folder = run.workspace.parent if run.mode == "replay" else RUNS / f"{datetime.now():%Y%m%d-%H%M%S}-s05"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "audit.jsonl"


# -- new in s03: errors are data — tool failures as results, one visible retry layer, clean stops ---


def error_text(err: Exception, workspace: Path) -> str:
    """An exception as the model reads it: type and message (no traceback), paths as it knows them."""
    kind = "" if isinstance(err, ToolError) else f"{type(err).__name__}: "
    return f"error: {kind}{err}".replace(f"{workspace}/", "")


def timed_out(timeout: float, stdout: str, stderr: str) -> str:
    """A timeout, and whatever the command printed before it was stopped."""
    said = truncate((stdout + stderr).strip(), 2000)
    return f"the command timed out after {timeout} s; it and every process it started were killed" + (
        f". Output before that:\n{said}" if said else " (no output before that)"
    )


# The SDK retries by itself (2 retries by default). This step owns retrying instead and builds the
# client with max_retries=0: retry layers multiply (5 attempts of ours over the SDK's 3 would be 15
# requests to an API that is already overloaded), and only one layer can show each attempt.
CLIENT_OPTIONS = {"max_retries": 0}
MAX_ATTEMPTS = 5  # requests per model call, the first included
BASE_WAIT, MAX_WAIT = 0.5, 16.0  # seconds: the first backoff, and the cap on any one backoff
MAX_SERVER_WAIT = 60.0  # a server asking for a longer pause than this ends the run instead
REASONS = {408: "request timeout", 409: "conflict", 429: "rate limited", 529: "overloaded"}
REASONS[200] = "an error inside the stream"  # s06: see broke_mid_stream()
WHAT_TO_DO = {  # status -> what the reader should do; none of these can pass by waiting
    400: "the request was invalid: {message} — a bug in the loop; the conversation is saved to look at",
    401: "the API refused the key (401: {message}) — check ANTHROPIC_API_KEY",
    403: "the key may not do this (403: {message}) — check its workspace and permissions in the Console",
    404: "not found (404: {message}) — check the model id (--model, MODEL_ID) and ANTHROPIC_BASE_URL",
    413: "the request is too large (413: {message}) — the conversation outgrew the limit; start afresh",
}


@dataclass
class Retry:
    """How the retry layer waits: injectable, so that replays, notebooks and tests never wait."""

    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random  # the jitter's source of randomness
    attempts: int = MAX_ATTEMPTS


class GaveUp(Exception):
    """The retry layer stopped retrying; the message is one line saying why and what to do."""


def retryable(status: int | None) -> bool:
    """May this pass on its own? None is a lost connection or timeout; 4xx but 408/409/429 never."""
    return status is None or status in (408, 409, 429) or status >= 500


def status_of(err: anthropic.APIError) -> int | None:
    """The HTTP status of an API error; None when no answer came (connection lost, timed out)."""
    return getattr(err, "status_code", None)


def backoff(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Equal jitter: half of min(cap, base * 2^(attempt-1)) for sure, the other half at random."""
    ceiling = min(MAX_WAIT, BASE_WAIT * 2 ** (attempt - 1))
    return ceiling / 2 + rand() * ceiling / 2


def server_wait(headers, now: Callable[[], float] = time.time) -> float | None:
    """The pause the server asked for: retry-after-ms, else retry-after (seconds or an HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - now())
            except (TypeError, ValueError):
                continue  # unreadable: fall back to our own backoff
    return None


def api_message(err: anthropic.APIError) -> str:
    """The API's own one-line explanation, when the body has one."""
    body = err.body if isinstance(err.body, dict) else {}
    return str((body.get("error") or {}).get("message") or err.message)


def fatal_line(err: Exception) -> str:
    """One line for a stop the loop cannot fix: what happened and what to do."""
    if not isinstance(err, anthropic.APIError):
        return str(err)
    status = status_of(err)
    advice = WHAT_TO_DO.get(status, "the API answered {status}: {message}")
    return advice.format(status=status, message=api_message(err))


def call_model(
    client: anthropic.Anthropic, retry: Retry | None, stream: bool = False, **request
) -> anthropic.types.Message:
    """client.messages.create(**request), or streamed (s05), retried on what may pass; each retry shown."""
    retry = retry or Retry()
    attempts = retry.attempts
    for attempt in range(1, attempts + 1):
        try:
            return streamed(client, **request) if stream else client.messages.create(**request)
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as err:
            status = status_of(err)
            if not retryable(status) and not broke_mid_stream(err):  # s06: a 200 stream that broke
                raise  # 400, 401, 403, 404, 413...: the same request would fail the same way
            lost = "timed out" if isinstance(err, anthropic.APITimeoutError) else "connection failed"
            why = REASONS.get(status) or (f"server error {status}" if status else lost)
            if attempt == attempts:
                raise GaveUp(given_up(why, status, attempts)) from err
            asked = server_wait(err.response.headers) if status else None
            if asked is not None and asked > MAX_SERVER_WAIT:
                raise GaveUp(
                    f"{why} ({status}): the API asks for a {asked:.0f} s pause — try again later"
                ) from err
            wait = backoff(attempt, retry.rand) if asked is None else asked
            note = " (as the server asked)" if asked is not None else ""
            console.print(
                f"[yellow]{why}[/] ({status or 'no answer'}) — retrying in {wait:.1f} s{note}, "
                f"attempt {attempt + 1} of {attempts}"
            )
            retry.sleep(wait)
    raise GaveUp("no attempts allowed (attempts < 1)")


def given_up(why: str, status: int | None, attempts: int) -> str:
    """The one line for retries spent: what kept failing, and what the reader can do about it."""
    if status is None:
        return f"could not reach the API in {attempts} attempts — check the network and ANTHROPIC_BASE_URL"
    return (
        f"the API is still failing after {attempts} attempts ({why}, {status}) — try again in a few minutes"
    )


def skip_wait(seconds: float) -> None:
    """The sleep used in replay (and with WORKBOOK_NO_SLEEP=1): say the wait, don't spend it."""
    console.print(f"[dim](not waiting {seconds:.1f} s: replay or WORKBOOK_NO_SLEEP)[/]")


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
    """The messages list as plain JSON, to read after a stop (and, from s05 on, to resume)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plain(messages), indent=2, ensure_ascii=False) + "\n")
    return path


# -- new in s04: several tool calls per turn — reads run together, every other call alone, in order --

MAX_TOOLS_PER_TURN = 10  # a turn asking for more: the calls past this are answered with an error, not run
MAX_PARALLEL = 8  # reads running at once, at most
READERS = ThreadPoolExecutor(MAX_PARALLEL, "read")  # made once: starting threads every turn is slow when busy


@dataclass
class Timed:
    """When one call ran, for the display only: timings never go into a tool_result."""

    index: int  # its place among the turn's tool_use blocks
    block: object
    group: int
    started: float  # time.monotonic()
    ended: float


def reads_only(block) -> bool:
    """Whether a call only reads, and so may run beside other reads (an unknown tool does not)."""
    tool = REGISTRY.get(block.name)
    return tool is not None and tool.read_only


def plan(blocks: list) -> list[list[int]]:
    """The calls' indexes, grouped in order: a run of reads is one group; any other call is alone."""
    groups = []
    for i, block in enumerate(blocks):
        if reads_only(block) and groups and reads_only(blocks[groups[-1][-1]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def over_the_cap(block, asked: int, audit: Path | None) -> str:
    """The answer to a call past MAX_TOOLS_PER_TURN: it did not run, and the model is told why."""
    output = (
        f"error: not run: this turn asked for {asked} tool calls and at most {MAX_TOOLS_PER_TURN} run "
        "per turn. Ask again for the ones you still need, fewer at a time."
    )
    if audit:
        line = {"id": block.id, "tool": block.name, "input": block.input, "decision": "over the cap"}
        line |= {"ms": 0, "chars": len(output), "is_error": True}
        with audit.open("a") as log:
            log.write(json.dumps(line, ensure_ascii=False) + "\n")
    return output


def run_tools(
    blocks: list,
    workspace: Path,
    permission: str = "auto",
    audit: Path | None = None,
    timeline: list | None = None,
    pool: ThreadPoolExecutor = READERS,  # one with a single worker runs the reads one by one, as s03 did
    read_latency: float = 0.0,
) -> list[dict]:
    """Answer every tool_use once, in the order asked: each group of reads in a thread pool, every
    other call alone in this thread, so it overlaps nothing and only it can ask a person."""
    answers = [None] * len(blocks)  # (output, is_error) per call, in tool_use order

    def run(i: int, group: int) -> None:
        started = time.monotonic()
        if read_latency and reads_only(blocks[i]):
            time.sleep(read_latency)  # stands in for a slow disk or a remote read (--read-latency)
        answers[i] = execute(blocks[i], workspace, permission, audit)
        if timeline is not None:
            timeline.append(Timed(i, blocks[i], group, started, time.monotonic()))

    for group, calls in enumerate(plan(blocks[:MAX_TOOLS_PER_TURN]), 1):
        if len(calls) == 1:  # a write, bash, or a lone read: here, in the loop's thread, alone
            run(calls[0], group)
            continue
        running = [pool.submit(run, i, group) for i in calls]
        wait(running)  # the whole group has finished before the next call starts
        for future in running:
            future.result()  # re-raises in this thread anything execute() let through
    for i in range(MAX_TOOLS_PER_TURN, len(blocks)):
        answers[i] = over_the_cap(blocks[i], len(blocks), audit), True
    return [
        {"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": is_error}
        for block, (output, is_error) in zip(blocks, answers)
    ]


def seconds(text) -> float:
    """A --read-latency value: seconds, from 0 to 60 (argparse reports a ValueError in one line)."""
    value = float(text)
    if not 0 <= value <= 60:
        raise ValueError(f"{text} is not between 0 and 60 seconds")
    return value


def label(block, limit: int = 44) -> str:
    """A call in a few words: its tool and the first line of its first input."""
    first = next(iter(block.input.values()), "") if isinstance(block.input, dict) else ""
    return f"{block.name} {(str(first).splitlines() or [''])[0]}"[:limit]


def show_timeline(timeline: list, width: int = 40) -> None:
    """Which calls ran together (same group) and how long each took, as bars on one time axis."""
    if not timeline:
        return
    start, end = min(t.started for t in timeline), max(t.ended for t in timeline)
    scale = width / max(end - start, 1e-9)
    table = Table(title="tool calls this turn: same group = ran together", title_justify="left")
    for column in ("group", "call", "ms", "timeline"):
        table.add_column(column, justify="right" if column == "ms" else "left")
    for t in sorted(timeline, key=lambda t: t.index):
        bar = " " * round((t.started - start) * scale) + "█" * max(1, round((t.ended - t.started) * scale))
        table.add_row(str(t.group), escape(label(t.block)), f"{(t.ended - t.started) * 1000:.0f}", bar)
    console.print(table)


# -- new in s05: the loop stops when it should — limits, a repeat brake, streaming, Ctrl-C, a trace --

MAX_STEPS = 50  # model calls in one run (--max-steps)
MAX_TOKENS_TOTAL = 2_000_000  # input + output tokens summed over the run, cached ones included
MAX_INPUT_TOKENS = 150_000  # one request's input: history only grows, so the next request is larger
MAX_COST = 5.00  # dollars, estimated (--max-cost); a warning comes first, at COST_WARNING of it
COST_WARNING = 0.8
# Dollars per million tokens, (input, output): Anthropic's list price for its Sonnet models, as
# published on anthropic.com/pricing. Prompt-cache writes cost 1.25x the input price, cache reads 0.1x.
# These are estimates: prices change, and the invoice is the truth. A model not listed is priced as MODEL.
PRICES = {"claude-sonnet-5": (3.00, 15.00)}
CACHE_WRITE, CACHE_READ = 1.25, 0.10
REPEAT_LIMIT = 3  # the same call (tool, input, result) this many times in a row: the last one is refused
INTERRUPT_GRACE = 1.0  # seconds a running command still gets after Ctrl-C, before its group is killed
INTERRUPTED = "error: interrupted by the user"  # how every answer to a call stopped by Ctrl-C begins
INTERRUPT = threading.Event()  # set by a first Ctrl-C while tools run: finish, answer, save, stop
CTRL_C_IN_TOOLS = (
    "interrupted by the user (Ctrl-C while tools ran: the calls that finished keep their results)"
)


def tokens_in(usage) -> int:
    """Everything one request sent: uncached input, plus what was written to and read from the cache."""
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return usage.input_tokens + cached


def cost(usage, model: str = MODEL) -> float:
    """Estimated dollars for one response: input (cache writes and reads at their prices), then output."""
    price_in, price_out = PRICES.get(model, PRICES[MODEL])
    written, read = usage.cache_creation_input_tokens or 0, usage.cache_read_input_tokens or 0
    weighted_in = usage.input_tokens + written * CACHE_WRITE + read * CACHE_READ
    return (weighted_in * price_in + usage.output_tokens * price_out) / 1_000_000


@dataclass
class Budget:
    """The run's limits and what it has spent so far; checked before every model call."""

    max_steps: int = MAX_STEPS
    max_tokens_total: int = MAX_TOKENS_TOTAL
    max_input_tokens: int = MAX_INPUT_TOKENS
    max_cost: float = MAX_COST
    model: str = MODEL
    rows: list = field(default_factory=list)  # per model call: (stop_reason, tokens in, tokens out, dollars)
    warned: bool = False
    reason: str = ""  # why the loop ended, once it has

    @property
    def tokens(self) -> int:
        return sum(tokens_in + tokens_out for _, tokens_in, tokens_out, _ in self.rows)

    @property
    def cost(self) -> float:
        return sum(row[3] for row in self.rows)

    def spend(self, response) -> str | None:
        """Count one response; the first time the cost passes COST_WARNING of the cap, say so."""
        usage = response.usage
        self.rows.append(
            (response.stop_reason, tokens_in(usage), usage.output_tokens, cost(usage, self.model))
        )
        if self.warned or self.cost < COST_WARNING * self.max_cost:
            return None
        self.warned = True
        return (
            f"about ${self.cost:.4f} spent, {self.cost / self.max_cost:.0%} of --max-cost ${self.max_cost:g}"
        )

    def exceeded(self) -> str:
        """The first limit reached, named with its flag; "" while there is room for another call."""
        last_in = self.rows[-1][1] if self.rows else 0
        if len(self.rows) >= self.max_steps:
            return f"max steps: {len(self.rows)} model calls made (--max-steps {self.max_steps})"
        if self.tokens >= self.max_tokens_total:
            limit = f"--max-tokens-total {self.max_tokens_total:,}"
            return f"token budget: {self.tokens:,} tokens in and out ({limit})"
        if last_in >= self.max_input_tokens:
            limit = f"--max-input-tokens {self.max_input_tokens:,}"
            return (
                f"input limit: the last request sent {last_in:,} input tokens, the next sends more ({limit})"
            )
        if self.cost >= self.max_cost:
            return f"cost limit: about ${self.cost:.4f} spent (--max-cost ${self.max_cost:g})"
        return ""

    def spent(self) -> dict:
        return {"steps": len(self.rows), "tokens": self.tokens, "cost": round(self.cost, 6)}

    def limits(self) -> dict:
        return {
            name: getattr(self, name)
            for name in ("max_steps", "max_tokens_total", "max_input_tokens", "max_cost")
        }


@dataclass
class RepeatGuard:
    """The brake on a model going round in circles. It sees every call in the order asked: a call is
    refused (an is_error asking for another approach) when the REPEAT_LIMIT - 1 calls just before it
    were the same tool with the same input and gave the same result; asking again stops the run."""

    limit: int = REPEAT_LIMIT
    recent: list = field(default_factory=list)  # [call, result] of the latest calls; None: not run yet
    refused: dict = field(default_factory=dict)  # this turn's refusals: tool_use id -> the answer
    turn: list = field(default_factory=list)  # this turn's entries in `recent`, in tool_use order
    stop: str = ""  # set when the model asks again after a refusal: why the run stops

    def screen(self, calls: list) -> list:
        """The calls that may run; the others get their answer in self.refused."""
        self.refused, self.turn = {}, []
        for block in calls:
            answer = self.check(block.name, json.dumps(block.input, sort_keys=True, ensure_ascii=False))
            if answer:
                self.refused[block.id] = answer
        return [block for block in calls if block.id not in self.refused]

    def check(self, name: str, data: str) -> str | None:
        """None to let this call (a tool and its input as JSON) run, or the error that answers it instead."""
        call = f"{name} {data}"
        before = self.recent[-(self.limit - 1) :]
        results = {result for _, result in before if result is not None}  # None: asked earlier this turn
        answer = None
        if before and before[-1] == [call, "refused"]:
            self.stop = f"repeated call: {call[:80]} asked for again after it was refused"
            answer = "error: not run: refused again, so this run stops here."
        elif len(before) == self.limit - 1 and {c for c, _ in before} == {call} and len(results) <= 1:
            answer = (
                f"error: not run: this is the same {name} call with the same input {self.limit} times in a "
                "row, and it gave the same result each time, so another gives nothing new. Change approach: "
                "other input, another tool, or stop and report what you found."
            )
        entry = [call, "refused" if answer else None]
        self.recent, self.turn = (self.recent + [entry])[-self.limit :], self.turn + [entry]
        return answer

    def merge(self, calls: list, results: list[dict]) -> list[dict]:
        """All the turn's tool_results in tool_use order, refusals in their places; results remembered."""
        ran = iter(results)
        merged = [
            {
                "type": "tool_result",
                "tool_use_id": block.id,
                "content": self.refused[block.id],
                "is_error": True,
            }
            if block.id in self.refused
            else next(ran)
            for block in calls
        ]
        for entry, result in zip(self.turn, merged):
            entry[1] = entry[1] or json.dumps([result["content"], result["is_error"]])
        return merged


class Cancelled(Exception):
    """A running command stopped by Ctrl-C."""


def wait_for(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """A command's (stdout, stderr) once it ends; TimeoutExpired after `timeout` s. After a Ctrl-C it
    gets INTERRUPT_GRACE seconds more, then its process group is killed and Cancelled raised."""
    deadline, grace_until = time.monotonic() + timeout, None
    while True:
        try:
            return process.communicate(timeout=0.1)  # asked again after a timeout, it loses no output
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if now >= deadline:
                raise
            if INTERRUPT.is_set():
                grace_until = grace_until or now + INTERRUPT_GRACE
                if now >= grace_until:
                    os.killpg(process.pid, signal.SIGKILL)
                    raise Cancelled from None
        except KeyboardInterrupt:  # a second Ctrl-C: the command goes at once, with the run
            os.killpg(process.pid, signal.SIGKILL)
            raise


@contextmanager
def ctrl_c_lets_tools_finish():
    """While tools run, a first Ctrl-C only sets INTERRUPT: the running call finishes (a long command
    is cancelled), the calls not started are answered as interrupted, and the loop stops after the
    turn. A second Ctrl-C raises KeyboardInterrupt at once."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals; elsewhere Ctrl-C keeps its default
        return

    def on_ctrl_c(signum, frame):
        if INTERRUPT.is_set():
            raise KeyboardInterrupt
        INTERRUPT.set()
        console.print("\n[yellow]Ctrl-C:[/] letting the running tool finish, then saving (Ctrl-C again: now)")

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def waiting(stream: bool, turn: int):
    """While the model answers: a streamed turn opens with its rule (its text then prints as it
    comes), a whole one shows the spinner."""
    if stream:
        console.rule(f"turn {turn}")
        yield
    else:
        with console.status("waiting for the model…"):
            yield


def streamed(client: anthropic.Anthropic, **request) -> anthropic.types.Message:
    """One model call, streamed: the text is printed as it arrives, a tool call once its input is whole.
    A Ctrl-C meanwhile raises KeyboardInterrupt, and the partial reply is dropped with the stream."""
    with client.messages.stream(**request) as events:
        for event in events:
            show_event(event)
        return events.get_final_message()


def show_event(event) -> None:
    """One streamed event as the reader sees it: text at once, a tool call when its input is complete."""
    if event.type == "content_block_start" and event.content_block.type == "text":
        console.print("[bold]model:[/] ", end="")
    elif event.type == "text":
        console.out(event.text, end="", highlight=False)
    elif event.type == "content_block_stop" and event.content_block.type == "text":
        console.out("")
    elif event.type == "content_block_stop" and event.content_block.type == "tool_use":
        block = event.content_block
        console.print(f"asks for {block.name} {json.dumps(block.input)}", style="dim", markup=False)


def show_spend(budget: Budget, warning: str | None) -> None:
    """What the run has spent so far, and the cost warning the first time it applies."""
    console.print(f"[dim]run so far: {budget.tokens:,} tokens, about ${budget.cost:.4f}[/]")
    if warning:
        console.print(f"[yellow]cost warning:[/] {escape(warning)}")


def answer_open_calls(messages: list) -> bool:
    """After a stop mid-turn, give every tool_use of the last assistant message an is_error result, so
    that the conversation obeys the API's rules again; whether there were any to answer."""
    last = plain(messages[-1]) if messages else {}
    asked = [b["id"] for b in last.get("content", []) if isinstance(b, dict) and b.get("type") == "tool_use"]
    if last.get("role") != "assistant" or not asked:
        return False
    missed = {
        "type": "tool_result",
        "content": f"{INTERRUPTED}: stopped before it had a result",
        "is_error": True,
    }
    messages.append({"role": "user", "content": [missed | {"tool_use_id": tool_id} for tool_id in asked]})
    return True


def stopped(turns: list, budget: Budget, trace_path: Path | None) -> list:
    """The end of a run, whatever ended it: the reason on screen and as the trace's last line."""
    console.print(f"[bold]stopped:[/] {escape(budget.reason)}", soft_wrap=True)
    trace(trace_path, "stop", reason=budget.reason, **budget.spent())
    return turns


def interrupted(messages: list, budget: Budget, trace_path: Path | None) -> None:
    """A Ctrl-C that ended the run at once: answer what was open, and say where it came."""
    if answer_open_calls(messages):
        budget.reason = "interrupted by the user (a second Ctrl-C while tools ran: open calls answered)"
    else:
        budget.reason = "interrupted by the user (during a model call: its partial reply was dropped)"
    stopped([], budget, trace_path)


def failed(budget: Budget | None, trace_path: Path | None, err: Exception) -> None:
    """A fatal error, the last of the six ways a run ends: named, and kept in the trace (main says it)."""
    if budget is None:
        return
    budget.reason = f"fatal error: {fatal_line(err)}"
    cause = err.__cause__ if isinstance(err, GaveUp) else err
    status = status_of(cause) if isinstance(cause, anthropic.APIError) else None
    error = {"status": status, "body": getattr(cause, "body", None), "message": str(err)}
    trace(trace_path, "model_call", step=len(budget.rows) + 1, error=error)
    trace(trace_path, "stop", reason=budget.reason, **budget.spent())


# The trace: one JSON object per line, written as it happens; s06 turns traces into fixtures.
#   {"event": "start", "script", "model", "max_tokens", "system", "tools", "stream", "limits"}
#   {"event": "model_call", "step", "request", "response", "ms", "spent"}   one per model call:
#       request = {"messages_count", "new_from", "new_messages"}: this request's messages are the
#       previous request's messages[:new_from] + new_messages (the first has new_from 0), so with the
#       start line every request body can be rebuilt exactly; response = the final Message as the API
#       returns it; spent = {"tokens", "cost"} for the run so far. A call that failed fatally has
#       "error": {"status", "body", "message"} in place of request and response.
#   {"event": "tools", "step", "results": [{"tool_use_id", "name", "input", "content", "is_error"}],
#       "ms", "next"}   next: "continue", or "stop" when the loop ends after this turn
#   {"event": "stop", "reason", "steps", "tokens", "cost"}   last, unless the process was killed


def trace(path: Path | None, event: str, **fields) -> None:
    """Append one line to the trace with a single write() and no buffer: a crash, even kill -9, loses
    nothing written before it and leaves no half line."""
    if path is None:
        return
    line = json.dumps(plain({"event": event, **fields}), ensure_ascii=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def trace_start(path, model: str, stream: bool, budget: Budget) -> None:
    """The first line: what every request of the run shares, and the run's limits."""
    shared = {"model": model, "max_tokens": MAX_TOKENS, "system": SYSTEM, "tools": TOOLS, "stream": stream}
    trace(path, "start", script=Path(__file__).stem, **shared, limits=budget.limits())


def trace_call(
    path, step: int, messages: list, logged: list, response, started: float, budget: Budget, **extra
) -> list:
    """The line for one model call; returns the messages it sent, so that the next logs only what is new."""
    new = next((i for i, (a, b) in enumerate(zip(logged, messages)) if a is not b), len(logged))
    sent = {"messages_count": len(messages), "new_from": new, "new_messages": messages[new:], **extra}
    spent = {"tokens": budget.tokens, "cost": round(budget.cost, 6)}
    ms = round((time.monotonic() - started) * 1000)
    outcome = {"error": response} if isinstance(response, dict) else {"response": response}  # s06
    trace(path, "model_call", step=step, request=sent, **outcome, ms=ms, spent=spent)
    return list(messages)


def trace_tools(path, step: int, calls: list, results: list, started: float, stop: str) -> None:
    """The line for one turn's tool calls: what ran, what came back, whether the loop goes on."""
    ran = [result | {"name": block.name, "input": block.input} for block, result in zip(calls, results)]
    ms = round((time.monotonic() - started) * 1000)
    trace(path, "tools", step=step, results=ran, ms=ms, next="stop" if stop else "continue")


# -- new in s06: the recovery chain — every iteration ends in a named transition -------------------

ESCALATED_MAX_TOKENS = 64_000  # max_tokens, first answer: the same request with room to finish (streamed)
MAX_CONTINUATIONS = 3  # max_tokens again: "go on where you stopped", at most this often per turn
MAX_PAUSES = 5  # pause_turn resumed at most this often per turn
STOP_HOOK_RETRIES = 2  # default of --stop-hook-retries: a failing hook is fed back at most this often
KEEP_RECENT_RESULTS = 1  # collapse leaves the newest tool_result messages whole
COLLAPSE_MIN_CHARS = 200  # a tool_result shorter than this is left alone: its placeholder saves nothing
SERVER_TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]  # --web-search
CONTINUE_PROMPT = (
    "Your last reply was cut off by the output token limit. Continue exactly where it stopped, "
    "with no apology and no recap. If a tool call was cut off, make it again in full."
)
TRUNCATED_CALL = (
    "error: not run — your reply was cut off (max_tokens) before this call was complete. Call again."
)
SUMMARY_PROMPT = (
    "The conversation has grown too long for the context window. Summarize everything above that is "
    "needed to carry on: the task, what was done and found, which files changed, what remains to do. "
    "Plain prose, no tool calls."
)
TRANSITIONS = {  # every iteration of the loop ends in exactly one of these
    "next_turn": "tool_use: run the tools, send their results",
    "escalate": "max_tokens: the same request again with max_tokens 64000",
    "continue": "max_tokens again: keep the partial reply, ask the model to go on",
    "collapse": "prompt too long: old tool results become short placeholders, retry",
    "compact": "still too long: the older history becomes a summary, retry",
    "resume_pause": "pause_turn: send the paused turn back unchanged, no new user message",
    "hook_retry": "end_turn, but the stop hook failed: its output goes back to the model",
    "done": "end_turn (the hook passed), stop_sequence or refusal: stop",
    "fail": "a cap was reached or nothing can be recovered: stop, saying why",
}
KEEPS_REPLY = ("next_turn", "continue", "resume_pause", "hook_retry", "done")  # the others throw it away


@dataclass
class Recovery:
    """What the recovery chain has tried in this turn (reset when tools run), and its whole record."""

    stop_hook: str | None = None  # --stop-hook: a shell command that must pass before the loop may stop
    hook_retries: int = STOP_HOOK_RETRIES
    web_search: bool = False  # --web-search: the API's server-side search tool, the usual cause of pause_turn
    max_tokens: int = MAX_TOKENS
    continuations: int = 0
    pauses: int = 0
    collapsed: bool = False
    compacted: bool = False
    hook_failures: int = 0  # for the whole run, not per turn
    log: list = field(default_factory=list)  # (transition, why), in order

    def new_turn(self) -> None:
        """Tools ran: the next model call starts with a clean slate and the normal max_tokens."""
        self.max_tokens, self.continuations, self.pauses = MAX_TOKENS, 0, 0
        self.collapsed = self.compacted = False


def next_transition(response, state: Recovery, messages: list, hook: tuple | None = None) -> tuple[str, str]:
    """(transition, why): what the loop does next, from how the call ended and what was tried already.

    `response` is None when the API refused the request as too long; `hook` is (passed, output) when
    the stop hook ran.
    """
    stop = response.stop_reason if response is not None else "prompt_too_long"
    if stop in ("prompt_too_long", "model_context_window_exceeded"):
        if not state.collapsed and collapsible(messages):
            return "collapse", f"{stop}: {collapsible(messages)} old tool results can be collapsed"
        if not state.compacted and split_point(messages) is not None:
            return "compact", f"{stop}: collapsing is not enough; summarize the older history"
        return "fail", f"{stop}, and this turn has already collapsed and compacted once: giving up"
    if stop == "tool_use":
        return "next_turn", "tool_use"
    if stop == "max_tokens" and state.max_tokens < ESCALATED_MAX_TOKENS:
        return "escalate", f"cut off at {state.max_tokens} tokens; retrying with {ESCALATED_MAX_TOKENS}"
    if stop == "max_tokens" and state.continuations < MAX_CONTINUATIONS:
        return "continue", f"cut off again; continuation {state.continuations + 1} of {MAX_CONTINUATIONS}"
    if stop == "max_tokens":
        return "fail", f"still cut off after {MAX_CONTINUATIONS} continuations: stopping to save tokens"
    if stop == "pause_turn" and state.pauses < MAX_PAUSES:
        return "resume_pause", f"pause {state.pauses + 1} of at most {MAX_PAUSES}"
    if stop == "pause_turn":
        return "fail", f"paused {MAX_PAUSES} times in a row: stopping"
    if stop == "refusal":
        return "done", "refusal: the model declined to go on, so the loop stops here"
    if hook and not hook[0] and state.hook_failures < state.hook_retries:
        return "hook_retry", f"stop hook failed ({state.hook_failures + 1} of {state.hook_retries} retries)"
    if hook and not hook[0]:
        return "fail", f"the stop hook still fails after {state.hook_retries} retries"
    return "done", stop + (" and the stop hook passed" if hook else "")


def show_transition(state: Recovery, transition: str, why: str, trace_path: Path | None) -> None:
    """The transition on screen, in the run's record and in the trace."""
    state.log.append((transition, why))
    trace(trace_path, "transition", name=transition, why=why)
    colour = {"done": "green", "fail": "red", "next_turn": "dim"}.get(transition, "magenta")
    console.print(f"[{colour}]→ {transition}[/] [dim]{escape(why)}[/]")


def context_chars(messages: list) -> int:
    """The size of the conversation in characters of JSON (roughly 4 per token)."""
    return len(json.dumps(plain([m["content"] for m in messages]), ensure_ascii=False))


def blocks(message: dict) -> list[dict]:
    """A message's content as a list of plain blocks, whether a string, our dicts or the SDK's objects."""
    content = plain(message["content"])
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def result_text(block: dict) -> str:
    content = block.get("content", "")
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def old_results(messages: list, keep: int = KEEP_RECENT_RESULTS) -> list[int]:
    """Indexes of the messages holding tool results, but the newest `keep` of them."""
    holders = [i for i, m in enumerate(messages) if any(b["type"] == "tool_result" for b in blocks(m))]
    return holders[: len(holders) - keep]


def collapsible(messages: list) -> int:
    """How many tool_results collapse() would shorten."""
    long = [b for i in old_results(messages) for b in blocks(messages[i]) if b["type"] == "tool_result"]
    return sum(len(result_text(b)) >= COLLAPSE_MIN_CHARS for b in long)


def collapse(messages: list) -> None:
    """Replace long old tool_result contents with a placeholder; ids, and so every pair, stay whole."""
    names = {b["id"]: b["name"] for m in messages for b in blocks(m) if b["type"] == "tool_use"}
    for i in old_results(messages):
        content = blocks(messages[i])
        for n, b in enumerate(content):
            if b["type"] == "tool_result" and len(result_text(b)) >= COLLAPSE_MIN_CHARS:
                what = f"{len(result_text(b))} characters of {names.get(b['tool_use_id'], 'tool')} output"
                content[n] = b | {"content": f"[collapsed: {what}; call it again if needed]"}
        messages[i] = {"role": "user", "content": content}


def split_point(messages: list) -> int | None:
    """Where compaction cuts: the last assistant message, so it stays with the results that answer it."""
    return next((i for i in range(len(messages) - 1, 0, -1) if messages[i]["role"] == "assistant"), None)


def compact(client, retry, model: str, messages: list, state: Recovery, trace_path):
    """Ask the model to summarize the history before the last turn; keep summary + last turn only."""
    cut = split_point(messages)
    older, recent = messages[:cut], messages[cut:]
    ask = older[:-1] + [
        {"role": "user", "content": blocks(older[-1]) + [{"type": "text", "text": SUMMARY_PROMPT}]}
    ]
    request = dict(model=model, system=SYSTEM, tools=tools(state), tool_choice={"type": "none"})
    response = call_model(client, retry, False, messages=ask, max_tokens=MAX_TOKENS, **request)
    sent = {"messages_count": len(ask), "new_from": 0, "new_messages": ask, "tool_choice": {"type": "none"}}
    trace(trace_path, "model_call", step=0, request=sent | {"stream": False}, response=response)
    summary = "".join(b.text for b in response.content if b.type == "text").strip()
    task = messages[0]["content"] if isinstance(messages[0]["content"], str) else "(see the summary)"
    opening = f"{task}\n\n[The earlier part of this session was compacted into this summary:]\n{summary}"
    messages[:] = [{"role": "user", "content": opening}, *recent]
    return response


def continue_cut(messages: list, response) -> None:
    """After a cut reply is appended: answer its tool calls (never run: their input may be cut) and ask
    the model to go on. Answering keeps the reply verbatim and tells the model exactly what happened."""
    results = [
        {"type": "tool_result", "tool_use_id": b.id, "content": TRUNCATED_CALL, "is_error": True}
        for b in response.content
        if b.type == "tool_use"
    ]
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": CONTINUE_PROMPT}]})


def hook_feedback(messages: list, state: Recovery, output: str) -> None:
    """The stop hook's failure, as the next user message: the model reads it and fixes what it says."""
    state.hook_failures += 1
    text = f"The stop hook `{state.stop_hook}` failed, so the task is not finished yet. Its output:\n{output}"
    messages.append({"role": "user", "content": text + "\nFix what it reports, then finish."})


def run_stop_hook(command: str, workspace: Path) -> tuple[bool, str]:
    """Run the stop hook in the workspace: (passed, output)."""
    try:
        done = subprocess.run(
            command, shell=True, cwd=workspace, capture_output=True, text=True, timeout=BASH_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return False, f"the stop hook timed out after {BASH_TIMEOUT} s"
    output = truncate((done.stdout + done.stderr).strip() or "(no output)")
    return done.returncode == 0, f"{output}\n[exit code {done.returncode}]"


def append_reply(messages: list, content: list) -> None:
    """Append the reply verbatim; after a pause it continues the paused turn, so it joins that message."""
    if messages and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
    else:
        messages.append({"role": "assistant", "content": content})


def tools(state: Recovery) -> list:
    return TOOLS + SERVER_TOOLS if state.web_search else TOOLS


def prompt_too_long(err: anthropic.APIError) -> bool:
    """The API's words for a request over the window: "prompt is too long: 213000 tokens > 200000 maximum"."""
    return status_of(err) == 400 and "prompt is too long" in api_message(err).lower()


def broke_mid_stream(err: anthropic.APIError) -> bool:
    """An `error` event inside a 200 stream. The SDK raises it as APIStatusError with status_code 200
    once the SDK's own status-based retries are past; call_model() retries it as it would a 529."""
    body = err.body if isinstance(err.body, dict) else {}
    return status_of(err) == 200 and (body.get("error") or {}).get("type") in (
        "overloaded_error",
        "api_error",
    )


def call_unless_too_long(client, retry, stream: bool, **request) -> tuple:
    """call_model() as (response, None); a 400 "prompt is too long" is (None, the error) instead of
    raised, for the loop to recover from."""
    try:
        return call_model(client, retry, stream, **request), None
    except anthropic.BadRequestError as err:
        if not prompt_too_long(err):
            raise
        console.print(f"[yellow]400[/] {escape(api_message(err))}")
        return None, {"status": 400, "body": err.body}


def recover(
    transition: str, client, retry, model: str, messages: list, response, state: Recovery, hook, trace_path
):
    """Carry out a recovery transition on the conversation; the loop then sends it again.
    Returns the summary's response after a compaction, else None."""
    if transition == "escalate":
        state.max_tokens = ESCALATED_MAX_TOKENS
    elif transition == "continue":
        state.continuations += 1
        continue_cut(messages, response)
    elif transition == "resume_pause":
        state.pauses += 1
    elif transition == "hook_retry":
        hook_feedback(messages, state, hook[1])
    elif transition in ("collapse", "compact"):
        before, summary = context_chars(messages), None
        if transition == "collapse":
            state.collapsed = True
            collapse(messages)
        else:
            state.compacted = True
            summary = compact(client, retry, model, messages, state, trace_path)
            tokens = f"tokens in {summary.usage.input_tokens} / out {summary.usage.output_tokens}"
            console.print(f"[bold]summary:[/] {escape(messages[0]['content'])}\n[dim]{tokens}[/]")
        trace(trace_path, "context", transition=transition, before=before, after=context_chars(messages))
        console.print(f"[dim]context {before:,} → {context_chars(messages):,} characters[/]")
        return summary
    return None


def trace_to_fixture(path: Path) -> dict:
    """A trace as a fixture: each model_call line becomes an exchange, its request rebuilt from the
    start line and the messages the call added, so any traced run replays offline (`--replay run.jsonl`).
    The tools run again, in the workspace the `run` line names (a fixture's, when the trace came from a
    replay; a live run's folder is not copied: put its files in fixtures/workspace/<name>/ and set
    `workspace`). Live tool output differs from machine to machine, so requests are compared by structure."""
    try:
        lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise replay.FixtureError(
            f"{path}: not a JSON-lines trace ({err}) — give a file --trace wrote"
        ) from None
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
        error = call.get("error")
        if error is None and request.get("stream"):  # as it came: a stream of events
            response = {"status": 200, "stream": replay.message_to_events(call["response"])}
        elif error is None:
            response = {"status": 200, "body": call["response"]}
        elif error["status"] == 200:  # an error event inside the stream
            response = {"status": 200, "stream": [{"event": "error", "data": error["body"]}]}
        else:
            response = {"status": error["status"], "body": error["body"]}
        exchanges.append({"request": request, "response": response, "match": "structure"})
    if not exchanges:
        raise replay.FixtureError(f"{path}: no model calls in this trace — was it written by s05 or s06?")
    return {
        "script": Path(__file__).stem,
        "scenario": Path(path).stem,
        "description": f"Converted from the trace {Path(path).name} by trace_to_fixture.",
        "provenance": about.get("provenance", "recorded"),
        "task": about.get("task") or exchanges[0]["request"]["messages"][0]["content"],
        "workspace": about.get("workspace", ""),
        "args": about.get("args", []),
        "match": "structure",
        "exchanges": exchanges,
    }


def fixture_file(trace_file: str) -> str:
    """Convert a trace to a fixture file in a temp folder, for --replay."""
    target = Path(tempfile.mkdtemp(prefix="workbook-trace-")) / (Path(trace_file).stem + ".json")
    target.write_text(json.dumps(trace_to_fixture(Path(trace_file)), indent=2, ensure_ascii=False))
    return str(target)


def run_line(run: replay.Run, args) -> dict:
    """The trace's `run` line, before the loop's `start`: what a replay of the trace needs besides the
    requests — the task, the workspace, and the s06 flags that change what the loop does."""
    flags = ["--web-search"] if args.web_search else []
    if args.stop_hook:
        flags += ["--stop-hook", args.stop_hook, "--stop-hook-retries", str(args.stop_hook_retries)]
    fixture = run.fixture or {}
    where = fixture.get("workspace", "")
    return dict(task=run.task, workspace=where, provenance=fixture.get("provenance", "recorded"), args=flags)


def differs(state: Recovery) -> dict:
    """What this call's request has that the trace's start line does not: s05's trace_call logs it."""
    fields = {"max_tokens": state.max_tokens, "stream": True} if state.max_tokens != MAX_TOKENS else {}
    return fields | ({"tools": tools(state)} if state.web_search else {})


def count(text: str) -> int:
    """A whole number, 0 or more (for --stop-hook-retries); argparse turns the ValueError into one line."""
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def add_recovery_flags(parser) -> None:
    """The stop hook and the server-side search tool."""
    add = parser.add_argument
    add("--stop-hook", metavar="CMD", help="a shell command that must pass before the loop may stop")
    add(
        "--stop-hook-retries",
        type=count,
        default=STOP_HOOK_RETRIES,
        metavar="N",
        help=f"times a failing stop hook is fed back to the model (default {STOP_HOOK_RETRIES})",
    )
    add("--web-search", action="store_true", help="offer the API's server-side web search tool")


# -- what the reader sees --------------------------------------------------------------------------


def show_turn(turn: int, response: anthropic.types.Message, streamed: bool = False) -> None:
    """One turn: the model's text (unless it was streamed as it came), then the stop reason and tokens."""
    if not streamed:
        console.rule(f"turn {turn}")
        for block in response.content:
            if block.type == "text":
                console.print(f"[bold]model:[/] {escape(block.text)}")
    tokens = f"tokens in {response.usage.input_tokens} / out {response.usage.output_tokens}"
    console.print(f"[dim]stop_reason={response.stop_reason}  {tokens}[/]")


def show_tool(block, output: str, limit: int = 400) -> None:
    """A tool call as it would look in a terminal, its output shortened to stay readable."""
    command = block.input.get("command") if isinstance(block.input, dict) else None
    console.print(escape(f"$ {command}" if command else f"{block.name} {block.input}"), style="cyan")
    shown = output if len(output) <= limit else output[:limit] + f"… ({len(output) - limit} more chars)"
    console.print(shown, markup=False)


def show_summary(budget: Budget) -> None:
    """A table of every turn: how it ended, its tokens and estimated cost; then why the loop ended."""
    table = Table(title="summary")
    for column in ("turn", "stop_reason", "tokens in", "tokens out", "cost (est.)"):
        table.add_column(column, justify="left" if column == "stop_reason" else "right")
    for n, (stop_reason, tokens_in, tokens_out, dollars) in enumerate(budget.rows, 1):
        table.add_row(str(n), stop_reason, f"{tokens_in:,}", f"{tokens_out:,}", f"${dollars:.4f}")
    table.add_row(
        "total",
        "",
        f"{sum(row[1] for row in budget.rows):,}",
        f"{sum(row[2] for row in budget.rows):,}",
        f"${budget.cost:.4f}",
    )
    console.print(table)
    console.print(f"[bold]ended:[/] {escape(budget.reason)}")


# -- the loop --------------------------------------------------------------------------------------


def agent_loop(
    client: anthropic.Anthropic,
    messages: list,
    workspace: Path,
    model: str = MODEL,
    permission: str = "auto",
    audit: Path | None = None,
    retry: Retry | None = None,  # s03: how call_model waits between attempts (default: really)
    read_latency: float = 0.0,  # s04: seconds added to each read-only call (--read-latency)
    budget: Budget | None = None,  # s05: the limits, and what the run spent; budget.reason: why it ended
    trace_path: Path | None = None,  # s05: where the JSON-lines trace goes (None: no trace)
    stream: bool = True,  # s05: stream each reply; False waits for it whole, as s01-s04 do
    recovery: Recovery | None = None,  # s06: the stop hook, --web-search, and the transitions taken
) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or a
    limit, the repeat brake or a Ctrl-C while tools run stops it (budget.reason says which). A Ctrl-C
    during a model call raises KeyboardInterrupt with the conversation as it was: main keeps it."""
    turns = []  # every response, in order
    budget, guard, logged = budget or Budget(model=model), RepeatGuard(), []  # s05: what stops the loop
    state = recovery or Recovery()  # s06: what recovery has tried this turn; state.log: every transition
    trace_start(trace_path, model, stream, budget)
    INTERRUPT.clear()
    while True:
        # 0. Before paying for another call, check every limit (s05): the first one reached ends the
        #    run, and the conversation is whole (it ends on the last turn's tool results).
        budget.reason = budget.exceeded()
        if budget.reason:
            return stopped(turns, budget, trace_path)

        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass and raises what cannot (s03); it streams (s05).
        #    s06: max_tokens and tools come from the recovery state, and "prompt is too long" comes back.
        started = time.monotonic()
        live = stream or state.max_tokens > MAX_TOKENS  # s06: unstreamed, the SDK refuses a 64k request
        with waiting(live, len(turns) + 1):
            response, too_long = call_unless_too_long(
                client,
                retry,
                live,
                model=model,
                system=SYSTEM,
                tools=tools(state),
                messages=messages,
                max_tokens=state.max_tokens,
            )
        if response is not None:
            turns.append(response)
            show_turn(len(turns), response, live)
            show_spend(budget, budget.spend(response))
        outcome = response or too_long
        logged = trace_call(
            trace_path, len(turns), messages, logged, outcome, started, budget, **differs(state)
        )

        # 2. Name the transition (s06): how the call ended, given what recovery has tried this turn.
        #    A stop hook, if any, runs at end_turn and can send the model back to work.
        hook = None
        if state.stop_hook and response is not None and response.stop_reason == "end_turn":
            hook = run_stop_hook(state.stop_hook, workspace)
        transition, why = next_transition(response, state, messages, hook)
        show_transition(state, transition, why, trace_path)

        # 3. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        #    s06: unless the transition throws it away (an escalated retry writes it again; a failure).
        if transition in KEEPS_REPLY:
            append_reply(messages, response.content)

        # 4. done and fail end the loop (s06). A recovery transition repairs the conversation and goes
        #    round again: a reply cut off by max_tokens is never executed, its last tool_use may be cut.
        if transition == "done":
            budget.reason = f"the model ended its turn (stop_reason {response.stop_reason})"
            return stopped(turns, budget, trace_path)
        if transition == "fail":
            budget.reason = f"recovery gave up: {why}"
            return stopped(turns, budget, trace_path)
        if transition != "next_turn":
            summary = recover(transition, client, retry, model, messages, response, state, hook, trace_path)
            if summary:  # a compaction's summary is a model call too: it costs tokens and a step
                turns.append(summary)
                show_spend(budget, budget.spend(summary))
            continue

        # 5. Run the tool calls, reads side by side and the rest one at a time, and answer each id
        #    exactly once, in the order asked, all in one user message. Each call still goes
        #    through execute(), so whatever fails is an is_error result, never a missing one.
        #    s05: the repeat brake answers the calls it holds back; a first Ctrl-C lets the running
        #    call finish, answers the others as interrupted, and ends the run after this turn.
        calls = [block for block in response.content if block.type == "tool_use"]
        timeline = []  # when each call ran: shown to the reader, never sent to the model
        allowed, started = guard.screen(calls), time.monotonic()
        with ctrl_c_lets_tools_finish():
            results = run_tools(allowed, workspace, permission, audit, timeline, read_latency=read_latency)
        results = guard.merge(calls, results)
        for block, result in zip(calls, results):
            show_tool(block, result["content"])
        show_timeline(timeline)
        messages.append({"role": "user", "content": results})
        state.new_turn()  # s06: tools ran, so the next call starts a new turn with fresh recovery caps
        budget.reason = CTRL_C_IN_TOOLS if INTERRUPT.is_set() else guard.stop
        trace_tools(trace_path, len(turns), calls, results, started, budget.reason)
        if budget.reason:
            return stopped(turns, budget, trace_path)


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    parser = replay.make_parser(__doc__, DEFAULT_FIXTURE)
    parser.add_argument(
        "--permission",
        choices=PERMISSIONS,
        help="ask before writes and bash (default at a terminal), auto (default otherwise: allow all "
        "but dangerous commands), deny (read-only tools only)",
    )
    parser.add_argument(
        "--read-latency",
        type=seconds,
        metavar="SECONDS",
        help="make every read-only call this much slower, like a network drive, to watch reads overlap "
        "(default: the fixture's read_latency in replay, else 0)",
    )
    add_budget_flags(parser)  # s05: the limits, --resume, --save, --trace, --no-stream
    add_recovery_flags(parser)  # s06: --stop-hook, --stop-hook-retries, --web-search
    args = parser.parse_args(argv)
    run, budget, trace_path, conversation, messages = None, None, None, None, []  # s05: kept at any stop
    try:
        if args.replay and args.replay.endswith(".jsonl"):  # s06: a trace replays as a fixture
            args.replay = fixture_file(args.replay)
        run = replay.start(resume_mode(args), MODEL, "s06_recovery", **CLIENT_OPTIONS)
        args = with_fixture_flags(parser, argv, run)
        console.print(f"[dim]{run.banner}[/]")
        console.print(f"[bold]task:[/] {escape(run.task)}")
        permission = args.permission or ("ask" if run.mode != "replay" and sys.stdin.isatty() else "auto")
        audit = audit_path(run)
        latency = args.read_latency
        if latency is None:  # a fixture may ask for it, so that its reads visibly overlap
            try:
                latency = seconds((run.fixture or {}).get("read_latency", 0))
            except (TypeError, ValueError):
                raise replay.FixtureError(
                    f"{run.fixture_path}: read_latency must be 0 to 60 seconds"
                ) from None
        if latency:
            console.print(f"[dim]each read-only call is slowed by {latency} s (simulated latency)[/]")
        messages = first_messages(run, args.resume)
        no_sleep = run.mode == "replay" or os.environ.get("WORKBOOK_NO_SLEEP")  # replays never wait
        retry = Retry(skip_wait, random.Random(0).random) if no_sleep else Retry()
        budget = Budget(
            args.max_steps, args.max_tokens_total, args.max_input_tokens, args.max_cost, run.model
        )
        trace_path = Path(args.trace or audit.parent / "trace.jsonl")
        conversation = Path(args.save or audit.parent / "conversation.json")
        stream = streaming(args, run)
        recovery = Recovery(args.stop_hook, args.stop_hook_retries, args.web_search)  # s06
        trace(trace_path, "run", **run_line(run, args))  # s06: what replaying this trace needs
        agent_loop(
            run.client,
            messages,
            run.workspace,
            run.model,
            permission,
            audit,
            retry,
            latency,
            budget,
            trace_path,
            stream,
            recovery,
        )
        show_summary(budget)
        console.print(f"[dim]permission {permission}; audit log: {audit}; trace: {trace_path}[/]")
        keep(messages, conversation)
        if budget.reason.startswith("recovery gave up"):  # s06: a cap reached, or nothing left to try
            return 1
        return 130 if INTERRUPT.is_set() else 0
    except (anthropic.APIError, GaveUp) as err:  # s03: what retrying cannot fix stops the run cleanly
        failed(budget, trace_path, err)  # s05: named, and kept in the trace
        console.print(f"[red]stopped:[/] {escape(fatal_line(err))}", soft_wrap=True)
        saved = save_conversation(messages, conversation)
        console.print(
            f"[dim]conversation so far ({len(messages)} messages) saved to {saved}[/]", soft_wrap=True
        )
        return 1
    except replay.WorkbookError as err:
        console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:  # s05: a Ctrl-C during a model call, or a second one: keep the work
        if budget:
            interrupted(messages, budget, trace_path)
            show_summary(budget)
            keep(messages, conversation)
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            console.print(f"[dim]{note}[/]")


# -- new in s05: the command line — limits, a saved conversation to resume, the trace, streaming ----

RESUME_INSTRUCTION = "Continue where you left off."  # what a live --resume adds when given no instruction
RESUME_FIXTURE = "fixtures/s05_resume.json"  # what --resume replays offline


def add_budget_flags(parser) -> None:
    """The limits, --resume, where the conversation and the trace go, and --no-stream."""
    limits = [
        ("--max-steps", "N", int, MAX_STEPS, "model calls"),
        ("--max-tokens-total", "N", int, MAX_TOKENS_TOTAL, "input + output tokens over the run"),
        ("--max-input-tokens", "N", int, MAX_INPUT_TOKENS, "input tokens in one request"),
        (
            "--max-cost",
            "DOLLARS",
            float,
            MAX_COST,
            f"dollars, estimated; warned at {COST_WARNING * 100:.0f}%%",
        ),
    ]
    for flag, metavar, kind, default, what in limits:
        help_ = f"at most this many {what} (default {default:,})"
        parser.add_argument(flag, type=kind, default=default, metavar=metavar, help=help_)
    add = parser.add_argument
    add(
        "--resume",
        metavar="FILE",
        help="continue a saved conversation; a task given too is the new instruction",
    )
    add("--save", metavar="FILE", help="where to save the conversation (default: beside the audit log)")
    add("--trace", metavar="FILE", help="where to write the JSON-lines trace (default: beside the audit log)")
    add(
        "--no-stream",
        action="store_true",
        help="wait for each reply whole instead of streaming it, as s01-s04",
    )


def resume_mode(args):
    """Offline, --resume replays RESUME_FIXTURE; live with no new instruction, it adds RESUME_INSTRUCTION."""
    if args.resume and not args.replay and not os.environ.get("ANTHROPIC_API_KEY"):
        args.default_fixture = RESUME_FIXTURE
    elif args.resume and not args.replay and not args.task:
        args.task = RESUME_INSTRUCTION
    return args


def with_fixture_flags(parser, argv: list[str] | None, run: replay.Run):
    """In replay, the fixture's own flags (its `args`, e.g. --max-steps 3) apply; the reader's win."""
    extra = (run.fixture or {}).get("args", [])
    return parser.parse_args([*extra, *(sys.argv[1:] if argv is None else argv)])


def first_messages(run: replay.Run, resume: str | None) -> list:
    """The task as the first message; or, with --resume, the saved conversation plus the instruction."""
    if not resume:
        return [{"role": "user", "content": run.task}]
    path = (
        Path(resume) if Path(resume).exists() or not (replay.ROOT / resume).exists() else replay.ROOT / resume
    )
    saved = load_conversation(path)
    console.print(f"[bold]resuming[/] {escape(str(path))}: {len(saved)} messages, then the task above")
    messages = continued(saved, run.task)
    recorded = run.fixture["exchanges"][0]["request"]["messages"] if run.fixture else None
    if recorded and replay.normalize_messages(recorded) != replay.normalize_messages(plain(messages)):
        run.transport.strict = False  # what was saved depends on when Ctrl-C came: check the API's rules only
        console.print(
            "[yellow]note:[/] not the conversation this fixture was recorded from; replaying leniently"
        )
    return messages


def load_conversation(path: Path) -> list:
    """A saved conversation, checked against the API's rules; any problem is one line saying what to do."""
    try:
        messages = json.loads(path.read_text())
    except FileNotFoundError:
        raise replay.WorkbookError(
            f"{path}: no such file — give the path a run printed after its stop"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise replay.WorkbookError(f"{path}: not a saved conversation (not JSON)") from None
    problems = replay.api_rule_problems(messages) if isinstance(messages, list) else ["it is not a list"]
    if problems:
        raise replay.WorkbookError(f"{path}: cannot continue this conversation — {problems[0]}")
    return messages


def continued(messages: list, instruction: str) -> list:
    """A saved conversation with the user's new instruction added, ready to send."""
    if messages[-1]["role"] == "user":  # it ends on tool results (a stop mid-task): the text goes after
        content = messages[-1]["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        extra = [{"type": "text", "text": instruction}] if instruction else []
        return messages[:-1] + [{"role": "user", "content": content + extra}]
    if not instruction:
        raise replay.WorkbookError("the conversation ended with the model's answer: give a new instruction")
    return messages + [{"role": "user", "content": instruction}]


def streaming(args, run: replay.Run) -> bool:
    """Stream, unless --no-stream, or a replayed fixture was recorded from a loop that did not stream."""
    if run.fixture:
        return not args.no_stream and any("stream" in e["response"] for e in run.fixture["exchanges"])
    return not args.no_stream


def keep(messages: list, path: Path) -> None:
    """Save the conversation, every tool_use answered, and say how to go on from it."""
    answer_open_calls(messages)
    save_conversation(messages, path)
    console.print(f"[dim]conversation saved: {path}[/]", soft_wrap=True)
    console.print(
        f'[dim]continue it: python {Path(__file__).name} --resume {path} "new instruction"[/]', soft_wrap=True
    )


if __name__ == "__main__":
    sys.exit(main())
