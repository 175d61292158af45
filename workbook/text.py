"""Text cut to fit: the one way the workbook shortens a line for a terminal, a table or a notebook."""

from __future__ import annotations

from rich.cells import cell_len


def clip(text: str, width: int) -> str:
    """`text` cut to `width` terminal cells (a wide character takes two), ending in … when cut."""
    if cell_len(text) <= width:
        return text
    text = text[:width]  # never more cells than characters kept, but for zero-width ones
    while text and cell_len(text) > width - 1:
        text = text[:-1]
    return text + "…"
