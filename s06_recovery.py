"""s06_recovery.py — Recovery: every turn ends in a named transition, and the loop climbs back.

DRAFT: built on s02_tools.py while s03-s05 are written; it is rebased onto s05_budget.py when that is
final, and then adds only what is below over s05 (streaming, budgets and the trace come from s05).
Adds: `next_transition()` names what each iteration leads to — next_turn, escalate, continue,
collapse, compact, resume_pause, stream_retry, hook_retry, done or fail — shown on screen and written
to the trace. max_tokens: a cut reply is never executed; the same request is sent again with 64k
(streamed), then the partial reply is kept, its tool calls answered with is_error, and the model asked
to go on, at most 3 times. "prompt is too long": old tool results collapse to placeholders, then the
older history is compacted into a summary, at most once per turn, never splitting a tool_use from its
tool_result. pause_turn: the paused content goes back unchanged. An error event inside a 200 stream is
retried like a 529. --stop-hook CMD must pass before the loop may stop. A --trace replays as a fixture.
Changed from s02: DEFAULT_FIXTURE, agent_loop (steps 1-4), main

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
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
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
    try:
        done = subprocess.run(
            command, shell=True, cwd=workspace, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"error: the command timed out after {timeout} s and was stopped"
    output = (done.stdout + done.stderr).strip() or "(no output)"
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
    return sorted(p for p in workspace.glob(glob) if p.is_file() and p.resolve().is_relative_to(workspace))


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
        except (ToolError, OSError, ValueError) as err:  # s03 makes every other exception data too
            output, is_error = (
                f"error: {err}".replace(f"{workspace}/", ""),
                True,
            )  # paths as the model sees them
    output = truncate(output)
    if audit:
        line = {"id": block.id, "tool": block.name, "input": block.input, "decision": decision}
        line |= {"ms": round((time.monotonic() - started) * 1000), "chars": len(output), "is_error": is_error}
        with audit.open("a") as log:
            log.write(json.dumps(line, ensure_ascii=False) + "\n")
    return output, is_error


def audit_path(run: replay.Run) -> Path:
    """The audit log: beside a replay's temp workspace (never in the repo), else in runs/<time>/."""
    folder = run.workspace.parent if run.mode == "replay" else RUNS / f"{datetime.now():%Y%m%d-%H%M%S}-s02"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "audit.jsonl"


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


# -- new in s06: the recovery chain — every iteration ends in a named transition -----------------------

ESCALATED_MAX_TOKENS = 64_000  # max_tokens, first answer: the same request with room to finish (streamed)
MAX_CONTINUATIONS = 3  # max_tokens again: "go on where you stopped", at most this often per turn
MAX_PAUSES = 5  # pause_turn resumed at most this often per turn
STOP_HOOK_RETRIES = 2  # default of --stop-hook-retries: a failing hook is fed back at most this often
STREAM_RETRIES = 3  # an error event inside a 200 stream is retried like a 529, at most this often
STREAM_RETRY_DELAY = 0.5  # seconds before the first of those retries, doubled each time
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
    "stream_retry": "an error event inside a 200 stream: the same request again, after a pause",
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
    trace: Path | None = None  # JSON lines: every request, response and transition
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

    def record(self, kind: str, **data) -> None:
        """One line of the JSON-lines trace (when --trace asked for one)."""
        if self.trace:
            with self.trace.open("a") as out:
                out.write(json.dumps({"event": kind, **data}, ensure_ascii=False, default=as_dict) + "\n")


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


def show_transition(state: Recovery, transition: str, why: str) -> None:
    """The transition on screen, in the run's record and in the trace."""
    state.log.append((transition, why))
    state.record("transition", transition=transition, why=why)
    colour = {"done": "green", "fail": "red", "next_turn": "dim"}.get(transition, "magenta")
    console.print(f"[{colour}]→ {transition}[/] [dim]{escape(why)}[/]")


