"""exercise_tables.py — the unit checks an exercise's piece is held to, where the recordings cannot reach.

A check is data: each row (a truth table's, or a small conversation's) is what the piece is given and
what the step's answer is. A test holds the step's own function to every row
(tests/classroom/test_exercise.py), so a row that no longer says what the step does fails there, not
in front of a student. `first_mistake(name, piece, step)` runs a table on a student's piece: the first
row it gets wrong, in words, or None; `shown(name)` is the table as the hints print it. The step's module
is given, never imported here (the steps import the package, not the other way round): a table that
needs the step's own types (its recovery state, its trace) takes them from it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace

from workbook.api.messages import blocks, plain, result_text

# -- s04's plan: which calls run together ----------------------------------------------------------

READS = {"read_file", "grep", "list_files"}  # s02's read-only tools
PLAN_ROWS = [  # the tools asked for in one turn, in order -> the groups of indexes the step runs
    (["read_file", "read_file"], [[0, 1]]),
    (["read_file", "grep", "list_files"], [[0, 1, 2]]),
    (["write_file", "read_file"], [[0], [1]]),
    (["read_file", "write_file", "read_file", "grep"], [[0], [1], [2, 3]]),
    (["bash", "bash"], [[0], [1]]),
    (["edit_file", "write_file", "read_file"], [[0], [1], [2]]),
    (["grep", "no_such_tool", "grep"], [[0], [1], [2]]),
    ([], []),
]


def plan_mistake(plan, step) -> str | None:
    """The first row the student's plan() gets wrong, said as what went wrong."""
    for tools, expected in PLAN_ROWS:
        blocks = [
            SimpleNamespace(type="tool_use", name=name, id=f"toolu_{i}", input={})
            for i, name in enumerate(tools)
        ]
        got = plan(blocks)
        got = [list(group) for group in got] if isinstance(got, (list, tuple)) else got
        if got == expected:
            continue
        asked = ", ".join(tools) or "no calls"
        said = f"plan([{asked}]) returned {got!r}; the step's plan returns {expected!r}"
        flat = [i for group in got for i in group] if isinstance(got, list) else None
        if flat is not None and sorted(flat) != list(range(len(tools))):
            return f"{said}: every call must be in exactly one group"
        if flat is not None and flat != list(range(len(tools))):
            return f"{said}: the calls' order changed; they run in the order asked"
        if isinstance(got, list) and any(len(g) > 1 and any(tools[i] not in READS for i in g) for g in got):
            return f"{said}: a call that is not a read ran beside other calls"
        return f"{said}: reads in a row ran apart, one at a time"
    return None


def plan_text() -> str:
    return "\n".join(f"  plan([{', '.join(tools)}]) -> {groups}" for tools, groups in PLAN_ROWS)


# -- s06's and s07's next_transition: what the loop does after each call ------------------------------

