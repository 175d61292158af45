"""s02_tools.py — Tools as data: schemas, a dispatch map, a harness that says no.

The idea: a tool is data, a schema the model reads and a handler that runs,
and every call goes through one function, `execute()`, that may say no. Is
the tool known, its input valid, the call allowed, its path in the workspace?
A refusal, or whatever a handler raises, is an `is_error` result the model
reads and corrects; the loop never crashes on it.

Adds over s01:
- six tools as data: a JSON Schema each, and a dispatch map to its handler;
- `execute()` for every call: the checks, the handler, its output cut to its
  head and tail, one line in the run's audit log;
- the permission gate, one of those checks: who says yes before a write or a
  command runs (--permission ask|auto|deny|all): a person, warned of a
  dangerous command; under auto, an allowlist of commands that only read;
- in support: the handlers, each kept inside the workspace and bounded in
  time and memory; the system prompt, built each run (`constitution()`: who
  the agent is, where it works, by what rules).

    user task
        |
        v
    +--------------+  stop_reason != tool_use   +------+
    | call model   | -------------------------> | done |
    +--------------+                            +------+
        ^      | tool_use
        |      v
        |  +==================================+
        +--| execute() each tool_use:         |  new in s02: a refusal is
           | known? valid input? gate says    |  an is_error tool_result
           | yes? path inside the workspace?  |  the model reads, and the
           | -> handler, truncate, audit line |  loop goes on; one result
           +==================================+  per tool_use id, as in s01

Run: python s02_tools.py          offline replay of its fixture, no key needed
     python s02_tools.py "task"   live, ANTHROPIC_API_KEY; asks before writes
"""

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from workbook import bounded_search, capture, display, environment, launch, step_cli, workspace_files
from workbook.asking import at_terminal  # the person at the terminal, whom the gate asks
from workbook.audit import log_call  # one JSON line per call in the run's folder
from workbook.shell_words import NotPlain, leaves_workspace, plain_words  # a command's words, if plain

import anthropic
import fastjsonschema

import s01_agent_loop as s01
from s01_agent_loop import BASH_TIMEOUT, MAX_TOKENS, MODEL

DEFAULT_FIXTURE = "fixtures/s02_fix_divide_by_zero.json"


# -- new in s02: tools as data — what the model is shown, and the handler that runs it --------------

MAX_OUTPUT = 10_000  # characters of tool output the model gets; the middle of longer output is cut


class ToolError(Exception):
    """A refusal or failure the model can correct: it becomes an is_error tool_result."""


@dataclass
class Tool:
    """One tool as data: what the model is shown (its name, what it does, the input it takes), the
    handler that runs it, and whether it only reads (a read passes the permission gate unasked)."""

    name: str
    description: str
    input_schema: dict
    handler: Callable[..., str]
    read_only: bool = False

    def __post_init__(self):  # compiled once, at import; unknown fields are refused, not ignored
        schema = {**self.input_schema, "additionalProperties": False}
        self.validate = fastjsonschema.compile(schema, use_default=False)  # never rewrite the model's input

    def shown(self) -> dict:
        """What the model is shown of this tool, in every request's `tools`."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


# -- new in s02, in support: the handlers — each inside the workspace, bounded in time and memory -----

MAX_FILE_BYTES = 10_000_000  # edit_file and grep read whole files: none larger
MAX_GLOB_PATHS = 20_000  # paths a glob may yield before it is refused as too broad
GREP_CPU_SECONDS = 5.0  # a pattern can backtrack for ever (ReDoS): the search stops after this
MAX_MATCHES = 500  # grep's lines, at most


def inside(workspace: Path, path: str) -> Path:
    """`path` resolved in the workspace (.., absolute paths, symlinks followed); refused if it leaves."""
    target = workspace_files.resolved(workspace / path)  # a link loop: an OSError, one line
    if not target.is_relative_to(workspace):
        raise ToolError(f"{path} is outside the workspace; use a path inside it, relative to it")
    return target


def bash(workspace: Path, command: str) -> str:
    """Unlike s01's run_bash: capture.run keeps only the output's head and tail while the command runs
    (a `cat` of a huge file fills no memory), and ends all the command started with it; a timeout is a
    ToolError that says what the command printed first."""
    try:
        done = capture.run(command, workspace, BASH_TIMEOUT)
    except subprocess.TimeoutExpired as err:
        stopped = f"the command timed out after {BASH_TIMEOUT} s; it and every process it started were killed"
        said = truncate(err.output.strip(), 2000)
        raise ToolError(
            stopped + (f". Output before that:\n{said}" if said else " (no output before that)")
        ) from None
    return f"{done.stdout.strip() or '(no output)'}\n[exit code {done.returncode}]"


def read_file(workspace: Path, path: str) -> str:
    """A regular file's text, no more of it than a result carries (its head and tail): never a FIFO."""
    return workspace_files.read_text(inside(workspace, path), path, MAX_OUTPUT - 100)  # 100: the cut's note


