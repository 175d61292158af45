"""s06_recovery.py — Recovery: every turn ends in a named transition, and the loop climbs back.

Adds over s05: every iteration ends in a named transition (next_transition()). max_tokens: never run
the cut reply; retry at 64k, then continue at most 3 times. "prompt is too long": collapse old tool
results, then compact the history into a summary, once a turn. pause_turn goes back unchanged.
--stop-hook CMD must pass before the loop may stop. A trace replays as a fixture (--replay run.jsonl).

    +--------------+  stop_reason  +=========================================+
    | call model   | ------------> | next_transition(): what happens next?   |  new in s06
    +--------------+               +=========================================+
        ^  ^  ^  ^                   | tool_use        -> next_turn: run the tools, send results
        |  |  |  +-------------------| max_tokens      -> escalate to 64k | continue (<= 3) | fail
        |  |  +----------------------| too long (400)  -> collapse | compact (<= 1 a turn) | fail
        |  +-------------------------| pause_turn      -> resume_pause: echo the content unchanged
        +----------------------------| end_turn        -> stop hook fails? hook_retry : done
                                     | refusal         -> done, saying so
Run: python s06_recovery.py --replay fixtures/s06_stop_hook.json   (each s06_* fixture is one path)
     python s06_recovery.py --trace run.jsonl "task"   then   --replay run.jsonl
"""

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from workbook import conversation, display, errors, launch, step_cli, tracing  # isort: split

import anthropic

import s02_tools as s02
import s03_errors as s03
import s04_parallel as s04
import s05_budget as s05
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import SYSTEM, TOOLS, ToolError, truncate
from s03_errors import CLIENT_OPTIONS, Retry, api_message
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
TRUNCATED_CALL = (
    "error: not run — your reply was cut off (max_tokens) before this call was complete. Call again."
)
SUMMARY_PROMPT = (
    "The conversation has grown too long for the context window. Summarize everything above that is "
    "needed to carry on: the task, what was done and found, which files changed, what remains to do. "
    "Plain prose, no tool calls."
)
TRANSITIONS = {  # every iteration of the loop ends in exactly one of these
    "next_turn": "tool_use: run the tools, send their results",
    "escalate": "max_tokens: the same request again with max_tokens 64000",
    "continue": "max_tokens again: keep the partial reply, ask the model to go on",
    "collapse": "prompt too long: old tool results become short placeholders, retry",
    "compact": "still too long: the older history becomes a summary, retry",
    "resume_pause": "pause_turn: send the paused turn back unchanged, no new user message",
    "hook_retry": "end_turn, but the stop hook failed: its output goes back to the model",
    "done": "end_turn (the hook passed), stop_sequence or refusal: stop",
    "fail": "a cap was reached or nothing can be recovered: stop, saying why",
}
KEEPS_REPLY = ("next_turn", "continue", "resume_pause", "hook_retry", "done")  # the others throw it away


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
    log: list = field(default_factory=list)  # (transition, why), in order

    def tools(self) -> list:
        return TOOLS + SERVER_TOOLS if self.web_search else TOOLS

    def new_turn(self) -> None:
        """Tools ran: the next model call starts with a clean slate and the normal max_tokens."""
        self.max_tokens, self.continuations, self.pauses = MAX_TOKENS, 0, 0
        self.collapsed = self.compacted = False


def next_transition(response, state: Recovery, messages: list, hook: tuple | None = None) -> tuple[str, str]:
    """(transition, why): what the loop does next, from how the call ended and what was tried already.
    `response` is None when the request was too long; `hook` is (passed, output) if the stop hook ran."""
    stop = response.stop_reason if response is not None else "prompt_too_long"
    if stop in ("prompt_too_long", "model_context_window_exceeded"):
        if not state.collapsed and collapsible(messages):
            return "collapse", f"{stop}: {collapsible(messages)} old tool results can be collapsed"
        if not state.compacted and split_point(messages) is not None:
            return "compact", f"{stop}: collapsing is not enough; summarize the older history"
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
    if stop == "refusal":
        return "done", "refusal: the model declined to go on, so the loop stops here"
    if hook and not hook[0] and state.hook_failures < state.hook_retries:
        return "hook_retry", f"stop hook failed ({state.hook_failures + 1} of {state.hook_retries} retries)"
    if hook and not hook[0]:
        return "fail", f"the stop hook still fails after {state.hook_retries} retries"
    return "done", stop + (" and the stop hook passed" if hook else "")


