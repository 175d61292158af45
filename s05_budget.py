"""s05_budget.py — Knowing when to stop, and never losing the work.

Adds over s04: a Budget checks --max-steps, --max-tokens-total (200,000, as
the article), --max-input-tokens and --max-cost (a dated price table) before
every call. Replies stream. A first Ctrl-C lets this turn's tools finish,
answers every call, saves and stops; a second cuts short the calls still open.
However the run ends, the conversation is saved: --resume FILE goes on from
it; --handoff FILE starts a fresh session from its task and what it did.

    user task, --resume FILE + a new instruction, or --handoff FILE
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
     python s05_budget.py --handoff FILE   start afresh from what it did
     python s05_budget.py "task" --max-cost 0.50   live, ANTHROPIC_API_KEY
"""

import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple, Self

from workbook import conversation, display, errors, launch, prices, step_cli, tracing
from workbook.conversation import tool_result  # {"type": "tool_result", "tool_use_id": ..., ...}

import anthropic
from anthropic.types import Message

import s03_errors as s03
import s04_parallel as s04
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import TOOLS
from s03_errors import CLIENT_OPTIONS, FATAL, GaveUp, call_model, fatal_line, stop_cleanly
from s04_parallel import RepeatBrake, run_tools

DEFAULT_FIXTURE = "fixtures/s05_streamed.json"


# -- new in s05: limits — steps, tokens, one request's input, estimated cost ------------------------

MAX_STEPS = 50  # model calls in one run (--max-steps)
MAX_TOKENS_TOTAL = 200_000  # input + output tokens summed over the run, cached ones included: as the article
MAX_INPUT_TOKENS = 150_000  # one request's input: history only grows, so the next request is larger
MAX_COST = 5.00  # dollars, estimated (--max-cost) from list prices dated prices.PRICES_AS_OF; warned at 80%
COST_WARNING = 0.8


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
    tokens = weighted_in * price_in + usage.output_tokens * price_out
    return tokens / 1_000_000 + searches * prices.WEB_SEARCH


class Row(NamedTuple):
    """One model call in the run's account."""

    stop_reason: str
    tokens_in: int
    tokens_out: int
    dollars: float


@dataclass
class Budget:
    """The run's limits and what it has spent so far; checked before every model call."""

    max_steps: int = MAX_STEPS
    max_tokens_total: int = MAX_TOKENS_TOTAL
    max_input_tokens: int = MAX_INPUT_TOKENS
    max_cost: float = MAX_COST
    rows: list[Row] = field(default_factory=list)  # one per model call
    tokens: int = 0  # in and out, over the run so far (kept as it goes: the rows only grow)
    cost: float = 0.0  # dollars, estimated, over the run so far
    warned: bool = False
    reason: str = ""  # why the run ended, whatever ended it (a limit, the model, the brake, Ctrl-C)

    def spend(self, response: Message) -> str | None:
        """Count one response; the first time the cost passes COST_WARNING of the cap, say so."""
        sent = tokens_in(response.usage)
        received = response.usage.output_tokens
        dollars = cost(response.usage, response.model)
        self.rows.append(Row(response.stop_reason, sent, received, dollars))
        self.tokens += sent + received
        self.cost += dollars
        if self.warned or self.cost < COST_WARNING * self.max_cost:
            return None
        self.warned = True
        return (
            f"about ${self.cost:.4f} spent, {self.cost / self.max_cost:.0%} of --max-cost ${self.max_cost:g}"
        )

    def exceeded(self) -> str:
        """The first limit reached, named with its flag; "" while there is room for another call."""
        if len(self.rows) >= self.max_steps:
            return f"max steps: {len(self.rows)} model calls made (--max-steps {self.max_steps})"
        if self.tokens >= self.max_tokens_total:
            limit = f"--max-tokens-total {self.max_tokens_total:,}"
            return f"token budget: {self.tokens:,} tokens in and out ({limit})"
        too_large = self.input_limit()
        if too_large:
            return too_large
        if self.cost >= self.max_cost:
            return f"cost limit: about ${self.cost:.4f} spent (--max-cost ${self.max_cost:g})"
        return ""

    def input_limit(self) -> str:
        """--max-input-tokens, judged by the last request: history only grows, so the next sends more."""
        last_in = self.rows[-1].tokens_in if self.rows else 0
        if last_in < self.max_input_tokens:
            return ""
        return (
            f"input limit: the last request sent {last_in:,} input tokens, the next sends more "
            f"(--max-input-tokens {self.max_input_tokens:,})"
        )

    def spent(self) -> dict:
        return {"steps": len(self.rows), "tokens": self.tokens, "cost": round(self.cost, 6)}


