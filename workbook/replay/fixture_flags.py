"""The flags a fixture's `args` may set: behaviour only, never where a step reads or writes."""

from __future__ import annotations

import math
from pathlib import Path

from workbook.api.contract import messages_problems
from workbook.errors import WorkbookError
from workbook.files import read_json
from workbook.paths import CONVERSATIONS, ROOT


# A fixture's `args` may set how the step behaves, never where it reads or writes: flag -> (the first
# step that has it, a check of its value, or None for a flag that takes none). Anything else is refused,
# including every path flag (--save, --trace, --record, --replay, --workspace) and abbreviations.
def _whole(least: int):
    # at most 18 ASCII digits: int() of thousands of digits raises, and '²' is a digit Python cannot read
    def check(value: str):
        whole = value.isascii() and value.isdigit() and len(value) <= 18 and int(value) >= least
        return None if whole else f"must be a whole number, at least {least} (at most 18 digits)"

    return check


def _seconds(value: str):
    number = _float(value)
    return None if number is not None and 0 <= number <= 60 else "must be seconds from 0 to 60"


def _dollars(value: str):
    number = _float(value)
    return None if number is not None and number > 0 else "must be a positive number of dollars"


def _float(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _permission(value: str):
    return None if value in ("ask", "auto", "deny") else "must be ask, auto or deny"


def _command(value: str):
    return None if value.strip() else "must be a command"


def _conversation(value: str):
    target = (ROOT / value).resolve()
    inside = not Path(value).is_absolute() and ".." not in Path(value).parts
    if not inside or not target.is_relative_to(CONVERSATIONS.resolve()) or not target.is_file():
        return "must name a file under fixtures/conversations/ (a path from the repo root)"
    try:
        messages = read_json(target, "saved conversation", "re-save it")
    except WorkbookError as err:
        return str(err)
    problems = messages_problems(messages)
    return f"not a saved conversation ({problems[0][1:]})" if problems else None


PATH_FLAGS = ("--save", "--trace", "--record", "--replay", "--workspace", "--resume", "--model", "--force")


FIXTURE_FLAGS = {
    "--permission": (2, _permission),
    "--read-latency": (4, _seconds),
    "--max-steps": (5, _whole(1)),
    "--max-tokens-total": (5, _whole(1)),
    "--max-input-tokens": (5, _whole(1)),
    "--max-cost": (5, _dollars),
    "--no-stream": (6, None),
    "--web-search": (7, None),
    "--stop-hook": (7, _command),  # a shell command: from an untrusted fixture, it meets the gate (s07)
    "--stop-hook-retries": (7, _whole(0)),
    "--resume": (9, _conversation),
    "--handoff": (11, _conversation),
}


def args_problems(args, script: str) -> list[str]:
    """What is wrong with a fixture's `args` for this step (empty when every flag may be used)."""
    if not isinstance(args, list) or not all(isinstance(a, str) and "\0" not in a for a in args):
        return ["must be a list of strings"]
    if any(len(a) > 1000 for a in args):  # a flag's value is a word or a number, never a page
        return ["each argument must be at most 1,000 characters"]
    problems, i, step = [], 0, int(script[1:3])
    while i < len(args):
        flag, has_value, value = args[i].partition("=")
        if flag not in FIXTURE_FLAGS:
            kind = "names a file" if flag in PATH_FLAGS else "is not a flag a fixture may set"
            problems.append(
                f"{args[i]!r} {kind}: a fixture sets behaviour flags only ({', '.join(FIXTURE_FLAGS)})"
            )
            break
        first, check = FIXTURE_FLAGS[flag]
        if step < first:
            problems.append(f"{flag} is not a flag of {script} (it comes in s{first:02})")
        if check is None and has_value:
            problems.append(f"{flag} takes no value")
        if check is not None and not has_value:
            if i + 1 == len(args):
                problems.append(f"{flag} needs a value")
                break
            i, value = i + 1, args[i + 1]
            if value.startswith("-"):  # the step's parser would take it for a flag
                problems.append(f"{flag} {value!r}: a value may not start with '-' (write {flag}=VALUE)")
                break
        problem = check(value) if check else None
        if problem:
            problems.append(f"{flag} {value!r}: {problem}")
        i += 1
    return problems
