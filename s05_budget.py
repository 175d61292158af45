"""s05_budget.py — Knowing when to stop.

Adds over s04 two ways to stop, each stop named and the conversation saved:
- limits, a Budget checked before every call: --max-steps, --max-tokens-total
  (200,000 by default), --max-input-tokens and --max-cost (estimated from a
  dated price table);
- a repeat brake on a model going round in circles. It answers a call with
  an error instead of running it when the call is the third in a row with
  the same input and the same result, or when it redoes a change to a file
  just undone (A→B, B→A, then A→B); asked for again at once, it stops the
  run.

    user task
        v
    +=================+  a limit is reached  +=============================+
    | Budget.exceeded | -------------------> | stop: the reason named, the |
    +=================+                      | conversation saved          |
        v room for one more call             +=============================+
    +--------------+  stop_reason != tool_use   +------+            ^
    | call_model() | -------------------------> | done |            |
    +--------------+                            +------+            |
        ^      | tool_use                               asked again |
        |      v                                                    |
        |  +================================================+       |
        +--| RepeatBrake: a third identical call, or a file |-------+
           | flipped back, is answered, not run             |
           +================================================+

Run: python s05_budget.py   replay: a third same read held back; --max-steps 5
     python s05_budget.py --replay fixtures/s05_token_budget.json
     python s05_budget.py --replay fixtures/s04_repeated_call.json
     python s05_budget.py --replay fixtures/s04_edit_flip_flop.json   circles
     python s05_budget.py "task" --max-cost 0.50   live, ANTHROPIC_API_KEY
"""

import json
import sys
import time
from dataclasses import dataclass, field
from typing import NamedTuple, Self

from workbook import conversation, display, launch, step_cli
from workbook.audit import log_call  # s02's audit log: one JSON line per call
from workbook.prices import cost  # a response's dollars, estimated from a dated table of list prices

import anthropic
from anthropic.types import Message

import s04_parallel as s04
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import TOOLS
from s03_errors import CLIENT_OPTIONS, FATAL, call_model, stop_cleanly

DEFAULT_FIXTURE = "fixtures/s05_brake_then_limit.json"


# -- new in s05: limits — steps, tokens, one request's input, estimated cost ------------------------

MAX_STEPS = 50  # model calls in one run (--max-steps)
MAX_TOKENS_TOTAL = 200_000  # input + output tokens over the run, cached ones included (docs/articles.md)
MAX_INPUT_TOKENS = 150_000  # one request's input: history only grows, so the next request is larger
MAX_COST = 5.00  # dollars, estimated from list prices (--max-cost); warned at 80%
COST_WARNING = 0.8


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
    reason: str = ""  # why the run ended, whatever ended it (a limit, the model, the brake)

    def spend(self, response: Message) -> str | None:
        """Count one response; the first time the cost passes COST_WARNING of the cap, say so."""
        usage = response.usage
        cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
        sent = usage.input_tokens + cached  # the whole input: tokens the API's cache held were sent too
        received = usage.output_tokens
        dollars = cost(usage, response.model)
        self.rows.append(Row(response.stop_reason, sent, received, dollars))
        self.tokens += sent + received
        self.cost += dollars
        if self.warned or self.cost < COST_WARNING * self.max_cost:
            return None
        self.warned = True
        share = self.cost / self.max_cost
        return f"about ${self.cost:.4f} spent, {share:.0%} of --max-cost ${self.max_cost:g}"

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


# -- new in s05: the repeat brake — a model going round in circles is held back, then stopped --------

REPEAT_LIMIT = 3  # the same call (tool, input, result) this many times in a row: the last one is held back
IN_CIRCLES = {  # the answer to a change that redoes one already undone, by tool
    "edit_file": "error: not run: this edit redoes one you already undid (A→B, then B→A, now A→B again): "
    "the edits are going in circles. Decide which version is right, say why, and stop editing it.",
    "write_file": "error: not run: this write redoes one you already undid (you wrote A, B, then A, and now "
    "B again): the writes are going in circles. Decide which version is right, say why, and stop writing it.",
}


