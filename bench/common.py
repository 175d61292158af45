"""What every benchmark shares: the repo's steps, a quiet step module, medians, process timing."""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def steps() -> list[str]:
    """The step scripts that exist now (`s[0-9][0-9]_*.py`, by glob, so a new step is picked up)."""
    return sorted(p.stem for p in ROOT.glob("s[0-9][0-9]_*.py"))


def has_step(prefix: str) -> str | None:
    """The module name of the step starting with `prefix` (e.g. "s04"), or None if not written yet."""
    return next((name for name in steps() if name.startswith(prefix + "_")), None)


def load_step(name: str):
    """Import a step script as a module (from the repo root)."""
    return importlib.import_module(name)


def owner(name: str, attr: str):
    """The module whose global `attr` the step `name` really uses: the step itself, else the latest step
    before it that defines (or imports) it. Steps import what they inherit, so s06 runs s03's run_bash."""
    names = steps()
    chain = [load_step(n) for n in reversed(names[: names.index(name) + 1])]
    return next((m for m in chain if attr in vars(m)), chain[0])


def offline_env(**extra) -> dict:
    """A reader's environment with no API key, so every script replays its fixture offline."""
    drop = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MODEL_ID", "WORKBOOK_REBUILD")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"PYTHONIOENCODING": "utf-8", "COLUMNS": "100"} | extra


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


@contextlib.contextmanager
def quiet(module, console_class=None):
    """Swap a step's module-level `console` for one writing to memory: rendering still runs, no terminal."""
    from workbook import display

    from rich.console import Console

    module = display  # every step prints through display.console
    saved = module.console
    module.console = (console_class or Console)(file=io.StringIO(), width=100, force_terminal=False)
    try:
        yield module.console
    finally:
        module.console = saved


@contextlib.contextmanager
def replaced(module, name: str, value):
    """Set `module.name` for the duration (the loop looks its helpers up by global name)."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def last_line(text: str, limit: int = 70) -> str:
    """The last non-empty line of some output, cut to `limit` characters: what a table cell can hold."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def side_by_side(commands: list[list[str]], env: dict, cwd: Path = ROOT) -> list[dict]:
    """Start the commands together (one per core) and time each to its end: its wall and CPU seconds
    (the process and the children it waited for, from os.wait4), peak RSS in MB, exit code and last line
    of output. A slow spell of a shared machine then falls on all of them alike: one after the other, it
    can fall on one of them alone, and by itself decide a ratio of two."""
    with tempfile.TemporaryDirectory(prefix="bench-out-") as tmp:
        outputs = [Path(tmp) / str(i) for i in range(len(commands))]  # a file, not a pipe: none fills up
        start = time.perf_counter()
        procs = []
        for argv, output in zip(commands, outputs):
            with output.open("w") as out:
                procs.append(subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT))

        def reaped(proc: subprocess.Popen) -> dict:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
            return {"wall": time.perf_counter() - start, "cpu": cpu, "peak_mb": usage.ru_maxrss / 1024}

        with ThreadPoolExecutor(len(procs)) as pool:  # each reaped as it ends: its own wall time
            results = list(pool.map(reaped, procs))
        for proc, output, result in zip(procs, outputs, results):
            result |= {"rc": proc.returncode, "last": last_line(output.read_text(errors="replace"))}
    return results


# -- where the time goes: exclusive timing by category -----------------------------------------------

# (category, "module:attribute.path"): the calls timed. A missing one is skipped, so a step that adds
# its own tool runner (s02's execute, s04's run_tools) or streams just adds a line here.
TIMED = [
    ("fixture load", "workbook.launch:load_with_bytes"),
    ("pydantic check", "workbook.api.contract:message_problems"),
    ("contract check", "workbook.replay.fixtures:exchange_problems"),  # a load: validators built + run
    ("workspace copy", "workbook.launch:copy_workspace"),
    ("transport", "workbook.replay.transport:ReplayTransport.__call__"),
    ("SDK", "anthropic._base_client:SyncAPIClient.request"),
    ("SDK", "anthropic.lib.streaming._messages:MessageStream.__iter__"),  # parsing a stream, event by event
    ("SDK", "anthropic.lib.streaming._messages:MessageStream.__next__"),
    ("SDK", "anthropic.lib.streaming._messages:MessageStream.get_final_message"),
    ("tools", "STEP:run_tool"),
    ("tools", "STEP:execute"),
    ("tools", "STEP:run_tools"),
    ("rendering", "rich.console:Console.print"),
    ("rendering", "rich.console:Console.rule"),
    ("spinner", "rich.status:Status.__enter__"),
    ("spinner", "rich.status:Status.__exit__"),
]


class Clock:
    """Exclusive timing by category: time inside a nested timed call goes to the inner category only.

    `timer` is time.perf_counter (wall) by default; time.process_time (this process's CPU, all its
    threads) is steadier on a busy shared machine, where other people's work only inflates wall time.
    """

    def __init__(self, timer=time.perf_counter):
        self.timer = timer
        self.totals: dict[str, float] = {}  # category -> seconds
        self.stack: list[list] = []  # [category, started], innermost last

    def wrap(self, category: str, fn):
        def timed(*args, **kwargs):
            now = self.timer()
            if self.stack:
                self._charge(self.stack[-1], now)
            self.stack.append([category, now])
            try:
                return fn(*args, **kwargs)
            finally:
                now = self.timer()
                self._charge(self.stack.pop(), now)
                if self.stack:
                    self.stack[-1][1] = now

        timed.__wrapped__ = fn
        return timed

    def wrap_iter(self, category: str, fn):
        """Like wrap, for a generator function: the time spent producing each item is charged."""

        def timed(*args, **kwargs):
            step = self.wrap(category, fn(*args, **kwargs).__next__)
            while True:
                try:
                    item = step()
                except StopIteration:
                    return
                yield item

        timed.__wrapped__ = fn
        return timed

    def _charge(self, frame: list, now: float) -> None:
        self.totals[frame[0]] = self.totals.get(frame[0], 0.0) + now - frame[1]
        frame[1] = now


@contextlib.contextmanager
def timing(step_module, targets=TIMED, timer=time.perf_counter):
    """Wrap every target that exists in a Clock for the duration; yield the clock; put them back after."""
    clock, undo = Clock(timer), []
    for category, target in targets:
        module_name, path = target.split(":")
        try:
            owner = step_module if module_name == "STEP" else importlib.import_module(module_name)
            *parents, attr = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
        except (AttributeError, ImportError, KeyError):
            continue
        wrap = clock.wrap_iter if attr == "__iter__" else clock.wrap
        setattr(owner, attr, wrap(category, getattr(owner, attr)))
        undo.append((owner, attr, original))
    try:
        yield clock
    finally:
        for owner, attr, original in reversed(undo):
            setattr(owner, attr, original)


@contextlib.contextmanager
def gc_pauses(timer=time.perf_counter):
    """Yield [seconds the garbage collector ran meanwhile, how many of its runs were full collections]."""
    totals, started = [0.0, 0], [0.0]

    def callback(phase, info):
        if phase == "start":
            started[0] = timer()
        else:
            totals[0] += timer() - started[0]
            totals[1] += info["generation"] == 2

    gc.callbacks.append(callback)
    try:
        yield totals
    finally:
        gc.callbacks.remove(callback)
