"""s06_recovery.py — Recovery: a named next move for every way a turn ends.

Adds over s05: each iteration ends in a named transition. A reply cut short
never has its tool calls run. "Prompt is too long": collapse old tool results,
then compact older history into a summary. --stop-hook CMD must pass before
the loop may stop; a trace replays as a fixture (--replay run.jsonl).

    +------------+ stop_reason +=============================================+
    | call model | ----------> | next_transition() (new): name the next move |
    +-^-^-^-^-^-^+             +=============================================+
      | | | | | +-- next_turn         <- tool_use: run the tools, send results
      | | | | +---- escalate|continue <- max_tokens: 64k once, then <= 3 more
      | | | +------ collapse|compact  <- prompt too long: each once a turn
      | | +-------- make_room         <- window full: keep the cut reply
      | +---------- resume_pause      <- pause_turn: send it back as it is
      +------------ hook_retry        <- end_turn, but the stop hook fails
                    done | fail       <- end_turn, refusal | out of tries

Run: python s06_recovery.py --replay fixtures/s06_stop_hook.json   hook_retry
     python s06_recovery.py --trace run.jsonl "task"   then --replay run.jsonl
"""

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbook import conversation, display, launch, step_cli, tracing
from workbook.conversation import blocks, context_chars, result_text  # a message's blocks, its size

import anthropic

import s02_tools as s02
import s03_errors as s03
import s05_budget as s05
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import SYSTEM, TOOLS, ToolError, truncate
from s03_errors import CLIENT_OPTIONS, Retry, api_message
from s04_parallel import Schedule
from s05_budget import CTRL_C_IN_TOOLS, INTERRUPT, Budget, RepeatGuard, call_model, run_tools, stopped

DEFAULT_FIXTURE = "fixtures/s06_truncated_tool_use.json"


# -- new in s06: the recovery chain — every iteration ends in a named transition -------------------

ESCALATED_MAX_TOKENS = 64_000  # max_tokens, first answer: the same request with room to finish (streamed)
MAX_CONTINUATIONS = 3  # max_tokens again: "go on where you stopped", at most this often per turn
MAX_PAUSES = 5  # pause_turn resumed at most this often per turn
STOP_HOOK_RETRIES = 2  # default of --stop-hook-retries: a failing hook is fed back at most this often
KEEP_RECENT_RESULTS = 1  # collapse leaves the newest tool_result messages whole
COLLAPSE_MIN_CHARS = 200  # a tool_result shorter than this is left alone: its placeholder saves nothing
SERVER_TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]  # --web-search
CONTINUE_PROMPT = (
    "Your last reply was cut off by the output token limit. Continue exactly where it stopped, "
    "with no apology and no recap. If a tool call was cut off, make it again in full."
)
ROOM_PROMPT = (
    "Your last reply stopped because the context window was full; older tool results were shortened to "
    "make room. Continue exactly where it stopped, no recap. If a tool call was cut off, make it again."
)
GO_ON = {"max_tokens": CONTINUE_PROMPT, "model_context_window_exceeded": ROOM_PROMPT}  # by what cut it
TRUNCATED_CALL = "error: not run — your reply was cut off ({}) before this call was complete. Call again."
SUMMARY_PROMPT = (
    "The conversation has grown too long for the context window. Summarize everything above that is "
    "needed to carry on: the task, what was done and found, which files changed, what remains to do. "
    "Plain prose, no tool calls."
)
TRANSITIONS = {  # every iteration ends in exactly one of these; Claude Code's query.ts name after the |
    "next_turn": "tool_use: run the tools, send their results | next_turn",
    "escalate": "max_tokens: the same request again with max_tokens 64000 | escalate (to 64k)",
    "continue": "max_tokens again: keep the cut reply, ask the model to go on | max-output-tokens recovery",
    "collapse": "prompt too long (400): old tool results become placeholders, retry | collapse_drain_retry",
    "compact": "still too long: the older history becomes a summary, retry | reactive_compact_retry",
    "make_room": "context window full (a reply): keep it, collapse or compact, go on | (not in the article)",
    "resume_pause": "pause_turn: send the paused turn back unchanged, no new user message | (server tools)",
    "hook_retry": "end_turn, but the stop hook failed: its output goes to the model | stop_hook_blocking",
    "done": "end_turn (the hook passed), stop_sequence or refusal: stop | Terminal (completed)",
    "fail": "a cap was reached or nothing can be recovered: stop, saying why | Terminal (error)",
}
KEEPS_REPLY = ("next_turn", "continue", "make_room", "resume_pause", "hook_retry", "done")  # others drop it


