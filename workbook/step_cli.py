"""What a step's main() uses: the flags (every step's, each added from the step that introduced it on),
starting the run, turning flags into what a step's Settings hold, and where a run's files go."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from workbook import display, flags, scrub
from workbook.asking import ask_person
from workbook.conversation import load_conversation, repo_path
from workbook.display import error, printable, say
from workbook.environment import for_run
from workbook.errors import FixtureError, WorkbookError
from workbook.files import read_json, refuse_unwritable, sweep_temp_files
from workbook.launch import Run, display_name, start
from workbook.launch import make_parser as make_shared_parser
from workbook.paths import ROOT, step_command
from workbook.replay.trust import recording_says_yes
from workbook.scratch import KEPT_RUNS, scratch_root
from workbook.tracing import fixture_file

import anthropic
from rich.markup import escape

RUNS = ROOT / "runs"  # live runs keep their audit log, trace and conversation in runs/<time>-<step>/


class LessonHelp(argparse.RawDescriptionHelpFormatter):
    """--help with the step's docstring as its description, fitted to the terminal: prose re-wrapped;
    each Run: line split before its comment when too wide; a diagram shown as drawn (the steps draw
    theirs at most 78 columns wide, so it fits an 80-column terminal)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = textwrap.dedent(text).strip("\n").split("\n\n")
        return "\n\n".join("\n".join(fitted(p, width)) for p in paragraphs)


def fitted(paragraph: str, width: int) -> list[str]:
    """One paragraph of a docstring in lines of at most `width` columns."""
    lines = paragraph.splitlines()
    if paragraph.startswith("Run:"):
        return [part for line in lines for part in run_line_parts(line, width)]
    if not paragraph.startswith(" ") and "\n " not in paragraph:
        return textwrap.wrap(" ".join(paragraph.split()), width)
    # a diagram: re-wrapping would break it, so it is drawn to fit (tests/steps/test_output_width.py)
    return lines


def run_line_parts(line: str, width: int) -> list[str]:
    """A `Run:` line, `command    what it does`: as it is if it fits, else the comment on its own line."""
    lead, command, comment = re.match(r"(Run: +| *)(\S.*?)(?: {3,}(.*))?$", line.rstrip()).groups()
    if len(line) <= width:
        return [line]
    if not comment:
        return textwrap.wrap(command, width, initial_indent=lead, subsequent_indent=" " * len(lead))
    return [lead + command, *textwrap.wrap(comment, width, initial_indent=" " * 9, subsequent_indent=" " * 9)]


def make_parser(doc: str, default_fixture: str, script: str) -> argparse.ArgumentParser:
    """The parser of step `script`: the flags every step shares (launch's), and those of the steps before
    it (s02's --permission, s04's --read-latency, s05's limits, s06's --no-stream, s07's stop hook,
    s09's files, s10's trace, s11's --handoff), with a --help that fits the terminal. The step adds its
    own."""
    parser = make_shared_parser(doc, default_fixture)
    parser.formatter_class = LessonHelp
    parser.set_defaults(script=script)
    for step, add in STEP_FLAGS:
        if step < step_number(script):
            add(parser)
    return parser


def step_number(script: str) -> int:
    return int(script[1:3])  # "s04_parallel" -> 4