# -- new in s05: replies stream — the text shows as it comes ------------------------------------------


def stream_reply(client: anthropic.Anthropic, **request) -> Message:
    """The reply, streamed: its text shows as it comes, a tool call once its input is whole (with its
    result). A Ctrl-C meanwhile raises KeyboardInterrupt, and the partial reply goes with the stream."""
    with client.messages.stream(**request) as events:
        for event in events:
            display.show_event(event)
        return events.get_final_message()


class Retry(s03.Retry):
    """Unlike s03's: an `error` event inside a streamed reply (HTTP said 200 before it began) is
    retried when it is one that may pass, overloaded or a server error, as a 529 or a 500 would be."""

    def reason(self, err: anthropic.APIError) -> str | None:
        if s03.status_of(err) != 200:
            return super().reason(err)
        body = err.body if isinstance(err.body, dict) else {}
        kind = (body.get("error") or {}).get("type")
        return "an error inside the stream" if kind in ("overloaded_error", "api_error") else None


# -- new in s05: a Ctrl-C keeps the work — the turn's tools finish, every call is answered ------------

INTERRUPTED = "error: interrupted by the user"  # how every answer to a call cut short by Ctrl-C begins
STILL_OPEN = f"{INTERRUPTED}: stopped before it had a result"  # the answer to a call that had not ended
INTERRUPT = threading.Event()  # set by a first Ctrl-C while tools run: they finish, then the run stops
CTRL_C_IN_TOOLS = "interrupted by the user (Ctrl-C while tools ran: each ran to its end, all answered)"
CTRL_C_TWICE = (
    "interrupted by the user (a second Ctrl-C while tools ran: the {} of {} calls that had ended "
    "keep their results)"
)


@contextmanager
def ctrl_c_lets_tools_finish():
    """While tools run, a first Ctrl-C only sets INTERRUPT: every call of this turn still runs to its
    end, each within its own timeout (each command has a process group of its own, which the terminal's
    Ctrl-C does not reach), every call is answered, and the loop stops after the turn, the work saved.
    A second Ctrl-C raises KeyboardInterrupt at once, and the running command's group ends with it
    (run_tools_until_ctrl_c keeps what had ended)."""
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


def run_tools_until_ctrl_c(calls: list, settings: "Settings", held: dict) -> tuple[list, list, str]:
    """s04's run_tools (with the repeat brake's answers, `held`), under Ctrl-C: (results, timeline, why a
    Ctrl-C stops the run, or ""). After a first Ctrl-C every call runs to its end. A second cuts the turn
    short at once: each call that had ended keeps its real result, and only those still open are
    answered as interrupted, so that the model is never told that a command which ran did not."""
    answers = {block_id: (error, True) for block_id, error in held.items()}  # run_tools adds each as it ends
    with ctrl_c_lets_tools_finish():
        try:
            results, timeline = run_tools(calls, settings, answers)
            return results, timeline, CTRL_C_IN_TOOLS if INTERRUPT.is_set() else ""
        except KeyboardInterrupt:  # the second Ctrl-C: the running command's group has ended with it
            ended = dict(answers)  # as it is now (a read the thread pool ends later is not counted)
    results = [tool_result(block.id, *ended.get(block.id, (STILL_OPEN, True))) for block in calls]
    return results, [], CTRL_C_TWICE.format(len(ended), len(calls))


