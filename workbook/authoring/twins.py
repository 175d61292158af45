"""twins — the Chinese notebooks in notebooks/zh-CN/, built from the English ones.

A twin is never edited by hand. It is the English notebook, copied whole (every code cell byte for
byte, every output, the metadata), with each markdown cell's text swapped for its Chinese translation.
The translations live in notebooks/zh-CN/translations/<name>.md, one section per markdown cell,
keyed by the English cell's id:

    <!-- cell 573967f3 from 9c1e02ab -->
    # s01 — Agent 循环
    ...

`from` is a short hash of the English text the section was translated from. When someone changes that
English cell, the hash no longer matches and the build names the cell as stale; a new English cell
with no section is named as missing. So the two languages cannot drift apart quietly: code and
outputs are copied, and prose that fell behind is reported by cell id.

    python -m workbook.authoring.twins            rebuild every twin, report what is missing or stale
    python -m workbook.authoring.twins --check    write nothing; exit 1 if a twin is out of date
    python -m workbook.authoring.twins --todo     add a section (English text to translate) per missing cell

Nothing here is lesson: it only copies and looks up.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workbook.paths import ROOT

ENGLISH = ROOT / "notebooks"  # the notebooks nbval re-runs
TWINS = ENGLISH / "zh-CN"  # their Chinese twins, same names
TRANSLATIONS = TWINS / "translations"  # the Chinese text, one .md per notebook
HASH_CHARS = 8  # enough to notice that an English cell changed
MARKER = re.compile(r"^<!-- cell (\S+) from ([0-9a-f]+) -->[ \t]*$", re.MULTILINE)
ENGLISH_WORDS = 5  # this many English words in a row, outside code and quotes, is an untranslated sentence
TODO = "TODO: translate the English below into Chinese, then delete this line."

HEADER = """\
<!-- The Chinese text of notebooks/{name}.ipynb: one section per markdown cell, keyed by the
English cell's id. `from` is the hash of the English text the section was translated from; when the
English cell changes, the build names this section as stale. Rebuild the twin after editing:
python -m workbook.authoring.twins -->
"""


class TwinError(Exception):
    """A notebook or translation file that cannot be used; its message is one line."""


@dataclass(frozen=True)
class Translation:
    text: str  # the Chinese markdown
    english_hash: str  # fingerprint() of the English text it was translated from


@dataclass
class Twin:
    """One built twin, and what its translation file lacks."""

    notebook: dict
    missing: list[str] = field(default_factory=list)  # markdown cell ids with no section
    stale: list[str] = field(default_factory=list)  # ids whose English changed since translation
    unused: list[str] = field(default_factory=list)  # sections for cells the English no longer has
    english: dict[str, str] = field(default_factory=dict)  # id -> an English sentence its section kept
    unknown: dict[str, list] = field(default_factory=dict)  # id -> code names no cell nor code has

    @property
    def complete(self) -> bool:
        return not (self.missing or self.stale or self.unused or self.english or self.unknown)


# -- reading ------------------------------------------------------------------------------------------


def english_notebooks() -> list[Path]:
    return sorted(ENGLISH.glob("*.ipynb"))


def twin_path(english: Path) -> Path:
    return TWINS / english.name


def translation_path(english: Path) -> Path:
    return TRANSLATIONS / f"{english.stem}.md"


def cell_text(cell: dict) -> str:
    """A cell's source as one string (nbformat allows a string or a list of lines)."""
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def fingerprint(text: str) -> str:
    """A short hash of an English cell's text: what a translation records it was made from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


def read_notebook(path: Path) -> dict:
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TwinError(f"{path.name}: not a readable notebook ({err})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list) or not all(isinstance(c, dict) and c.get("id") for c in cells):
        raise TwinError(f"{path.name}: every cell needs an id (nbformat 4.5); open and save it in Jupyter")
    return notebook


def read_translations(path: Path) -> dict[str, Translation]:
    """cell id -> its Chinese text, from a translation file (none yet: empty)."""
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    marks = list(MARKER.finditer(text))
    found: dict[str, Translation] = {}
    for mark, following in zip(marks, [*marks[1:], None]):
        cell_id, english_hash = mark.group(1), mark.group(2)
        if cell_id in found:
            raise TwinError(f"{path.name}: cell {cell_id} is translated twice; keep one section")
        body = text[mark.end() : following.start() if following else len(text)]
        found[cell_id] = Translation(body.strip("\n"), english_hash)
    return found


# -- building -----------------------------------------------------------------------------------------


def as_lines(text: str) -> list[str]:
    """Text as nbformat stores it: a list of lines, each keeping its newline but the last."""
    return text.splitlines(keepends=True)


def build_twin(english: dict, translations: dict[str, Translation]) -> Twin:
    """The English notebook with its markdown in Chinese; a cell with no translation keeps its English."""
    twin = Twin(copy.deepcopy(english))
    markdown_ids = set()
    for cell in twin.notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue  # code and its outputs: copied as they are
        markdown_ids.add(cell["id"])
        translation = translations.get(cell["id"])
        if translation is None:
            twin.missing.append(cell["id"])
            continue
        if translation.english_hash != fingerprint(cell_text(cell)):
            twin.stale.append(cell["id"])
        if leftover := english_left(translation.text):
            twin.english[cell["id"]] = leftover
        if unknown := unknown_names(translation.text, cell_text(cell)):
            twin.unknown[cell["id"]] = unknown
        cell["source"] = as_lines(translation.text)
    twin.unused = sorted(set(translations) - markdown_ids)
    return twin


CODE_NAME = re.compile(r"`([A-Za-z_][A-Za-z0-9_.]*)(?:\(\))?`")  # `name`, `module.name`, `name()`


@functools.cache
def code_words() -> frozenset[str]:
    """Every word of the steps' and the package's code: the names a translation may quote."""
    paths = [*ROOT.glob("s[0-9][0-9]_*.py"), *(ROOT / "workbook").rglob("*.py")]
    return frozenset(word for path in paths for word in re.findall(r"\w+", path.read_text()))


def unknown_names(chinese: str, english: str) -> list[str]:
    """The code names a translation quotes that neither its English cell nor the code has: a section
    left behind when the English, or the code it names, moved on (its marker may still match)."""
    quoted = dict.fromkeys(CODE_NAME.findall(chinese))
    return [name for name in quoted if name not in english and name.split(".")[-1] not in code_words()]


# What may stay English in a Chinese cell: code, commands, quotes of what a model or fixture said, links.
KEPT_AS_IS = [
    re.compile(r"```.*?```", re.DOTALL),  # code blocks
    re.compile(r"<!--.*?-->", re.DOTALL),  # comments
    re.compile(r"`[^`]*`"),  # inline code, commands, identifiers
    re.compile(r"^>.*$", re.MULTILINE),  # a block quote: the recorded text of a model or a fixture
    re.compile(r'"[^"\n]*"|“[^”]*”|「[^」]*」'),  # quoted words
    re.compile(r"\]\([^)]*\)|https?://\S+"),  # link targets
]
SENTENCE = re.compile(rf"[A-Za-z][\w'’-]*(?:[ ,;:\n]+[A-Za-z][\w'’-]*){{{ENGLISH_WORDS - 1},}}")


def english_left(text: str) -> str:
    """The first run of English words in a translated cell, outside code and quotes ("" if none)."""
    for kept in KEPT_AS_IS:
        text = kept.sub(" ", text)
    found = SENTENCE.search(text)
    return found.group(0) if found else ""


def build(english_path: Path) -> Twin:
    return build_twin(read_notebook(english_path), read_translations(translation_path(english_path)))


def serialize(notebook: dict) -> str:
    """A notebook as Jupyter saves it (nbformat: one-space indent, sorted keys, UTF-8 as is)."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


