"""s06_recovery.py — Recovery: a reply cut short is sent again, never run.

Adds over s05: every reply is followed by a named transition, the loop's
next move. A reply cut short by max_tokens never has its tool calls run: the
same request is sent again with room to finish (64k tokens), and if it is cut
again, the model is asked to go on where it stopped.

In support: replies stream from s06 on, since the SDK refuses to wait for a
64k reply whole (--no-stream: each reply whole, as before, but 64k still
streams); and an error that arrives inside a stream, after HTTP said 200, is
retried as s03 retries a 529 or a 500.

    call model --stop_reason--> next_transition() (new) names the next move:

      tool_use                 -> next_turn  run the tools, send the results
      max_tokens, first time   -> escalate   drop the cut reply; the same
                                             request again, 64k, streamed
      max_tokens again         -> continue   keep it, answer its cut calls,
        (at most 3 times)                    ask the model to go on
      max_tokens after those 3 -> fail       stop, exit 1
      any other stop           -> done       stop

Run: python s06_recovery.py   replay: a reply cut at 8000 tokens, sent again
     python s06_recovery.py --replay fixtures/s06_truncated_tool_use.json
     python s06_recovery.py --replay fixtures/s06_overloaded_mid_stream.json
"""

import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Self

from workbook import conversation, display, launch, step_cli

import anthropic
from anthropic.types import Message

import s03_errors as s03
import s05_budget as s05
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import TOOLS
from s03_errors import CLIENT_OPTIONS, call_model
from s05_budget import RepeatBrake, run_tools, stopped

DEFAULT_FIXTURE = "fixtures/s06_escalation.json"


# -- new in s06: the recovery chain — every reply is followed by a named transition ---------------

ESCALATED_MAX_TOKENS = 64_000  # max_tokens, first answer: the same request with room to finish (streamed)
MAX_CONTINUATIONS = 3  # max_tokens again: "go on where you stopped", at most this often till tools run
CONTINUE_PROMPT = (
    "Your last reply was cut off by the output token limit. Continue exactly where it stopped, "
    "with no apology and no recap. If a tool call was cut off, make it again in full."
)
TRUNCATED_CALL = "error: not run — your reply was cut off ({}) before this call was complete. Call again."
DROPPED_CALL = "never run: its input was cut off, and the reply is dropped and asked for again"  # shown only


@dataclass
class Recovery:
    """What the recovery chain may still try in this turn, what it has tried (reset when tools run), and
    the run's record of transitions."""

    max_tokens: int = MAX_TOKENS
    continuations: int = 0
    log: list = field(default_factory=list)  # (transition, why) of every iteration, in order

    def gave_up(self) -> bool:
        """Whether the run's last transition was fail: recovery could not get a whole reply."""
        return bool(self.log) and self.log[-1][0] == "fail"

    def new_turn(self) -> None:
        """Tools ran: the next model call starts with a clean slate and the normal max_tokens (most replies
        fit in it, and a reply that runs away costs at most that much)."""
        self.max_tokens = MAX_TOKENS
        self.continuations = 0


# The call, with the max_tokens recovery asks for, streamed when it must be.
def call(
    client: anthropic.Anthropic, messages: list, settings: "Settings", turn: int | str | None
) -> Message:
    """s05's model call, with the max_tokens recovery asks for, under the turn's rule (None: the rule of
    the turn it is sent again in); the reply streamed (a 64k reply must be, even with --no-stream) or
    whole, then shown."""
    streamed = settings.stream or settings.recovery.max_tokens > MAX_TOKENS
    send = partial(stream_reply, client) if streamed else client.messages.create
    request = settings.shared_request() | {"max_tokens": settings.recovery.max_tokens}
    with display.waiting(turn, streamed):  # the turn's rule on screen, a spinner till the reply
        response = call_model(send, settings.retry, messages=messages, **request)
    display.show_turn(response, streamed)
    return response


# The transition: how the call ended, and what recovery has tried.
def next_transition(response: Message, state: Recovery) -> tuple[str, str]:
    """(transition, why): the loop's next move (next_turn, escalate, continue, done or fail), from how the
    call ended and what recovery has tried already."""
    stop = response.stop_reason
    if stop == "tool_use":
        return "next_turn", "tool_use"
    if stop == "max_tokens" and state.max_tokens < ESCALATED_MAX_TOKENS:
        again = f"sent again with {ESCALATED_MAX_TOKENS}"
        return "escalate", f"cut at {state.max_tokens} tokens: reply dropped, {again}"
    if stop == "max_tokens" and state.continuations < MAX_CONTINUATIONS:
        return "continue", f"cut off again; continuation {state.continuations + 1} of {MAX_CONTINUATIONS}"
    if stop == "max_tokens":
        return "fail", f"still cut off after {MAX_CONTINUATIONS} continuations: stopping to save tokens"
    return "done", stop


def log_transition(transition: str, why: str, settings: "Settings") -> None:
    """The transition an iteration ends in: kept in the run's record, and shown."""
    settings.recovery.log.append((transition, why))
    display.show_transition(transition, why)


