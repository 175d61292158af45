"""s09_keep_the_work.py — Never losing the work.

Adds over s08: a first Ctrl-C lets this turn's tools finish, answers every
call, saves and stops; a second cuts short the calls still open, keeping the
results of those that had ended. However the run ends, the conversation is
saved: --resume FILE goes on from it with a new instruction.

    user task, or --resume FILE + a new instruction
        v
    +--------------------+  done | fail | a limit  +=========================+
    | s08's loop         | ---------------------> | saved: the conversation |
    |                    |                        | and how to --resume it  |
    +--------------------+                        +=========================+
        ^      | tool_use                                 ^ Ctrl-C while the
        |      v                                          | tools ran: they
        |  +======================================+       | finish, each call
        +--| run_tools_until_ctrl_c() (new): a    |-------+ is answered
           | first Ctrl-C waits for the turn      |
           +======================================+

Run from the root: python -m workbook.later.s09_keep_the_work
  (no flags)                       replay: a run cut short by Ctrl-C, resumed
  --replay fixtures/s05_interrupt.json
      (press Ctrl-C while ./slow_check.sh runs: once, or twice)
"""

import signal
import sys
import textwrap
import threading
from contextlib import contextmanager
from pathlib import Path

from workbook import conversation, display, errors, launch, step_cli
from workbook.api.messages import blocks  # a message's blocks, as dicts
from workbook.conversation import tool_result  # {"type": "tool_result", "tool_use_id": ..., ...}
from workbook.later.s07_really_done import append_reply, run_stop_hook
from workbook.later.s08_full_context import (
    Settings,
    call_unless_too_long,
    count,
    count_summary,
    next_transition,
    recover,
)

import anthropic

import s04_parallel as s04
from s01_agent_loop import MODEL
from s03_errors import CLIENT_OPTIONS, FATAL, stop_cleanly
from s05_budget import RepeatBrake, held_answers, stopped
from s06_recovery import log_transition

DEFAULT_FIXTURE = "fixtures/s05_resume.json"


# -- new in s09: a Ctrl-C keeps the work — the turn's tools finish, every call is answered ------------

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
    """s05's run_tools (the brake's answers, `held`; s04 runs the rest), under Ctrl-C: (results, timeline,
    why a Ctrl-C stops the run, or ""). After a first Ctrl-C every call runs to its end. A second cuts the
    turn short at once: each call that had ended keeps its real result, and only those still open are
    answered as interrupted, so that the model is never told that a command which ran did not."""
    answers = held_answers(calls, held, settings)  # s05's; s04's run_tools adds each other as it ends
    with ctrl_c_lets_tools_finish():
        try:
            results, timeline = s04.run_tools(calls, settings, answers)
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


def interrupted(messages: list, settings: "Settings") -> None:
    """A Ctrl-C that ended the run at once: answer the calls still open, and say where it came."""
    if answer_open_calls(messages):
        where = "a Ctrl-C before the turn's results were kept: its calls answered as interrupted"
    else:
        where = "during a model call: its partial reply was dropped"
    stopped(settings, f"interrupted by the user ({where})")


# -- new in s09: --resume — a saved conversation, and a new instruction after it ----------------------


def first_messages(run: launch.Run, args) -> list:
    """The task as the first message; or, with --resume, the saved conversation plus the instruction."""
    resume = args.resume
    if not resume:
        return [{"role": "user", "content": run.task}]
    saved, refused = conversation.resumable(conversation.load_conversation(conversation.repo_path(resume)))
    task = clipped(first_text(saved), 300)  # the task it was given, as the model read it
    display.say(f"resuming {len(saved)} saved messages, from\n  {resume}\nits task:", "bold")
    display.say(textwrap.fill(task, display.console.width - 2, initial_indent="  ", subsequent_indent="  "))
    display.say("its last turn:", "bold")
    display.show_resumed(saved)  # the last calls, and the answers saved for them
    display.say(refused or "then the new instruction (printed above, after the banner)", "bold")
    return continued(saved, run.task)


def mark_a_refusal(messages: list, last) -> None:
    """A run that ended on the model's refusal: its saved turn keeps the refusal's stop_details (never
    sent), so that a --resume of it can say what was refused before the new instruction."""
    if last is not None and last.stop_reason == "refusal" and messages[-1]["role"] == "assistant":
        messages[-1][conversation.REFUSED] = conversation.plain(last.stop_details) or {}


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