# -- what is left to translate ------------------------------------------------------------------------


def section(cell: dict, text: str) -> str:
    """A translation file's section for a cell: its marker, then the text."""
    return f"<!-- cell {cell['id']} from {fingerprint(cell_text(cell))} -->\n{text.strip(chr(10))}\n"


def english_cells(english_path: Path, ids: list[str]) -> list[dict]:
    wanted = set(ids)
    return [cell for cell in read_notebook(english_path)["cells"] if cell["id"] in wanted]


def report(english_path: Path, twin: Twin) -> list[str]:
    """One line per cell that needs a translator, each saying what to do."""
    name = english_path.name
    lines = [f"{name}: cell {i} has no translation (add it: --todo)" for i in twin.missing]
    for cell in english_cells(english_path, twin.stale):
        lines.append(
            f"{name}: cell {cell['id']} changed in English since it was translated; update the Chinese "
            f"and its marker to `from {fingerprint(cell_text(cell))}`"
        )
    lines += [f"{name}: cell {i} is translated but no longer in the English notebook" for i in twin.unused]
    lines += [f"{name}: cell {i} is still English: {words[:60]!r}" for i, words in twin.english.items()]
    lines += [
        f"{name}: cell {i} names code that neither its English nor the code has: {', '.join(names)}"
        for i, names in twin.unknown.items()
    ]
    return lines


