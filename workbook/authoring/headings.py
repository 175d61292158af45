"""headings — the section headings of the notebooks, and how a document links to one.

docs/articles.md names a notebook section by its English heading (`nb s05 › Ctrl-C keeps the work`);
the Chinese docs link to the same section of the Chinese twin, under its Chinese heading. Jupyter
gives each heading an anchor: its text as rendered, spaces turned to "-".

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


def link(label: str, target: str, heading: Heading) -> str:
    """A markdown link to a heading; the target in <…> when the anchor holds what ends a plain one."""
    destination = f"{target}#{heading.anchor}"
    if re.search(r"[\s()<>]", destination):
        destination = f"<{destination}>"
    return f"[{label}]({destination})"