@dataclass
class Recovery:
    """What the recovery chain has tried in this turn (reset when tools run), and its whole record."""

    stop_hook: str | None = None  # --stop-hook: a shell command that must pass before the loop may stop
    hook_retries: int = STOP_HOOK_RETRIES
    web_search: bool = False  # --web-search: the API's server-side search tool, the usual cause of pause_turn
    max_tokens: int = MAX_TOKENS
    continuations: int = 0
    pauses: int = 0
    collapsed: bool = False
    compacted: bool = False
    hook_failures: int = 0  # for the whole run, not per turn
    about: dict | None = None  # the trace's `run` line: what replaying this run's trace needs
    too_long: dict | None = None  # the last call's 400 "prompt is too long", as the trace keeps it
    log: list = field(default_factory=list)  # (transition, why), in order
    system: str = SYSTEM  # s02's constitution for this run

    def tools(self) -> list:
        return TOOLS + SERVER_TOOLS if self.web_search else TOOLS

    def differs(self) -> dict:
        """What this call's request has that the trace's start line does not: the trace logs it too."""
        fields = {"max_tokens": self.max_tokens, "stream": True} if self.max_tokens != MAX_TOKENS else {}
        return fields | ({"tools": self.tools()} if self.web_search else {})

    def sending(self, system: str):
        """This state, set to send `system` (s02's constitution) with every request, a compaction's too."""
        self.system = system
        return self

    def request(self, model: str) -> dict:
        """What every request of this run shares: the model, the system prompt, the tools."""
        return dict(model=model, system=self.system, tools=self.tools())

    def new_turn(self) -> None:
        """Tools ran: the next model call starts with a clean slate and the normal max_tokens."""
        self.max_tokens, self.continuations, self.pauses = MAX_TOKENS, 0, 0
        self.collapsed = self.compacted = False


def next_transition(response, state: Recovery, messages: list, hook: tuple | None = None) -> tuple[str, str]:
    """(transition, why): what the loop does next, from how the call ended and what was tried already.
    `response` is None when the request was too long; `hook` is (passed, output) if the stop hook ran."""
    stop = response.stop_reason if response is not None else "prompt_too_long"
    if stop in ("prompt_too_long", "model_context_window_exceeded"):  # the second is a reply: kept
        room = "make_room" if stop == "model_context_window_exceeded" else None
        if not state.collapsed and collapsible(messages):
            return room or "collapse", f"{stop}: {collapsible(messages)} old tool results can be collapsed"
        if not state.compacted and split_point(messages) is not None:
            return room or "compact", f"{stop}: collapsing is not enough; summarize the older history"
        return "fail", f"{stop}, and this turn has already collapsed and compacted once: giving up"
    if stop == "tool_use":
        return "next_turn", "tool_use"
    if stop == "max_tokens" and state.max_tokens < ESCALATED_MAX_TOKENS:
        return "escalate", f"cut off at {state.max_tokens} tokens; retrying with {ESCALATED_MAX_TOKENS}"
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
    if hook and not hook[0] and state.hook_failures < state.hook_retries:
        return "hook_retry", f"stop hook failed ({state.hook_failures + 1} of {state.hook_retries} retries)"
    if hook and not hook[0]:
        return "fail", f"the stop hook still fails after {state.hook_retries} retries"
    return "done", stop + (" and the stop hook passed" if hook else "")


