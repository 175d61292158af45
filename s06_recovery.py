"""s06_recovery.py — Recovery: a named next move for every way a turn ends.

Adds over s05: each iteration ends in a named transition. A reply cut short
by max_tokens never has its tool calls run; the same request is sent again
with room to finish (streamed: a 64k reply must be). A paused turn is sent
back as it is. --stop-hook CMD must pass before the loop may stop.

    +------------+ stop_reason +=============================================+
    | call model | ----------> | next_transition() (new): name the next move |
    +-^-^-^-^----+             +=============================================+
      | | | +-- next_turn          <- tool_use: run the tools, send results
      | | +---- escalate|continue  <- max_tokens: 64k once, then <= 3 more
      | +------ resume_pause       <- pause_turn: send it back as it is
      +-------- hook_retry         <- end_turn, but the stop hook fails
                done | fail        <- end_turn, refusal | out of tries

Run: python s06_recovery.py   replay: a reply cut at 8000 tokens, sent again
     python s06_recovery.py --replay fixtures/s06_truncated_tool_use.json
     python s06_recovery.py --replay fixtures/s06_stop_hook.json   hook_retry
     python s06_recovery.py "task" --web-search   live, ANTHROPIC_API_KEY
"""

import sys
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple, Self

from workbook import conversation, display, launch, prices, step_cli

import anthropic
from anthropic.types import Message

import s02_tools as s02
import s03_errors as s03
import s05_budget as s05
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import TOOLS, ToolError, bash, truncate
from s03_errors import CLIENT_OPTIONS, FATAL, call_model, stop_cleanly
from s05_budget import RepeatBrake, run_tools, stopped

DEFAULT_FIXTURE = "fixtures/s06_escalation.json"


# -- new in s06: replies stream — an escalated reply of 64k tokens must, and text shows as it comes --


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


# -- new in s06: the recovery chain — every iteration ends in a named transition -------------------

ESCALATED_MAX_TOKENS = 64_000  # max_tokens, first answer: the same request with room to finish (streamed)
MAX_CONTINUATIONS = 3  # max_tokens again: "go on where you stopped", at most this often per turn
MAX_PAUSES = 5  # pause_turn resumed at most this often per turn
STOP_HOOK_RETRIES = 2  # default of --stop-hook-retries: a failing hook is fed back at most this often
SERVER_TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]  # --web-search
CONTINUE_PROMPT = (
    "Your last reply was cut off by the output token limit. Continue exactly where it stopped, "
    "with no apology and no recap. If a tool call was cut off, make it again in full."
)
TRUNCATED_CALL = "error: not run — your reply was cut off ({}) before this call was complete. Call again."
TRANSITIONS = {  # every iteration ends in exactly one of these; Claude Code's query.ts name after the |
    "next_turn": "tool_use: run the tools, send their results | next_turn",
    "escalate": "max_tokens: the same request again with max_tokens 64000 | escalate (to 64k)",
    "continue": "max_tokens again: keep the cut reply, ask the model to go on | max-output-tokens recovery",
    "resume_pause": "pause_turn: send the paused turn back unchanged, no new user message | (server tools)",
    "hook_retry": "end_turn, but the stop hook failed: its output goes to the model | stop_hook_blocking",
    "done": "end_turn (the hook passed), stop_sequence or refusal: stop | Terminal (completed)",
    "fail": "a cap was reached or nothing can be recovered: stop, saying why | Terminal (error)",
}
KEEPS_REPLY = ("next_turn", "continue", "resume_pause", "hook_retry", "done")  # escalate and fail drop it
SENT_AGAIN = ("escalate", "resume_pause")  # the next call is this turn's again, not a new turn


@dataclass
class Recovery:
    """What the recovery chain may still try in this turn, what it has tried (reset when tools run), and
    the run's record of transitions."""

    hook_retries: int = STOP_HOOK_RETRIES  # --stop-hook-retries: a failing hook is fed back this often
    max_tokens: int = MAX_TOKENS
    continuations: int = 0
    pauses: int = 0
    hook_failures: int = 0  # for the whole run, not per turn
    log: list = field(default_factory=list)  # (transition, why) of every iteration, in order

    def new_turn(self) -> None:
        """Tools ran: the next model call starts with a clean slate and the normal max_tokens."""
        self.max_tokens = MAX_TOKENS
        self.continuations = 0
        self.pauses = 0


class HookResult(NamedTuple):
    """What the stop hook said: whether it passed, and its output (the model reads it if not)."""

    passed: bool
    output: str


# 0. The limits: s05's, and the API's web searches priced too.
class Budget(s05.Budget):
    """Unlike s05's: web searches (--web-search) are priced too, at the API's price a search."""

    def price(self, response: Message) -> float:
        used = response.usage.server_tool_use
        searches = (used.web_search_requests or 0) if used else 0
        return super().price(response) + searches * prices.WEB_SEARCH


