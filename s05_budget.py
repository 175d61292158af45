"""s05_budget.py — Knowing when to stop, and never losing the work.

Adds over s04: a Budget checks --max-steps, --max-tokens-total (200,000, as
the article), --max-input-tokens and --max-cost (a dated price table) before
every call. Replies stream. A first Ctrl-C lets this turn's tools finish,
answers every call, saves and stops; a second cuts them short. However the run
ends, the conversation is saved (--resume FILE goes on from it).

    user task, or --resume FILE + a new instruction
        v
    +=================+  a limit is reached  +=============================+
    | Budget.exceeded | -------------------> | stop: the reason named, the |
    +=================+                      | conversation saved, a trace |
        v room for one more call             +=============================+
    +==============+  stop_reason != tool_use   +------+      ^ Ctrl-C while
    | call_model() | -------------------------> | done |      | tools ran:
    |  (streamed)  |                            +------+      | they finish
    +==============+ -- tool_use --> s04's run_tools() -------+-> Budget again

Run: python s05_budget.py   replay: a streamed run that ends normally
     python s05_budget.py --replay fixtures/s05_max_steps.json   a limit hit
     python s05_budget.py --resume FILE   go on from a saved conversation
     python s05_budget.py "task" --max-cost 0.50   live, ANTHROPIC_API_KEY
"""

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from workbook import conversation, display, errors, launch, prices, step_cli, tracing

import anthropic

import s02_tools as s02
import s03_errors as s03
import s04_parallel as s04
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import SYSTEM, TOOLS
from s03_errors import CLIENT_OPTIONS, GaveUp, HarnessError, Retry, fatal_line
from s04_parallel import RepeatGuard, Schedule

DEFAULT_FIXTURE = "fixtures/s05_streamed.json"


# -- new in s05: limits — steps, tokens, one request's input, estimated cost ------------------------

MAX_STEPS = 50  # model calls in one run (--max-steps)
MAX_TOKENS_TOTAL = 200_000  # input + output tokens summed over the run, cached ones included: as the article
MAX_INPUT_TOKENS = 150_000  # one request's input: history only grows, so the next request is larger
MAX_COST = 5.00  # dollars, estimated (--max-cost) from list prices dated prices.PRICES_AS_OF; warned at 80%
COST_WARNING = 0.8
INTERRUPTED = "error: interrupted by the user"  # how every answer to a call cut short by Ctrl-C begins
INTERRUPT = threading.Event()  # set by a first Ctrl-C while tools run: they finish, then the run stops
CTRL_C_IN_TOOLS = "interrupted by the user (Ctrl-C while tools ran: each ran to its end, all answered)"


def tokens_in(usage) -> int:
    """Everything one request sent: uncached input, plus what was written to and read from the cache."""
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return usage.input_tokens + cached


def cost(usage, model: str = MODEL) -> float:
    """Estimated dollars for one response, from the price table (workbook/prices.py, dated): plain input;
    cache writes by how long they are kept (5 minutes or 1 hour), cache reads; output; web searches."""
    price_in, price_out = prices.PRICES.get(model, prices.PRICES[MODEL])
    split = usage.cache_creation  # None from an API or fixture that does not split: all 5-minute writes
    hour = (split.ephemeral_1h_input_tokens or 0) if split else 0
    minutes = (usage.cache_creation_input_tokens or 0) - hour
    weighted_in = usage.input_tokens + minutes * prices.CACHE_WRITE_5M + hour * prices.CACHE_WRITE_1H
    weighted_in += (usage.cache_read_input_tokens or 0) * prices.CACHE_READ
    searches = (usage.server_tool_use.web_search_requests or 0) if usage.server_tool_use else 0
    return (
        weighted_in * price_in + usage.output_tokens * price_out
    ) / 1_000_000 + searches * prices.WEB_SEARCH


