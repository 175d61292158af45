"""s05_budget.py — Knowing when to stop: limits, a repeat brake, streaming, a Ctrl-C that keeps the work.

Adds over s04: every run ends for a named reason, with a conversation that can be resumed. A Budget
checks --max-steps, --max-tokens-total, --max-input-tokens and --max-cost (from a price table) before
each call; a RepeatGuard refuses the third identical call in a row. Replies stream. A Ctrl-C lets the
running tool finish and answers every call; a second stops at once. The conversation is saved however
the run ends (--resume FILE goes on from it), and a JSON-lines trace survives even kill -9.

    user task, or --resume FILE + a new instruction
        v
    +=================+  a limit reached: stop, named   +----------------------------------------+
    | Budget.exceeded | ------------------------------> | conversation saved (Ctrl-C too); trace |
    +=================+                                 +----------------------------------------+
        v                                                 ^ asked again after a refusal, or Ctrl-C
    +--------------+  stop_reason != tool_use   +------+  |
    | call_model() | -------------------------> | done |  |
    |  (streamed)  |                            +------+  |
    +--------------+     +============================================+
        ^      |-------> | RepeatGuard refuses a 3rd identical call;  | -+
        +--------------- | run_tools(); Ctrl-C answers every call     |
                         +============================================+
Run: python s05_budget.py                       offline replay: a streamed run that ends normally
     python s05_budget.py --replay fixtures/s05_max_steps.json       stopped by --max-steps 3
     python s05_budget.py --replay fixtures/s05_token_budget.json    a cost warning, then the token budget
     python s05_budget.py --replay fixtures/s05_repeated_call.json   the repeat brake
     python s05_budget.py --replay fixtures/s05_interrupt.json       press Ctrl-C during ./slow_check.sh,
     python s05_budget.py --resume FILE                              then go on from the file it saved
     python s05_budget.py "task" --max-cost 0.50                     live, with ANTHROPIC_API_KEY
"""

import json
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

import anthropic
from rich.markup import escape

import replay
import s02_tools as s02
import s03_errors as s03
import s04_parallel as s04
import support
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import SYSTEM, TOOLS, ToolError
from s03_errors import CLIENT_OPTIONS, GaveUp, Retry, fatal_line, status_of

DEFAULT_FIXTURE = "fixtures/s05_streamed.json"


# -- new in s05: limits — steps, tokens, one request's input, estimated cost ------------------------

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
        return sum(row[1] + row[2] for row in self.rows)

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
        last_in, steps = (self.rows[-1][1] if self.rows else 0), len(self.rows)
        reached = [
            (steps >= self.max_steps, f"max steps: {steps} model calls made (--max-steps {self.max_steps})"),
            (
                self.tokens >= self.max_tokens_total,
                f"token budget: {self.tokens:,} tokens in and out (--max-tokens-total {self.max_tokens_total:,})",
            ),
            (
                last_in >= self.max_input_tokens,
                f"input limit: the last request sent {last_in:,} input tokens, the next sends more "
                f"(--max-input-tokens {self.max_input_tokens:,})",
            ),
            (
                self.cost >= self.max_cost,
                f"cost limit: about ${self.cost:.4f} spent (--max-cost ${self.max_cost:g})",
            ),
        ]
        return next((why for hit, why in reached if hit), "")

    def spent(self) -> dict:
        return {"steps": len(self.rows), "tokens": self.tokens, "cost": round(self.cost, 6)}


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


# -- new in s05: a Ctrl-C keeps the work — the running call finishes, every call is answered ----------


class Cancelled(ToolError):
    """A running command stopped by Ctrl-C: s03's execute() turns it into the call's answer."""


