"""s10_trace.py — A trace: every step written down, so that a run replays.

Adds over s09: the trace, one JSON line per event (the run, each model call
with what it added to the conversation, each transition, each turn of tools,
the stop), appended as it happens, so a kill -9 loses nothing written before
it. Any run's trace replays as a fixture: --replay run.jsonl. Your own runs
become lessons. Reading a trace back is the package's, beside the other file
formats: workbook/tracing.py rebuilds each request from the messages logged
before it and the new ones its line holds (trace_to_fixture).

    +--------------------+  every event, as it happens   +==================+
    | s09's loop         | ----------------------------> | trace.jsonl      |
    +--------------------+                               +==================+
                                                              | --replay
                                                              v
                                           the same requests, replayed offline

Run from the root: python -m workbook.later.s10_trace
  (no flags)                  replay: s08's collapse and compaction, traced
  --replay TRACE.jsonl        the trace, replayed
"""

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from workbook import display, launch, step_cli, tracing
from workbook.conversation import context_chars  # the context's size, in characters of JSON
from workbook.later import s08_full_context as s08
from workbook.later import s09_keep_the_work as s09
from workbook.later.s07_really_done import append_reply, run_stop_hook
from workbook.later.s08_full_context import (
    NO_TOOLS,
    call_unless_too_long,
    count,
    count_summary,
    next_transition,
)
from workbook.later.s09_keep_the_work import (
    answer_open_calls,
    first_messages,
    interrupted,
    keep_the_work,
    mark_a_refusal,
    run_tools_until_ctrl_c,
)

import anthropic

import s05_budget as s05
import s06_recovery as s06
from s01_agent_loop import MAX_TOKENS, MODEL
from s03_errors import CLIENT_OPTIONS, FATAL, GaveUp, fatal_line, stop_cleanly
from s05_budget import RepeatBrake

DEFAULT_FIXTURE = "fixtures/s06_collapse_then_compact.json"


# -- new in s10: the trace — one JSON line per event, written as it happens ---------------------------


class Trace:
    """The trace, as the loop writes it: one JSON line per event (the run's start, each model call, each
    turn of tools, the stop), appended as it happens, so a kill -9 loses nothing written before it.
    Trace(None) writes nothing. It remembers the messages its last model_call line sent, so that each
    line logs only what is new."""

    def __init__(self, path: Path | None = None, script: str = ""):
        self.path = path
        self.script = script  # the step that writes it, named on the start line
        self.logged: list = []
        self.sent = 0  # requests sent so far, a 400 answered included: each model_call line its number
        self.shared: dict = {}  # what the start line logged, which a model_call line need not repeat

    def write(self, event: str, **fields) -> None:
        tracing.trace(self.path, event, **fields)

    def start(self, request: dict, budget, **more) -> None:
        """The first line: what every request of the run shares (model, system, tools, max_tokens,
        stream: in `request`, or `more` of it), and the run's limits."""
        request = request | more
        limits = {
            name: getattr(budget, name)
            for name in ("max_steps", "max_tokens_total", "max_input_tokens", "max_cost")
        }
        self.shared = request
        self.write("start", script=self.script, **request, limits=limits)

    def call(self, messages: list, outcome, started: float, budget, **extra) -> None:
        """The line for one model call: what it added to the messages, the reply (or the 400 that took
        its place, s08) and what the run has spent. `extra`: fields of this request (its max_tokens,
        whether it streamed: s06); only those that differ from the start line are logged."""
        if self.path is None:  # no trace file: nothing to write, and no copy of the history to keep
            return
        self.sent += 1  # a 400 in a reply's place, and a summary's request, are calls too
        extra = {k: v for k, v in extra.items() if k not in self.shared or self.shared[k] != v}
        new = self.first_new(messages)
        sent = {"messages_count": len(messages), "new_from": new, "new_messages": messages[new:], **extra}
        spent = {"spent": {"tokens": budget.tokens, "cost": round(budget.cost, 6)}} if budget else {}
        ms = {"ms": round((time.monotonic() - started) * 1000)} if budget else {}
        result = {"error": outcome} if isinstance(outcome, dict) else {"response": outcome}
        self.write("model_call", step=self.sent, request=sent, **result, **ms, **spent)
        self.logged = list(messages)

    def first_new(self, messages: list) -> int:
        """Where `messages` stop being the ones logged last. A loop mostly appends: then every logged
        message is still there, and the new ones start after them. s08's collapse and compaction rewrite
        the history in place: then it is the first message that is not the one logged."""
        known = len(self.logged)
        if messages[:known] == self.logged:
            return known
        return next((i for i, (a, b) in enumerate(zip(self.logged, messages)) if a is not b), known)

    def tools(self, step: int, calls: list, results: list, started: float, stop: str) -> None:
        """The line for one turn's tool calls: what ran, what came back, whether the loop goes on."""
        ran = [result | {"name": block.name, "input": block.input} for block, result in zip(calls, results)]
        ms = round((time.monotonic() - started) * 1000)
        self.write("tools", step=step, results=ran, ms=ms, next="stop" if stop else "continue")

    def error(self, cause: Exception, message: str) -> None:
        """The line for a model call that failed for good: its status and body, when the API sent them."""
        self.sent += 1
        status = getattr(cause, "status_code", None)
        error = {"status": status, "body": getattr(cause, "body", None), "message": message}
        self.write("model_call", step=self.sent, error=error)

    def side_call(self, messages: list, response, **extra) -> None:
        """The line for a call beside the conversation (s08's request for a summary): its messages
        whole, and its reply. The conversation's own lines go on from where they were."""
        logged, self.logged = self.logged, []  # none of its messages was logged: all are new
        self.call(messages, response, 0, None, **extra)
        self.logged = logged

    def stop(self, reason: str, budget) -> None:
        """The last line: why the run ended, and what it spent."""
        spent = {"steps": len(budget.rows), "tokens": budget.tokens, "cost": round(budget.cost, 6)}
        self.write("stop", reason=reason, **spent)


