"""The teacher's terminal in columns: the class table's rows in 80 columns, and names and results cut
to fit with a mark, so that two names never show alike and a result is never cut mid-word."""

from __future__ import annotations

import textwrap

from workbook.text import cut_middle

TABLE_WIDTH = 80  # the class table's columns
MOST_LABELS = 10_000  # names a Labels remembers; past it, it starts afresh (a class keeps 500 at most)


def table_row(row: tuple, widths: list[int]) -> str:
    """One row of the class table in 80 columns: its last result at the end when it fits, else wrapped
    at words on the lines below it, indented."""
    start = "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  "
    if len(start) + len(row[-1]) <= TABLE_WIDTH:
        return start + row[-1]
    return (
        start.rstrip()
        + "\n"
        + textwrap.fill(row[-1], TABLE_WIDTH, initial_indent="    ", subsequent_indent="    ")
    )


class Labels:
    """Names as a column of `width` shows them: cut in the middle (cut_middle), and two names never shown
    alike: a name whose cut is another's gets a number too ("js-ts…ned~2"). Each name keeps its label, so
    the log and the table show a student alike from line to line."""

    def __init__(self, width: int):
        self.width = width
        self.labels: dict[str, str] = {}  # name -> label
        self.names: dict[str, str] = {}  # label -> name

    def __call__(self, name: str) -> str:
        label = self.labels.get(name)
        if label is not None:
            return label
        if len(self.labels) >= MOST_LABELS:
            self.labels.clear()
            self.names.clear()
        label, n = cut_middle(name, self.width), 1
        while label in self.names:
            n += 1
            label = cut_middle(name, self.width - len(f"~{n}")) + f"~{n}"
        self.labels[name], self.names[label] = label, name
        return label
