"""s04_parallel.py — Calls side by side: reads together, writes one at a time.

Adds over s03: `run_tools()` groups a turn's calls in order: a run of
read-only calls runs together in a thread pool; any other call is a barrier
that runs alone, so two writes never race and only a lone call can ask a
person. Past ten calls in a turn, the rest are answered with an error.

    user task
        |
        v
    +--------------+  stop_reason != tool_use   +------+
    | call_model() | -------------------------> | done |
    +--------------+                            +------+
        ^      | tool_use x N
        |      v
        |  +========================================+  new in s04: reads
        +--| run_tools(): groups the calls in order |  side by side in a
           | [read read grep] -> [write] -> [read]  |  pool; every other
           | each via s03's execute(); answers in   |  call alone; past the
           | tool_use order, in one user message    |  cap: is_error; a
           +========================================+  timeline shows groups

Run: python s04_parallel.py   replay: two reads together, then an edit alone
     python s04_parallel.py --replay fixtures/s04_read_many.json   5 reads
     python s04_parallel.py --replay fixtures/s04_tool_storm.json   12 calls
     python s04_parallel.py --read-latency 0   no simulated read latency
     python s04_parallel.py "task"   live, with ANTHROPIC_API_KEY
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Self

from workbook import display, launch, step_cli
from workbook.audit import log_call  # s02's audit log: one JSON line per call
from workbook.conversation import tool_result  # {"type": "tool_result", "tool_use_id": ..., ...}
from workbook.timeline import Timed  # when a call ran, for the timeline on screen

import anthropic

import s03_errors as s03
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import REGISTRY, TOOLS
from s03_errors import CLIENT_OPTIONS, call_model, execute

DEFAULT_FIXTURE = "fixtures/s04_mixed_turn.json"


# -- new in s04: a turn's calls side by side — reads run together, every other call alone, in order -

MAX_TOOLS_PER_TURN = 10  # a turn asking for more: the calls past this are answered with an error, not run
MAX_PARALLEL = 8  # reads running at once, at most


def reads_only(block) -> bool:
    """Whether a call only reads, and so may run beside other reads (an unknown tool does not). bash
    never does, not even `cat`: a command can write, and it may need a person's yes, asked alone."""
    tool = REGISTRY.get(block.name)
    return tool is not None and tool.read_only


def plan(blocks: list) -> list[list[int]]:
    """The calls' indexes, grouped in order: a run of reads is one group; any other call is alone."""
    groups = []
    for i, block in enumerate(blocks):
        if reads_only(block) and groups and reads_only(blocks[groups[-1][-1]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def run_tools(
    calls: list, settings: "Settings", answers: dict | None = None
) -> tuple[list[dict], list[Timed]]:
    """Answer every tool_use once, in the order asked: (tool_results, timeline). Each group of reads
    runs in the thread pool, every other call alone in this thread, so it overlaps nothing and only it
    can ask a person. `answers` (tool_use id -> (output, is_error)) receives each call's answer the
    moment it ends; a call already answered there is not run. The timeline is for the screen only."""
    answers = {} if answers is None else answers
    runnable = [block for block in calls if block.id not in answers]
    timeline = []

    def run(i: int, group: int) -> None:
        block = runnable[i]
        started = time.monotonic()
        if settings.read_latency and reads_only(block):
            time.sleep(settings.read_latency)  # stands in for a slow disk or a remote read
        answers[block.id] = execute(
            block, settings.workspace, settings.permission, settings.audit, settings.ask
        )
        timeline.append(Timed(i, block, group, started, time.monotonic()))

    for group, indexes in enumerate(plan(runnable[:MAX_TOOLS_PER_TURN]), 1):
        if len(indexes) == 1:  # a write, bash, or a lone read: here, in the loop's thread, alone
            run(indexes[0], group)
            continue
        with ThreadPoolExecutor(MAX_PARALLEL, "read") as readers:  # the group's reads, side by side
            running = [readers.submit(run, i, group) for i in indexes]
        for future in running:  # the whole group has finished (the pool's exit waits for it)
            future.result()  # re-raises in this thread anything execute() let through
    for block in runnable[MAX_TOOLS_PER_TURN:]:
        answers[block.id] = over_the_cap(block, len(calls), settings), True
    return [tool_result(block.id, *answers[block.id]) for block in calls], timeline


def over_the_cap(block, asked: int, settings: "Settings") -> str:
    """The answer to a call past MAX_TOOLS_PER_TURN: it did not run, and the model is told why."""
    output = (
        f"error: not run: this turn asked for {asked} tool calls and at most {MAX_TOOLS_PER_TURN} run "
        "per turn. Ask again for the ones you still need, fewer at a time."
    )
    log_call(settings.audit, block, "over the cap", output, True, time.monotonic())
    return output


# -- the loop --------------------------------------------------------------------------------------


@dataclass
class Settings(s03.Settings):
    """s03's settings, and the seconds added to each read (--read-latency), to watch reads overlap."""

    read_latency: float = 0.0

    @classmethod
    def for_run(cls, run: launch.Run, args) -> Self:
        """s03's, with --read-latency (in a replay, else the fixture's own read_latency)."""
        settings = super().for_run(run, args)
        settings.read_latency = step_cli.read_latency(args, run)
        return settings


def agent_loop(client: anthropic.Anthropic, messages: list, settings: Settings) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops."""
    turns = []  # every response, in order
    while True:
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

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return turns

        # 4. (new in s04) Run the tool calls, reads side by side and the rest one at a time, and
        #    answer each id exactly once, in the order asked, all in one user message.
        calls = [block for block in response.content if block.type == "tool_use"]
        results, timeline = run_tools(calls, settings)  # the timeline is shown, never sent
        display.show_tools(calls, results, timeline)
        messages.append({"role": "user", "content": results})


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s04_parallel")  # s02's --permission too
    step_cli.add_latency_flag(parser)  # s04's own: --read-latency
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s03's run, with this step's loop and settings."""
    return s03.run_and_report(agent_loop, Settings.for_run(run, args), run)


if __name__ == "__main__":
    sys.exit(main())
