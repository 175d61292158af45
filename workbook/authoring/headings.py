"""headings — the section headings of the notebooks, and how a document links to one.

docs/articles.md names a notebook section by its English heading (`nb s05 › Ctrl-C keeps the work`);
the Chinese docs link to the same section of the Chinese twin, under its Chinese heading. A twin's
cells carry the English cells' ids, so the two headings of one section are found by cell id and
place in the cell. Jupyter gives each heading an anchor: its text as rendered, spaces turned to "-".

Nothing here is lesson: it only reads notebooks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

HEADING = re.compile(r"^(#{1,6}) +(.+?) *#* *$", re.MULTILINE)


@dataclass(frozen=True)
class Heading:
    cell: str  # the id of the markdown cell it is in
    place: int  # 0 for the cell's first heading, 1 for its second ...
    text: str  # as written, markdown included: "The server's own word: `x-should-retry`"

    @property
    def rendered(self) -> str:
        """The heading as a reader sees it: no backticks, no emphasis marks."""
        return re.sub(r"`|\*\*|(?<!\w)\*|\*(?!\w)", "", self.text)

    @property
    def anchor(self) -> str:
        """The anchor Jupyter gives the heading: the rendered text, each space a "-"."""
        return self.rendered.replace(" ", "-")


def headings(notebook: Path) -> list[Heading]:
    """Every heading of a notebook's markdown cells, in order."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # a "# comment" in a code block is not one
        found += [Heading(cell["id"], n, m.group(2)) for n, m in enumerate(HEADING.finditer(text))]
    return found


def twin_heading(english: Path, twin: Path, text: str) -> Heading | None:
    """The twin's heading for the section the English notebook heads `text`, or None."""
    mine = next((h for h in headings(english) if h.text == text), None)
    if mine is None:
        return None
    return next((h for h in headings(twin) if (h.cell, h.place) == (mine.cell, mine.place)), None)


def link(label: str, target: str, heading: Heading) -> str:
    """A markdown link to a heading; the target in <…> when the anchor holds what ends a plain one."""
    destination = f"{target}#{heading.anchor}"
    if re.search(r"[\s()<>]", destination):
        destination = f"<{destination}>"
    return f"[{label}]({destination})"