# A row: (the case, stop_reason, the recovery state's fields, the stop hook's (passed, output)) -> transition
RECOVERY_ROWS = [  # s06: a reply cut short is sent again, never run; any other stop ends the run
    ("the model asked for tools", "tool_use", {}, None, "next_turn"),
    ("the model ended its turn", "end_turn", {}, None, "done"),
    ("a stop sequence", "stop_sequence", {}, None, "done"),
    ("a refusal: any other stop", "refusal", {}, None, "done"),
    ("cut by max_tokens, first time", "max_tokens", {}, None, "escalate"),
    ("cut again after escalating", "max_tokens", {"max_tokens": 64_000}, None, "continue"),
    ("cut after 2 continuations", "max_tokens", {"max_tokens": 64_000, "continuations": 2}, None, "continue"),
    ("cut after 3 continuations", "max_tokens", {"max_tokens": 64_000, "continuations": 3}, None, "fail"),
]
FAILED = (False, "1 failed\n[exit code 1]")  # a stop hook's result: bash's output ends in its exit code
REALLY_DONE_ROWS = [  # s07: a pause, a refusal and the stop hook first; anything else as s06 names it
    ("paused by a server tool", "pause_turn", {}, None, "resume_pause"),
    ("paused again, 4 pauses so far", "pause_turn", {"pauses": 4}, None, "resume_pause"),
    ("paused again, 5 pauses so far", "pause_turn", {"pauses": 5}, None, "fail"),
    ("a refusal", "refusal", {}, None, "done"),
    ("ended, the stop hook passed", "end_turn", {}, (True, "ok\n[exit code 0]"), "done"),
    ("ended, the stop hook failed", "end_turn", {}, FAILED, "hook_retry"),
    ("ended, the hook failed once before", "end_turn", {"hook_failures": 1}, FAILED, "hook_retry"),
    ("ended, the hook failed after 2 retries", "end_turn", {"hook_failures": 2}, FAILED, "fail"),
    ("ended, the hook failed, no retries allowed", "end_turn", {"hook_retries": 0}, FAILED, "fail"),
    ("ended, no stop hook: s06's", "end_turn", {}, None, "done"),
    ("the model asked for tools: s06's", "tool_use", {}, None, "next_turn"),
    ("cut by max_tokens: s06's", "max_tokens", {}, None, "escalate"),
    (
        "cut after 3 continuations: s06's",
        "max_tokens",
        {"max_tokens": 64_000, "continuations": 3},
        None,
        "fail",
    ),
]


def transition_mistake(rows: list, next_transition, step) -> str | None:
    """The first row the student's next_transition() gets wrong, named by its case. s06's takes
    (response, state); s07's takes the stop hook's result too. The step's own state and hook types are
    what the loop passes."""
    for case, stop, fields, hook, expected in rows:
        state = step.Recovery(**fields)
        response = SimpleNamespace(stop_reason=stop, content=[], stop_details=None)
        hooked = (hook and step.HookResult(*hook),) if hasattr(step, "HookResult") else ()
        result = next_transition(response, state, *hooked)
        got = result[0] if isinstance(result, tuple) and result else result
        if got != expected:
            where = ", ".join(f"state.{k}={v}" for k, v in fields.items()) or "a fresh state"
            where += f", the stop hook {'passed' if hook[0] else 'failed'}" if hook else ""
            return (
                f"{case} (stop_reason {stop}, {where}): your next_transition returned {got!r}; "
                f"the step's is {expected!r}"
            )
    return None


def transition_text(rows: list) -> str:
    return "\n".join(
        f"  {stop:<13} {', '.join(f'{k}={v}' for k, v in fields.items()) or '-':<34} "
        f"{'hook ' + ('passed' if hook[0] else 'failed') if hook else '':<12} -> {expected}"
        for _, stop, fields, hook, expected in rows
    )


# -- s08's collapse: old tool results become placeholders, every pair stays whole -------------------

PLACEHOLDER = "[collapsed: {} characters of {} output; call it again if needed]"  # as the recordings hold it
GO_ON = {
    "type": "text",
    "text": "Continue where you stopped.",
}  # a text after the results (s06's continue_cut)
THREE_TURNS = [  # each turn: the calls, as (id, tool, characters of output, is_error), and a text after them
    ([("toolu_log", "read_file", 4000, False), ("toolu_grep", "grep", 60, False)], None),
    ([("toolu_test", "bash", 300, True)], GO_ON),
    ([("toolu_new", "read_file", 5000, False)], None),
]
COLLAPSE_ROWS = [  # (the case, the turns, keep) -> the ids whose results become placeholders
    ("three turns", THREE_TURNS, 1, {"toolu_log", "toolu_test"}),
    ("three turns, for compaction's summary", THREE_TURNS, 0, {"toolu_log", "toolu_test", "toolu_new"}),
    ("three turns, all of them kept", THREE_TURNS, 3, set()),
    (
        "results of 199 and 200 characters (COLLAPSE_MIN_CHARS: 200)",
        [
            ([("toolu_199", "grep", 199, False), ("toolu_200", "list_files", 200, False)], None),
            *THREE_TURNS[2:],
        ],
        1,
        {"toolu_200"},
    ),
]