def show_transition(state: Recovery, transition: str, why: str, trace_path: Path | None) -> None:
    """The transition on screen, in the run's record and in the trace."""
    state.log.append((transition, why))
    tracing.trace(trace_path, "transition", name=transition, why=why)
    colour = {"done": "green", "fail": "red", "next_turn": "dim"}.get(transition, "magenta")
    display.say(f"→ {transition}  {why}", colour)


def context_chars(messages: list) -> int:
    """The size of the conversation in characters of JSON (roughly 4 per token)."""
    return len(json.dumps(conversation.plain([m["content"] for m in messages]), ensure_ascii=False))


def blocks(message: dict) -> list[dict]:
    """A message's content as a list of plain blocks, whether a string, our dicts or the SDK's objects."""
    content = conversation.plain(message["content"])
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def result_text(block: dict) -> str:
    content = block.get("content", "")
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


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
    request = dict(model=model, system=SYSTEM, tools=state.tools(), tool_choice={"type": "none"})
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
    results = [
        conversation.tool_result(b.id, TRUNCATED_CALL, True) for b in response.content if b.type == "tool_use"
    ]
    messages.append({"role": "user", "content": [*results, {"type": "text", "text": CONTINUE_PROMPT}]})


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


def append_reply(messages: list, content: list) -> None:
    """Append the reply verbatim; after a pause it continues the paused turn, so it joins that message."""
    if messages and messages[-1]["role"] == "assistant":
        messages[-1] = {"role": "assistant", "content": [*messages[-1]["content"], *content]}
    else:
        messages.append({"role": "assistant", "content": content})


def call_unless_too_long(client, retry, stream: bool, messages: list, model: str, state: Recovery) -> tuple:
    """s05's call_model() with the recovery state's max_tokens and tools, as (response, response); a
    400 "prompt is too long" is (None, the error) instead of raised, for the loop to recover from."""
    request = dict(model=model, system=SYSTEM, tools=state.tools(), max_tokens=state.max_tokens)
    try:
        response = call_model(client, retry, stream, messages=messages, **request)
        return response, response
    except anthropic.BadRequestError as err:
        if "prompt is too long" not in api_message(err).lower():  # "prompt is too long: 213000 tokens > ..."
            raise
        display.say(f"400 {api_message(err)}", "yellow")
        return None, {"status": 400, "body": err.body}


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


def recover(transition: str, client, retry, model: str, messages: list, response, state, hook, trace_path):
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
    elif transition in ("collapse", "compact"):
        before, summary = context_chars(messages), None
        if transition == "collapse":
            state.collapsed = True
            collapse(messages)
        else:
            state.compacted = True
            summary = compact(client, retry, model, messages, state, trace_path)
        tracing.show_context(transition, before, context_chars(messages), trace_path)
        return summary
    return None


def run_line(run: launch.Run, args) -> dict:
    """The trace's `run` line: what a replay of the trace needs besides the requests (step_cli's)."""
    hook = ["--stop-hook", args.stop_hook, "--stop-hook-retries", str(args.stop_hook_retries)]
    return step_cli.run_line(run, ["--web-search"] * args.web_search + hook * bool(args.stop_hook))


def differs(state: Recovery) -> dict:
    """What this call's request has that the trace's start line does not: the trace logs it too."""
    fields = {"max_tokens": state.max_tokens, "stream": True} if state.max_tokens != MAX_TOKENS else {}
    return fields | ({"tools": state.tools()} if state.web_search else {})