# The two repairs, each followed by sending the conversation again.
def escalate(response: Message, state: Recovery) -> None:
    """The cut reply is dropped (its calls shown, never run): the same request, with room to finish.
    Dropped, not kept: sent again whole, the reply has nothing cut to repair, and the conversation holds
    no half-written call."""
    state.max_tokens = ESCALATED_MAX_TOKENS  # nothing else changes
    show_cut_calls(response, DROPPED_CALL)


def go_on(messages: list, response: Message, state: Recovery) -> None:
    """The cut reply is kept (appended already) and the model asked to continue where it stopped. Kept,
    not dropped: at 64k there is no more room to ask for, so sent again it would be cut again. Its calls
    are answered (every tool_use needs its result), never run: their input may be cut."""
    state.continuations += 1
    results = show_cut_calls(response, TRUNCATED_CALL.format(response.stop_reason))
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": CONTINUE_PROMPT}]})
    display.show_prompt("and the model is asked to go on", CONTINUE_PROMPT)


def show_cut_calls(response: Message, answer: str) -> list:
    """Each tool call of a cut reply (its input never whole), shown with `answer`, the error that takes
    the place of its result; those results, one per call."""
    calls = [block for block in response.content if block.type == "tool_use"]
    results = [conversation.tool_result(block.id, answer, True) for block in calls]
    display.show_tools(calls, results, [])
    return results


# -- new in s06, in support of recovery: replies stream — the SDK will not wait for 64k tokens whole ---


def stream_reply(client: anthropic.Anthropic, **request) -> Message:
    """The reply, streamed: its text shows as it comes, a tool call once its input is whole (with its
    result)."""
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


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s05.Settings):
    """s05's settings, and what s06 adds: streaming and its retry layer, and the recovery chain's state."""

    retry: Retry = field(default_factory=Retry)
    stream: bool = True  # False: wait for each reply whole, as s01-s05 do (--no-stream)
    recovery: Recovery = field(default_factory=Recovery)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s05's, with streaming (unless --no-stream, or a replayed fixture was recorded without it)."""
        settings = super().for_run(run, args)
        settings.retry = Retry.for_run(run)
        settings.stream = step_cli.streaming(args, run)
        return settings

    def shared_request(self) -> dict:
        """What every request of the run shares: the model, the system prompt, the tools."""
        return dict(model=self.model, system=self.system, tools=TOOLS)


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """s05's loop, each reply followed by a named transition: recovery repairs what it can, goes on."""
    turns = []  # every reply kept, in order (a reply recovery drops is not a turn)
    brake = RepeatBrake()  # s05's
    budget = settings.budget
    state = settings.recovery  # what recovery has tried, and its record
    transition = None  # how the last call ended: its named next move
    while True:
        # 0. Before paying for another call, check every limit (s05).
        reason = budget.exceeded()
        if reason:
            stopped(settings, reason)
            return turns

        # 1. Send the whole history: the model has no memory of its own between calls.
        #    (new in s06) With the max_tokens recovery asks for (call(), above). A request sent again
        #    (escalate) is its turn's retry, shown under that turn's rule, as s03's retries are.
        rule = None if transition == "escalate" else len(turns) + 1
        response = call(client, messages, settings, rule)
        warning = budget.spend(response)  # its tokens and cost, counted: a step spent (s05)
        display.show_spend(budget, warning)

        # (new in s06) Name the transition: how the call ended, and what recovery has tried. A reply
        # cut off the first time is dropped, and the same request sent again with room to finish.
        transition, why = next_transition(response, state)
        log_transition(transition, why, settings)
        if transition == "escalate":
            escalate(response, state)
            continue
        if transition == "fail":  # recovery gave up: the cut reply is not kept, and the run ends
            stopped(settings, f"recovery gave up: {why}")
            return turns

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})
        turns.append(response)

        # 3. (new in s06) A reply cut off again is kept: its calls are answered, never run, and the model
        #    is asked to go on where it stopped. Any other stop but tool_use ends the loop.
        if transition == "continue":
            go_on(messages, response, state)
            continue
        if transition == "done":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns

        # 4. Run the tool calls as s05 does: reads side by side, the repeat brake.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)  # tool_use id -> the error that answers it instead
        results, timeline = run_tools(calls, settings, held)
        brake.remember(calls, results)
        display.show_tools(calls, results, timeline)
        messages.append({"role": "user", "content": results})
        state.new_turn()  # (new in s06) tools ran: the next call starts a turn with fresh recovery caps
        if brake.stop:  # asked again after a refusal: going round once more would change nothing
            stopped(settings, brake.stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s06_recovery")  # s02's, s04's and s05's too
    step_cli.add_stream_flag(parser)  # s06's own: --no-stream
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s05's run, with this step's loop and settings; recovery giving up is exit 1."""
    return run_and_keep(agent_loop, Settings.for_run(run, args), run)


def run_and_keep(loop, settings: Settings, run: launch.Run) -> int:
    """Unlike s05's: recovery giving up (the last transition was fail) is exit 1."""
    code = s05.run_and_keep(loop, settings, run)
    return 1 if code == 0 and settings.recovery.gave_up() else code


if __name__ == "__main__":
    sys.exit(main())
