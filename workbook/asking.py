"""s02's question to a person at the terminal: the one place the gate talks to a human."""

from __future__ import annotations

import json
import sys
import unicodedata

from workbook import display

from rich.cells import cell_len
from rich.text import Text

MAX_SHOWN_LINES = 40  # a call that needs more lines to be shown whole is refused, never cut: nobody can
# say yes to what they were not shown


def at_terminal(call, danger: str | None, why: str | None = None) -> bool | None:
    """The person at this terminal, asked about `call` (ask_person); None when standard input is no
    terminal: nobody is there to ask."""
    return ask_person(call, danger, why) if sys.stdin.isatty() else None


def question(call, danger: str | None, why: str | None = None) -> Text:
    """The question's first line: the tool, warned of its danger in red, or else told why it is asked."""
    if danger:
        return Text.assemble(("allow", "yellow"), f" {call.name}", (f" ({danger})", "red"), "?")
    return Text.assemble(("allow", "yellow"), f" {call.name}?", (f" ({why})" if why else "", "dim"))


def ask_person(call, danger: str | None, why: str | None = None) -> bool:
    """A y/n question at the terminal about a tool call (its `name` and `input`), shown whole and
    wrapped, as plain text: a control character is shown as its escape (\\x1b, \\u202e), never obeyed,
    and `[bold]` is shown, never read as markup. Anything but yes is a no, and so is no terminal at
    all, and so is a call too long to show whole."""
    lines = call_lines(call.input, display.console.width)
    if len(lines) > MAX_SHOWN_LINES:
        display.say(
            f"not asked: this {call.name} call takes {len(lines)} lines to show whole (at most "
            f"{MAX_SHOWN_LINES}), so it is refused",
            "yellow",
        )
        return False
    display.console.print(question(call, danger, why))
    display.console.print(Text("\n".join(lines)), soft_wrap=True)
    try:
        answer = display.console.input(Text("[y/N] "))
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def visible(text: str) -> str:
    """`text` with each control or formatting character (ESC, BEL, U+202E...) but newline written as
    its escape: what a person is asked about is what runs, character for character."""
    return "".join(
        c if c == "\n" or unicodedata.category(c)[0] != "C" else c.encode("unicode_escape").decode()
        for c in text
    )


def call_lines(data: dict, width: int) -> list[str]:
    """A call's arguments, each `name: value`, whole, wrapped to `width` cells with an indent: the
    bash command as `$ command`."""
    lines = []
    for name, value in data.items():
        shown = visible(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
        head = "  $ " if name == "command" else f"  {name}: "
        for n, line in enumerate(shown.split("\n")):
            lines += wrapped((head if n == 0 else " " * len(head)) + line, width, " " * len(head))
    return lines


def wrapped(line: str, width: int, indent: str) -> list[str]:
    """One line cut into pieces of at most `width` cells, the pieces after the first indented; nothing
    is dropped, and no piece is wider than the terminal."""
    width = max(width, len(indent) + 10)
    pieces, piece = [], ""
    for char in line:
        if cell_len(piece + char) > width:
            pieces.append(piece)
            piece = indent
        piece += char
    return [*pieces, piece]
