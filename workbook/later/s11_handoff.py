"""s11_handoff.py — A fresh session: start over from what the old one did.

Adds over s10: --handoff FILE starts a fresh session of one message, for a
run that drifted: the saved run's task, what it did as the harness reads it
from its tool calls and results (never from what the model said: that is what
drifted), and the new instruction. The loop is s10's, unchanged: a handoff
changes only what the loop starts with.

    --handoff FILE: a saved run that drifted
        v
    +======================================+
    | what_it_did() (new): the files it    |  read from the calls and their
    | changed, the commands it ran, the    |  results, not from the model's
    | calls that failed; its last words    |  own account
    +======================================+
        v  one message: the task, what it did, the new instruction
    +--------------------+
    | s10's loop         |  a fresh session, traced, its work kept
    +--------------------+

Run from the root: python -m workbook.later.s11_handoff
  (no flags)                  replay: a run that drifted, handed off
  --handoff FILE              a fresh session from FILE, such as
                              fixtures/conversations/s05_drifted.json
"""

import json
import sys

from workbook import conversation, display, launch, step_cli
from workbook.api.messages import blocks, result_text  # a message's blocks, a result's text
from workbook.later import s09_keep_the_work as s09
from workbook.later import s10_trace as s10
from workbook.later.s09_keep_the_work import (
    clipped,
    first_text,
)

from s01_agent_loop import MODEL
from s03_errors import CLIENT_OPTIONS

DEFAULT_FIXTURE = "fixtures/s05_handoff.json"


# -- new in s11: --handoff FILE — a fresh session from a saved one's task and what it did -----------

HANDOFF = (
    "[A fresh session. An earlier session on this task drifted and was stopped. What it did, as "
    "the harness read it from that session's tool calls and results (check the files as they are "
    "now before you rely on it):]"
)
WRITES = ("write_file", "edit_file")  # s02's tools that change a file
LISTED = 8  # of commands and failures, the last this many are listed; the rest are counted


def first_messages(run: launch.Run, args) -> list:
    """Unlike s09's: with --handoff, a fresh session of one message; else s09's (the task, or --resume)."""
    if args.handoff:
        return handed_off(run, args.handoff)
    return s09.first_messages(run, args)


def handed_off(run: launch.Run, path: str) -> list:
    """A fresh session of one message: the saved conversation's task, what it did, and the instruction."""
    saved = conversation.load_conversation(conversation.repo_path(path))
    task = first_text(saved).split(HANDOFF)[0].strip()  # a handoff of a handoff: the first task
    text = "\n\n".join(part for part in (task, HANDOFF, what_it_did(saved), run.task) if part)
    display.show_handoff(path, len(saved), text)
    return [{"role": "user", "content": text}]


def what_it_did(messages: list) -> str:
    """A saved conversation as a few lines of fact, read by the harness from its tool calls and their
    results, never from what the model said about them (that is what drifted): the files it changed,
    the commands it ran and how each ended, the calls that failed or were refused; and, marked as
    the model's own, its last words."""
    results = {b["tool_use_id"]: b for m in messages for b in blocks(m) if b["type"] == "tool_result"}
    changed, commands, failed = {}, [], []
    for block in (b for m in messages for b in blocks(m) if b["type"] == "tool_use"):
        result = results.get(block["id"], {})
        said = result_text(result).strip().splitlines() or ["(no result)"]
        given = block.get("input") if isinstance(block.get("input"), dict) else {}
        if result.get("is_error"):
            failed.append(f"{call_label(block['name'], given)}: {clipped(said[0], 240)}")
        elif block["name"] in WRITES:
            changed[str(given.get("path"))] = changed.get(str(given.get("path")), 0) + 1
        elif block["name"] == "bash":
            commands.append(f"{call_label('bash', given)} ({said[-1].strip('[]')})")
    files = ", ".join(f"{path} ({n} {'writes' if n > 1 else 'write'})" for path, n in changed.items())
    return "\n".join(
        [
            f"Files it changed: {files or 'none'}",
            f"Commands it ran:{listed(commands)}",
            f"Calls that failed or were refused:{listed(failed)}",
            f"Its last words: {clipped(last_words(messages), 600) or '(none)'}",
        ]
    )


def last_words(messages: list) -> str:
    """The text of the model's last reply that had any."""
    for message in reversed(messages):
        text = " ".join(b["text"] for b in blocks(message) if b["type"] == "text").strip()
        if message["role"] == "assistant" and text:
            return text
    return ""


def call_label(name: str, given: dict) -> str:
    """A call in a few words: the tool, and the path, command or pattern it was given."""
    what = given.get("path") or given.get("command") or given.get("pattern")
    return f"{name} {clipped(str(what), 120) if what else json.dumps(given, ensure_ascii=False)[:80]}"


def listed(items: list[str]) -> str:
    """none, or the last LISTED items, one a line, and how many came before them."""
    if not items:
        return " none"
    earlier = f"\n  ({len(items) - LISTED} earlier ones not listed)" if len(items) > LISTED else ""
    return earlier + "".join(f"\n  - {item}" for item in items[-LISTED:])


# -- the loop: s10's, unchanged (a handoff changes only the messages it starts with) -----------------

Settings = s10.Settings  # a fresh session needs no setting of its own
agent_loop = s10.agent_loop  # python -m workbook stepdiff s11 shows it, and that nothing changed


def main(argv: list[str] | None = None) -> int:
    """Replay the default fixture, or run a task live (--help: the flags)."""
    parser = step_cli.make_parser(__doc__, DEFAULT_FIXTURE, "s11_handoff")  # every earlier step's
    step_cli.add_handoff_flag(parser)  # s11's own: --handoff
    return step_cli.run_step(parser, argv, MODEL, run_task, **CLIENT_OPTIONS)


def run_task(run: launch.Run, args) -> int:
    """s10's run, traced and its work kept; (new in s11) with --handoff, it starts a fresh session."""
    settings = Settings.for_run(run, args)
    return s10.run_traced(run, args, settings, first_messages(run, args))  # s11's first messages


if __name__ == "__main__":
    sys.exit(main())