def answer_open_calls(messages: list) -> bool:
    """After a stop mid-turn, give every tool_use of the last assistant message an is_error result, so
    that the conversation obeys the API's rules again; whether there were any to answer."""
    last = conversation.plain(messages[-1]) if messages else {}
    asked = [b["id"] for b in last.get("content", []) if isinstance(b, dict) and b.get("type") == "tool_use"]
    if last.get("role") != "assistant" or not asked:
        return False
    messages.append({"role": "user", "content": [tool_result(i, STILL_OPEN, True) for i in asked]})
    return True


# -- new in s05: every way a run ends is named, on screen and as the trace's last line ----------------


def stopped(settings: "Settings", reason: str) -> None:
    """The end of a run, whatever ended it: the reason on screen, in the budget, and in the trace."""
    settings.budget.reason = reason
    display.show_stop(reason)
    settings.trace.stop(reason, settings.budget)


def interrupted(messages: list, settings: "Settings") -> None:
    """A Ctrl-C that ended the run at once: answer the calls still open, and say where it came."""
    if answer_open_calls(messages):
        where = "a Ctrl-C before the turn's results were kept: its calls answered as interrupted"
    else:
        where = "during a model call: its partial reply was dropped"
    stopped(settings, f"interrupted by the user ({where})")


def failed(settings: "Settings", err: Exception) -> None:
    """A fatal error (s03 says it on screen): the failed call and the stop, as the trace's last lines."""
    cause = err.__cause__ if isinstance(err, GaveUp) else err
    settings.trace.error(len(settings.budget.rows) + 1, cause, str(err))
    settings.budget.reason = f"fatal error: {fatal_line(err)}"
    settings.trace.stop(settings.budget.reason, settings.budget)


# -- new in s05: --resume — a saved conversation, and a new instruction after it ----------------------


def first_messages(run: launch.Run, args) -> list:
    """The task as the first message; or, with --resume, the saved conversation plus the instruction;
    or, with --handoff, a fresh session from it."""
    if args.handoff:
        return handed_off(run, args.handoff)
    resume = args.resume
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


# -- new in s05: --handoff — a run that drifted starts afresh, from its task and what it did ------------

HANDOFF = (
    "[A fresh session. An earlier session on this task drifted and was stopped. What it did, as "
    "the harness read it from that session's tool calls and results (check the files as they are "
    "now before you rely on it):]"
)