def run_step(
    parser: argparse.ArgumentParser, argv: list[str] | None, model: str, run_task, **client_options
) -> int:
    """Start the run the flags ask for, print where it runs and its task, then `run_task(run, args)` ->
    exit code. In a replay the fixture's own flags apply too, under the reader's. What escapes the task
    ends the run in one line: a problem for the reader to fix (exit 1), or a Ctrl-C (exit 130)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    scrub.hide_from_tools()  # before any tool runs: none may read this process's key from /proc
    run = None
    try:
        args = prepared(args)
        refuse_unwritable_flags(args)
        run = start(args, model, args.script, **client_options)
        args = parser.parse_args([*run.fixture_args, *argv])  # the fixture's flags, then the reader's
        refuse_a_permission_the_recording_cannot_follow(args, run)
        refuse_no_stream_for_a_streamed_recording(args, run)
        if hasattr(args, "permission") and permission(args, run) == "ask":
            run.ask = ask_person  # s02's --permission ask asks whoever types: at a terminal, or into a pipe
        for line in banner_lines(run):
            say(line)
        goes_on = getattr(args, "resume", None) or getattr(args, "handoff", None)  # the task comes after
        label = "new instruction" if goes_on else "task"
        display.console.print(f"[bold]{label}:[/] {escape(printable(run.task))}")
        return run_task(run, args)
    except WorkbookError as err:
        error("error", str(err))
        return 1
    except anthropic.APIError as err:
        error("error", str(err))
        return 1
    except KeyboardInterrupt:
        display.console.print("[yellow]interrupted[/] — stopped before the next turn")
        return 130
    finally:
        note = run.finish() if run else None
        if note:
            say(note)


def prepared(args: argparse.Namespace) -> argparse.Namespace:
    """What the flags mean before the run starts. With s09's --resume FILE or s11's --handoff FILE:
    offline, the recording that goes on from that very conversation replays (recording_from); live with
    no new instruction, RESUME_INSTRUCTION or HANDOFF_INSTRUCTION is sent. A step that writes traces (s10 on)
    replays one as a fixture: --replay run.jsonl, converted first."""
    if getattr(args, "resume", None) and getattr(args, "handoff", None):
        raise WorkbookError("--resume goes on from a saved conversation, --handoff starts afresh: give one")
    for flag, instruction in (("resume", RESUME_INSTRUCTION), ("handoff", HANDOFF_INSTRUCTION)):
        saved = getattr(args, flag, None)
        if not saved or args.replay:
            continue
        if not os.environ.get("ANTHROPIC_API_KEY"):
            args.default_fixture = offline_recording(flag, saved)
        elif not args.task:
            args.task = instruction
    if hasattr(args, "trace") and args.replay and args.replay.endswith(".jsonl"):
        args.replayed_trace = args.replay  # the file the reader named, for the banner
        args.replay = fixture_file(args.replay, args.script)
    return args


RESUME_INSTRUCTION = "Continue where you left off."  # what a live --resume sends when given no instruction
HANDOFF_INSTRUCTION = "Carry on with the task."  # what a live --handoff adds when given no instruction


def recording_from(flag: str, saved: str | Path) -> str | None:
    """The committed fixture recorded going on (`--resume` or `--handoff`) from this very conversation,
    whatever file it was saved in: fixtures/NAME.json, or None."""
    wanted = read_json(repo_path(str(saved)), "saved conversation", "give the path a run printed")
    for fixture in sorted((ROOT / "fixtures").glob("*.json")):
        args = read_json(fixture, "fixture", "").get("args") or []
        given = args[args.index(f"--{flag}") + 1] if f"--{flag}" in args[:-1] else None
        if given and (ROOT / given).is_file() and read_json(ROOT / given, "", "") == wanted:
            return f"fixtures/{fixture.name}"
    return None


def offline_recording(flag: str, saved: str) -> str:
    """What an offline --resume or --handoff of `saved` replays; with no recording of it, one line."""
    load_conversation(repo_path(saved))  # a file that is no conversation to go on from: one line, first
    fixture = recording_from(flag, saved)
    if fixture is None:
        raise WorkbookError(
            f"no recording goes on from {saved}, so it cannot --{flag} offline: set ANTHROPIC_API_KEY to "
            "go on live"
        )
    return fixture


def banner_lines(run: Run, width: int | None = None) -> list[str]:
    """The run's banner in lines that fit the terminal: one per clause, a command on a line of its own,
    and, for a fixture whose note says it is abridged, the sentence that says so."""
    note = (run.fixture or {}).get("provenance_note", "")[: display.SCREEN_CHARS]  # a screen at most
    abridged = [s.strip() for s in note.split(". ") if "abridged" in s][:2]  # what a banner can hold
    lines = []
    for clause in run.banner.split("; ") + [f"note: {s.rstrip('.')}." for s in abridged]:
        said, colon, command = clause.partition(": python ")
        lines += [said + ":", "  python " + command] if colon else [clause]
    wrap = width or display.console.width  # the console in use (a notebook or a test may swap it)
    fit = dict(subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)  # paths stay whole
    return [part for line in lines for part in textwrap.wrap(line, wrap, **fit)]


def run_files(run: Run) -> Path:
    """The folder a run keeps its files in (audit log, trace, conversation): beside a replay's temp
    workspace (never in the repo), else runs/<time>-<step>/ for a live run. Made once per run."""
    if run.replayed:
        return run.folder
    if run.kept is None:
        run.kept = RUNS / f"{datetime.now():%Y%m%d-%H%M%S}-{run.script}"
        run.kept.mkdir(parents=True, exist_ok=True)
    return run.kept


LATENCY = flags.seconds(60, "a latency")  # a --read-latency value: seconds, from 0 to 60


def read_latency(args, run: Run) -> float:
    """s04's --read-latency, else the fixture's own `read_latency` (so that its reads visibly overlap),
    else 0."""
    latency = args.read_latency
    if latency is None:
        try:
            latency = LATENCY((run.fixture or {}).get("read_latency", 0))
        except (TypeError, argparse.ArgumentTypeError):
            raise FixtureError(f"{run.fixture_path}: read_latency must be 0 to 60 seconds") from None
    if latency:
        say(f"each read-only call is slowed by {latency} s (simulated latency)")
    return latency


def refuse_unwritable_flags(args) -> None:
    """--save, --trace and --record write only regular files, new or not, in folders that exist: a
    device, a FIFO, a folder or a missing folder is one line before anything runs (or is created).
    A `.NAME.*.tmp` that a killed save of that file left beside it is swept now, at the start."""
    for flag in ("save", "trace", "record"):
        value = getattr(args, flag, None)
        if value and not (flag == "trace" and getattr(args, "replay", None) == value):
            refuse_unwritable(Path(value), f"--{flag}")
            sweep_temp_files(Path(value))


def resume_hint(script: str, saved: Path) -> list[str]:
    """How to go on from a saved conversation, as commands that work as printed: live, with a new
    instruction (it needs a key), saying when a replay's copy is tidied away; and offline, when a
    recording goes on from this very conversation, from the committed copy it was recorded from."""
    live = [f"  {step_command(script)} --resume \\", f"    {saved} \\", '    "new instruction"']
    if Path(saved).resolve().is_relative_to(scratch_root()):  # a replay's folder: tidied away later
        live.append(f"  (this copy goes after {KEPT_RUNS} more runs; --save FILE keeps one where you choose)")
    if os.environ.get("ANTHROPIC_API_KEY"):
        return ["continue it (live, with your key):", *live]
    hint = ["continue it live with a new instruction (set ANTHROPIC_API_KEY first):", *live]
    fixture = recording_from("resume", saved)
    if fixture is None:
        return hint
    args = read_json(ROOT / fixture, "fixture", "")["args"]
    committed = args[args.index("--resume") + 1]
    return [*hint, f"or offline, as {fixture} recorded it:", f"  {step_command(script)} --resume {committed}"]


# -- each step's own flags (a step's main adds those of every step before it) -------------------------


PERMISSIONS = ("ask", "auto", "deny", "all")  # s02's --permission: ask, decide alone, reads only, all


def add_permission_flag(parser) -> None:
    """s02's --permission: who decides whether a write or a command may run."""
    parser.add_argument(
        "--permission",
        choices=PERMISSIONS,
        help="ask: before writes and bash (default live at a terminal); auto: writes, read-only commands "
        "and a trusted fixture's run unasked, other commands ask (no terminal: refused); deny: reads "
        "only; all: everything unasked (only in a folder you can lose)",
    )