def write_file(workspace: Path, path: str, content: str) -> str:
    target = inside(workspace, path)
    if target.exists() and not target.is_file():
        raise ToolError(f"{path}: not a regular file (a folder, a pipe or a device); write files only")
    target.parent.mkdir(parents=True, exist_ok=True)
    return f"wrote {target.write_text(content)} characters to {path}"


def edit_file(workspace: Path, path: str, old_text: str, new_text: str) -> str:
    """Replace the one occurrence of old_text; none or several is an error, never a guess."""
    target = inside(workspace, path)
    with workspace_files.regular_file(target, path, MAX_FILE_BYTES):  # a file small enough to edit in memory
        text = target.read_text()
    if text.count(old_text) != 1:
        found = f"occurs {text.count(old_text)} times" if old_text in text else "does not occur"
        raise ToolError(f"old_text {found} in {path}; it must match exactly once (quote more of the file)")
    target.write_text(text.replace(old_text, new_text))
    return f"edited {path}: replaced 1 occurrence"


def grep(workspace: Path, pattern: str, glob: str = "**/*") -> str:
    """file:line: text per matching line (at most MAX_MATCHES); time and memory bounded, compile too."""
    files = workspace_files.glob_files(workspace, glob, MAX_GLOB_PATHS)  # bounded, never out of the workspace
    try:
        hits = bounded_search.grep(pattern, files, workspace, MAX_MATCHES, GREP_CPU_SECONDS)
    except bounded_search.PatternError as err:  # said for the model already: it needs no type name
        raise ToolError(str(err)) from err
    return "\n".join(hits) or "(no matches)"


def list_files(workspace: Path, glob: str = "**/*") -> str:
    files = workspace_files.glob_files(workspace, glob, MAX_GLOB_PATHS)  # bounded, never out of the workspace
    return "\n".join(str(p.relative_to(workspace)) for p in files) or "(no files)"


# -- new in s02: the dispatch map — every tool, by name: its schema, its handler, whether it only reads --

REGISTRY = {  # tool name -> Tool
    tool.name: tool
    for tool in [
        Tool(**s01.TOOLS[0], handler=bash),  # s01's bash, as the model knows it; s02's handler runs it
        Tool(
            name="read_file",
            description="Read a text file. Paths are relative to the workspace.",
            input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            handler=read_file,
            read_only=True,
        ),
        Tool(
            name="write_file",
            description="Create or overwrite a text file, and the folders it needs.",
            input_schema={
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
            handler=write_file,
        ),
        Tool(
            name="edit_file",
            description="Replace old_text, which must occur exactly once in the file, with new_text.",
            input_schema={
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_text": {"type": "string", "minLength": 1},
                    "new_text": {"type": "string"},
                },
                "required": ["path", "old_text", "new_text"],
            },
            handler=edit_file,
        ),
        Tool(
            name="grep",
            description="Search files for a regular expression. Returns file:line: text for each match.",
            input_schema={
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "glob": {"type": "string", "default": "**/*"}},
                "required": ["pattern"],
            },
            handler=grep,
            read_only=True,
        ),
        Tool(
            name="list_files",
            description="List the files matching a glob pattern such as **/*.py (default: every file).",
            input_schema={"type": "object", "properties": {"glob": {"type": "string", "default": "**/*"}}},
            handler=list_files,
            read_only=True,
        ),
    ]
}
TOOLS = [tool.shown() for tool in REGISTRY.values()]  # what every request shows the model


# -- new in s02: execute() — every call checked, run, cut to size and logged --------------------------

Person = Callable[..., bool | None]  # whom the gate asks about a call (its danger, why): yes, no or None


def admit(block, permission: str, ask: Person | None) -> tuple[str, str | None]:
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
    return gate(tool, block, permission, ask)