def add_todo_sections(english_path: Path, twin: Twin) -> int:
    """Append a section holding the English text for each missing cell; return how many."""
    cells = english_cells(english_path, twin.missing)
    if not cells:
        return 0
    path = translation_path(english_path)
    existing = path.read_text(encoding="utf-8") if path.exists() else HEADER.format(name=english_path.stem)
    added = "".join("\n" + section(cell, f"{TODO}\n{cell_text(cell)}") for cell in cells)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(existing.rstrip("\n") + "\n" + added, encoding="utf-8")
    return len(cells)


# -- the command line ---------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m workbook.authoring.twins",
        description="Build notebooks/zh-CN/ from the English notebooks and their Chinese translations.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="write nothing; exit 1 if a twin is stale")
    action.add_argument("--todo", action="store_true", help="add a section to translate per missing cell")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    """Build (or with --check, compare) every twin; 1 if any cell needs a translator or a twin is stale."""
    problems = 0
    for english_path in english_notebooks():
        twin = build(english_path)
        if args.todo and add_todo_sections(english_path, twin):
            print(f"{english_path.name}: sections to translate added to {relative(english_path)}")
            twin = build(english_path)
        lines = report(english_path, twin)
        print("\n".join(lines) if lines else f"{english_path.name}: every markdown cell is translated")
        if args.todo:
            show_current_english(english_path, twin.stale)
        problems += len(lines) + (not settle(english_path, twin, args.check))
    return 1 if problems else 0


def settle(english_path: Path, twin: Twin, check_only: bool) -> bool:
    """Write the twin if it changed (or, checking only, say so); whether the committed twin is current."""
    text, target = serialize(twin.notebook), twin_path(english_path)
    if target.exists() and target.read_text(encoding="utf-8") == text:
        return True
    if check_only:
        print(
            f"{target.name}: the committed twin differs from its build; "
            "run python -m workbook.authoring.twins"
        )
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"{target.name}: rebuilt")
    return True


def show_current_english(english_path: Path, ids: list[str]) -> None:
    """A stale cell's English as it reads now, for the translator (git log -p shows what changed)."""
    for cell in english_cells(english_path, ids):
        print(f"\n--- {english_path.name}, cell {cell['id']}, English now ---\n{cell_text(cell)}\n")


def relative(english_path: Path) -> str:
    return str(translation_path(english_path).relative_to(ROOT))


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        return run(args)
    except TwinError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