# 1. The call, with the max_tokens recovery asks for, streamed when it must be.
def shared_request(settings: "Settings") -> dict:
    """What every request of the run shares: the model, the system prompt, the tools (s02's, and with
    --web-search the API's own search tool, the usual cause of pause_turn)."""
    tools = TOOLS + SERVER_TOOLS if settings.web_search else TOOLS
    return dict(model=settings.model, system=settings.system, tools=tools)


def call(client: anthropic.Anthropic, messages: list, settings: "Settings", streamed: bool) -> Message:
    """s05's model call, with the max_tokens recovery asks for, streamed or whole."""
    send = partial(stream_reply, client) if streamed else client.messages.create
    request = shared_request(settings) | {"max_tokens": settings.recovery.max_tokens}
    return call_model(send, settings.retry, messages=messages, **request)


def numbered(turn: int, resent_by: str | None) -> tuple[int, str]:
    """The next call's turn number, and its label: a request that recovery sends again (`resent_by`,
    the transition that did) is that turn's retry, not a new turn."""
    return (turn, f"{turn}, sent again ({resent_by})") if resent_by else (turn + 1, str(turn + 1))


def count_turn(turns: list, response: Message, budget: Budget, label, streamed: bool = False) -> None:
    """A reply is a step, as s05's loop counts one: kept, shown, and its tokens and cost spent."""
    turns.append(response)
    display.show_turn(label, response, streamed)
    display.show_spend(budget, budget.spend(response))


# 2. The transition: how the call ended, what recovery has tried, what the stop hook said.
def run_stop_hook(settings: "Settings", response: Message) -> HookResult | None:
    """Once the model has ended its turn, run the stop hook (if there is one) in the workspace, as s02
    runs bash: whether it passed, and what it printed. None: no hook, or the turn did not end."""
    if not settings.stop_hook or response.stop_reason != "end_turn":
        return None
    try:
        output = truncate(bash(settings.workspace, settings.stop_hook))
    except ToolError as err:
        output = f"the stop hook: {err}"
    hook = HookResult(output.endswith("[exit code 0]"), output)
    display.show_hook(settings.stop_hook, output, hook.passed)
    return hook


def next_transition(response: Message, state: Recovery, hook: HookResult | None) -> tuple[str, str]:
    """(transition, why): what the loop does next, from how the call ended and what was tried already.
    `hook` is the stop hook's result, if it ran."""
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
    if stop == "pause_turn" and state.pauses < MAX_PAUSES:
        return "resume_pause", f"pause {state.pauses + 1} of at most {MAX_PAUSES}"
    if stop == "pause_turn":
        return "fail", f"paused {MAX_PAUSES} times in a row: stopping"
    if stop == "refusal":  # stop_details (SDK): the category and explanation, when the API gives them
        said = conversation.refusal_reason(conversation.plain(getattr(response, "stop_details", None)))
        return "done", f"refusal{said}: the model declined to go on, so the loop stops here"
    if hook and not hook.passed and state.hook_failures < state.hook_retries:
        return "hook_retry", f"stop hook failed ({state.hook_failures + 1} of {state.hook_retries} retries)"
    if hook and not hook.passed:
        return "fail", f"the stop hook still fails after {state.hook_retries} retries"
    return "done", stop + (" and the stop hook passed" if hook else "")


def log_transition(transition: str, why: str, settings: "Settings") -> None:
    """The transition an iteration ends in: kept in the run's record, and shown."""
    settings.recovery.log.append((transition, why))
    display.show_transition(transition, why)


# 3. The reply, appended verbatim when the transition keeps it.
def append_reply(messages: list, response: Message) -> None:
    """Append the reply as the SDK returns it, as s01 does; after a pause it continues the paused turn,
    so it joins that message."""
    if messages and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *response.content]}
    else:
        messages.append({"role": "assistant", "content": response.content})


# 4. Recovering: each transition's repair of the conversation, before it is sent again.
def ended_because(transition: str, why: str, response) -> str:
    """Why the run ended: the model's own stop, or recovery giving up."""
    if transition == "done":
        return f"the model ended its turn (stop_reason {response.stop_reason})"
    return f"recovery gave up: {why}"


def recover(transition: str, messages: list, response: Message, hook, settings: "Settings") -> None:
    """Carry out a recovery transition on the conversation, which is then sent again."""
    state = settings.recovery
    if transition == "escalate":
        state.max_tokens = ESCALATED_MAX_TOKENS
    elif transition == "continue":
        state.continuations += 1
        continue_cut(messages, response, CONTINUE_PROMPT)
    elif transition == "resume_pause":
        state.pauses += 1  # nothing to add: the paused turn goes back as it is
    elif transition == "hook_retry":
        hook_feedback(messages, settings, hook)