def truncate(text: str, limit: int = MAX_OUTPUT) -> str:
    """Keep the head and the tail (where errors and exit codes are), and say how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - 2 * half} characters cut from the middle] …\n{text[-half:]}"


def execute(
    block,
    workspace: Path,
    permission: str = "auto",
    audit: Path | None = None,
    ask: Person | None = at_terminal,
) -> tuple[str, bool]:
    """One tool call: known? valid? allowed? then its handler. Returns (output, is_error). A refusal,
    and whatever a handler raises, is an is_error result the model reads: the loop never crashes on it."""
    started = time.monotonic()
    workspace = workspace.resolve()
    decision, refusal = admit(block, permission, ask)
    output = refusal
    is_error = refusal is not None
    if not is_error:
        try:
            output = REGISTRY[block.name].handler(workspace, **block.input)
        except Exception as err:  # a file it cannot decode, a bug in a handler...: the model reads it
            output = error_text(err, workspace)
            is_error = True
    output = truncate(output)
    log_call(audit, block, decision, output, is_error, started)
    return output, is_error


def error_text(err: Exception, workspace: Path) -> str:
    """An exception as the model reads it: its type and message (no traceback), paths as it wrote them.
    A ToolError is the harness's own refusal, so it needs no type name."""
    kind = "" if isinstance(err, ToolError) else f"{type(err).__name__}: "
    return f"error: {kind}{err}".replace(f"{workspace}/", "")


# -- new in s02: the permission gate — who says yes before a write or a command runs -----------------


def gate(tool: Tool, call, permission: str, ask: Person | None) -> tuple[str, str | None]:
    """(decision, refusal or None) for a call whose input is valid:

    read_file, grep, list_files    run, under every --permission
    --permission all               runs every call
    --permission deny              refuses every other call
    --permission ask               asks the person `ask` about every other call
    --permission auto              runs writes and edits; a command only if it is a plain read
                                   (cat, ls, grep... the allowlist), else asks `ask`
    """
    if tool.read_only:
        return "read-only", None
    if permission == "all":
        return "allowed", None
    if permission == "deny":
        return "denied", "denied: this run allows read-only tools only (--permission deny)"
    if permission == "ask":
        return asked(call, ask, "--permission ask asks about every call")
    if tool.name != "bash":
        return "allowed", None  # auto: a write or an edit, kept inside the workspace by the handlers
    why = not_read_only(call.input["command"])  # None for a plain read: cat, ls, grep... no shell syntax
    return ("allowed", None) if why is None else asked(call, ask, why)


def asked(call, ask: Person | None, why: str) -> tuple[str, str | None]:
    """A person decides, warned of a dangerous command; anything but yes is a no:

    the person says yes            approved: it runs
    the person says no             denied: the user said no
    no answer, dangerous command   denied: it needs a person's yes (rm -rf, sudo, git push...)
    no answer, any other           refused: not run, as nobody at a terminal said yes
    """
    danger = dangerous(call.input["command"]) if call.name == "bash" else None
    answer = ask(call, danger, why) if ask else None
    if answer:
        return "approved", None
    if answer is False:
        return "denied", "denied: the user said no to this call. Do not retry it; do something else."
    if danger:
        return "denied", (
            f"denied: this command needs a person's yes ({danger}), and no person gave one. "
            "Do without it, or leave it to the user."
        )
    return "refused", (
        f"not run: {why}, and no person at a terminal said yes. To allow it: --permission ask at a "
        "terminal, or --permission all."
    )


# -- new in s02, in support of the gate: what a person is warned of, what auto runs unasked ---------

DANGEROUS = {  # regular expression -> why a matching command needs a person's yes, as they are warned
    r"\brm\s+-\w*[rRf]": "rm -r/-f deletes with no undo",
    r"\bsudo\b": "sudo acts as root, beyond the workspace",
    r"\bgit\s+push\b": "git push publishes beyond this machine",
    r"\b(curl|wget)\b.*\|\s*(ba|z)?sh\b": "piping a download into a shell runs code nobody has read",
}


def dangerous(command: str) -> str | None:
    """Why a command needs a person's yes (it deletes, acts as root, publishes...), or None."""
    return next((why for rx, why in DANGEROUS.items() if re.search(rx, command)), None)


READ_ONLY_COMMANDS = {"cat", "head", "tail", "wc", "ls", "grep", "pwd", "echo", "stat", "du", "diff", "true"}