def old_results(messages: list, keep: int = KEEP_RECENT_RESULTS) -> list[int]:
    """Indexes of the messages holding tool results, but the newest `keep` of them."""
    holders = [i for i, m in enumerate(messages) if any(b["type"] == "tool_result" for b in blocks(m))]
    return holders[: len(holders) - keep]


def collapsible(messages: list) -> int:
    """How many tool_results collapse() would shorten."""
    long = [b for i in old_results(messages) for b in blocks(messages[i]) if b["type"] == "tool_result"]
    return sum(len(result_text(b)) >= COLLAPSE_MIN_CHARS for b in long)


def collapse(messages: list) -> None:
    """Replace long old tool_result contents with a placeholder; ids, and so every pair, stay whole."""
    names = {b["id"]: b["name"] for m in messages for b in blocks(m) if b["type"] == "tool_use"}
    for i in old_results(messages):
        content = blocks(messages[i])
        for n, b in enumerate(content):
            if b["type"] == "tool_result" and len(result_text(b)) >= COLLAPSE_MIN_CHARS:
                what = f"{len(result_text(b))} characters of {names.get(b['tool_use_id'], 'tool')} output"
                content[n] = b | {"content": f"[collapsed: {what}; call it again if needed]"}
        messages[i] = {"role": "user", "content": content}


def split_point(messages: list) -> int | None:
    """Where compaction cuts: the last assistant message, so it stays with the results that answer it."""
    return next((i for i in range(len(messages) - 1, 0, -1) if messages[i]["role"] == "assistant"), None)


def compact(client, retry, model: str, messages: list, state: Recovery, trace_path):
    """Ask the model to summarize the history before the last turn; keep summary + last turn only."""
    cut = split_point(messages)
    older, recent = messages[:cut], messages[cut:]
    last = {"role": "user", "content": blocks(older[-1]) + [{"type": "text", "text": SUMMARY_PROMPT}]}
    ask = older[:-1] + [last]
    request = state.request(model) | {"tool_choice": {"type": "none"}}
    response = call_model(client, retry, False, messages=ask, max_tokens=MAX_TOKENS, **request)
    tracing.Trace(trace_path).call(0, ask, response, 0, None, tool_choice={"type": "none"}, stream=False)
    summary = "".join(b.text for b in response.content if b.type == "text").strip()
    task = messages[0]["content"] if isinstance(messages[0]["content"], str) else "(see the summary)"
    opening = f"{task}\n\n[The earlier part of this session was compacted into this summary:]\n{summary}"
    messages[:] = [{"role": "user", "content": opening}, *recent]
    return response


def continue_cut(messages: list, response) -> None:
    """After a cut reply is appended: answer its tool calls (never run: their input may be cut) and ask
    the model to go on. Answering keeps the reply verbatim and tells the model exactly what happened."""
    cut_by = response.stop_reason  # max_tokens, or model_context_window_exceeded
    answer = TRUNCATED_CALL.format(cut_by)
    results = [conversation.tool_result(b.id, answer, True) for b in response.content if b.type == "tool_use"]
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": GO_ON[cut_by]}]})


def hook_feedback(messages: list, state: Recovery, output: str) -> None:
    """The stop hook's failure, as the next user message: the model reads it and fixes what it says."""
    state.hook_failures += 1
    text = f"The stop hook `{state.stop_hook}` failed, so the task is not finished yet. Its output:\n{output}"
    messages.append({"role": "user", "content": text + "\nFix what it reports, then finish."})


def run_stop_hook(command: str, workspace: Path) -> tuple[bool, str]:
    """Run the stop hook in the workspace, as s03 runs bash: (passed, output)."""
    try:
        output = truncate(s03.run_bash(command, workspace))
    except ToolError as err:
        return False, f"the stop hook: {err}"
    return output.endswith("[exit code 0]"), output