def first_text(messages: list) -> str:
    """The text of the first message: the task the conversation was given."""
    content = blocks(messages[0]) if messages else []
    return "\n".join(b["text"] for b in content if b.get("type") == "text").strip()


def clipped(text: str, limit: int) -> str:
    """`text`, cut to at most `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the loop (s09 adds no setting: what it keeps is the conversation) ----------------------------


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """s08's loop. (new in s09) A first Ctrl-C lets the turn's tools finish, then stops; one during a
    model call, or a second, raises KeyboardInterrupt: run_task keeps the work."""
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

        # 1. Send the whole history (s06); too long is no crash (s08).
        response = call_unless_too_long(client, messages, settings)  # None: too long
        if response is not None:
            count(turns, response, budget)

        # Name the transition: how the call ended, what recovery tried (s06), the stop hook (s07).
        hook = run_stop_hook(settings, response) if response is not None else None
        transition, why = next_transition(response, state, messages, hook)
        log_transition(transition, why, settings)
        if transition == "fail":  # recovery gave up: the cut reply is not kept, and the run ends (s06)
            stopped(settings, f"recovery gave up: {why}")
            return turns

        # 2. Append the reply verbatim, unless recovery drops it (s06's escalate), or no reply came: the
        #    request was too long (s08's collapse, compact). After a pause it joins the paused turn (s07).
        if transition not in ("escalate", "collapse", "compact"):
            append_reply(messages, response)

        # 3. Any stop but tool_use ends the loop; a repair sends the conversation again (s06).
        if transition == "done":
            stopped(settings, f"the model ended its turn (stop_reason {response.stop_reason})")
            return turns
        if transition != "next_turn":
            summary = recover(transition, messages, response, hook, client, settings)
            if summary is not None:  # a compaction's summary is a model call: it costs a step
                count_summary(turns, summary, budget, state.turn)
            continue

        # 4. Run the tool calls as s05 does: reads side by side, the repeat brake. (new in s09) A first
        #    Ctrl-C lets every call of this turn run to its end, then stops; a second cuts them short.
        calls = [block for block in response.content if block.type == "tool_use"]
        held = brake.hold_back(calls)
        results, timeline, ctrl_c = run_tools_until_ctrl_c(calls, settings, held)
        messages.append({"role": "user", "content": results})  # kept first: a Ctrl-C may come any time
        brake.remember(calls, results)
        display.show_tools(calls, results, timeline)
        state.new_turn()  # tools ran: the next call starts a turn with fresh recovery caps (s06)
        stop = ctrl_c or brake.stop  # (new in s09) a Ctrl-C, or s05's repeat brake
        if stop:
            stopped(settings, stop)
            return turns


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s09_keep_the_work")  # every earlier step's
    step_cli.add_keep_flags(parser)  # s09's own: --resume, --save
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """The loop; however it ends, even by Ctrl-C, the conversation is saved, to resume. Recovery giving
    up is exit 1, a Ctrl-C 130."""
    settings = Settings.for_run(run, args)
    messages = first_messages(run, args)
    saved = saved_path(run, args)
    try:
        turns = agent_loop(run.client, messages, settings)
        mark_a_refusal(messages, turns[-1] if turns else None)
    except FATAL as err:  # s03: what retrying cannot fix; (new in s09) every open call answered first
        answer_open_calls(messages)  # a resume of the saved conversation must answer every tool_use
        return stop_cleanly(err, messages, saved)
    except KeyboardInterrupt:  # a Ctrl-C during a model call, or a second one while tools ran
        interrupted(messages, settings)
    code = keep_the_work(run, messages, settings, saved)
    return 1 if code == 0 and settings.recovery.gave_up() else code


def saved_path(run: launch.Run, args) -> Path:
    """Where the conversation is saved: --save, or the run's folder."""
    return Path(args.save or step_cli.run_files(run) / "conversation.json")


def keep_the_work(run: launch.Run, messages: list, settings: Settings, saved: Path) -> int:
    """However the run ended: the summary, every open call answered, the conversation saved, and how
    to go on from it. Exit code 130 if a Ctrl-C ended it, else 0."""
    display.show_budget(settings.budget)
    answer_open_calls(messages)  # a conversation to resume must answer every tool_use
    conversation.save_conversation(messages, saved)
    display.say(f"audit log: {settings.audit}\nconversation saved: {saved}")
    display.say("\n".join(step_cli.resume_hint(run.script, saved)))
    return 130 if settings.budget.reason.startswith("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
