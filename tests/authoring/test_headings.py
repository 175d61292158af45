"""workbook/authoring/headings.py: a notebook's section headings, and the anchor Jupyter gives each.
docs/articles*.md's links to them are checked in test_articles_map.py."""

import json

from workbook.authoring import headings


def notebook(path, *cells) -> object:
    """A notebook of (id, kind, source) cells, written to `path`."""
    written = [{"id": i, "cell_type": kind, "source": source, "metadata": {}} for i, kind, source in cells]
    path.write_text(json.dumps({"cells": written, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_jupyter_anchor_is_the_rendered_heading_with_dashes():
    heading = headings.Heading("c", 0, "The server's own word: `x-should-retry`")
    assert heading.anchor == "The-server's-own-word:-x-should-retry"
    assert (
        headings.link("x", "n.ipynb", headings.Heading("c", 0, "A `f()` call")) == "[x](<n.ipynb#A-f()-call>)"
    )


def test_emphasis_is_not_part_of_the_rendered_heading_but_a_star_between_words_is():
    assert headings.Heading("c", 0, "**Bold** and *slanted* `code`").rendered == "Bold and slanted code"
    assert headings.Heading("c", 0, "2*3 is six").rendered == "2*3 is six"
    assert headings.link("x", "n.ipynb", headings.Heading("c", 0, "Plain")) == "[x](n.ipynb#Plain)"


def test_every_markdown_heading_is_found_numbered_in_its_cell_and_no_code_comment_is_one(tmp_path):
    path = notebook(
        tmp_path / "n.ipynb",
        ("a", "markdown", ["# Title\n", "text\n", "## Second ##\n"]),
        ("b", "code", "# a comment in code\n"),
        ("c", "markdown", "```bash\n# not a heading\n```\n### Third\n#no space, no heading\n"),
    )
    assert headings.headings(path) == [
        headings.Heading("a", 0, "Title"),
        headings.Heading("a", 1, "Second"),
        headings.Heading("c", 0, "Third"),
    ]
