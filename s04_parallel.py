"""s04_parallel.py — Several tool calls in one turn: reads run together, writes one at a time.

Adds over s03: a turn's tool_use blocks no longer run one by one. `run_tools()` walks them in order
and groups them: a run of consecutive read-only calls (read_file, grep, list_files) runs together in a
bounded thread pool; any other call (a write, an edit, bash, an unknown tool) is a barrier that runs
alone, in the loop's own thread, after everything before it and before everything after it. So two
writes never race, and only a call running alone can ask a person for a yes: prompts never come from
two threads at once. Each call still goes through execute(), so a failure is still an is_error result.
The answers go back in ONE user message, in tool_use order, each with its id, whatever order the calls
finished in. A turn asking for more than MAX_TOOLS_PER_TURN calls gets the excess answered with an
is_error result asking for fewer. A timeline on screen (never in a result) shows which calls ran together.
Changed from s03: DEFAULT_FIXTURE, audit_path, agent_loop, main

    user task
        |
        v
    +--------------+  stop_reason != tool_use   +------+
    | call_model() | -------------------------> | done |
    +--------------+                            +------+
        ^      | tool_use x N
        |      v
        |  +=========================================+
        +--| run_tools(): group the calls in order   |  new in s04: reads side by side in a
           |  [read read grep] -> [write] -> [read]  |  thread pool; every other call alone;
           |  each through s03's execute(); answers  |  calls past the cap get an is_error;
           |  in tool_use order, in one user message |  a timeline shows the groups
           +=========================================+

Run: python s04_parallel.py                        offline replay: four reads and a grep in one turn
     python s04_parallel.py --replay fixtures/s04_mixed_turn.json    read, read, write, read
     python s04_parallel.py --replay fixtures/s04_tool_storm.json    twelve calls: two over the cap
     python s04_parallel.py --read-latency 0       the same, without the simulated read latency
     python s04_parallel.py "task"                 live, with ANTHROPIC_API_KEY
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
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
DEFAULT_FIXTURE = "fixtures/s04_read_many.json"

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
            stdout, stderr = done.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(done.pid, signal.SIGKILL)  # the whole group: children would keep the pipes open
            raise ToolError(timed_out(timeout, *done.communicate())) from None
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
    decision, refusal = admit(block, permission)
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
    folder = run.workspace.parent if run.mode == "replay" else RUNS / f"{datetime.now():%Y%m%d-%H%M%S}-s04"
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


def call_model(client: anthropic.Anthropic, retry: Retry | None, **request) -> anthropic.types.Message:
    """client.messages.create(**request), retried on what may pass; every retry shown on screen."""
    retry = retry or Retry()
    attempts = retry.attempts
    for attempt in range(1, attempts + 1):
        try:
            return client.messages.create(**request)
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as err:
            status = status_of(err)
            if not retryable(status):
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


# -- what the reader sees --------------------------------------------------------------------------


def show_turn(turn: int, response: anthropic.types.Message) -> None:
    """One turn: the model's text, then the stop reason and the tokens it cost."""
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


def show_summary(turns: list) -> None:
    """A table of every turn: how it ended and what it cost."""
    table = Table(title="summary")
    for column in ("turn", "stop_reason", "tokens in", "tokens out"):
        table.add_column(column)
    for n, response in enumerate(turns, 1):
        table.add_row(
            str(n), response.stop_reason, str(response.usage.input_tokens), str(response.usage.output_tokens)
        )
    table.add_row(
        "total",
        "",
        str(sum(r.usage.input_tokens for r in turns)),
        str(sum(r.usage.output_tokens for r in turns)),
    )
    console.print(table)


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
) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass and raises what cannot (s03).
        with console.status("waiting for the model…"):
            response = call_model(
                client,
                retry,
                model=model,
                system=SYSTEM,
                tools=TOOLS,
                messages=messages,
                max_tokens=MAX_TOKENS,
            )
        turns.append(response)
        show_turn(len(turns), response)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return turns

        # 4. Run the tool calls, reads side by side and the rest one at a time, and answer each id
        #    exactly once, in the order asked, all in one user message. Each call still goes
        #    through execute(), so whatever fails is an is_error result, never a missing one.
        calls = [block for block in response.content if block.type == "tool_use"]
        timeline = []  # when each call ran: shown to the reader, never sent to the model
        results = run_tools(calls, workspace, permission, audit, timeline, read_latency=read_latency)
        for block, result in zip(calls, results):
            show_tool(block, result["content"])
        show_timeline(timeline)
        messages.append({"role": "user", "content": results})


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
    args = parser.parse_args(argv)
    run = None
    try:
        run = replay.start(args, MODEL, "s04_parallel", **CLIENT_OPTIONS)
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
        messages = [{"role": "user", "content": run.task}]
        no_sleep = run.mode == "replay" or os.environ.get("WORKBOOK_NO_SLEEP")  # replays never wait
        retry = Retry(skip_wait, random.Random(0).random) if no_sleep else Retry()
        turns = agent_loop(
            run.client, messages, run.workspace, run.model, permission, audit, retry, read_latency=latency
        )
        show_summary(turns)
        console.print(f"[dim]permission {permission}; audit log: {audit}[/]")
        return 0
    except (anthropic.APIError, GaveUp) as err:  # s03: what retrying cannot fix stops the run cleanly
        console.print(f"[red]stopped:[/] {escape(fatal_line(err))}", soft_wrap=True)
        saved = save_conversation(messages, audit.parent / "conversation.json")
        console.print(
            f"[dim]conversation so far ({len(messages)} messages) saved to {saved}[/]", soft_wrap=True
        )
        return 1
    except replay.WorkbookError as err:
        console.print(f"[red]error:[/] {escape(str(err))}", soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/] — stopped before the next turn; s05 adds keeping the work")
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            console.print(f"[dim]{note}[/]")


if __name__ == "__main__":
    sys.exit(main())