def not_read_only(command: str) -> str | None:
    """Why --permission auto may not run `command` unasked, or None for a plain read: a program on
    READ_ONLY_COMMANDS, its words plain. An allowlist, since no list of dangers names every way to
    delete (`rm --recursive`, `find . -delete`, a one-line Python script):

        not_read_only("cat notes.txt")      None: auto runs it
        not_read_only("ls; rm -r ../x")     "it uses shell syntax (';')"
    """
    try:
        words = plain_words(command)  # refuses shell syntax (; | $( ) * ...) and stray quotes
    except NotPlain as err:
        return str(err)
    if not words or words[0] not in READ_ONLY_COMMANDS:
        return f"{words[0] if words else 'an empty command'!r} is not a read-only command auto knows"
    outside = [word for word in words[1:] if leaves_workspace(word)]  # /etc/x, --file=/x, ../x
    return f"{outside[0]!r} leaves the workspace" if outside else None


# -- new in s02, in support: the system prompt, the loop's constitution — who, where, by what rules ---

IDENTITY = "You are a coding agent."
SYSTEM = f"{IDENTITY} Use the tools to solve tasks in the workspace. Act, don't explain."
RULES = [  # behaviour the harness cannot enforce in code, so it asks for it at the top of every request
    "Match the project's existing style: naming, layout, tests.",
    "Destructive or irreversible actions (deleting, overwriting, pushing) need the user's yes first.",
    "Quote code as path:line. Say what you changed and what you could not check.",
]


def constitution(workspace: Path, facts: dict | None) -> str:
    """The system prompt, built each run, at the top of every request: who (identity), where (folder, OS,
    date, git, the workspace's AGENTS.md or CLAUDE.md), how (rules). No facts gathered: SYSTEM alone."""
    if facts is None:
        return SYSTEM
    lines = [f"- {label}: {facts[key]}" for key, label in environment.LABELS.items() if facts.get(key)]
    parts = [SYSTEM, "Environment:\n" + "\n".join(lines), "Rules:\n" + "\n".join(f"- {r}" for r in RULES)]
    found = environment.instructions(workspace)  # the project's own memory file, if it keeps one
    if found:
        name, text = found
        parts.append(f"Project instructions, from {name} (follow them):\n{text}")
    return "\n\n".join(parts)


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s01.Settings):
    """s01's settings, and what s02 adds: who says yes to a call, where each call is logged, and the
    system prompt built for this run."""

    permission: str = "auto"  # --permission: ask, auto, deny or all
    ask: Person | None = at_terminal  # who the gate asks: the person at a terminal, if one is there
    audit: Path | None = None  # the audit log, one JSON line per call (None: no log)
    system: str = SYSTEM  # the constitution, built for this run

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s01's, with what the flags and the run give."""
        settings = super().for_run(run)
        settings.permission = step_cli.permission(args, run)  # default: ask at a terminal, live; else auto
        settings.ask = run.ask  # who answers the gate: the run's person (under ask, whoever types)
        settings.audit = step_cli.run_files(run) / "audit.jsonl"  # in the run's folder
        settings.system = constitution(run.workspace, environment.for_run(run))  # folder, OS, date, git
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        with display.waiting(len(turns) + 1):  # the turn's rule on screen, a spinner till the reply
            response = client.messages.create(
                model=settings.model,
                system=settings.system,
                tools=TOOLS,
                messages=messages,
                max_tokens=MAX_TOKENS,
            )
        turns.append(response)
        display.show_turn(response)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return turns

        # 4. Run every tool_use and answer each id exactly once, all in one user message.
        #    (new in s02) execute() never raises on what the model sent: a refusal is an is_error result.
        results = []
        for block in response.content:
            if block.type == "tool_use":
                output, is_error = execute(
                    block, settings.workspace, settings.permission, settings.audit, settings.ask
                )
                display.show_tool(block, output, is_error)
                results.append(
                    {"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": is_error}
                )
        messages.append({"role": "user", "content": results})


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s02_tools")
    step_cli.add_permission_flag(parser)  # s02's own: --permission
    return step_cli.run_step(parser, argv, MODEL, run_task)


def run_task(run: launch.Run, args) -> int:
    """s01's run, with this step's settings; then the summary, and where the audit log went."""
    messages = [{"role": "user", "content": run.task}]
    settings = Settings.for_run(run, args)
    turns = agent_loop(run.client, messages, settings)
    display.show_summary(turns)
    display.say(f"permission {settings.permission}\naudit log: {settings.audit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