def output(chars: int) -> str:
    """A tool's output of exactly `chars` characters, in lines as a log's."""
    line = "2026-11-28 01:00:00 INFO app[311] GET /api/orders 200\n"
    return (line * (chars // len(line) + 1))[:chars]


def conversation(turns: list) -> list:
    """The task, then each turn: the model's calls, and one user message with their results."""
    messages = [{"role": "user", "content": "Why do the orders fail?"}]
    for calls, after in turns:
        asked = [{"type": "tool_use", "id": i, "name": tool, "input": {}} for i, tool, _, _ in calls]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "Looking."}, *asked]})
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": output(n), "is_error": err}
            for i, _, n, err in calls
        ]
        messages.append({"role": "user", "content": results + ([dict(after)] if after else [])})
    return messages


def collapse_mistake(collapse, step) -> str | None:
    """The first case the student's collapse() gets wrong, said as what went wrong."""
    for case, turns, keep, collapsed in COLLAPSE_ROWS:
        messages = conversation(turns)
        before = copy.deepcopy(messages)
        where = f"collapse({case}, keep={keep})"
        collapse(messages, keep=keep)
        if [m["role"] for m in messages] != [m["role"] for m in before]:
            return f"{where}: {len(before)} messages became {len(messages)}; only results' contents change"
        if messages == before and collapsed:
            return (
                f"{where}: nothing in messages changed; collapse changes the list it is given, in place "
                "(the loop sends that same list again)"
            )
        names = {i: tool for calls, _ in turns for i, tool, _, _ in calls}
        holders = [n for n, m in enumerate(before) if m["role"] == "user" and n > 0]
        newest = holders[len(holders) - keep :] if keep else []
        for n, (old, new) in enumerate(zip(before, messages)):
            said = message_mistake(blocks(old), blocks(new), names, collapsed, n in newest, keep)
            if said:
                return f"{where}: messages[{n}]: {said}"
    return None


def message_mistake(old: list, new: list, names: dict, collapsed: set, newest: bool, keep: int) -> str | None:
    """What went wrong in one message: a tool_result gone, kept whole or shortened when it should not be."""
    results = {b["tool_use_id"]: b for b in new if isinstance(b, dict) and b.get("type") == "tool_result"}
    for block in old:
        if block["type"] != "tool_result":
            if block not in new:
                return f"its {block['type']} block changed or went; only tool results' contents are collapsed"
            continue
        i, chars = block["tool_use_id"], len(block["content"])
        got = results.get(i)
        if got is None:
            return (
                f"the tool_result for {i} ({names[i]}) is gone: a placeholder replaces its content, never "
                "the block (every tool_use needs its tool_result, by id)"
            )
        if got.get("is_error", False) != block["is_error"]:
            return f"{i}'s is_error changed: a collapsed error is still an error"
        text, placeholder = result_text(got), PLACEHOLDER.format(chars, names[i])
        if i in collapsed and text == block["content"]:
            return f"{i}'s result ({chars} characters of {names[i]} output, an old one) is still whole"
        if i in collapsed and text != placeholder:
            return f"{i}'s placeholder is {text!r}; the step's is {placeholder!r} (the recordings hold it)"
        if i not in collapsed and text != block["content"] and newest:
            return f"{i}'s result changed, but this message is one of the newest {keep}, which stay whole"
        if i not in collapsed and text != block["content"]:
            return f"{i}'s result changed, but it is only {chars} characters (under COLLAPSE_MIN_CHARS)"
    if len(new) != len(old):
        return f"{len(old)} blocks became {len(new)}; collapse changes results' contents, nothing else"
    return None


def collapse_text() -> str:
    turns = " | ".join(
        " + ".join(f"{i} ({tool}, {n} characters{', is_error' if err else ''})" for i, tool, n, err in calls)
        + (" + a text" if after else "")
        for calls, after in THREE_TURNS
    )
    return f"  three turns, their results: {turns}\n" + "\n".join(
        f"  {case}, keep={keep} -> {', '.join(sorted(collapsed)) or 'nothing'} collapsed"
        for case, _, keep, collapsed in COLLAPSE_ROWS
    )


