"""Starting a step's run: live, replay or record, chosen from its flags and the environment."""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path

from workbook.asking import at_terminal
from workbook.display import say
from workbook.errors import FixtureError, WorkbookError
from workbook.files import refuse_unwritable, write_json
from workbook.paths import ROOT, UNGATED, step_command
from workbook.replay.fixtures import load_fixture
from workbook.replay.journal import Journal, journal_of
from workbook.replay.record import RecordingTransport, recording_header, save_recording
from workbook.replay.transport import ReplayTransport, replay_client
from workbook.replay.trust import recorded_commands, recorded_person, vouched_by
from workbook.scratch import copy_workspace, release
from workbook.scrub import public_endpoint

import anthropic

REBUILD_ENV = "WORKBOOK_REBUILD"  # set by `python -m workbook rebuild`: replay leniently, then store requests


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (what is wrong, and --help), not the usage block too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} — see --help\n")


def make_parser(doc: str, default_fixture: str) -> argparse.ArgumentParser:
    """The flags every step shares; a step adds its own to the parser this returns."""
    parser = OneLineParser(
        description=doc,
        epilog=f"With no task, replays {default_fixture} offline (with or without ANTHROPIC_API_KEY).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--rec` must not quietly mean --record
    )
    parser.add_argument("task", nargs="?", help="the task for a live run (needs ANTHROPIC_API_KEY)")
    parser.add_argument("--replay", metavar="FIXTURE", help="replay a recorded fixture, offline")
    parser.add_argument("--record", metavar="FIXTURE", help="run live and save the exchange as a fixture")
    parser.add_argument("--force", action="store_true", help="with --record: overwrite an existing file")
    parser.add_argument("--model", help="model id (default: $MODEL_ID, else the step's MODEL)")
    parser.add_argument(
        "--workspace", help="folder the tools act in for a live run (default: current folder)"
    )
    parser.set_defaults(default_fixture=default_fixture)
    return parser


class Mode(StrEnum):
    """How a run reaches a model: live (the API, with a key), replay (a fixture, offline), record (live,
    each exchange kept as a fixture), or rebuild (a replay that accepts what the step sends now and
    stores it: `python -m workbook rebuild` runs the step so, in a process of its own)."""

    LIVE = "live"
    REPLAY = "replay"
    RECORD = "record"
    REBUILD = "rebuild"


@dataclass
class Run:
    """Everything a step needs to start: the client, the task, where tools act, and how we got here."""

    client: anthropic.Anthropic
    mode: Mode
    task: str
    workspace: Path
    model: str
    banner: str
    fixture_path: Path | None = None
    transport: ReplayTransport | RecordingTransport | None = None
    fixture: dict | None = None  # the loaded fixture, in replay
    script: str = ""  # the step's name, kept in a recording
    trusted: bool = False  # a replay of a fixture on the trust list: its recorded commands run unasked
    fixture_args: list[str] = field(default_factory=list)  # the fixture's checked flags, paths made absolute
    folder: Path | None = None  # a replay's run folder: its workspace copy, and the files the step keeps
    kept: Path | None = None  # a live run's folder in runs/, for the files the step keeps (step_cli)
    environment: dict | None = None  # s02: folder, OS, date, git, for the system prompt (environment.py)
    journal: Journal | None = None  # record mode: each exchange appended as it completes (journal.py)
    # The run's clock and dice, for a step's waits and their jitter: real ones live; a replay's say each
    # wait instead of spending it (a recording has no clock) and draw the same jitter every time, so a
    # replay prints the same lines on every run.
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random
    # Who answers the permission gate (s02) about a command auto will not run alone: the person at this
    # terminal, if one is there; in a replay, the recording says yes to its own trusted calls.
    ask: Callable | None = at_terminal

    @property
    def replayed(self) -> bool:
        """Whether the model's answers come from a fixture (a replay, or a rebuild)."""
        return self.mode in (Mode.REPLAY, Mode.REBUILD)

    def without_clock(self) -> Run:
        """This run, its waits said instead of spent, its jitter fixed (see `sleep`)."""
        self.sleep, self.rand = say_the_wait, random.Random(0).random
        return self

    def finish(self) -> str | None:
        """End the run: save what record mode captured (or what a rebuild observed), remove the
        replay's workspace copy. Returns a line for the reader, or None; never raises."""
        try:
            if self.mode is Mode.RECORD:
                return save_recording(self, self.journal)
            if self.mode is Mode.REBUILD:
                return save_rebuild(self)
            return None
        except (WorkbookError, OSError) as err:
            return f"error: {err}"
        finally:
            if self.folder:
                release(self.folder)


