"""s02's question to a person at the terminal: the one function in the gate that talks to a human."""

from __future__ import annotations

import json

from workbook import display

from rich.markup import escape

DANGEROUS = {  # regular expression -> the warning a person sees when asked (and a recorded denial)
    r"\brm\s+-\w*[rRf]": "rm -r/-f deletes with no undo",
    r"\bsudo\b": "sudo acts as root, beyond the workspace",
    r"\bgit\s+push\b": "git push publishes beyond this machine",
    r"\b(curl|wget)\b.*\|\s*(ba|z)?sh\b": "piping a download into a shell runs code nobody has read",
}


def ask_person(tool, data: dict, danger: str | None) -> bool:
    """A y/n question at the terminal about a call to `tool` (s02's Tool): its whole input is shown
    (wrapped, never cut: what is not shown would run after a yes), and anything but yes is a no, as
    is no terminal at all."""
    warning = f" [red]({escape(danger)})[/]" if danger else ""
    shown = escape(json.dumps(data))  # JSON: control characters and other non-ASCII come escaped
    try:
        answer = display.console.input(f"[yellow]allow[/] {tool.name} {shown}{warning}? \\[y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