def append_reply(messages: list, response, transition: str) -> None:
    """Append the reply verbatim if the transition keeps it (KEEPS_REPLY); after a pause it continues the
    paused turn, so it joins that message. A refusal is marked with its stop_details, for --resume."""
    if transition not in KEEPS_REPLY:
        return
    content = conversation.plain(response.content)  # as JSON: the SDK re-dumps its objects on every call
    if messages and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
    else:
        messages.append({"role": "assistant", "content": content})
    if response.stop_reason == "refusal":
        messages[-1][conversation.REFUSED] = conversation.plain(response.stop_details) or {}


def call_unless_too_long(client, retry, stream: bool, messages: list, model: str, state: Recovery):
    """s05's call_model() with the recovery state's max_tokens and tools. A 400 "prompt is too long" is
    not raised: the reply is None, and the error is kept in state.too_long, for the loop to recover."""
    request = state.request(model) | {"max_tokens": state.max_tokens}
    state.too_long = None
    try:
        return call_model(client, retry, stream, messages=messages, **request)
    except anthropic.BadRequestError as err:
        if "prompt is too long" not in api_message(err).lower():  # "prompt is too long: 213000 tokens > ..."
            raise
        display.say(f"400 {api_message(err)}", "yellow")
        state.too_long = {"status": 400, "body": err.body}
        return None


def tally(turns: list, response, budget: Budget, streamed: bool) -> None:
    """A reply is a turn: shown, and its tokens and cost spent (s05). None (too long) is not."""
    if response is not None:
        turns.append(response)
        display.show_turn(len(turns), response, streamed)
        display.show_spend(budget, budget.spend(response))


def ended(response) -> bool:
    return response is not None and response.stop_reason == "end_turn"


def ended_because(transition: str, why: str, response) -> str:
    """Why the run ended, for budget.reason: the model's own stop, or recovery giving up."""
    stop = f"the model ended its turn (stop_reason {response.stop_reason})" if transition == "done" else ""
    return stop or f"recovery gave up: {why}"


@dataclass
class Caller:
    """What recovery needs to call the model itself (compaction asks it for a summary)."""

    client: anthropic.Anthropic
    retry: Retry | None
    model: str
    trace_path: Path | None


