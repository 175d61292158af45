"""s04_parallel.py — Several calls a turn: reads together, writes one at a time.

Adds over s03: `run_tools()` groups a turn's calls in order: a run of
read-only calls runs together in a thread pool; any other call is a barrier
that runs alone, so two writes never race and only a lone call can ask a
person. A repeat brake refuses a third identical call, and an edit that flips
a file back again (A→B→A→B).

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

Run: python s04_parallel.py       replay: four reads and a grep in one turn
     python s04_parallel.py --replay fixtures/s04_mixed_turn.json   a write
     python s04_parallel.py --replay fixtures/s04_tool_storm.json   12 calls
     python s04_parallel.py --read-latency 0   no simulated read latency
     python s04_parallel.py "task"   live, with ANTHROPIC_API_KEY
"""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from workbook import display, launch, step_cli
from workbook.timeline import Timed  # when each call ran, for the timeline

import anthropic

import s02_tools as s02
from s01_agent_loop import MAX_TOKENS, MODEL
from s02_tools import SYSTEM, TOOLS
from s03_errors import (
    CLIENT_OPTIONS,
    REGISTRY,
    GaveUp,
    HarnessError,
    Retry,
    call_model,
    execute,
    retry_policy,
    stop_cleanly,
)

DEFAULT_FIXTURE = "fixtures/s04_read_many.json"

# -- new in s04: several tool calls per turn — reads run together, every other call alone, in order --

MAX_TOOLS_PER_TURN = 10  # a turn asking for more: the calls past this are answered with an error, not run
MAX_PARALLEL = 8  # reads running at once, at most
READERS = ThreadPoolExecutor(MAX_PARALLEL, "read")  # made once: starting threads every turn is slow when busy


def reads_only(block) -> bool:
    """Whether a call only reads, and so may run beside other reads (an unknown tool does not)."""
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


def over_the_cap(block, asked: int, audit: Path | None) -> str:
    """The answer to a call past MAX_TOOLS_PER_TURN: it did not run, and the model is told why."""
    output = (
        f"error: not run: this turn asked for {asked} tool calls and at most {MAX_TOOLS_PER_TURN} run "
        "per turn. Ask again for the ones you still need, fewer at a time."
    )
    s02.log_call(audit, block, "over the cap", output, True, time.monotonic())
    return output


@dataclass
class Schedule:
    """How one turn's calls run, and when they did: the pool its reads share (one with a single worker
    runs them one by one, as s03 did), the seconds added to each read (--read-latency), and the
    timeline of each call's start and end, for the reader's eyes only."""

    read_latency: float = 0.0
    pool: ThreadPoolExecutor = READERS
    timeline: list = field(default_factory=list)


def run_tools(
    blocks: list,
    workspace: Path,
    permission: str = "auto",
    audit: Path | None = None,
    schedule: Schedule | None = None,
    execute=execute,  # s03's; s05 passes its own, which a Ctrl-C can stop
) -> list[dict]:
    """Answer every tool_use once, in the order asked: each group of reads in a thread pool, every
    other call alone in this thread, so it overlaps nothing and only it can ask a person."""
    schedule = schedule or Schedule()
    answers = [None] * len(blocks)  # (output, is_error) per call, in tool_use order

    def run(i: int, group: int) -> None:
        started = time.monotonic()
        if schedule.read_latency and reads_only(blocks[i]):
            time.sleep(schedule.read_latency)  # stands in for a slow disk or a remote read
        answers[i] = execute(blocks[i], workspace, permission, audit)
        schedule.timeline.append(Timed(i, blocks[i], group, started, time.monotonic()))

    for group, calls in enumerate(plan(blocks[:MAX_TOOLS_PER_TURN]), 1):
        if len(calls) == 1:  # a write, bash, or a lone read: here, in the loop's thread, alone
            run(calls[0], group)
            continue
        running = [schedule.pool.submit(run, i, group) for i in calls]
        wait(running)  # the whole group has finished before the next call starts
        for future in running:
            future.result()  # re-raises in this thread anything execute() let through
    for i in range(MAX_TOOLS_PER_TURN, len(blocks)):
        answers[i] = over_the_cap(blocks[i], len(blocks), audit), True
    return [
        {"type": "tool_result", "tool_use_id": block.id, "content": output, "is_error": is_error}
        for block, (output, is_error) in zip(blocks, answers)
    ]


# -- new in s04: the repeat brake — the same call, with the same result, again and again ---------------

REPEAT_LIMIT = 3  # the same call (tool, input, result) this many times in a row: the last one is refused