@dataclass
class RepeatBrake:
    """Holds a call back (answers it with an error asking for another approach; it never runs) when the
    model is going round in circles, by one of two rules:

    repeats()      the same call again, when its last REPEAT_LIMIT - 1 runs gave one same result
                       read_file config.toml -> "port = 80"     runs
                       read_file config.toml -> "port = 80"     runs
                       read_file config.toml                    held back
    flips_back()   a change to a file that redoes the change just undone
                       edit utils.py  A -> B                    runs
                       edit utils.py  B -> A                    runs: one undo is a change of mind
                       edit utils.py  A -> B                    held back

    If the model's very next call is the one just held back, in this turn or the next, the run stops.
    The brake judges the calls alone, never the files.
    """

    ran: list[tuple[str, str]] = field(default_factory=list)  # the latest calls, (call, what it gave)
    changes: dict[tuple, list] = field(default_factory=dict)  # (tool, path) -> its last two changes
    held: str = ""  # the call just held back, until the model asks for another
    stop: str = ""  # why the run stops, once the model asks again for the call held back

    def hold_back(self, calls: list) -> dict[str, str]:
        """The answers to the calls this brake holds back, by tool_use id; the others may run."""
        held = {}
        for block in calls:
            answer = self.answer(block)
            if answer:
                held[block.id] = answer
        return held

    def answer(self, block) -> str | None:
        """None to let this call run, or the error that answers it instead."""
        call = as_call(block)
        if call == self.held:  # held back, and asked for again at once
            self.stop = f"repeated call: {call[:80]} asked for again after it was refused"
            return "error: not run: refused again, so this run stops here."
        self.held = ""
        if self.repeats(call):
            self.held = call
            return (
                f"error: not run: this is the same {block.name} call with the same input "
                f"{REPEAT_LIMIT} times in a row, and it gave the same result each time, so another gives "
                "nothing new. Change approach: other input, another tool, or stop and report what you found."
            )
        if self.flips_back(block):
            self.held = call
            return IN_CIRCLES[block.name]
        return None

    def repeats(self, call: str) -> bool:
        """Whether the REPEAT_LIMIT - 1 calls just before were this same call, each giving one result."""
        before = self.ran[-(REPEAT_LIMIT - 1) :]
        return len(before) == REPEAT_LIMIT - 1 and len(set(before)) == 1 and before[0][0] == call

    def flips_back(self, block) -> bool:
        """Whether this call redoes the change to its file just undone: (A, B), (B, A), and now (A, B)."""
        file, change = self.change(block)
        if file is None:
            return False
        before, after = change
        return self.changes.get(file, [])[-2:] == [(before, after), (after, before)]

    def change(self, block) -> tuple[tuple | None, tuple | None]:
        """((tool, path), (before, after)) for an edit (its old_text, new_text) or a write (what the last
        write of the file wrote, and its content); (None, None) for any other call."""
        given = block.input if isinstance(block.input, dict) else {}  # not yet validated: execute() checks
        path = given.get("path")
        if block.name not in IN_CIRCLES or not isinstance(path, str):
            return None, None
        file = (block.name, path)
        if block.name == "edit_file":
            return file, (given.get("old_text"), given.get("new_text"))
        earlier = self.changes.get(file)
        last_written = earlier[-1][1] if earlier else None  # a write changes what the last write wrote
        return file, (last_written, given.get("content"))

    def remember(self, calls: list, results: list[dict]) -> None:
        """What this turn's calls gave (results are in calls' order; a call held back gave its refusal):
        the latest REPEAT_LIMIT - 1 calls, and each change that worked (one refused, held back or failed
        left its file as it was)."""
        for block, result in zip(calls, results):
            self.ran.append((as_call(block), json.dumps([result["content"], result["is_error"]])))
            file, change = self.change(block)
            if file is not None and not result["is_error"]:
                self.changes[file] = [*self.changes.get(file, []), change][-2:]
        del self.ran[: -(REPEAT_LIMIT - 1)]