def add_latency_flag(parser) -> None:
    """s04's --read-latency: slow every read down, to watch reads overlap."""
    parser.add_argument(
        "--read-latency",
        type=LATENCY,
        metavar="SECONDS",
        help="make every read-only call this much slower, like a network drive, to watch reads overlap "
        "(default: the fixture's read_latency in replay, else 0)",
    )


def add_limit_flags(parser) -> None:
    """s05's flags: the limits. A limit not given is left to s05's Budget (its defaults are named in the
    help, and a test keeps them equal); 0, -1 or nan as a limit is refused in one line."""
    add = parser.add_argument
    add("--max-steps", type=limit, metavar="N", help="model calls (default 50)")
    add("--max-tokens-total", type=limit, metavar="N", help="tokens in + out (default 200,000)")
    add("--max-input-tokens", type=limit, metavar="N", help="input, one request (default 150,000)")
    add("--max-cost", type=dollars, metavar="DOLLARS", help="estimated, warned at 80%% (default 5.00)")


def add_handoff_flag(parser) -> None:
    """s11's flag: --handoff, a fresh session from a saved one."""
    parser.add_argument(
        "--handoff", metavar="FILE", help="start a fresh session from a saved one's task and what it did"
    )


def add_trace_flag(parser) -> None:
    """s10's flag: where the trace goes."""
    parser.add_argument(
        "--trace", metavar="FILE", help="where to write the trace (default: beside the audit log)"
    )


def add_keep_flags(parser) -> None:
    """s09's flags: --resume, and where the conversation goes."""
    add = parser.add_argument
    add("--resume", metavar="FILE", help="go on from a saved conversation; a task is the new instruction")
    add("--save", metavar="FILE", help="where to save the conversation (default: beside the audit log)")


LIMITS = ("max_steps", "max_tokens_total", "max_input_tokens", "max_cost")  # s05's Budget, by flag


def limits(args) -> dict:
    """The limits the reader (or the fixture) set, by Budget field; the others keep Budget's defaults."""
    return {name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None}


def add_stream_flag(parser) -> None:
    """s06's flag: --no-stream."""
    parser.add_argument("--no-stream", action="store_true", help="wait for each reply whole, as s01-s05 do")


def add_hook_flags(parser, hook_retries: int = 2) -> None:
    """s07's flags: the stop hook, and the server-side search tool."""
    add = parser.add_argument
    add("--stop-hook", metavar="CMD", help="a shell command that must pass before the loop may stop")
    add("--stop-hook-retries", type=count, default=hook_retries, metavar="N", help="default %(default)s")
    add("--web-search", action="store_true", help="offer the API's server-side web search tool")


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