# Each stage of the loop that the trace records, as s05-s09 do it and then written down.
def stopped(settings: "Settings", reason: str) -> None:
    """Unlike s05's: the stop is the trace's last line too."""
    s05.stopped(settings, reason)
    settings.trace.stop(reason, settings.budget)


def failed(settings: "Settings", err: Exception) -> None:
    """A fatal error (s03 says it on screen): the failed call and the stop, as the trace's last lines."""
    cause = err.__cause__ if isinstance(err, GaveUp) else err
    settings.trace.error(cause, str(err))
    settings.budget.reason = f"fatal error: {fatal_line(err)}"
    settings.trace.stop(settings.budget.reason, settings.budget)


def trace_call(settings: "Settings", messages: list, response, started: float, streamed: bool):
    """A model call's line: what was sent, and the reply or the 400 that took its place (max_tokens and
    stream are logged when they differ from the run's: an escalation)."""
    outcome = response or settings.recovery.too_long
    sent = {"max_tokens": settings.recovery.max_tokens, "stream": streamed}
    settings.trace.call(messages, outcome, started, settings.budget, **sent)


def log_transition(transition: str, why: str, settings: "Settings") -> None:
    """Unlike s06's: the transition is written to the trace too."""
    s06.log_transition(transition, why, settings)
    settings.trace.write("transition", name=transition, why=why)