def as_dict(block) -> dict:
    """A content block as plain JSON, whether the SDK's object (from a response) or our own dict."""
    return block if isinstance(block, dict) else block.model_dump(mode="json", exclude_none=True)


def context_chars(messages: list) -> int:
    """The size of the conversation in characters of JSON (roughly 4 per token)."""
    return sum(len(json.dumps([as_dict(b) for b in blocks(m)], ensure_ascii=False)) for m in messages)


def blocks(message: dict) -> list:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def result_text(block: dict) -> str:
    content = block.get("content", "")
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def collapsible(messages: list, keep: int = KEEP_RECENT_RESULTS) -> int:
    """How many tool_results collapse() would shorten: long ones outside the newest `keep` messages."""
    holders = [m for m in messages if any(as_dict(b).get("type") == "tool_result" for b in blocks(m))]
    old = holders[: len(holders) - keep]
    return sum(
        1
        for m in old
        for b in map(as_dict, blocks(m))
        if b.get("type") == "tool_result" and len(result_text(b)) >= COLLAPSE_MIN_CHARS
    )


def collapse(messages: list, keep: int = KEEP_RECENT_RESULTS) -> int:
    """Replace long old tool_result contents with a placeholder; ids and pairs stay. Returns how many."""
    names = {b["id"]: b["name"] for m in messages for b in map(as_dict, blocks(m)) if b["type"] == "tool_use"}
    holders = [
        i for i, m in enumerate(messages) if any(as_dict(b).get("type") == "tool_result" for b in blocks(m))
    ]
    count = 0
    for i in holders[: len(holders) - keep]:
        content = []
        for b in map(as_dict, blocks(messages[i])):
            if b["type"] == "tool_result" and len(result_text(b)) >= COLLAPSE_MIN_CHARS:
                name, size = names.get(b["tool_use_id"], "tool"), len(result_text(b))
                b = b | {
                    "content": f"[collapsed: {size} characters of {name} output; call it again if needed]"
                }
                count += 1
            content.append(b)
        messages[i] = {"role": "user", "content": content}
    return count


def split_point(messages: list) -> int | None:
    """Where compaction cuts: the last assistant message, so it stays with the results that answer it."""
    return next((i for i in range(len(messages) - 1, 0, -1) if messages[i]["role"] == "assistant"), None)


def compact(client: anthropic.Anthropic, model: str, messages: list, state: Recovery):
    """Ask the model to summarize the history before the last turn; keep summary + last turn only."""
    cut = split_point(messages)
    older, recent = messages[:cut], messages[cut:]
    ask = older[:-1] + [
        {"role": "user", "content": blocks(older[-1]) + [{"type": "text", "text": SUMMARY_PROMPT}]}
    ]
    request = dict(model=model, system=SYSTEM, tools=tools(state), tool_choice={"type": "none"})
    request |= dict(messages=ask, max_tokens=MAX_TOKENS)
    response = client.messages.create(**request)
    state.record("exchange", request=request, response=response.model_dump(mode="json"))
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


def prompt_too_long(err: anthropic.BadRequestError) -> bool:
    """The API's words for a request over the window: "prompt is too long: 213000 tokens > 200000 maximum"."""
    detail = err.body.get("error", {}) if isinstance(err.body, dict) else {}
    return "prompt is too long" in str(detail.get("message", "")).lower()


def broke_mid_stream(err: anthropic.APIStatusError) -> bool:
    """An `error` event inside a 200 stream: the SDK raises it as APIStatusError with status 200, after
    its own status-based retries are out of the picture, so the loop retries it as it would a 529."""
    detail = err.body.get("error", {}) if isinstance(err.body, dict) else {}
    return err.status_code == 200 and detail.get("type") in ("overloaded_error", "api_error")


