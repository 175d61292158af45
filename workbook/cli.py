"""The command line: python -m workbook check|trust|rebuild|serve|grade|stepdiff.

Each command's module loads only when that command runs: `python -m workbook --help` and
`stepdiff` need no SDK, so they start at once.
"""

from __future__ import annotations

import sys

COMMANDS = {  # name -> what it does, as `python -m workbook` lists them
    "check": "check fixtures against the format and the API's rules: check FIXTURE...",
    "trust": "after reading a fixture: let a replay run its recorded commands unasked: trust FIXTURE...",
    "rebuild": "re-run a scripted fixture's step, keep its responses, store the requests it sends now",
    "serve": "the classroom replay server: serve FIXTURE... [--port N] (serve --help)",
    "grade": "grade any agent loop up the workbook's ladder: grade [--json] -- CMD (grade --help)",
    "stepdiff": "how agent_loop changed between steps: stepdiff s05 | s02 s05 | --stat",
}
USAGE = "usage: python -m workbook check|trust|rebuild|serve|grade|stepdiff ... (--help on each)"
FIXTURE_COMMANDS = ("check", "trust", "rebuild")


def usage() -> str:
    """The commands, one line each: what `python -m workbook` prints with no command."""
    lines = [USAGE, ""] + [f"  {name:<9} {about}" for name, about in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run one command (see COMMANDS); exit 2 with the usage for anything else."""
    if argv in ([], ["--help"], ["-h"]):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: no command {argv[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    try:
        return run_command(command, rest)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run_command(command: str, rest: list[str]) -> int:
    """The server and the grader load only when asked for: `check` stays quick to start."""
    if command == "serve":
        from workbook.classroom import server

        return server.main(rest)
    if command == "grade":
        from workbook.classroom import grade

        return grade.main(rest)
    if command == "stepdiff":
        from workbook.authoring import stepdiff

        return stepdiff.main(rest)
    from workbook.replay import commands as fixture_commands

    if "--help" in rest or "-h" in rest:
        print(f"usage: python -m workbook {command} FIXTURE...\n\n{COMMANDS[command]}")
        return 0
    if not rest:
        example = f"python -m workbook {command} fixtures/*.json"
        print(f"error: {command} needs one or more fixture files, e.g. {example}", file=sys.stderr)
        return 2
    return max(fixture_commands.run_on(command, path) for path in rest)