def recover(transition: str, messages: list, response, hook, client, settings: "Settings"):
    """s08's recover, written to the trace: what collapse or compaction made of the context, and the
    compaction's own request and reply (a trace that replays must hold every request)."""
    before = context_chars(messages)
    summary = s08.recover(transition, messages, response, hook, client, settings)
    if context_chars(messages) != before:
        settings.trace.write("context", transition=transition, before=before, after=context_chars(messages))
    if summary is not None:
        settings.trace.side_call(settings.recovery.summarized, summary, tool_choice=NO_TOOLS, stream=False)
    return summary


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s09.Settings):
    """s09's settings, and the trace."""

    trace: Trace = field(default_factory=Trace)  # Trace(None): no trace file

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s09's, and the trace (--trace, or in the run's folder), opened with its `run` line: what a
        replay of the trace needs besides its requests (the task, the workspace, the flags)."""
        settings = super().for_run(run, args)
        trace_file = args.trace or step_cli.run_files(run) / "trace.jsonl"
        settings.trace = Trace(Path(trace_file), run.script)
        settings.trace.write("run", **step_cli.run_line(run, args))
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """s09's loop, every step written to the trace as it happens."""
    turns = []  # every response, in order
    brake = RepeatBrake()  # s05's
    budget = settings.budget
    state = settings.recovery  # what recovery has tried, and its record
    settings.trace.start(settings.shared_request(), budget, max_tokens=MAX_TOKENS, stream=settings.stream)
    while True:
        # 0. Before paying for another call, check every limit (s05).
        reason = budget.exceeded()
        if reason:
            stopped(settings, reason)
            return turns

        # 1. Send the whole history (s06); too long is no crash (s08). (new in s10) Traced, with its time.
        started = time.monotonic()
        streamed = settings.stream or state.max_tokens > MAX_TOKENS  # how call() sends it (s06), traced
        response = call_unless_too_long(client, messages, settings)  # None: too long
        if response is not None:
            count(turns, response, budget)
        trace_call(settings, messages, response, started, streamed)

        # Name the transition (s06, s07, s08), and trace it.
        hook = run_stop_hook(settings, response) if response is not None else None
        transition, why = next_transition(response, state, messages, hook)
        log_transition(transition, why, settings)
        if transition == "fail":  # recovery gave up: the cut reply is not kept, and the run ends (s06)
            stopped(settings, f"recovery gave up: {why}")
            return turns

        # 2. Append the reply verbatim, unless recovery drops it (s06's escalate), or no reply came: the
        #    request was too long (s08's collapse, compact). After a pause it joins the paused turn (s07).
        if transition not in ("escalate", "collapse", "compact"):
            append_reply(messages, response)

        # 3. Any stop but tool_use ends the loop; a repair sends the conversation again (s06).
        if transition == "done":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns
        if transition != "next_turn":
            summary = recover(transition, messages, response, hook, client, settings)
            if summary is not None:  # a compaction's summary is a model call: it costs a step
                count_summary(turns, summary, budget, state.turn)
            continue

        # 4. Run the tool calls as s09 does (a Ctrl-C lets them finish). (new in s10) The turn, traced.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)
        started = time.monotonic()
        results, timeline, ctrl_c = run_tools_until_ctrl_c(calls, settings, held)
        messages.append({"role": "user", "content": results})  # kept first: a Ctrl-C may come any time
        brake.remember(calls, results)
        display.show_tools(calls, results, timeline)
        state.new_turn()  # tools ran: the next call starts a turn with fresh recovery caps (s06)
        stop = ctrl_c or brake.stop  # a Ctrl-C (s09), or s05's repeat brake
        settings.trace.tools(len(turns), calls, results, started, stop)
        if stop:
            stopped(settings, stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s10_trace")  # every earlier step's
    step_cli.add_trace_flag(parser)  # s10's own: --trace; and --replay takes a trace too
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s09's run, traced: however it ends, its last line in the trace says why."""
    settings = Settings.for_run(run, args)  # opens the trace with its run line
    return run_traced(run, args, settings, first_messages(run, args))


def run_traced(run: launch.Run, args, settings: Settings, messages: list) -> int:
    """The loop from `messages`, traced; however it ends, the trace shown, the work kept (s09)."""
    saved = s09.saved_path(run, args)
    try:
        turns = agent_loop(run.client, messages, settings)
        mark_a_refusal(messages, turns[-1] if turns else None)
    except FATAL as err:  # s03: what retrying cannot fix
        failed(settings, err)
        answer_open_calls(messages)  # s09: a resume of the saved conversation must answer every tool_use
        return stop_cleanly(err, messages, saved)
    except KeyboardInterrupt:  # a Ctrl-C during a model call, or a second one while tools ran (s09)
        interrupted(messages, settings)
        settings.trace.stop(settings.budget.reason, settings.budget)
    display.show_trace(settings.trace.path)  # the trace as written, a line an event
    display.say(f"--replay it to run it again, offline:\n  {settings.trace.path}")
    code = keep_the_work(run, messages, settings, saved)
    return 1 if code == 0 and settings.recovery.gave_up() else code


if __name__ == "__main__":
    sys.exit(main())
