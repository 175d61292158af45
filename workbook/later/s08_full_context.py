"""s08_full_context.py — When the context is full: make room, and go on.

Adds over s07: a request the API refuses as too long ("prompt is too long",
a 400) is not a crash. Old tool results are collapsed to placeholders and the
request is sent again; if that is not enough, the older history is compacted
into a summary the model writes. A reply that filled the window is kept, and
room is made after it.

    +------------+  400: too long   +=======================================+
    | call model | ---------------> | next_transition() (new): make room    |
    +-^-^-^------+                  +=======================================+
      | | +-- collapse   <- old tool results become placeholders, once a turn
      | +---- compact    <- still too long: a summary of the older history
      +------ make_room  <- a reply filled the window: keep it, then collapse
              fail       <- nothing left to shrink: stop, saying why
      (and every transition of s06 and s07: escalate, resume_pause, ...)

Run from the root: python -m workbook.later.s08_full_context
  (no flags)                             replay: too long twice: collapsed,
                                         compacted
  --replay fixtures/s06_prompt_too_long_collapse.json   (collapsing is enough)
  --replay fixtures/s06_window_full_after_history.json  (a reply fills it)
"""

import sys
from dataclasses import dataclass, field
from typing import Self

from workbook import display, launch, step_cli
from workbook.api.messages import blocks, result_text  # a message's blocks, a result's text
from workbook.conversation import context_chars, json_chars  # sizes, in characters of JSON
from workbook.later import s07_really_done as s07
from workbook.later.s07_really_done import append_reply, run_stop_hook

import anthropic
from anthropic.types import Message

import s05_budget as s05
import s06_recovery as s06
from s01_agent_loop import MAX_TOKENS, MODEL
from s03_errors import CLIENT_OPTIONS, api_message, call_model
from s05_budget import RepeatBrake, run_tools, stopped
from s06_recovery import log_transition

DEFAULT_FIXTURE = "fixtures/s06_collapse_then_compact.json"


# -- new in s08: making room — collapse old results, then compact the older history -----------------

KEEP_RECENT_RESULTS = 1  # collapse leaves the newest tool_result messages whole
COLLAPSE_MIN_CHARS = 200  # a tool_result shorter than this is left alone: its placeholder saves nothing
ROOM_PROMPT = (
    "Your last reply stopped because the context window was full; older tool results were shortened to "
    "make room. Continue exactly where it stopped, no recap. If a tool call was cut off, make it again."
)
NO_TOOLS = {"type": "none"}  # compaction's tool_choice: a summary in prose, no tool call
SUMMARY_PROMPT = (
    "The conversation has grown too long for the context window. Summarize everything above that is "
    "needed to carry on: the task, what was done and found, which files changed, what remains to do. "
    "Plain prose, no tool calls."
)
TRANSITIONS = s07.TRANSITIONS | {  # s07's, and three more; Claude Code's query.ts name after the |
    "collapse": "prompt too long (400): old tool results become placeholders, retry | collapse_drain_retry",
    "compact": "still too long: the older history becomes a summary, retry | reactive_compact_retry",
    "make_room": "context window full (a reply): keep it, collapse or compact, go on | (not in the article)",
}


@dataclass
class Recovery(s07.Recovery):
    """s07's, and whether this turn has collapsed or compacted already (each once a turn), with a record
    of the last refusal as too long and of what compaction asked the model to summarize."""

    SENT_AGAIN = (
        "escalate",
        "resume_pause",
        "collapse",
        "compact",
    )  # the same turn's call again, not a new turn
    collapsed: bool = False
    compacted: bool = False
    too_long: dict | None = None  # the last call's 400 "prompt is too long", its status and body
    summarized: list | None = None  # the messages compaction last asked the model to summarize
    summary_too_long: bool = False  # compaction's own request was refused as too long: nothing left

    def new_turn(self) -> None:
        super().new_turn()
        self.collapsed = False
        self.compacted = False
        self.summary_too_long = False


# 0. The limits: after making room, the next request is judged by what it holds.
@dataclass
class Budget(s05.Budget):
    """Unlike s05's: after making room for a reply that filled the window, the input limit judges the
    next request by an estimate of what it holds, not by the last request, which held more."""

    estimate: int | None = None  # the next request's input tokens, from made_room()

    def made_room(self, before: int, after: int) -> None:
        """The request shrank from `before` to `after` characters of JSON: its tokens did, roughly, too."""
        self.estimate = round(self.rows[-1].tokens_in * after / before)

    def input_limit(self) -> str:
        estimate, self.estimate = self.estimate, None  # it judges the next request only
        if estimate is None:
            return super().input_limit()
        if estimate < self.max_input_tokens:
            return ""
        return (
            f"input limit: after making room the next request still holds about {estimate:,} input tokens "
            f"(--max-input-tokens {self.max_input_tokens:,})"
        )