def start(args: argparse.Namespace, model: str, script: str, **client_options) -> Run:
    """Pick the mode from the flags and the environment, and build the client for it (see `choose`)."""
    return choose(args, model, script, **client_options)


def choose(args: argparse.Namespace, model: str, script: str, **client_options) -> Run:
    """With no task: a replay (the step's default fixture unless --replay names one), key or no key.
    With a task: a live run, which needs ANTHROPIC_API_KEY. Flags that contradict each other stop here.
    """
    model = args.model or os.environ.get("MODEL_ID") or model
    refuse_conflicting_flags(args)
    key = os.environ.get("ANTHROPIC_API_KEY")
    if args.record:
        if not key:
            raise WorkbookError("--record needs ANTHROPIC_API_KEY: set it, or use --replay to run offline")
        return _start_record(args, model, script, key, client_options)
    if not args.task:
        path = Path(args.replay) if args.replay else ROOT / args.default_fixture
        return start_replay(path, model, client_options, script, args)
    if not key:
        raise WorkbookError("a live task needs ANTHROPIC_API_KEY — set it, or run with no task to replay")
    workspace = _live_workspace(args)
    client = anthropic.Anthropic(api_key=key, **client_options)
    where = public_endpoint(os.environ.get("ANTHROPIC_BASE_URL"))
    banner = f"live: {model} at {where}; tools act in {workspace}"
    if script in UNGATED:
        banner += f"; {script} has no permission gate: it runs every command the model asks for, unasked"
    run = Run(client, Mode.LIVE, args.task, workspace, model, banner, script=script)
    return run.without_clock() if os.environ.get("WORKBOOK_NO_SLEEP") else run  # the suite's live runs


def say_the_wait(seconds: float) -> None:
    """A replay's sleep: the wait is said, not spent."""
    say(f"(a replay has no clock: the {seconds:.1f} s wait is not spent)")


def refuse_conflicting_flags(args: argparse.Namespace) -> None:
    conflict = flag_conflict(args)
    if conflict:
        raise WorkbookError(conflict)


def flag_conflict(args: argparse.Namespace) -> str | None:
    """Flags that cannot all be meant at once: one line saying which, and what to do instead."""
    replay_, record, task = getattr(args, "replay", None), getattr(args, "record", None), args.task
    if replay_ and record:
        return "--replay plays a fixture offline and --record saves a live run: give one of them"
    if replay_ and task:
        return f"--replay runs the fixture's own task: drop {task!r}, or drop --replay to run it live"
    if record and not task:
        return '--record runs live: give a task too, e.g. --record fixtures/mine.json "list the files"'
    if getattr(args, "force", False) and not record:
        return "--force only applies to --record (to overwrite an existing recording)"
    if getattr(args, "workspace", None) and not task:
        return "--workspace is for a live run (give a task); a replay works in a temp copy of its own"
    return None


def _live_workspace(args) -> Path:
    workspace = Path(args.workspace or os.getcwd()).resolve()
    if not workspace.is_dir():
        raise WorkbookError(f"--workspace {args.workspace}: no such folder — create it or name another")
    return workspace