@dataclass
class Budget:
    """The run's limits and what it has spent so far; checked before every model call."""

    max_steps: int = MAX_STEPS
    max_tokens_total: int = MAX_TOKENS_TOTAL
    max_input_tokens: int = MAX_INPUT_TOKENS
    max_cost: float = MAX_COST
    model: str = MODEL
    rows: list = field(default_factory=list)  # per model call: (stop_reason, tokens in, tokens out, dollars)
    tokens: int = 0  # in and out, over the run so far (kept as it goes: the rows only grow)
    cost: float = 0.0  # dollars, estimated, over the run so far
    warned: bool = False
    reason: str = (
        ""  # why the run ended, whatever ended it (a limit, the model, the brake, Ctrl-C): stopped()
    )

    def spend(self, response) -> str | None:
        """Count one response; the first time the cost passes COST_WARNING of the cap, say so."""
        usage = response.usage
        row = (response.stop_reason, tokens_in(usage), usage.output_tokens, cost(usage, self.model))
        self.rows.append(row)
        self.tokens, self.cost = self.tokens + row[1] + row[2], self.cost + row[3]
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
            return (
                f"input limit: the last request sent {last_in:,} input tokens, the next sends more "
                f"(--max-input-tokens {self.max_input_tokens:,})"
            )
        if self.cost >= self.max_cost:
            return f"cost limit: about ${self.cost:.4f} spent (--max-cost ${self.max_cost:g})"
        return ""

    def spent(self) -> dict:
        return {"steps": len(self.rows), "tokens": self.tokens, "cost": round(self.cost, 6)}


# -- new in s05: a Ctrl-C keeps the work — the turn's tools finish, every call is answered ------------


