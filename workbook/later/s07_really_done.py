"""s07_really_done.py — Really done? A turn can end otherwise than it seems.

Adds over s06: three more moves for a turn that ends otherwise than it seems
(two new transitions, and a reason for done). A paused turn (pause_turn,
from a server-side tool such as the API's web search) is sent back as it is,
to go on. A refusal ends the run, saying why. And --stop-hook CMD must pass
before the loop may stop: while it fails, its output goes back to the model.

    +------------+ stop_reason +=============================================+
    | call model | ----------> | next_transition() (new): three more moves   |
    +-^-^--------+             +=============================================+
      | +-- resume_pause  <- pause_turn: send it back as it is, <= 5 times
      +---- hook_retry    <- end_turn, but the stop hook fails, <= N times
            done          <- a refusal (its reason shown), or the hook passed
      (and every transition of s06: next_turn, escalate, continue, fail)

Run from the root: python -m workbook.later.s07_really_done
  (no flags)                           replay: a stop hook fails once, passes
  --replay fixtures/s06_pause_turn.json
  --replay fixtures/s06_refusal.json
  "task" --web-search                  live, ANTHROPIC_API_KEY
"""

import sys
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple, Self

from workbook import conversation, display, launch, step_cli

import anthropic
from anthropic.types import Message

import s02_tools as s02
import s06_recovery as s06
from s01_agent_loop import MODEL
from s02_tools import TOOLS, ToolError, bash, truncate
from s03_errors import CLIENT_OPTIONS
from s05_budget import RepeatBrake, run_tools, stopped
from s06_recovery import call, log_transition

DEFAULT_FIXTURE = "fixtures/s06_stop_hook.json"


# -- new in s07: is the turn really over? A pause goes on; a stop hook must pass; a refusal ends ------

MAX_PAUSES = 5  # pause_turn resumed at most this often per turn
STOP_HOOK_RETRIES = 2  # default of --stop-hook-retries: a failing hook is fed back at most this often
SERVER_TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]  # --web-search
TRANSITIONS = {  # every move of s07's loop, s06's and two more; Claude Code's query.ts name after |
    "next_turn": "tool_use: run the tools, send their results | next_turn",
    "escalate": "max_tokens: the same request again with max_tokens 64000 | escalate (to 64k)",
    "continue": "max_tokens again: keep the cut reply, ask the model to go on | max-output-tokens recovery",
    "done": "end_turn (the hook passed), stop_sequence or refusal: stop | Terminal (completed)",
    "fail": "recovery has nothing left to try: stop, saying why | Terminal (error)",
    "resume_pause": "pause_turn: send the paused turn back unchanged, no new user message | (server tools)",
    "hook_retry": "end_turn, but the stop hook failed: its output goes to the model | stop_hook_blocking",
}


@dataclass
class Recovery(s06.Recovery):
    """s06's, and how often this turn paused, how often the stop hook failed in the run, and the turn the
    screen is on: a paused turn goes on past a reply that was kept, so s06's count of kept replies no
    longer numbers the turns."""

    SENT_AGAIN: ClassVar[tuple[str, ...]] = ("escalate", "resume_pause")  # the same turn's call again
    turn: int = 0  # the model's turn, as the screen numbers it
    hook_retries: int = STOP_HOOK_RETRIES  # --stop-hook-retries: a failing hook is fed back this often
    pauses: int = 0
    hook_failures: int = 0  # for the whole run, not per turn

    def new_turn(self) -> None:
        super().new_turn()
        self.pauses = 0

    def next_rule(self) -> str:
        """The next call's rule on screen: the next turn's number, or, for the same turn's call sent again
        (SENT_AGAIN), this turn's, marked as its retry."""
        last = self.log[-1][0] if self.log else None
        if last in self.SENT_AGAIN:
            return f"{self.turn}, sent again ({last})"
        self.turn += 1
        return str(self.turn)


class HookResult(NamedTuple):
    """What the stop hook said: whether it passed, and its output (the model reads it if not)."""

    passed: bool
    output: str


# 2. The transition: a pause, a refusal and the stop hook first; anything else as s06 names it.
def run_stop_hook(settings: "Settings", response: Message) -> HookResult | None:
    """Once the model has ended its turn, run the stop hook (if there is one) in the workspace, as s02
    runs bash: whether it passed (exit code 0), and what it printed. None: no hook, or no end_turn."""
    if not settings.stop_hook or response.stop_reason != "end_turn":
        return None
    try:
        output = truncate(bash(settings.workspace, settings.stop_hook))
    except ToolError as err:
        output = f"the stop hook: {err}"
    hook = HookResult(output.endswith("[exit code 0]"), output)  # bash's last line is its exit code
    display.show_hook(settings.stop_hook, output, hook.passed)
    return hook