# 1. The call: a prompt too long is an outcome, not a crash.
def call_unless_too_long(client, messages: list, settings: "Settings") -> Message | None:
    """s06's call. A 400 "prompt is too long" is not raised: the reply is None, and the error is kept in
    recovery.too_long, for the loop to recover."""
    state = settings.recovery
    state.too_long = None
    try:
        return s06.call(client, messages, settings, state.next_rule())
    except anthropic.BadRequestError as err:
        if "prompt is too long" not in api_message(err).lower():  # "prompt is too long: 213000 tokens > ..."
            raise
        display.say(f"400 {api_message(err)}", "yellow")
        state.too_long = {"status": 400, "body": err.body}
        return None


# 2. The transition: too long first; anything else as s07 names it.
def next_transition(response, state: Recovery, messages: list, hook) -> tuple[str, str]:
    """(transition, why). `response` is None when the request was too long; a reply that stopped with
    model_context_window_exceeded filled the window. Either way, collapse first, then compact, each
    once a turn; else s07 decides."""
    stop = response.stop_reason if response is not None else "prompt_too_long"
    if stop not in ("prompt_too_long", "model_context_window_exceeded"):
        return s07.next_transition(response, state, hook)
    shrink = room_move(messages, state)  # collapse, compact, or None: nothing left this turn
    if shrink and response is not None:  # a reply that filled the window: kept, and room made after it
        return "make_room", f"{stop}: keep the reply, then {shrink}"
    if shrink == "collapse":
        return "collapse", f"{stop}: {collapsible(messages)} old tool results can be collapsed"
    if shrink == "compact":
        return "compact", f"{stop}: still too long; summarize the older history"
    collapse = "already collapsed once" if state.collapsed else "no old tool result to collapse"
    compact = "already compacted once" if state.compacted else "no earlier turn to summarize"
    compact = "even the summary's request was too long" if state.summary_too_long else compact
    return "fail", f"{stop}, and this turn: {collapse}, {compact}: giving up"


def room_move(messages: list, state: Recovery) -> str | None:
    """How to make room now: collapse first, then compact, each once a turn; None if neither is left."""
    if not state.collapsed and collapsible(messages):
        return "collapse"
    if not state.compacted and split_point(messages) is not None:
        return "compact"
    return None


# 3. Making room: collapse, or compact (a model call of its own), then send again.
def recover(transition: str, messages: list, response, hook, client, settings: "Settings") -> Message | None:
    """s07's recover, and making room. Returns the reply of compaction's request for a summary (a model
    call of its own, to be counted), else None."""
    state = settings.recovery
    if transition == "make_room":  # the kept reply's cut calls answered; then room_move's choice
        results = s06.show_cut_calls(response, s06.TRUNCATED_CALL.format(response.stop_reason))  # never run
        messages.append({"role": "user", "content": [*results, {"type": "text", "text": ROOM_PROMPT}]})
        transition = room_move(messages, state) or "compact"
    if transition not in ("collapse", "compact"):
        return s07.recover(transition, messages, response, hook, settings)
    before = context_chars(messages)
    summary = None
    if transition == "collapse":
        state.collapsed = True
        collapse(messages)
    else:
        state.compacted = True
        summary = compact(client, messages, settings)
    display.show_context(before, context_chars(messages))
    if response is not None:  # make_room: the reply that filled the window was counted; its input tokens
        fixed = json_chars(settings.shared_request())  # now overstate the next request, which holds less
        settings.budget.made_room(before + fixed, context_chars(messages) + fixed)
    return summary


def count_summary(turns: list, summary: Message, budget, turn: int) -> None:
    """Compaction's request for a summary is a model call of its own: its reply opens with a rule of its
    own (it was asked for inside recover(), not under the loop's turn), and counts as a step."""
    display.rule(f"turn {turn}, its summary")
    display.show_turn(summary)
    count(turns, summary, budget)


def count(turns: list, response: Message, budget) -> None:
    """A reply is a step, as s05 counts one: kept, and its tokens and cost spent."""
    turns.append(response)
    warning = budget.spend(response)
    display.show_spend(budget, warning)


def old_results(messages: list, keep: int = KEEP_RECENT_RESULTS) -> list[int]:
    """Indexes of the messages holding tool results, but the newest `keep` of them."""
    holders = [i for i, m in enumerate(messages) if any(b["type"] == "tool_result" for b in blocks(m))]
    return holders[: len(holders) - keep]


def collapsible(messages: list) -> int:
    """How many tool_results collapse() would shorten."""
    long = [b for i in old_results(messages) for b in blocks(messages[i]) if b["type"] == "tool_result"]
    return sum(len(result_text(b)) >= COLLAPSE_MIN_CHARS for b in long)


def collapse(messages: list, keep: int = KEEP_RECENT_RESULTS) -> None:
    """Replace long old tool_result contents with a placeholder; ids, and so every pair, stay whole."""
    names = {b["id"]: b["name"] for m in messages for b in blocks(m) if b["type"] == "tool_use"}
    for i in old_results(messages, keep):
        content = blocks(messages[i])
        for n, b in enumerate(content):
            if b["type"] == "tool_result" and len(result_text(b)) >= COLLAPSE_MIN_CHARS:
                what = f"{len(result_text(b))} characters of {names.get(b['tool_use_id'], 'tool')} output"
                content[n] = b | {"content": f"[collapsed: {what}; call it again if needed]"}
        messages[i] = {"role": "user", "content": content}