def as_call(block) -> str:
    """A call as the brake compares calls: the tool's name and its input, as JSON."""
    return f"{block.name} {json.dumps(block.input, sort_keys=True, ensure_ascii=False)}"


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s04.Settings):
    """s04's settings, and what s05 adds: the run's limits and what it has spent."""

    budget: Budget = field(default_factory=Budget)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s04's, with the limits the flags (or the fixture) set."""
        settings = super().for_run(run, args)
        settings.budget = Budget(**step_cli.limits(args))
        return settings


def run_tools(calls: list, settings: "Settings", held: dict[str, str] | None = None) -> tuple[list, list]:
    """Unlike s04's: a call the brake holds back (`held`: its error, by tool_use id) is answered with
    that error and never runs; s04 runs the others. The answers stay in the order asked."""
    return s04.run_tools(calls, settings, held_answers(calls, held or {}, settings))


def held_answers(calls: list, held: dict[str, str], settings: "Settings") -> dict:
    """The brake's answers, as s04 takes answers given already: each call held back answered with its
    error, and logged as held back (s02's audit log has a line for every call, run or not)."""
    answers = {}
    for block in calls:
        if block.id in held:
            answers[block.id] = held[block.id], True
            log_call(settings.audit, block, "held back", held[block.id], True, time.monotonic())
    return answers


def stopped(settings: "Settings", reason: str) -> None:
    """The end of a run, whatever ended it: the reason on screen, and in the budget."""
    settings.budget.reason = reason
    display.show_stop(reason)


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or a
    limit or the repeat brake stops it (settings.budget.reason says which)."""
    turns = []  # every response, in order
    brake = RepeatBrake()  # (new in s05) it holds back a call the model keeps repeating
    budget = settings.budget
    while True:
        # 0. (new in s05) Before paying for another call, check every limit: the first one reached
        #    ends the run, and the conversation is whole (it ends on the last turn's tool results).
        reason = budget.exceeded()
        if reason:
            stopped(settings, reason)
            return turns

        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass and raises what cannot (s03).
        with display.waiting(len(turns) + 1):  # the turn's rule on screen, a spinner till the reply
            response = call_model(
                client.messages.create,
                settings.retry,
                model=settings.model,
                system=settings.system,
                tools=TOOLS,
                messages=messages,
                max_tokens=MAX_TOKENS,
            )
        turns.append(response)
        display.show_turn(response)
        warning = budget.spend(response)  # (new in s05) its tokens and cost, counted: a step spent
        display.show_spend(budget, warning)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns

        # 4. Run the tool calls as s04 does, each id answered once, in order, in one user message.
        #    (new in s05) The brake answers the calls it holds back; asked again, it stops the run.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)  # tool_use id -> the error that answers it instead
        results, timeline = run_tools(calls, settings, held)
        brake.remember(calls, results)
        display.show_tools(calls, results, timeline)
        messages.append({"role": "user", "content": results})
        if brake.stop:  # asked again after a refusal: going round once more would change nothing
            stopped(settings, brake.stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s05_budget")  # s02's and s04's flags too
    step_cli.add_limit_flags(parser)  # s05's own: the limits
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """The loop within this run's limits; however it stops, the summary and the conversation saved."""
    return run_and_keep(agent_loop, Settings.for_run(run, args), run)


def run_and_keep(loop, settings: Settings, run: launch.Run) -> int:
    """The task through `loop`; however it stops, the budget's summary, and the conversation saved."""
    messages = [{"role": "user", "content": run.task}]
    saved = step_cli.run_files(run) / "conversation.json"
    try:
        loop(run.client, messages, settings)
    except FATAL as err:  # s03: what retrying cannot fix
        return stop_cleanly(err, messages, saved)
    display.show_budget(settings.budget)
    conversation.save_conversation(messages, saved)
    display.say(f"audit log: {settings.audit}\nconversation saved: {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