# -- s09's answer_open_calls: every tool_use answered after a stop, so the run can be resumed ---------


def asked(*ids: str, sdk: bool = False) -> dict:
    """The model's turn, calling a tool once per id: plain dicts, or the SDK's objects as a reply holds."""
    from anthropic.types import TextBlock, ToolUseBlock

    if sdk:
        calls = [ToolUseBlock(type="tool_use", id=i, name="bash", input={"command": "make"}) for i in ids]
        return {"role": "assistant", "content": [TextBlock(type="text", text="Running."), *calls]}
    calls = [{"type": "tool_use", "id": i, "name": "bash", "input": {"command": "make"}} for i in ids]
    return {"role": "assistant", "content": [{"type": "text", "text": "Running."}, *calls]}


def answered(*ids: str) -> dict:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids],
    }


TASK = {"role": "user", "content": "Build it."}
OPEN_ROWS = [  # (the case, the conversation when the run stopped) -> the ids still to answer, in order
    ("two calls open", lambda: [TASK, asked("toolu_a", "toolu_b")], ["toolu_a", "toolu_b"]),
    (
        "two calls open, as the SDK's blocks",
        lambda: [TASK, asked("toolu_a", "toolu_b", sdk=True)],
        ["toolu_a", "toolu_b"],
    ),
    ("every call answered", lambda: [TASK, asked("toolu_a"), answered("toolu_a")], []),
    ("the model's last word, no call", lambda: [TASK, {"role": "assistant", "content": "Done."}], []),
    ("only the task", lambda: [TASK], []),
    (
        "an earlier turn answered, the last one open",
        lambda: [TASK, asked("toolu_a"), answered("toolu_a"), asked("toolu_b", "toolu_c")],
        ["toolu_b", "toolu_c"],
    ),
]


def open_calls_mistake(answer_open_calls, step) -> str | None:
    """The first case the student's answer_open_calls() gets wrong, said as what went wrong."""
    for case, made, ids in OPEN_ROWS:
        messages = made()
        before = plain(copy.deepcopy(messages))
        got = answer_open_calls(messages)
        where = f"answer_open_calls({case})"
        if plain(messages[: len(before)]) != before:
            return f"{where}: the messages already there changed; answers are added after them"
        added = plain(messages[len(before) :])
        if bool(got) != bool(ids):
            return f"{where}: returned {got!r}; the step's returns {bool(ids)} (whether calls were answered)"
        if not ids and added:
            return f"{where}: {len(added)} message(s) added, but no call was open: nothing is added"
        if ids and not added:
            return f"{where}: nothing added; each open tool_use of the last turn needs a tool_result"
        if ids and len(added) > 1:
            return (
                f"{where}: the answers came in {len(added)} user messages; they all go in ONE user message, "
                "right after the assistant's"
            )
        if not ids:
            continue
        content = added[0].get("content") if added[0].get("role") == "user" else None
        results = [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
        if [b.get("tool_use_id") for b in results] != ids:
            return (
                f"{where}: the answers are for {[b.get('tool_use_id') for b in results]}, in a "
                f"{added[0].get('role')} message; every open tool_use needs its own, in order: {ids}"
            )
        for b in results:
            if b.get("is_error") is not True:
                return (
                    f"{where}: {b['tool_use_id']}'s answer has is_error {b.get('is_error')!r}: a call "
                    "stopped before its result is answered as an error, so the model never takes it for done"
                )
            if not b.get("content"):
                return (
                    f"{where}: {b['tool_use_id']}'s answer is empty: say the call was stopped before it ended"
                )
    return None


def open_calls_text() -> str:
    return "\n".join(f"  {case} -> {', '.join(ids) or 'nothing'} answered" for case, _, ids in OPEN_ROWS)


# -- s10's Trace.first_new: where the messages stop being the ones the last model_call line logged ----

REPLY_1 = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "grep", "input": {}}],
}
RESULT_1 = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output(900)}],
}
REPLY_2 = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {}}],
}
RESULT_2 = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"}]}
COLLAPSED_1 = {  # RESULT_1 after s08's collapse: a new message in its place
    "role": "user",
    "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": PLACEHOLDER.format(900, "grep")}
    ],
}
SUMMARY = {"role": "user", "content": "A summary of the work so far: ..."}  # s08's compaction
ASK = {"role": "user", "content": "Why do the orders fail?"}
FIRST_NEW_ROWS = [  # (the case, what the last line logged, the messages sent now) -> where the new ones start
    ("nothing logged yet: the first call", [], [ASK], 0),
    ("a reply and its results appended", [ASK], [ASK, REPLY_1, RESULT_1], 1),
    ("another turn appended", [ASK, REPLY_1, RESULT_1], [ASK, REPLY_1, RESULT_1, REPLY_2, RESULT_2], 3),
    (
        "the same list sent again (an escalation asks again)",
        [ASK, REPLY_1, RESULT_1],
        [ASK, REPLY_1, RESULT_1],
        3,
    ),
    (
        "messages[2] collapsed in place (s08), a turn appended",
        [ASK, REPLY_1, RESULT_1, REPLY_2],
        [ASK, REPLY_1, COLLAPSED_1, REPLY_2, RESULT_2],
        2,
    ),
    ("the history compacted into a summary (s08)", [ASK, REPLY_1, RESULT_1, REPLY_2, RESULT_2], [SUMMARY], 0),
]