def continue_cut(messages: list, response: Message, go_on: str) -> None:
    """After a cut reply is appended: answer its tool calls (never run: their input may be cut) and ask
    the model to `go_on`. Answering keeps the reply verbatim and tells the model exactly what happened."""
    answer = TRUNCATED_CALL.format(response.stop_reason)
    calls = [block for block in response.content if block.type == "tool_use"]
    results = [conversation.tool_result(block.id, answer, True) for block in calls]
    display.show_tools(calls, results, [])  # each cut call, and the error that answers it
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": go_on}]})


def hook_feedback(messages: list, settings: "Settings", hook: HookResult) -> None:
    """The stop hook's failure, as the next user message: the model reads it and fixes what it says."""
    settings.recovery.hook_failures += 1
    text = f"The stop hook `{settings.stop_hook}` failed, so the task is not finished yet. Its output:\n"
    messages.append({"role": "user", "content": text + hook.output + "\nFix what it reports, then finish."})


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s05.Settings):
    """s05's settings, and what s06 adds: streaming and its retry layer, a stop hook that must pass
    before the loop may stop, the API's web search, and the recovery chain's state."""

    retry: Retry = field(default_factory=Retry)
    budget: Budget = field(default_factory=Budget)
    stream: bool = True  # False: wait for each reply whole, as s01-s05 do (--no-stream)
    stop_hook: str | None = None  # --stop-hook: a shell command run in the workspace
    web_search: bool = False  # --web-search: the API's server-side search tool
    recovery: Recovery = field(default_factory=Recovery)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s05's, with streaming (unless --no-stream, or a replayed fixture was recorded without it),
        --stop-hook (a fixture's own hook meets s02's gate first, as a bash call would),
        --stop-hook-retries and --web-search."""
        settings = super().for_run(run, args)
        settings.retry = Retry.for_run(run)
        settings.budget = Budget(**step_cli.limits(args))
        settings.stream = step_cli.streaming(args, run)
        settings.stop_hook = step_cli.stop_hook(run, args, s02.gate, s02.REGISTRY["bash"])
        settings.web_search = args.web_search
        settings.recovery = Recovery(hook_retries=args.stop_hook_retries)
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """s05's loop, each iteration ending in a named transition: recovery repairs what it can, goes on."""
    turns = []  # every response, in order
    brake = RepeatBrake(settings.workspace)  # s05's
    budget = settings.budget
    state = settings.recovery  # what recovery has tried, and its record
    turn, transition = 0, None  # the model's turn, and how the last call ended
    while True:
        # 0. Before paying for another call, check every limit (s05).
        reason = budget.exceeded()
        if reason:
            stopped(settings, reason)
            return turns

        # 1. Send the whole history. (new in s06) Recovery sets max_tokens; a 64k reply must stream.
        turn, label = numbered(turn, transition if transition in SENT_AGAIN else None)
        streamed = settings.stream or state.max_tokens > MAX_TOKENS
        with display.waiting(label, streamed):
            response = call(client, messages, settings, streamed)
        count_turn(turns, response, budget, label, streamed)

        # 2. (new in s06) Name the transition: how the call ended, what recovery tried, the stop hook.
        hook = run_stop_hook(settings, response)  # None: no hook, or the turn did not end
        transition, why = next_transition(response, state, hook)
        log_transition(transition, why, settings)

        # 3. Append the reply verbatim, unless the transition throws it away (an escalation asks again).
        if transition in KEEPS_REPLY:
            append_reply(messages, response)

        # 4. done and fail end the loop; any other transition repairs the conversation and goes round.
        if transition in ("done", "fail"):
            stopped(settings, ended_because(transition, why, response))
            return turns
        if transition != "next_turn":
            recover(transition, messages, response, hook, settings)
            continue

        # 5. Run the tool calls as s05 does: reads side by side, the repeat brake.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)
        results, timeline = run_tools(calls, settings, held)
        messages.append({"role": "user", "content": results})
        brake.remember(results)
        display.show_tools(calls, results, timeline)
        state.new_turn()  # (new in s06) tools ran: the next call starts a turn with fresh recovery caps
        if brake.stop:
            stopped(settings, brake.stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s06_recovery")  # s02's, s04's and s05's too
    step_cli.add_recovery_flags(parser, STOP_HOOK_RETRIES)  # s06's own: --stop-hook, --web-search
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s05's run, with this step's loop and settings; recovery giving up is exit 1."""
    settings = Settings.for_run(run, args)
    messages = [{"role": "user", "content": run.task}]
    saved = step_cli.run_files(run) / "conversation.json"
    try:
        agent_loop(run.client, messages, settings)
    except FATAL as err:  # s03: what retrying cannot fix
        return stop_cleanly(err, messages, saved)
    display.show_budget(settings.budget)
    conversation.save_conversation(messages, saved)
    display.say(f"audit log: {settings.audit}\nconversation saved: {saved}")
    return 1 if settings.budget.reason.startswith("recovery gave up") else 0  # the last transition: fail


if __name__ == "__main__":
    sys.exit(main())