def run_line(run: Run, args) -> dict:
    """s10's trace `run` line, before `start`: what a replay of the trace needs besides the requests —
    the task, the workspace, and the flags that change what the loop does (the limits set, the stop
    hook, web search) or what it starts from (a --resume or --handoff of a saved conversation, named
    from the repo root, as a fixture names one)."""
    fixture = run.fixture or {}
    where, provenance = fixture.get("workspace", ""), fixture.get("provenance", "recorded")
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in limits(args).items()]
    flags += ["--web-search"] if args.web_search else []
    for flag in ("resume", "handoff"):
        saved = getattr(args, flag, None)
        if saved:
            path = repo_path(saved).resolve()
            flags += [f"--{flag}", str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)]
    if args.stop_hook:
        flags += ["--stop-hook", args.stop_hook, "--stop-hook-retries", str(args.stop_hook_retries)]
    return dict(
        task=run.task,
        workspace=where,
        provenance=provenance,
        args=flags,
        environment=for_run(run),
        live=not run.replayed,
    )


def stop_hook(run: Run, args, gate, bash) -> str | None:
    """s07's --stop-hook. A replayed fixture's own hook is a stranger's command: it meets s02's `gate`,
    as a call to `bash` would, before the run starts, and a refusal stops the run in one line. A
    trusted fixture vouches for its own hook (unless it is dangerous); any other asks the run's person."""
    hook = args.stop_hook
    if hook and {hook, f"--stop-hook={hook}"} & set(run.fixture_args):
        call = SimpleNamespace(id="stop_hook", name="bash", input={"command": hook})
        vouched = recording_says_yes if run.trusted else run.ask
        _decision, refusal = gate(bash, call, permission(args, run), vouched)
        if refusal:
            raise WorkbookError(f"the fixture's --stop-hook {hook!r}: {refusal}")
    return hook


def streaming(args, run: Run) -> bool:
    """s06 on: stream, unless --no-stream, or a replayed fixture was recorded from a loop that did not."""
    recorded = [e["response"] for e in run.fixture["exchanges"]] if run.fixture else [{"stream": []}]
    return not args.no_stream and any("stream" in response for response in recorded)


def permission(args, run: Run) -> str:
    """s02's --permission, or its default: ask a person at a terminal in a live run, else auto."""
    return args.permission or ("ask" if run.mode != "replay" and sys.stdin.isatty() else "auto")


def refuse_a_permission_the_recording_cannot_follow(args, run: Run) -> None:
    """A fixture recorded under one --permission says so in its own args (its recording holds the
    gate's answers under it: auto's "no person gave one", a person's "no" under ask). It replays only under
    that permission: under another the gate answers otherwise, and the replay would stop at that turn
    with a mismatch. Said before the run starts."""
    recorded = recorded_permission(run.fixture_args)
    if recorded and args.permission != recorded:
        raise WorkbookError(
            f"{display_name(run.fixture_path)} replays only under --permission {recorded}: it was "
            f"recorded under it (its args say so), and {args.permission} would answer otherwise — "
            f"drop --permission {args.permission}, or give a task to run it live"
        )


def refuse_no_stream_for_a_streamed_recording(args, run: Run) -> None:
    """s06's --no-stream asks for each reply whole. A recording whose first request streamed would then
    stop at turn 1 with a mismatch (`stream: expected true`): said before the run starts, with what to do."""
    if not getattr(args, "no_stream", False) or not run.fixture:
        return
    first = next((e["request"] for e in run.fixture["exchanges"] if isinstance(e.get("request"), dict)), {})
    if first.get("stream") is True:
        raise WorkbookError(
            f"{display_name(run.fixture_path)} was recorded streaming and replays only so: --no-stream "
            "would ask for each reply whole — drop --no-stream, or give a task to run it live"
        )


def recorded_permission(fixture_args: list[str]) -> str | None:
    """The --permission a fixture's args set (`--permission X` or `--permission=X`), if any."""
    for i, arg in enumerate(fixture_args):
        if arg == "--permission" and i + 1 < len(fixture_args):
            return fixture_args[i + 1]
        if arg.startswith("--permission="):
            return arg.partition("=")[2]
    return None


# -- each step's flags, from the step that introduced them on (make_parser adds the earlier ones) ----

STEP_FLAGS = (
    (2, add_permission_flag),
    (4, add_latency_flag),
    (5, add_limit_flags),
    (6, add_stream_flag),
    (7, add_hook_flags),
    (9, add_keep_flags),
    (10, add_trace_flag),
    (11, add_handoff_flag),
)