@dataclass
class RepeatGuard:
    """The brake on a model going round in circles. It sees every call in the order asked: a call is
    refused (an is_error asking for another approach) when the REPEAT_LIMIT - 1 calls just before it
    were the same tool with the same input and gave the same result, or when it is an edit that flips
    a file back again (A→B→A→B); asking again stops the run."""

    limit: int = REPEAT_LIMIT
    recent: list = field(default_factory=list)  # (call, result) of the latest calls; result None: not run yet
    refused: dict = field(default_factory=dict)  # this turn's refusals: tool_use id -> the answer
    turn: list = field(default_factory=list)  # this turn's (call, result), in tool_use order
    stop: str = ""  # set when the model asks again after a refusal: why the run stops
    edits: dict = field(default_factory=dict)  # path -> the (old_text, new_text) edits asked for, in order

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
        if before and before[-1] == (call, "refused"):
            self.stop = f"repeated call: {call[:80]} asked for again after it was refused"
            answer = "error: not run: refused again, so this run stops here."
        elif len(before) == self.limit - 1 and {c for c, _ in before} == {call} and len(results) <= 1:
            answer = (
                f"error: not run: this is the same {name} call with the same input {self.limit} times in a "
                "row, and it gave the same result each time, so another gives nothing new. Change approach: "
                "other input, another tool, or stop and report what you found."
            )
        elif self.flip_flop(name, data):
            answer = (
                "error: not run: this edit redoes one you already undid (A→B, then B→A, now A→B again): "
                "the edits are going in circles. Decide which version is right, say why, and stop editing it."
            )
        self.turn.append((call, "refused" if answer else None))
        self.recent = (self.recent + self.turn[-1:])[-self.limit :]
        return answer

    def flip_flop(self, name: str, data: str) -> bool:
        """Whether this edit_file redoes an edit of the same file after its undo (A→B, B→A, A→B)."""
        if name != "edit_file":
            return False
        edit = json.loads(data)
        change = (edit.get("old_text"), edit.get("new_text"))  # not yet validated: execute() checks it
        done = self.edits.setdefault(str(edit.get("path")), [])
        undo = (change[1], change[0])  # a no-op edit (A→A) undoes nothing
        circle = change in done and change != undo and undo in done[done.index(change) :]
        done.append(change)
        return circle

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
        self.turn = [
            (call, seen or json.dumps([result["content"], result["is_error"]]))
            for (call, seen), result in zip(self.turn, merged)
        ]
        mine = min(len(self.turn), self.limit)  # the newest entries of `recent` are this turn's
        self.recent = self.recent[: len(self.recent) - mine] + self.turn[len(self.turn) - mine :]
        return merged


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
    system: str = SYSTEM,  # s02: the constitution, built for this run (system_for)
) -> list:
    """Call the model, run the tools it asks for, feed the results back; repeat until it stops, or
    until the model asks again for a call the repeat brake refused."""
    turns, guard = [], RepeatGuard()  # every response, in order; the brake on repeated calls
    while True:
        # 1. Send the whole history: the model has no memory of its own between calls.
        #    call_model() retries what may pass and raises what cannot (s03).
        with display.waiting(len(turns) + 1):
            response = call_model(
                client,
                retry,
                model=model,
                system=system,
                tools=TOOLS,
                messages=messages,
                max_tokens=MAX_TOKENS,
            )
        turns.append(response)
        display.show_turn(len(turns), response)

        # 2. Append the reply verbatim: the next request must carry the tool_use ids it contains.
        messages.append({"role": "assistant", "content": response.content})

        # 3. Any stop but tool_use ends the loop. That includes max_tokens: a reply cut off there may
        #    hold a tool_use whose input is incomplete, and it must never be executed.
        if response.stop_reason != "tool_use":
            return turns

        # 4. (new in s04) Run the tool calls, reads side by side and the rest one at a time, and
        #    answer each id exactly once, in the order asked, all in one user message. The repeat
        #    brake answers the calls it holds back; each other call still goes through execute().
        calls = [block for block in response.content if block.type == "tool_use"]
        schedule, allowed = Schedule(read_latency), guard.screen(calls)  # its timeline: shown, never sent
        results = guard.merge(calls, run_tools(allowed, workspace, permission, audit, schedule))
        display.show_tools(calls, results, schedule.timeline)
        messages.append({"role": "user", "content": results})
        if guard.stop:  # asked again after a refusal: going round once more would change nothing
            display.say(f"stopped: {guard.stop}", "bold")
            return turns


def main(argv: list[str] | None = None) -> int:
    """Build the client for the mode asked for, run the loop on the task, print the summary."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE)
    step_cli.add_permission_flag(parser, s02.PERMISSIONS)
    step_cli.add_latency_flag(parser)
    args = parser.parse_args(argv)
    return step_cli.run_step(args, MODEL, "s04_parallel", run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s03's run, with the read latency this run asked for."""
    settings = step_cli.settings(args, run, "s04", retry_policy(run))
    messages = [{"role": "user", "content": run.task}]
    try:
        system = s02.system_for(run)
        turns = agent_loop(
            run.client, messages, run.workspace, run.model, **settings.for_the_loop(), system=system
        )
    except (anthropic.APIError, GaveUp, HarnessError) as err:
        return stop_cleanly(err, messages, settings.folder / "conversation.json")
    display.show_summary(turns)
    display.say(f"permission {settings.permission}\naudit log: {settings.audit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