def first_new_mistake(first_new, step) -> str | None:
    """The first case the student's first_new() gets wrong, said as what the trace would then log. The
    piece is a method: it is given a Trace of the step's, as the loop's model_call line left it."""
    for case, logged, messages, expected in FIRST_NEW_ROWS:
        trace = step.Trace(None)
        trace.logged = list(logged)
        sent = list(messages)
        got = first_new(trace, sent)
        where = f"first_new({case}: {len(logged)} logged, {len(messages)} sent)"
        if sent != messages or trace.logged != logged:
            return f"{where}: the messages or the log changed; first_new only looks"
        if got == expected:
            continue
        said = f"{where} returned {got!r}; the step's returns {expected}"
        if got == len(messages) and expected < len(messages):
            return (
                f"{said}: {got} is the length of messages, so messages[{got}:] is empty and the line "
                "would log nothing new"
            )
        if got == 0:
            return f"{said}: the line would log the whole history again, not only what is new"
        if got == len(logged) and expected < len(logged):
            return (
                f"{said}: messages[{expected}] was replaced in place, so the line would never log "
                "the change (look for the first message that is not the one logged)"
            )
        return said
    return None


def first_new_text() -> str:
    return "\n".join(
        f"  {case}: {len(logged)} logged, {len(messages)} sent -> {expected}"
        for case, logged, messages, expected in FIRST_NEW_ROWS
    )


# -- s11's what_it_did: a drifted run's work, read from its calls and results, not from its words -----


def called(*calls: tuple, text: str = "") -> dict:
    """The model's turn: its words, then a tool_use per (id, tool, input)."""
    words = [{"type": "text", "text": text}] if text else []
    uses = [{"type": "tool_use", "id": i, "name": tool, "input": given} for i, tool, given in calls]
    return {"role": "assistant", "content": words + uses}


def came_back(*results: tuple) -> dict:
    """The results of a turn: one tool_result per (id, what came back, is_error)."""
    answers = [{"type": "tool_result", "tool_use_id": i, "content": c, "is_error": e} for i, c, e in results]
    return {"role": "user", "content": answers}