def call_model(client: anthropic.Anthropic, model: str, messages: list, state: Recovery):
    """One streamed request (64k would be refused unstreamed); None when the prompt is too long."""
    request = dict(
        model=model, system=SYSTEM, tools=tools(state), messages=messages, max_tokens=state.max_tokens
    )
    traced = request | {"stream": True}  # as the SDK sends it, so a trace can become a fixture
    for attempt in range(STREAM_RETRIES + 1):
        try:
            with client.messages.stream(**request) as stream:
                response = stream.get_final_message()
            state.record("exchange", request=traced, response=response.model_dump(mode="json"))
            return response
        except anthropic.BadRequestError as err:
            state.record("exchange", request=traced, error={"status": err.status_code, "body": err.body})
            if prompt_too_long(err):
                return None
            raise
        except anthropic.APIStatusError as err:
            if not broke_mid_stream(err) or attempt == STREAM_RETRIES:
                raise
            state.record("exchange", request=traced, error={"status": 200, "body": err.body})
            show_transition(
                state,
                "stream_retry",
                f"{err.body['error']['type']} inside the stream; retry {attempt + 1} of {STREAM_RETRIES}",
            )
            time.sleep(STREAM_RETRY_DELAY * 2**attempt)


def recover(transition: str, client, model: str, messages: list, response, state: Recovery, hook):
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
        before = context_chars(messages)
        if transition == "collapse":
            state.collapsed = True
            collapse(messages)
        else:
            state.compacted = True
            summary = compact(client, model, messages, state)
            tokens = f"tokens in {summary.usage.input_tokens} / out {summary.usage.output_tokens}"
            console.print(f"[bold]summary:[/] {escape(messages[0]['content'])}\n[dim]{tokens}[/]")
        state.record("context", transition=transition, before=before, after=context_chars(messages))
        console.print(f"[dim]context {before:,} → {context_chars(messages):,} characters[/]")
        return summary if transition == "compact" else None


# -- the loop --------------------------------------------------------------------------------------


def agent_loop(
    client: anthropic.Anthropic,
    messages: list,
    workspace: Path,
    model: str = MODEL,
    permission: str = "auto",
    audit: Path | None = None,
    recovery: Recovery | None = None,
) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    state = recovery or Recovery()  # what recovery has tried, and the record of transitions
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        #    (s06: streamed; None when the API answers that the prompt is too long.)
        with console.status("waiting for the model…"):
            response = call_model(client, model, messages, state)
        if response is not None:
            turns.append(response)
            show_turn(len(turns), response)

        # 2. Name the transition: how the call ended, given what recovery has already tried this turn.
        #    A stop hook, if any, runs at end_turn and can send the model back to work.
        hook = None
        if state.stop_hook and response is not None and response.stop_reason == "end_turn":
            hook = run_stop_hook(state.stop_hook, workspace)
        transition, why = next_transition(response, state, messages, hook)
        show_transition(state, transition, why)

        # 3. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        #    Only an escalated retry throws it away (it will be written again), and a failure.
        if transition in KEEPS_REPLY:
            append_reply(messages, response.content)

        # 4. done and fail end the loop; a recovery transition repairs the request and goes round again.
        #    A reply cut off by max_tokens is never executed: its last tool_use may be incomplete.
        if transition in ("done", "fail"):
            return turns
        if transition != "next_turn":
            summary = recover(transition, client, model, messages, response, state, hook)
            turns += [summary] if summary else []  # a compaction's summary is a turn too: it costs tokens
            continue

        # 5. Run every tool_use and answer each id exactly once, all in one user message.
        #    execute() never raises on what the model sent: a refusal is an is_error result.
        results = []
        for block in response.content:
            if block.type == "tool_use":
                output, is_error = execute(block, workspace, permission, audit)
                show_tool(block, output)
                results.append(
                    {"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": is_error}
                )
        messages.append({"role": "user", "content": results})
        state.new_turn()