def start_replay(path: Path, model: str, client_options: dict, script: str = "", args=None) -> Run:
    fixture = load_fixture(path)
    trusted = vouched_by(fixture) is not None  # its bytes, and its workspace, are on the trust list
    name = display_name(path)
    if getattr(args, "replayed_trace", None):  # a trace, converted to this fixture first
        name = f"the trace {display_name(Path(args.replayed_trace))}"
    if not trusted and script in UNGATED and recorded_commands(fixture):
        raise FixtureError(
            f"{name}: {script} runs commands with no permission gate, and this fixture is not on the "
            f"trust list — read it, then `python -m workbook trust {name}`, or replay it with s02 or later"
        )
    mode = Mode.REBUILD if os.environ.get(REBUILD_ENV) else Mode.REPLAY
    lenient = mode is Mode.REBUILD
    # Only `rebuild` (lenient) reads every request back; a step's own replay keeps only the last.
    client, transport = replay_client(fixture, name, strict=not lenient, keep_all=lenient, **client_options)
    workspace = copy_workspace(fixture["workspace"])
    banner = f"offline replay of {name} ({fixture['provenance']}); no API key used"
    banner += "" if trusted else "; not on the trust list, so its commands go through the permission gate"
    banner += f"; the fixture sets {' '.join(fixture['args'])}" if fixture.get("args") else ""
    if not getattr(args, "replay", None):
        step = step_command(script) if script else "python sNN_step.py"
        banner += f'; to run live, set ANTHROPIC_API_KEY and give a task: {step} "list the files"'
    run = Run(client, mode, fixture["task"], workspace, model, banner, path, transport, fixture)
    run.trusted, run.fixture_args, run.folder, run.script = (
        trusted,
        absolute_args(fixture),
        workspace.parent,
        script,
    )
    run.ask = recorded_person(transport, workspace, at_terminal)  # takes the copy: this run's own
    return run.without_clock()


def absolute_args(fixture: dict) -> list[str]:
    """A fixture's args as the step should parse them: a --resume or --handoff file made absolute under
    the repo, so that the reader's current folder cannot change which file is read."""
    args = list(fixture.get("args", []))
    for i, arg in enumerate(args):
        flag, has_value, value = arg.partition("=")
        if flag in ("--resume", "--handoff") and has_value:
            args[i] = f"{flag}={(ROOT / value).resolve()}"
        elif arg in ("--resume", "--handoff"):
            args[i + 1] = str((ROOT / args[i + 1]).resolve())
    return args


def _start_record(args, model: str, script: str, key: str, client_options: dict) -> Run:
    target = Path(args.record)
    if target.is_dir():
        raise WorkbookError(f"--record {target}: is a folder — give a file name, e.g. {target}/mine.json")
    if target.parent.exists() and not target.parent.is_dir():
        raise WorkbookError(f"--record {target}: {target.parent} is not a folder — give a path in a folder")
    if target.exists() and not getattr(args, "force", False):
        raise WorkbookError(
            f"--record {target}: the file exists — pick another name, or add --force to replace it"
        )
    journal = journal_of(target)
    refuse_unwritable(journal, "--record")  # a folder or a device there is one line now, not a lost run
    if os.path.lexists(journal) and not getattr(args, "force", False):
        raise WorkbookError(
            f"--record {target}: {journal} holds a killed recording's exchanges (it replays with --replay "
            f"{journal}) — move it away, or add --force to record over it"
        )
    transport = RecordingTransport()
    http = anthropic.DefaultHttpxClient(transport=transport)
    client = anthropic.Anthropic(api_key=key, http_client=http, **client_options)
    workspace = _live_workspace(args)
    banner = f"recording a live run of {model} to {target}; tools act in {workspace}"
    run = Run(client, Mode.RECORD, args.task, workspace, model, banner, target, transport, script=script)
    # each exchange is appended as it completes (kill -9 loses none); the header is asked for then
    run.journal = Journal(journal, partial(recording_header, run))
    transport.on_exchange = run.journal.append
    return run


def display_name(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except (ValueError, OSError):
        return str(path)


def save_rebuild(run: Run) -> str:
    """Store the requests this run sent as the fixture's recorded requests, in the file `rebuild` named
    (REBUILD_ENV); `rebuild` checks it and only then replaces the fixture."""
    seen, exchanges = run.transport.seen, run.fixture["exchanges"]
    if len(seen) != len(exchanges):
        raise FixtureError(
            f"{run.fixture_path}: the run sent {len(seen)} requests for {len(exchanges)} responses"
        )
    for exchange, body in zip(exchanges, seen):
        exchange["request"] = body
    target = os.environ[REBUILD_ENV]
    write_json(target, run.fixture)
    return f"rebuilt {len(seen)} requests of {run.fixture_path}"
