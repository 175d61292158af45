"""docs/articles.md gives every point of the source articles a place, and every place it names is real.

A place is a notebook section (`nb s05 › Ctrl-C keeps the work`), a fixture, a file, or a name in a
step (`s07:TRANSITIONS`). The Chinese page links each section to the Chinese twin, under its Chinese
heading: a link must land on a heading that is there, or a reader cannot find the section.
"""

import importlib
import re
from pathlib import Path
from urllib.parse import unquote

from workbook import paths
from workbook.authoring import headings

import pytest
from conftest import ROOT

ENGLISH = ROOT / "docs" / "articles.md"
CHINESE = ROOT / "docs" / "articles.zh-CN.md"
NOTEBOOKS = {
    p.stem[:3] if re.match(r"s\d\d_", p.stem) else "epilogue": p for p in (ROOT / "notebooks").glob("*.ipynb")
}
CHINESE_DOCS = sorted([ROOT / "README.zh-CN.md", *(ROOT / "docs").glob("*.zh-CN.md")])
LINK = re.compile(r"\[([^\]]*)\]\((?:<([^>]*)>|([^)\s]*))\)")  # [label](target) or [label](<target>)


def notebook_links(text: str) -> list[tuple[str, str, str]]:
    """(label, notebook, anchor) for each link into the Chinese notebooks."""
    found = []
    for label, bracketed, plain in LINK.findall(text):
        target, _, anchor = (bracketed or plain).partition("#")
        if "notebooks/zh-CN/" in target:
            found.append((label, target, anchor))
    return found


def table_rows(path: Path) -> list[tuple[str, list[str]]]:
    """(the section it is in, its cells) for each row of each table, headings and rules left out."""
    rows, section, header = [], "", False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section, header = line, True
        elif line.startswith("|") and not set(line) <= set("|-: "):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if header:
                header = False
            else:
                rows.append((section, cells))
    return rows


def test_every_point_has_a_place():
    rows = table_rows(ENGLISH)
    assert len(rows) > 60  # the five articles' points, and the SDK's
    assert not [cells[0] for _, cells in rows if not cells[-1]]


def test_the_chinese_page_has_a_row_for_every_point_of_the_english_one():
    def per_section(path):
        counts = {}
        for section, _ in table_rows(path):
            counts[section] = counts.get(section, 0) + 1
        return list(counts.values())

    assert per_section(CHINESE) == per_section(ENGLISH)


# What may follow a section's name: the next place ("; "), the cell's end (" |"), a closing or an
# opening parenthesis, the end of inline code, or the line's end. Not ":" or ",": a name cut there
# ("1. Truncated text" for "1. Truncated text: escalate, then continue") is not the heading.
AFTER_A_HEADING = re.compile(r"(;|\s\||\)|\s\(|`|$)", re.MULTILINE)


def names_a_whole_heading(rest: str, notebook: Path) -> bool:
    """Whether `rest` opens with one of the notebook's headings, whole, as written."""
    found = headings.headings(notebook)
    return any(rest.startswith(h.text) and AFTER_A_HEADING.match(rest, len(h.text)) for h in found)


def test_every_notebook_section_named_is_a_heading_of_that_notebook():
    text = ENGLISH.read_text(encoding="utf-8")
    named = list(re.finditer(r"nb (s\d\d|epilogue) › ", text))
    assert len(named) > 50
    wrong = []
    for mention in named:
        rest = text[mention.end() :]
        if not names_a_whole_heading(rest, NOTEBOOKS[mention.group(1)]):
            wrong.append(f"{mention.group(0)}{rest[:50]}")
    assert not wrong, f"sections that are not headings (whole, as written) of their notebook: {wrong}"


def test_a_section_is_named_by_its_whole_heading():
    notebook = NOTEBOOKS["s06"]
    assert names_a_whole_heading("1. Truncated text: escalate, then continue; `s06", notebook)
    assert names_a_whole_heading("1. Truncated text: escalate, then continue |", notebook)
    assert not names_a_whole_heading("1. Truncated text; `s06_truncated_text.json`", notebook)
    assert not names_a_whole_heading("1. Truncated text: escalate; `s06_truncated_text.json`", notebook)


@pytest.mark.parametrize("path", [ENGLISH, CHINESE], ids=lambda p: p.name)
def test_every_fixture_and_file_named_exists(path):
    text = path.read_text(encoding="utf-8")
    fixtures = re.findall(r"`((?:s\d\d|grade)_\w+\.json)`", text)
    files = re.findall(r"`((?:workbook|tests|notebooks|fixtures|docs)/[\w./-]+\.\w+)`", text)
    assert fixtures and files
    missing = [f for f in fixtures if not (ROOT / "fixtures" / f).exists()]
    missing += [f for f in files if not (ROOT / f).exists()]
    assert not missing


@pytest.mark.parametrize("path", [ENGLISH, CHINESE], ids=lambda p: p.name)
def test_every_name_in_a_step_is_defined_there(path):
    names = re.findall(r"`(s\d\d):([A-Za-z_][\w.]*)`", path.read_text(encoding="utf-8"))
    steps = {step[:3]: paths.step_module(step) for step in paths.STEPS}
    missing = []
    for step, name in names:
        found = importlib.import_module(steps[step])
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is None:
            missing.append(f"{step}:{name}")
    assert not missing


@pytest.mark.parametrize("path", CHINESE_DOCS, ids=lambda p: p.name)
def test_chinese_docs_link_notebook_sections_by_their_chinese_headings(path):
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"nb (s\d\d|epilogue) › ", text), (
        "a section named in English: link its Chinese heading"
    )
    broken = []
    for label, target, anchor in notebook_links(text):
        notebook = (path.parent / unquote(target)).resolve()
        if not notebook.exists():
            broken.append(f"{target}: no such notebook")
            continue
        if not anchor:
            continue
        found = [h for h in headings.headings(notebook) if h.anchor == unquote(anchor)]
        if not found:
            broken.append(f"{target}#{anchor}: no such heading")
        elif "›" in label and label.split("›", 1)[1].strip() != found[0].rendered:
            broken.append(f"[{label}]: the heading reads {found[0].rendered!r}")
    assert not broken, f"{path.name}: {broken}"


def test_the_chinese_page_links_its_sections():
    assert len(notebook_links(CHINESE.read_text(encoding="utf-8"))) > 50
