"""Text cut to fit, the workbook's three ways: at a width in terminal cells (a terminal or a notebook
line), in the middle (a name, both ends kept), at a word (a sentence in a table)."""

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


def cut_middle(text: str, width: int) -> str:
    """Text in at most `width` characters, a cut one marked "…" in its middle: names that share a
    beginning differ at their end (js-ts_runner-pinned, js-ts_runner-latest), and both ends stay."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def cut_at_word(text: str, width: int) -> str:
    """Text in at most `width` characters, a cut one ended at a word, marked "…"."""
    if len(text) <= width:
        return text
    kept = text[: width - 1]
    space = kept.rfind(" ")
    return (kept[:space] if space > width // 2 else kept).rstrip(" ,;:") + "…"