def handed_off(run: launch.Run, path: str) -> list:
    """A new conversation of one message: the saved conversation's task, what it did (the harness reads
    that from its tool calls; the model's own account is what drifted), and the instruction, if any."""
    saved = conversation.load_conversation(conversation.repo_path(path))
    task = conversation.first_text(saved).split(HANDOFF)[0].strip()  # a handoff of a handoff: the task
    opening = "\n\n".join(part for part in (task, HANDOFF, conversation.what_it_did(saved), run.task) if part)
    display.show_handoff(path, len(saved), opening)
    return conversation.replay_leniently_unless_recorded(run, [{"role": "user", "content": opening}])


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s04.Settings):
    """s04's settings, and what s05 adds: the run's limits and what it has spent, the trace, streaming;
    and a retry layer that also retries an error inside a stream."""

    retry: Retry = field(default_factory=Retry)
    budget: Budget = field(default_factory=Budget)
    trace: tracing.Trace = field(default_factory=tracing.Trace)  # Trace(None): no trace file
    stream: bool = True  # False: wait for each reply whole, as s01-s04 do (--no-stream)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s04's, with the limits the flags set, a trace file (--trace, or in the run's folder), and
        streaming unless --no-stream or a replayed fixture was recorded without it."""
        settings = super().for_run(run, args)
        settings.retry = Retry.for_run(run)
        settings.budget = Budget(**step_cli.limits(args))
        trace_file = args.trace or step_cli.run_files(run) / "trace.jsonl"
        settings.trace = tracing.Trace(Path(trace_file), run.script)
        settings.stream = step_cli.streaming(args, run)
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or a
    limit, the repeat brake or a Ctrl-C stops it (settings.budget.reason says which). A Ctrl-C during
    a model call raises KeyboardInterrupt, the conversation as it was: run_task keeps it."""
    turns = []  # every response, in order
    brake = RepeatBrake()  # s04's
    budget = settings.budget
    request = dict(model=settings.model, system=settings.system, tools=TOOLS, max_tokens=MAX_TOKENS)
    send = partial(stream_reply, client) if settings.stream else client.messages.create
    settings.trace.start(request | {"stream": settings.stream}, budget)
    while True:
        # 0. (new in s05) Before paying for another call, check every limit: the first one reached
        #    ends the run, and the conversation is whole (it ends on the last turn's tool results).
        reason = budget.exceeded()
        if reason:
            stopped(settings, reason)
            return turns

        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass, raises what cannot (s03); (new in s05) it streams.
        started = time.monotonic()
        with display.waiting(len(turns) + 1, settings.stream):
            response = call_model(send, settings.retry, messages=messages, **request)
        turns.append(response)
        display.show_turn(len(turns), response, settings.stream)
        display.show_spend(budget, budget.spend(response))
        settings.trace.call(len(turns), messages, response, started, budget)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns

        # 4. Run the tool calls as s04 does: reads side by side, the repeat brake, each id answered once,
        #    in order, in one user message. (new in s05) A first Ctrl-C lets every call of this turn
        #    run to its end, and ends the run after it; a second cuts short the calls still open.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)
        started = time.monotonic()
        results, timeline, ctrl_c = run_tools_until_ctrl_c(calls, settings, held)
        messages.append({"role": "user", "content": results})  # kept first: a Ctrl-C may come any time
        brake.remember(results)
        display.show_tools(calls, results, timeline)
        stop = ctrl_c or brake.stop  # a Ctrl-C, or s04's repeat brake
        settings.trace.tools(len(turns), calls, results, started, stop)
        if stop:
            stopped(settings, stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s05_budget")  # s02's and s04's flags too
    step_cli.add_budget_flags(parser)  # s05's own: the limits, --resume, --save, --trace, --no-stream
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """The loop within this run's limits; however it ends, the conversation is saved, to resume."""
    settings = Settings.for_run(run, args)
    messages = first_messages(run, args)
    saved = saved_path(run, args)
    try:
        agent_loop(run.client, messages, settings)
    except FATAL as err:  # s03: what retrying cannot fix
        failed(settings, err)
        return stop_cleanly(err, messages, saved)
    except KeyboardInterrupt:  # a Ctrl-C during a model call, or a second one while tools ran
        interrupted(messages, settings)
    return keep_the_work(run, messages, settings, saved)


def saved_path(run: launch.Run, args) -> Path:
    """Where the conversation is saved: --save, or the run's folder."""
    return Path(args.save or step_cli.run_files(run) / "conversation.json")


def keep_the_work(run: launch.Run, messages: list, settings: Settings, saved: Path) -> int:
    """However the run ended: the summary, every open call answered, the conversation saved, and how
    to go on from it. Exit code 130 if a Ctrl-C ended it, else 0."""
    display.show_budget(settings.budget)
    answer_open_calls(messages)  # a conversation to resume must answer every tool_use
    conversation.save_conversation(messages, saved)
    display.say(f"audit log: {settings.audit}\ntrace: {settings.trace.path}\nconversation saved: {saved}")
    display.say("\n".join(step_cli.resume_hint(run.script, saved)))
    return 130 if settings.budget.reason.startswith("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
