"""The command line: python -m workbook check|trust|rebuild|serve|grade|stepdiff|exercise.

Each command's module loads only when that command runs: `python -m workbook --help` and
`stepdiff` need no SDK, so they start at once. Every help text fits 80 columns, the width a
terminal in a classroom is sure to have.
"""

from __future__ import annotations

import sys

COMMANDS = {  # name -> what it does, as `python -m workbook` lists them (each line fits 80 columns)
    "check": "check fixtures against the format and the API's rules",
    "trust": "after reading a fixture: let its replay run its commands unasked",
    "rebuild": "re-run a scripted fixture's step; store the requests it sends now",
    "serve": "the classroom replay server, one cursor per student",
    "grade": "grade any agent loop, in any language, up the workbook's ladder",
    "stepdiff": "how agent_loop changed between steps: stepdiff s05 | --stat",
    "exercise": "write each step's piece yourself, checked offline: list | hint N",
}
USAGE = "usage: python -m workbook COMMAND [ARGS...]"


def usage() -> str:
    """The commands, one line each: what `python -m workbook` and its --help print."""
    lines = [USAGE, "", "commands:"] + [f"  {name:<9} {about}" for name, about in COMMANDS.items()]
    lines += ["", "python -m workbook COMMAND --help says more about each."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run one command (see COMMANDS); with none, list them; exit 2 for a command that does not exist."""
    if argv in ([], ["--help"], ["-h"]):
        print(usage())
        return 0
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
    if command == "exercise":
        from workbook.classroom import exercise

        return exercise.main(rest)
    if command == "stepdiff":
        from workbook.authoring import stepdiff

        return stepdiff.main(rest)
    from workbook.replay import commands as fixture_commands

    if "--help" in rest or "-h" in rest:
        example = f"python -m workbook {command} fixtures/s01_hello_agent.json"
        print(f"usage: python -m workbook {command} FIXTURE...\n\n{COMMANDS[command]}.\ne.g. {example}")
        return 0
    if not rest:
        example = f"python -m workbook {command} fixtures/*.json"
        print(f"error: {command} needs one or more fixture files, e.g. {example}", file=sys.stderr)
        return 2
    return max(fixture_commands.run_on(command, path) for path in rest)