FIX = {"role": "user", "content": "Fix the failing test."}
DID_ROWS = [  # (the case, the saved conversation) -> the notes, a line each
    (
        "a claim the results contradict",
        lambda: [
            FIX,
            called(
                ("t1", "bash", {"command": "pytest -q"}),
                ("t2", "edit_file", {"path": "a.py"}),
                ("t3", "write_file", {"path": "../x"}),
                text="All tests pass now.",
            ),
            came_back(
                ("t1", "1 failed\n[exit code 1]", False),
                ("t2", "edited a.py", False),
                ("t3", "error: outside the workspace", True),
            ),
        ],
        "Files it changed: a.py (1 write)\nCommands it ran:\n  - bash pytest -q (exit code 1)\n"
        "Calls that failed or were refused:\n  - write_file ../x: error: outside the workspace\n"
        "Its last words: All tests pass now.",
    ),
    (
        "only words, no call",
        lambda: [FIX, {"role": "assistant", "content": [{"type": "text", "text": "It is fixed."}]}],
        "Files it changed: none\nCommands it ran: none\nCalls that failed or were refused: none\n"
        "Its last words: It is fixed.",
    ),
    (
        "a file written back and forth",
        lambda: [
            FIX,
            *[
                m
                for n, value in enumerate(("A", "B", "A"))
                for m in (
                    called((f"w{n}", "write_file", {"path": "c.toml", "content": value})),
                    came_back((f"w{n}", "wrote c.toml", False)),
                )
            ],
            called(("w3", "write_file", {"path": "c.toml", "content": "B"}), text="Setting it to B."),
            came_back(("w3", "error: not run: the writes are going in circles", True)),
        ],
        "Files it changed: c.toml (3 writes)\nCommands it ran: none\nCalls that failed or were refused:\n"
        "  - write_file c.toml: error: not run: the writes are going in circles\n"
        "Its last words: Setting it to B.",
    ),
]


def did_mistake(what_it_did, step) -> str | None:
    """The first case the student's what_it_did() gets wrong, said as what the fresh session would be
    told that did not happen (or not told that did)."""
    for case, made, want in DID_ROWS:
        messages = made()
        before = copy.deepcopy(messages)
        got = what_it_did(messages)
        where = f"what_it_did({case})"
        if messages != before:
            return f"{where}: the saved conversation changed; what_it_did only reads it"
        if not isinstance(got, str):
            return f"{where} returned {type(got).__name__}; it returns the notes as one string, a line each"
        have, should = got.splitlines(), want.splitlines()
        for n, line in enumerate(should):
            mine = have[n] if n < len(have) else "(no such line)"
            if mine == line:
                continue
            said = f"{where}, line {n + 1}: {mine!r}; the step's is {line!r}"
            if line.startswith("Files it changed") and "../x" in mine:
                return (
                    f"{said}: ../x is listed as changed, but its call failed (is_error): a failed or "
                    "refused call changed nothing, and goes under the calls that failed"
                )
            if line.startswith("Files it changed") and "writes)" in line:
                return f"{said}: each write to a path is counted once, so the back and forth does not show"
            if line.startswith("  - bash"):
                return f"{said}: how a command ended is the last line of its result ([exit code N])"
            return said
        if len(have) > len(should):
            return (
                f"{where}: {len(have)} lines, the step's {len(should)}: {have[len(should)]!r} is one too many"
            )
    return None


def did_text() -> str:
    return "\n\n".join(
        f"  {case} ->\n" + "\n".join(f"    {line}" for line in want.splitlines())
        for case, _, want in DID_ROWS
    )


# -- the tables, by name (an exercise's `table`) ------------------------------------------------------


@dataclass(frozen=True)
class Table:
    mistake: Callable  # (the piece, the step's module) -> its first mistake, in words, or None
    shown: Callable[[], str]  # the table as the hints print it


TABLES = {
    "plan": Table(plan_mistake, plan_text),
    "s06_next_transition": Table(
        partial(transition_mistake, RECOVERY_ROWS), partial(transition_text, RECOVERY_ROWS)
    ),
    "s07_next_transition": Table(
        partial(transition_mistake, REALLY_DONE_ROWS),
        partial(transition_text, REALLY_DONE_ROWS),
    ),
    "collapse": Table(collapse_mistake, collapse_text),
    "answer_open_calls": Table(open_calls_mistake, open_calls_text),
    "first_new": Table(first_new_mistake, first_new_text),
    "what_it_did": Table(did_mistake, did_text),
}


def first_mistake(name: str, piece, step) -> str | None:
    """The first row of table `name` that `piece` gets wrong; `step`: the module of the step it is from."""
    return TABLES[name].mistake(piece, step)


def shown(name: str) -> str:
    return TABLES[name].shown()