def split_point(messages: list) -> int | None:
    """Where compaction cuts: the last assistant message, so it stays with the results that answer it."""
    return next((i for i in range(len(messages) - 1, 0, -1) if messages[i]["role"] == "assistant"), None)


def summary_ask(messages: list) -> list:
    """What compaction sends: the history before the last turn, its old tool results collapsed (it must
    fit where the whole history did not), and the request for its summary."""
    older = [dict(m) for m in messages[: split_point(messages)]]
    collapse(older, keep=0)
    last = {"role": "user", "content": blocks(older[-1]) + [{"type": "text", "text": SUMMARY_PROMPT}]}
    return older[:-1] + [last]


def compact(client: anthropic.Anthropic, messages: list, settings: "Settings") -> Message | None:
    """Ask the model to summarize the history before the last turn; keep the task, the summary and the
    last turn only. The summary's request is a model call of its own: its reply is returned. If even
    that request is too long, nothing changes, and None says so (the next call fails, saying why)."""
    recent = messages[split_point(messages) :]
    request = settings.shared_request() | {"max_tokens": MAX_TOKENS, "tool_choice": NO_TOOLS}
    settings.recovery.summarized = summary_ask(messages)
    try:
        response = call_model(
            client.messages.create, settings.retry, messages=settings.recovery.summarized, **request
        )
    except anthropic.BadRequestError as err:
        if "prompt is too long" not in api_message(err).lower():
            raise
        display.say(f"the summary's request: 400 {api_message(err)}", "yellow")
        settings.recovery.summary_too_long = True
        return None
    summary = "".join(b.text for b in response.content if b.type == "text").strip()
    task = messages[0]["content"] if isinstance(messages[0]["content"], str) else "(see the summary)"
    opening = f"{task}\n\n[The earlier part of this session was compacted into this summary:]\n{summary}"
    messages[:] = [{"role": "user", "content": opening}, *recent]
    return response


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s07.Settings):
    """s07's settings, with s08's recovery state and budget."""

    recovery: Recovery = field(default_factory=Recovery)
    budget: Budget = field(default_factory=Budget)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s07's, with s08's budget and recovery state."""
        settings = super().for_run(run, args)
        settings.budget = Budget(**step_cli.limits(args))
        settings.recovery = Recovery(hook_retries=args.stop_hook_retries)
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """s07's loop; (new in s08) a request too long, or a reply that filled the window, makes room."""
    turns = []  # every response, in order
    brake = RepeatBrake()  # s05's
    budget = settings.budget
    state = settings.recovery  # what recovery has tried, and its record
    while True:
        # 0. Before paying for another call, check every limit (s05).
        reason = budget.exceeded()
        if reason:
            stopped(settings, reason)
            return turns

        # 1. Send the whole history (s06). (new in s08) Too long is no crash: the response is None.
        response = call_unless_too_long(client, messages, settings)  # shown under the turn's rule
        if response is not None:
            count(turns, response, budget)

        # Name the transition (s06, s07); (new in s08) too long first.
        hook = run_stop_hook(settings, response) if response is not None else None
        transition, why = next_transition(response, state, messages, hook)
        log_transition(transition, why, settings)
        if transition == "fail":  # recovery gave up: the cut reply is not kept, and the run ends (s06)
            stopped(settings, f"recovery gave up: {why}")
            return turns

        # 2. Append the reply verbatim, unless recovery drops it (s06's escalate), or (new in s08) no reply
        #    came: the request was too long (collapse, compact). After a pause it joins the paused turn (s07).
        if transition not in ("escalate", "collapse", "compact"):
            append_reply(messages, response)

        # 3. Any stop but tool_use ends the loop; a repair sends the conversation again (s06).
        if transition == "done":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns
        if transition != "next_turn":
            summary = recover(transition, messages, response, hook, client, settings)
            if summary is not None:  # new in s08: a compaction's summary is a model call: it costs a step
                count_summary(turns, summary, budget, state.turn)
            continue

        # 4. Run the tool calls as s05 does: reads side by side, the repeat brake.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)
        results, timeline = run_tools(calls, settings, held)
        brake.remember(calls, results)
        display.show_tools(calls, results, timeline)
        messages.append({"role": "user", "content": results})
        state.new_turn()  # tools ran: the next call starts a turn with fresh recovery caps (s06)
        if brake.stop:
            stopped(settings, brake.stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s08_full_context")  # every earlier step's
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s07's run, with this step's loop and settings; recovery giving up is exit 1 (s06)."""
    return s06.run_and_keep(agent_loop, Settings.for_run(run, args), run)


if __name__ == "__main__":
    sys.exit(main())