def wait_for(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """s03's run_bash waits with this. A first Ctrl-C changes nothing here: the command runs to its end
    (or its own timeout). A second raises KeyboardInterrupt, and the command's process group goes too."""
    try:
        return process.communicate(timeout=timeout)
    except KeyboardInterrupt:  # a second Ctrl-C: the command goes at once, with the run
        os.killpg(process.pid, signal.SIGKILL)
        raise


def bash(workspace: Path, command: str) -> str:
    return s03.run_bash(command, workspace, wait=wait_for)


REGISTRY = s03.REGISTRY | {"bash": replace(s03.REGISTRY["bash"], handler=bash)}  # a bash Ctrl-C can stop


def execute(block, workspace: Path, permission: str = "auto", audit: Path | None = None) -> tuple[str, bool]:
    """s03's execute(), with the bash that a second Ctrl-C stops."""
    return s03.execute(block, workspace, permission, audit, REGISTRY)


def run_tools(blocks: list, workspace: Path, *args, **kwargs) -> list[dict]:
    """s04's run_tools(), each call through this step's execute()."""
    return s04.run_tools(blocks, workspace, *args, execute=execute, **kwargs)


@contextmanager
def ctrl_c_lets_tools_finish():
    """While tools run, a first Ctrl-C only sets INTERRUPT: every call of this turn still runs to its
    end, each within its own timeout (the state stays whole: no half-run turn), every call is answered,
    and the loop stops after the turn, the work saved. A second Ctrl-C raises KeyboardInterrupt at once."""
    INTERRUPT.clear()  # a new turn of tools: no Ctrl-C yet
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals; elsewhere Ctrl-C keeps its default
        return
    previous = signal.signal(signal.SIGINT, first_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def first_ctrl_c(signum, frame) -> None:
    if INTERRUPT.is_set():
        raise KeyboardInterrupt
    INTERRUPT.set()
    display.say(
        "\nCtrl-C: this turn's tools run to their end, then the work is saved (Ctrl-C again: now)", "yellow"
    )


def call_model(client: anthropic.Anthropic, retry: Retry | None, stream: bool = False, **request):
    """s03's call_model(), streamed: the text shows as it comes, a tool call once its input is whole.
    A Ctrl-C meanwhile raises KeyboardInterrupt, and the partial reply is dropped with the stream."""
    return s03.call_model(client, retry, partial(streamed, client) if stream else None, **request)


def streamed(client: anthropic.Anthropic, **request) -> anthropic.types.Message:
    with client.messages.stream(**request) as events:
        for event in events:
            display.show_event(event)
        return events.get_final_message()


def answer_open_calls(messages: list) -> bool:
    """After a stop mid-turn, give every tool_use of the last assistant message an is_error result, so
    that the conversation obeys the API's rules again; whether there were any to answer."""
    last = conversation.plain(messages[-1]) if messages else {}
    asked = [b["id"] for b in last.get("content", []) if isinstance(b, dict) and b.get("type") == "tool_use"]
    if last.get("role") != "assistant" or not asked:
        return False
    note = f"{INTERRUPTED}: stopped before it had a result"
    messages.append({"role": "user", "content": [conversation.tool_result(i, note, True) for i in asked]})
    return True


def start_trace(
    path: Path | None, script: str, request: dict, stream: bool, budget: Budget, about=None
) -> None:
    """The trace's first line: what every request of the run shares (`request`: model, system, tools),
    and the run's limits."""
    shared = request | dict(max_tokens=MAX_TOKENS, stream=stream)
    tracing.trace_start(path, script, shared, budget, about)


def stopped(turns: list, budget: Budget, trace_path: Path | None, reason: str = "") -> list:
    """The end of a run, whatever ended it: the reason on screen and as the trace's last line."""
    budget.reason = reason or budget.reason
    display.say(f"stopped: {budget.reason}", "bold")
    tracing.trace(trace_path, "stop", reason=budget.reason, **budget.spent())
    return turns


def interrupted(messages: list, budget: Budget, trace_path: Path | None) -> None:
    """A Ctrl-C that ended the run at once: answer what was open, and say where it came."""
    where = "a second Ctrl-C while tools ran: open calls answered"
    where = where if answer_open_calls(messages) else "during a model call: its partial reply was dropped"
    stopped([], budget, trace_path, f"interrupted by the user ({where})")


def failed(budget: Budget, trace_path: Path | None, err: Exception) -> None:
    """A fatal error, the last of the six ways a run ends: named, and kept in the trace."""
    budget.reason = f"fatal error: {fatal_line(err)}"
    cause = err.__cause__ if isinstance(err, GaveUp) else err
    tracing.trace_error(trace_path, len(budget.rows) + 1, cause, str(err))
    tracing.trace(trace_path, "stop", reason=budget.reason, **budget.spent())


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
    system: str = SYSTEM,  # s02: the constitution, built for this run (system_for)
) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or a
    limit, the repeat brake or a Ctrl-C stops it (budget.reason says which). A Ctrl-C during a model
    call raises KeyboardInterrupt, the conversation as it was: main keeps it."""
    turns, guard, trace = [], RepeatGuard(), tracing.Trace(trace_path)  # responses; the brake; the trace
    budget, request = budget or Budget(model=model), dict(model=model, system=system, tools=TOOLS)
    start_trace(trace_path, "s05_budget", request, stream, budget)
    while True:
        # 0. (new in s05) Before paying for another call, check every limit: the first one reached
        #    ends the run, and the conversation is whole (it ends on the last turn's tool results).
        if budget.exceeded():
            return stopped(turns, budget, trace_path, budget.exceeded())

        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass, raises what cannot (s03), and streams (s05).
        started = time.monotonic()
        with display.waiting(len(turns) + 1, stream):
            response = call_model(client, retry, stream, messages=messages, max_tokens=MAX_TOKENS, **request)
        turns.append(response)
        display.show_turn(len(turns), response, stream)
        display.show_spend(budget, budget.spend(response))
        trace.call(len(turns), messages, response, started, budget)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return stopped(
                turns, budget, trace_path, f"the model ended its turn (stop_reason {response.stop_reason})"
            )

        # 4. Run the tool calls as s04 does: reads side by side, the repeat brake, each id answered once,
        #    in order, in one user message. (new in s05) A first Ctrl-C lets every call of this turn
        #    run to its end, and ends the run after it; a second cuts them short (main answers them).
        calls = [block for block in response.content if block.type == "tool_use"]
        schedule, allowed, started = Schedule(read_latency), guard.screen(calls), time.monotonic()
        with ctrl_c_lets_tools_finish():
            ran = run_tools(allowed, workspace, permission, audit, schedule)
        results = guard.merge(calls, ran)
        display.show_tools(calls, results, schedule.timeline)
        messages.append({"role": "user", "content": results})
        stop = CTRL_C_IN_TOOLS if INTERRUPT.is_set() else guard.stop  # a Ctrl-C, or s04's repeat brake
        trace.tools(len(turns), calls, results, started, stop)
        if stop:
            return stopped(turns, budget, trace_path, stop)


# -- new in s05: the command line — limits, a saved conversation to resume, the trace, streaming ----

RESUME_INSTRUCTION = "Continue where you left off."  # what a live --resume adds when given no instruction
RESUME_FIXTURE = "fixtures/s05_resume.json"  # what --resume replays offline


def first_messages(run: launch.Run, resume: str | None) -> list:
    """The task as the first message; or, with --resume, the saved conversation plus the instruction."""
    if not resume:
        return [{"role": "user", "content": run.task}]
    saved, refused = conversation.resumable(conversation.load_conversation(conversation.repo_path(resume)))
    then = refused or "then the task above"
    display.say(f"resuming {len(saved)} saved messages; {then}, from\n  {resume}", "bold")
    return conversation.replay_leniently_unless_recorded(run, continued(saved, run.task))


def continued(messages: list, instruction: str) -> list:
    """A saved conversation with the user's new instruction added, ready to send."""
    if messages[-1]["role"] == "user":  # it ends on tool results (a stop mid-task): the text goes after
        content = messages[-1]["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        extra = [{"type": "text", "text": instruction}] if instruction else []
        return messages[:-1] + [{"role": "user", "content": content + extra}]
    if not instruction:
        raise errors.WorkbookError("the conversation ended with the model's answer: give a new instruction")
    return messages + [{"role": "user", "content": instruction}]


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE)
    step_cli.add_permission_flag(parser, s02.PERMISSIONS)
    step_cli.add_latency_flag(parser)
    step_cli.add_budget_flags(parser, Budget())
    flags = step_cli.Flags(parser, argv)  # in replay, the fixture's own flags apply too
    args = step_cli.resume_mode(flags.parse(), RESUME_FIXTURE, RESUME_INSTRUCTION)
    return step_cli.run_step(args, MODEL, "s05_budget", run_task, flags, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args, loop=agent_loop, script: str = "s05_budget", **options) -> int:
    """Run `loop` (s06 passes its own) within the flags' limits; whatever ends it, keep the conversation."""
    settings = step_cli.settings(args, run, script[:3], s03.retry_policy(run))
    trace_path = Path(args.trace or settings.folder / "trace.jsonl")
    saved = Path(args.save or settings.folder / "conversation.json")
    budget = Budget(args.max_steps, args.max_tokens_total, args.max_input_tokens, args.max_cost, run.model)
    messages = first_messages(run, args.resume)
    try:
        loop(
            run.client,
            messages,
            run.workspace,
            run.model,
            **settings.for_the_loop(),
            budget=budget,
            trace_path=trace_path,
            stream=step_cli.streaming(args, run),
            system=s02.system_for(run),
            **options,
        )
    except (anthropic.APIError, GaveUp, HarnessError) as err:  # s03: what retrying cannot fix
        failed(budget, trace_path, err)
        return s03.stop_cleanly(err, messages, saved)
    except KeyboardInterrupt:  # a Ctrl-C during a model call, or a second one: keep the work
        interrupted(messages, budget, trace_path)
    display.show_budget(budget)
    answer_open_calls(messages)  # a conversation to resume must answer every tool_use
    conversation.save_conversation(messages, saved)
    display.say(f"audit log: {settings.audit}\ntrace: {trace_path}\nconversation saved: {saved}")
    display.say("\n".join(step_cli.resume_hint(script, saved, RESUME_FIXTURE)))
    return 130 if budget.reason.startswith("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