def add_flags(parser) -> None:
    """The stop hook and the server-side search tool."""
    add = parser.add_argument
    add("--stop-hook", metavar="CMD", help="a shell command that must pass before the loop may stop")
    add("--stop-hook-retries", type=step_cli.count, default=STOP_HOOK_RETRIES, metavar="N", help="default 2")
    add("--web-search", action="store_true", help="offer the API's server-side web search tool")


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
    recovery: Recovery | None = None,  # s06: the stop hook, --web-search, and the transitions taken
) -> list:
    """s05's loop, each iteration ending in a named transition: recovery repairs what it can, goes on."""
    turns, guard, trace = [], RepeatGuard(), tracing.Trace(trace_path)  # responses; the brake; the trace
    budget, state = budget or Budget(model=model), recovery or Recovery()  # state: what recovery tried
    s05.start_trace(trace_path, "s06_recovery", model, stream, budget, state.about)
    while True:
        # 0. Before paying for another call, check every limit (s05).
        if budget.exceeded():
            return stopped(turns, budget, trace_path, budget.exceeded())

        # 1. Send the whole history. (new in s06) Recovery sets max_tokens and tools; too long is no crash.
        started, live = time.monotonic(), stream or state.max_tokens > MAX_TOKENS  # 64k must stream
        with display.waiting(len(turns) + 1, live):
            response, outcome = call_unless_too_long(client, retry, live, messages, model, state)
        tally(turns, response, budget, live)
        trace.call(len(turns), messages, outcome, started, budget, **differs(state))

        # 2. (new in s06) Name the transition: how the call ended, what recovery tried, the stop hook.
        hook = run_stop_hook(state.stop_hook, workspace) if state.stop_hook and ended(response) else None
        transition, why = next_transition(response, state, messages, hook)
        show_transition(state, transition, why, trace_path)

        # 3. Append the reply verbatim, unless the transition throws it away (an escalation asks again).
        if transition in KEEPS_REPLY:
            append_reply(messages, response.content)

        # 4. done and fail end the loop; any other transition repairs the conversation and goes round.
        if transition in ("done", "fail"):
            return stopped(turns, budget, trace_path, ended_because(transition, why, response))
        if transition != "next_turn":
            summary = recover(transition, client, retry, model, messages, response, state, hook, trace_path)
            tally(turns, summary, budget, False)  # a compaction's summary is a model call: it costs a step
            continue

        # 5. Run the tool calls as s05 does: reads side by side, the repeat brake, Ctrl-C keeps the work.
        calls = [block for block in response.content if block.type == "tool_use"]
        timeline, allowed, started = [], guard.screen(calls), time.monotonic()
        with s05.ctrl_c_lets_tools_finish():
            ran = run_tools(allowed, workspace, permission, audit, timeline, read_latency=read_latency)
        results = guard.merge(calls, ran)
        display.show_tools(calls, results, timeline)
        messages.append({"role": "user", "content": results})
        state.new_turn()  # (new in s06) tools ran: the next call starts a turn with fresh recovery caps
        budget.reason = CTRL_C_IN_TOOLS if INTERRUPT.is_set() else guard.stop
        trace.tools(len(turns), calls, results, started, budget.reason)
        if budget.reason:
            return stopped(turns, budget, trace_path)


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    parser = launch.make_parser(__doc__, DEFAULT_FIXTURE)
    for add in (s02.add_flags, s04.add_flags, s05.add_flags, add_flags):
        add(parser)
    args = step_cli.resume_mode(parser.parse_args(argv), s05.RESUME_FIXTURE, s05.RESUME_INSTRUCTION)
    body = lambda run: run_task(run, step_cli.with_fixture_flags(parser, argv, run))  # noqa: E731
    return step_cli.run_step(args, MODEL, "s06_recovery", body, step_cli.trace_as_fixture, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s05's run with this loop; a fixture's stop hook meets s02's gate first; giving up exits 1."""
    hook, permission = args.stop_hook, step_cli.permission_for(args.permission, run)
    if hook and {hook, f"--stop-hook={hook}"} & set(run.fixture_args):  # a stranger's command
        if refusal := s02.gate(s02.REGISTRY["bash"], {"command": hook}, permission, run.trusted)[1]:
            raise errors.WorkbookError(f"the fixture's --stop-hook {hook!r}: {refusal}")
    state = Recovery(hook, args.stop_hook_retries, args.web_search, about=run_line(run, args))
    code = s05.run_task(run, args, agent_loop, "s06_recovery", recovery=state)
    return 1 if code == 0 and state.log and state.log[-1][0] == "fail" else code


if __name__ == "__main__":
    sys.exit(main())