def trace_to_fixture(path: Path) -> dict:
    """A trace (JSON lines) as a fixture: every traced exchange becomes a request and its response.

    Live tool output differs from machine to machine, so requests are compared by structure.
    """
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    start = next((line for line in lines if line["event"] == "start"), {})
    exchanges = []
    for line in (line for line in lines if line["event"] == "exchange"):
        error = line.get("error")
        if error is None:
            response = {"status": 200, "body": line["response"]}
        elif error["status"] == 200:  # an error event inside the stream
            response = {"status": 200, "stream": [{"event": "error", "data": error["body"]}]}
        else:
            response = {"status": error["status"], "body": error["body"]}
        exchanges.append({"request": line["request"], "response": response, "match": "structure"})
    if not exchanges:
        raise replay.FixtureError(f"{path}: no exchanges in this trace — was it written with --trace?")
    return {
        "script": "s06_recovery",
        "scenario": Path(path).stem,
        "description": f"Converted from the trace {Path(path).name} by s06_recovery.trace_to_fixture.",
        "provenance": start.get("provenance", "recorded"),
        "task": start.get("task") or exchanges[0]["request"]["messages"][0]["content"],
        "workspace": start.get("workspace", ""),
        "args": start.get("args", []),
        "match": "structure",
        "exchanges": exchanges,
    }


def start_line(run: replay.Run, args) -> dict:
    """The trace's first line: enough to replay it — the task, the workspace, the flags that matter."""
    flags = ["--web-search"] if args.web_search else []
    if args.stop_hook:
        flags += ["--stop-hook", args.stop_hook, "--stop-hook-retries", str(args.stop_hook_retries)]
    fixture = run.fixture or {}
    provenance = fixture.get("provenance", "recorded")
    where = fixture.get("workspace", "")
    return dict(
        mode=run.mode, model=run.model, task=run.task, workspace=where, provenance=provenance, args=flags
    )


def fixture_file(trace: str) -> str:
    """Convert a trace to a fixture file in a temp folder, for --replay."""
    target = Path(tempfile.mkdtemp(prefix="workbook-trace-")) / (Path(trace).stem + ".json")
    target.write_text(json.dumps(trace_to_fixture(Path(trace)), indent=2, ensure_ascii=False))
    return str(target)


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
        "--stop-hook", metavar="CMD", help="a shell command that must pass before the loop stops"
    )
    parser.add_argument(
        "--stop-hook-retries",
        type=int,
        default=STOP_HOOK_RETRIES,
        metavar="N",
        help="times a failing hook is fed back",
    )
    parser.add_argument(
        "--web-search", action="store_true", help="offer the API's server-side web search tool"
    )
    parser.add_argument(
        "--trace", metavar="FILE", help="write every request, response and transition as JSON lines"
    )
    args = parser.parse_args(argv)
    run = None
    try:
        if args.replay and args.replay.endswith(".jsonl"):  # a trace: replay it as a fixture
            args.replay = fixture_file(args.replay)
        run = replay.start(args, MODEL, "s06_recovery")
        if run.fixture and run.fixture.get("args"):  # a fixture replays with the flags it was made with
            args = parser.parse_args([*run.fixture["args"], *(sys.argv[1:] if argv is None else argv)])
        console.print(f"[dim]{run.banner}[/]")
        console.print(f"[bold]task:[/] {escape(run.task)}")
        permission = args.permission or ("ask" if run.mode != "replay" and sys.stdin.isatty() else "auto")
        audit = audit_path(run)
        recovery = Recovery(
            args.stop_hook, args.stop_hook_retries, args.web_search, args.trace and Path(args.trace)
        )
        recovery.record("start", **start_line(run, args))
        messages = [{"role": "user", "content": run.task}]
        turns = agent_loop(run.client, messages, run.workspace, run.model, permission, audit, recovery)
        show_summary(turns)
        console.print(f"[dim]permission {permission}; audit log: {audit}[/]")
        return 1 if recovery.log and recovery.log[-1][0] == "fail" else 0
    except (replay.WorkbookError, anthropic.APIError) as err:
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