def wait_for(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """s03's run_bash waits with this: (stdout, stderr) once the command ends; TimeoutExpired after
    `timeout` s. After a Ctrl-C the command gets INTERRUPT_GRACE seconds more, then its group goes."""
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
                    raise Cancelled(
                        "interrupted by the user: the command was cancelled, its process group killed"
                    ) from None
        except KeyboardInterrupt:  # a second Ctrl-C: the command goes at once, with the run
            os.killpg(process.pid, signal.SIGKILL)
            raise


def bash(workspace: Path, command: str) -> str:
    return s03.run_bash(command, workspace, wait=wait_for)


REGISTRY = s03.REGISTRY | {"bash": replace(s03.REGISTRY["bash"], handler=bash)}  # a bash Ctrl-C can stop


def execute(block, workspace: Path, permission: str = "auto", audit: Path | None = None) -> tuple[str, bool]:
    """s03's execute(); after a Ctrl-C nothing new starts, yet every call still gets its answer."""
    if INTERRUPT.is_set():
        s02.log_call(audit, block, "interrupted", f"{INTERRUPTED}: not run", True, time.monotonic())
        return f"{INTERRUPTED}: not run", True
    return s03.execute(block, workspace, permission, audit, REGISTRY)


def run_tools(blocks: list, workspace: Path, *args, **kwargs) -> list[dict]:
    """s04's run_tools(), each call through this step's execute()."""
    return s04.run_tools(blocks, workspace, *args, execute=execute, **kwargs)


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
        support.console.print(
            "\n[yellow]Ctrl-C:[/] letting the running tool finish, then saving (Ctrl-C again: now)"
        )

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def call_model(client: anthropic.Anthropic, retry: Retry | None, stream: bool = False, **request):
    """s03's call_model(), streamed: the text shows as it comes, a tool call once its input is whole.
    A Ctrl-C meanwhile raises KeyboardInterrupt, and the partial reply is dropped with the stream."""
    return s03.call_model(client, retry, partial(streamed, client) if stream else None, **request)


def streamed(client: anthropic.Anthropic, **request) -> anthropic.types.Message:
    with client.messages.stream(**request) as events:
        for event in events:
            support.show_event(event)
        return events.get_final_message()


def answer_open_calls(messages: list) -> bool:
    """After a stop mid-turn, give every tool_use of the last assistant message an is_error result, so
    that the conversation obeys the API's rules again; whether there were any to answer."""
    last = support.plain(messages[-1]) if messages else {}
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
    support.console.print(f"[bold]stopped:[/] {escape(budget.reason)}", soft_wrap=True)
    support.trace(trace_path, "stop", reason=budget.reason, **budget.spent())
    return turns


def interrupted(messages: list, budget: Budget, trace_path: Path | None) -> None:
    """A Ctrl-C that ended the run at once: answer what was open, and say where it came."""
    if answer_open_calls(messages):
        budget.reason = "interrupted by the user (a second Ctrl-C while tools ran: open calls answered)"
    else:
        budget.reason = "interrupted by the user (during a model call: its partial reply was dropped)"
    stopped([], budget, trace_path)


def failed(budget: Budget, trace_path: Path | None, err: Exception) -> None:
    """A fatal error, the last of the six ways a run ends: named, and kept in the trace."""
    budget.reason = f"fatal error: {fatal_line(err)}"
    cause = err.__cause__ if isinstance(err, GaveUp) else err
    status = status_of(cause) if isinstance(cause, anthropic.APIError) else None
    error = {"status": status, "body": getattr(cause, "body", None), "message": str(err)}
    support.trace(trace_path, "model_call", step=len(budget.rows) + 1, error=error)
    support.trace(trace_path, "stop", reason=budget.reason, **budget.spent())


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
) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or a
    limit, the repeat brake or a Ctrl-C stops it (budget.reason says which). A Ctrl-C during a model
    call raises KeyboardInterrupt, the conversation as it was: main keeps it."""
    turns, guard, logged = [], RepeatGuard(), []  # every response; the repeat brake; what the trace has
    budget, request = budget or Budget(model=model), dict(model=model, system=SYSTEM, tools=TOOLS)
    support.trace_start(trace_path, "s05_budget", dict(request, max_tokens=MAX_TOKENS, stream=stream), budget)
    INTERRUPT.clear()
    while True:
        # 0. (new in s05) Before paying for another call, check every limit: the first one reached
        #    ends the run, and the conversation is whole (it ends on the last turn's tool results).
        budget.reason = budget.exceeded()
        if budget.reason:
            return stopped(turns, budget, trace_path)

        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass, raises what cannot (s03), and streams (s05).
        started = time.monotonic()
        with support.waiting(len(turns) + 1, stream):
            response = call_model(client, retry, stream, messages=messages, max_tokens=MAX_TOKENS, **request)
        turns.append(response)
        support.show_turn(len(turns), response, stream)
        support.show_spend(budget, budget.spend(response))
        logged = support.trace_call(trace_path, len(turns), messages, logged, response, started, budget)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            budget.reason = f"the model ended its turn (stop_reason {response.stop_reason})"
            return stopped(turns, budget, trace_path)

        # 4. Run the tool calls, reads side by side (s04), and answer each id once, in order, in one
        #    user message. (new in s05) The repeat brake answers the calls it holds back; a first
        #    Ctrl-C lets the running call finish, answers the rest as interrupted, and ends the run.
        calls = [block for block in response.content if block.type == "tool_use"]
        timeline, allowed, started = [], guard.screen(calls), time.monotonic()
        with ctrl_c_lets_tools_finish():
            ran = run_tools(allowed, workspace, permission, audit, timeline, read_latency=read_latency)
        results = guard.merge(calls, ran)
        support.show_tools(calls, results, timeline)
        messages.append({"role": "user", "content": results})
        budget.reason = CTRL_C_IN_TOOLS if INTERRUPT.is_set() else guard.stop
        support.trace_tools(trace_path, len(turns), calls, results, started, budget.reason)
        if budget.reason:
            return stopped(turns, budget, trace_path)


# -- new in s05: the command line — limits, a saved conversation to resume, the trace, streaming ----

RESUME_INSTRUCTION = "Continue where you left off."  # what a live --resume adds when given no instruction
RESUME_FIXTURE = "fixtures/s05_resume.json"  # what --resume replays offline


def add_flags(parser) -> None:
    """The limits, --resume, where the conversation and the trace go, and --no-stream."""
    add = parser.add_argument
    add("--max-steps", type=int, default=MAX_STEPS, metavar="N", help=f"model calls (default {MAX_STEPS})")
    add(
        "--max-tokens-total", type=int, default=MAX_TOKENS_TOTAL, metavar="N", help="tokens in + out, the run"
    )
    add(
        "--max-input-tokens",
        type=int,
        default=MAX_INPUT_TOKENS,
        metavar="N",
        help="input tokens, one request",
    )
    add(
        "--max-cost",
        type=float,
        default=MAX_COST,
        metavar="DOLLARS",
        help="dollars, estimated (warned at 80%%)",
    )
    add("--resume", metavar="FILE", help="continue a saved conversation; a task given is the new instruction")
    add("--save", metavar="FILE", help="where to save the conversation (default: beside the audit log)")
    add("--trace", metavar="FILE", help="where to write the JSON-lines trace (default: beside the audit log)")
    add("--no-stream", action="store_true", help="wait for each reply whole, as s01-s04 do")


def resume_mode(args):
    """Offline, --resume replays RESUME_FIXTURE; live with no new instruction, it adds RESUME_INSTRUCTION."""
    if args.resume and not args.replay and not os.environ.get("ANTHROPIC_API_KEY"):
        args.default_fixture = RESUME_FIXTURE
    elif args.resume and not args.replay and not args.task:
        args.task = RESUME_INSTRUCTION
    return args


def first_messages(run: replay.Run, resume: str | None) -> list:
    """The task as the first message; or, with --resume, the saved conversation plus the instruction."""
    if not resume:
        return [{"role": "user", "content": run.task}]
    saved = support.load_conversation(support.repo_path(resume))
    support.say(f"resuming {resume}: {len(saved)} messages, then the task above", "bold")
    return support.replay_leniently_unless_recorded(run, continued(saved, run.task))


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


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    parser = replay.make_parser(__doc__, DEFAULT_FIXTURE)
    for add in (s02.add_flags, s04.add_flags, add_flags):
        add(parser)
    args = resume_mode(parser.parse_args(argv))
    body = lambda run: run_task(run, support.with_fixture_flags(parser, argv, run))  # noqa: E731
    return support.run_step(args, MODEL, "s05_budget", body, **CLIENT_OPTIONS)


def run_task(run: replay.Run, args, loop=agent_loop, script: str = "s05_budget", **options) -> int:
    """Run `loop` (s06 passes its own) with the flags' limits; whatever ends it, keep the conversation."""
    permission, audit, retry, latency = s04.settings(args, run, script[:3])
    trace_path, saved = Path(args.trace or audit.parent / "trace.jsonl"), audit.parent / "conversation.json"
    limits = (args.max_steps, args.max_tokens_total, args.max_input_tokens, args.max_cost)
    messages, budget = first_messages(run, args.resume), Budget(*limits, run.model)
    stream = support.streaming(args, run)
    try:
        loop(
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
            **options,
        )
    except (anthropic.APIError, GaveUp) as err:  # s03: what retrying cannot fix; s05: named in the trace
        failed(budget, trace_path, err)
        return s03.stop_cleanly(err, messages, Path(args.save or saved))
    except KeyboardInterrupt:  # a Ctrl-C during a model call, or a second one: keep the work
        interrupted(messages, budget, trace_path)
    support.show_budget(budget)
    support.say(f"audit log: {audit}; trace: {trace_path}")
    keep(messages, Path(args.save or saved), script)
    return 130 if budget.reason.startswith("interrupted") else 0


def keep(messages: list, path: Path, script: str) -> None:
    """Save the conversation, every tool_use answered, and say how to go on from it."""
    answer_open_calls(messages)
    support.save_conversation(messages, path)
    support.say(f"conversation saved: {path}")
    support.say(f'continue it: python {script}.py --resume {path} "new instruction"')


if __name__ == "__main__":
    sys.exit(main())