def recover(transition: str, messages: list, response, state: Recovery, hook: tuple | None, caller: Caller):
    """Carry out a recovery transition on the conversation (then sent again): a compaction's summary."""
    if transition == "escalate":
        state.max_tokens = ESCALATED_MAX_TOKENS
    elif transition == "continue":
        state.continuations += 1
        continue_cut(messages, response)
    elif transition == "resume_pause":
        state.pauses += 1
    elif transition == "hook_retry":
        hook_feedback(messages, state, hook[1])
    elif transition == "make_room":  # the kept reply's cut calls answered; then collapse, else compact
        continue_cut(messages, response)
        transition = "collapse" if not state.collapsed and collapsible(messages) else "compact"
    if transition in ("collapse", "compact"):
        before, summary = context_chars(messages), None
        if transition == "collapse":
            state.collapsed = True
            collapse(messages)
        else:
            state.compacted = True
            summary = compact(caller.client, caller.retry, caller.model, messages, state, caller.trace_path)
        tracing.show_context(transition, before, context_chars(messages), caller.trace_path)
        return summary
    return None


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
    recovery: Recovery | None = None,  # s06: the stop hook, --web-search, and the transitions taken
) -> list:
    """s05's loop, each iteration ending in a named transition: recovery repairs what it can, goes on."""
    turns, guard, trace = [], RepeatGuard(), tracing.Trace(trace_path)  # responses; the brake; the trace
    budget, state = budget or Budget(model=model), (recovery or Recovery()).sending(system)  # what it tried
    caller = Caller(client, retry, model, trace_path)  # how recovery calls the model itself (compaction)
    s05.start_trace(trace_path, "s06_recovery", state.request(model), stream, budget, state.about)
    while True:
        # 0. Before paying for another call, check every limit (s05).
        if budget.exceeded():
            return stopped(turns, budget, trace_path, budget.exceeded())

        # 1. Send the whole history. (new in s06) Recovery sets max_tokens and tools; too long is no crash.
        started, live = time.monotonic(), stream or state.max_tokens > MAX_TOKENS  # 64k must stream
        with display.waiting(len(turns) + 1, live):
            response = call_unless_too_long(client, retry, live, messages, model, state)  # None: too long
        tally(turns, response, budget, live)
        trace.call(len(turns), messages, response or state.too_long, started, budget, **state.differs())

        # 2. (new in s06) Name the transition: how the call ended, what recovery tried, the stop hook.
        hook = run_stop_hook(state.stop_hook, workspace) if state.stop_hook and ended(response) else None
        transition, why = next_transition(response, state, messages, hook)
        tracing.show_transition(state.log, transition, why, trace_path)

        # 3. Append the reply verbatim, unless the transition throws it away (an escalation asks again).
        append_reply(messages, response, transition)

        # 4. done and fail end the loop; any other transition repairs the conversation and goes round.
        if transition in ("done", "fail"):
            return stopped(turns, budget, trace_path, ended_because(transition, why, response))
        if transition != "next_turn":
            summary = recover(transition, messages, response, state, hook, caller)
            tally(turns, summary, budget, False)  # a compaction's summary is a model call: it costs a step
            continue
        # 5. Run the tool calls as s05 does: reads side by side, the repeat brake, Ctrl-C keeps the work.
        calls = [block for block in response.content if block.type == "tool_use"]
        schedule, allowed, started = Schedule(read_latency), guard.screen(calls), time.monotonic()
        with s05.ctrl_c_lets_tools_finish():
            ran = run_tools(allowed, workspace, permission, audit, schedule)
        results = guard.merge(calls, ran)
        display.show_tools(calls, results, schedule.timeline)
        messages.append({"role": "user", "content": results})
        state.new_turn()  # (new in s06) tools ran: the next call starts a turn with fresh recovery caps
        stop = CTRL_C_IN_TOOLS if INTERRUPT.is_set() else guard.stop  # a Ctrl-C, or s04's repeat brake
        trace.tools(len(turns), calls, results, started, stop)
        if stop:
            return stopped(turns, budget, trace_path, stop)


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE)
    step_cli.add_permission_flag(parser, s02.PERMISSIONS)
    step_cli.add_latency_flag(parser)
    step_cli.add_budget_flags(parser, Budget())
    step_cli.add_recovery_flags(parser, STOP_HOOK_RETRIES)
    flags = step_cli.Flags(parser, argv)  # in replay, the fixture's own flags apply too
    args = step_cli.resume_mode(flags.parse(), s05.RESUME_FIXTURE, s05.RESUME_INSTRUCTION)
    prepare = step_cli.trace_as_fixture  # --replay run.jsonl: the trace, converted to a fixture first
    return step_cli.run_step(args, MODEL, "s06_recovery", run_task, flags, prepare, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s05's run with this loop; a fixture's stop hook meets s02's gate first; giving up exits 1."""
    step_cli.gate_fixture_hook(run, args, s02.gate, s02.REGISTRY["bash"])
    about = step_cli.run_line(run, args)  # the trace's `run` line, for --replay run.jsonl
    state = Recovery(args.stop_hook, args.stop_hook_retries, args.web_search, about=about)
    code = s05.run_task(run, args, agent_loop, "s06_recovery", recovery=state)
    return 1 if code == 0 and state.log and state.log[-1][0] == "fail" else code


if __name__ == "__main__":
    sys.exit(main())