def next_transition(response: Message, state: Recovery, hook: HookResult | None) -> tuple[str, str]:
    """(transition, why). `hook` is the stop hook's result, if it ran."""
    stop = response.stop_reason
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
    transition, why = s06.next_transition(response, state)
    return transition, why + (" and the stop hook passed" if hook else "")


# 3. The reply: after a pause, it continues the paused turn.
def append_reply(messages: list, response: Message) -> None:
    """Append the reply as the SDK returns it; after a pause it continues the paused turn, so it joins
    that message (the API takes a paused turn back as it is, and its continuation with it)."""
    if messages and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *response.content]}
    else:
        messages.append({"role": "assistant", "content": response.content})


# 3. Recovering: a pause is sent back as it is; a failing hook's output goes to the model.
def recover(transition: str, messages: list, response: Message, hook, settings: "Settings") -> None:
    """Each repair before the conversation is sent again: s06's two, and the two of s07."""
    match transition:
        case "escalate":  # s06's: the same request, with room to finish
            s06.escalate(response, settings.recovery)
        case "continue":  # s06's: the cut calls answered, and the model asked to go on
            s06.go_on(messages, response, settings.recovery)
        case "resume_pause":  # nothing to add: the paused turn goes back as it is
            settings.recovery.pauses += 1
        case "hook_retry":  # the hook's failure, as the next user message
            hook_feedback(messages, settings, hook)


def hook_feedback(messages: list, settings: "Settings", hook: HookResult) -> None:
    """The stop hook's failure, as the next user message: the model reads it and fixes what it says."""
    settings.recovery.hook_failures += 1
    text = f"The stop hook `{settings.stop_hook}` failed, so the task is not finished yet. Its output:\n"
    messages.append({"role": "user", "content": text + hook.output + "\nFix what it reports, then finish."})


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s06.Settings):
    """s06's settings, and what s07 adds: a stop hook that must pass before the loop may stop, the
    API's web search (the usual cause of pause_turn), and s07's recovery state."""

    stop_hook: str | None = None  # --stop-hook: a shell command run in the workspace
    web_search: bool = False  # --web-search: the API's server-side search tool
    recovery: Recovery = field(default_factory=Recovery)

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s06's, with --stop-hook (a fixture's own hook meets s02's gate first, as a bash call would),
        --stop-hook-retries and --web-search."""
        settings = super().for_run(run, args)
        settings.stop_hook = step_cli.stop_hook(run, args, s02.gate, s02.REGISTRY["bash"])
        settings.web_search = args.web_search
        settings.recovery = Recovery(hook_retries=args.stop_hook_retries)
        return settings

    def shared_request(self) -> dict:
        """s06's, and with --web-search the API's own search tool beside s02's."""
        return super().shared_request() | {"tools": TOOLS + SERVER_TOOLS if self.web_search else TOOLS}


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """s06's loop; (new in s07) a paused turn goes on, and the stop hook must pass before it ends."""
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

        # 1. Send the whole history (s06). (new in s07) A paused turn sent back is that turn's again.
        response = call(client, messages, settings, state.next_rule())  # a paused turn goes on as itself
        turns.append(response)
        warning = budget.spend(response)  # its tokens and cost, counted (s05)
        display.show_spend(budget, warning)

        # Name the transition (s06). (new in s07) Once the model ends its turn, the stop hook runs.
        hook = run_stop_hook(settings, response)  # None: no hook, or the turn did not end
        transition, why = next_transition(response, state, hook)
        log_transition(transition, why, settings)
        if transition == "fail":  # recovery gave up: the cut reply is not kept, and the run ends (s06)
            stopped(settings, f"recovery gave up: {why}")
            return turns

        # 2. Append the reply verbatim, unless recovery drops it (s06's escalate). (new in s07) After a
        #    pause, it joins the paused turn.
        if transition != "escalate":
            append_reply(messages, response)

        # 3. Any stop but tool_use ends the loop; a repair sends the conversation again (s06).
        if transition == "done":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns
        if transition != "next_turn":
            recover(transition, messages, response, hook, settings)
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
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s07_really_done")  # every earlier step's
    step_cli.add_hook_flags(parser, STOP_HOOK_RETRIES)  # s07's own: --stop-hook, --web-search
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s06's run, with this step's loop and settings; recovery giving up is exit 1 (s06)."""
    return s06.run_and_keep(agent_loop, Settings.for_run(run, args), run)


if __name__ == "__main__":
    sys.exit(main())
