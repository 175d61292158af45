"""The Chinese notebooks stay in step with the English ones, by construction.

Each twin in notebooks/zh-CN/ is built by workbook/authoring/twins.py from its English notebook: the
code cells and outputs copied, each markdown cell's text looked up by cell id in
notebooks/zh-CN/translations/. These tests check the result against the English notebooks
themselves, not against the build, and name the cell that needs a translator:
`python -m workbook.authoring.twins` says the same, and `--todo` adds the English text to translate.

nbval re-runs the English notebooks only: a twin's code and outputs are the English ones (checked
here), so its nbval run would execute the same cells against the same outputs a second time.
"""

import json
import re

from workbook.authoring import twins as twins

import pytest
from conftest import ROOT

ENGLISH = twins.english_notebooks()
NAMES = [path.stem for path in ENGLISH]


def load(path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def code_and_markdown(notebook: dict) -> list[tuple[str, str]]:
    return [(cell["cell_type"], cell["id"]) for cell in notebook["cells"]]


def test_the_seven_notebooks_are_all_here():
    assert len(ENGLISH) >= 7 and {"s01_agent_loop", "epilogue_tool_runner"} <= set(NAMES)


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_every_english_notebook_has_a_chinese_twin(english):
    assert twins.twin_path(english).exists(), (
        f"no twin for {english.name}: python -m workbook.authoring.twins"
    )


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_the_twin_has_the_same_cells_in_the_same_order(english):
    assert code_and_markdown(load(twins.twin_path(english))) == code_and_markdown(load(english)), (
        f"{english.name}: cells added, removed or moved; rebuild with python -m workbook.authoring.twins"
    )


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_code_cells_and_their_outputs_are_the_english_ones_byte_for_byte(english):
    twin = load(twins.twin_path(english))
    for ours, theirs in zip(twin["cells"], load(english)["cells"]):
        if theirs["cell_type"] == "code":
            assert twins.serialize(ours) == twins.serialize(theirs), f"{english.name}: cell {ours['id']}"
    assert twin["metadata"] == load(english)["metadata"]


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_every_markdown_cell_has_a_translation(english):
    missing = twins.build(english).missing
    assert not missing, (
        f"{english.name}: no translation for cell(s) {missing}; python -m workbook.authoring.twins --todo"
    )


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_no_translation_was_made_from_english_that_has_since_changed(english):
    twin = twins.build(english)
    assert not twin.stale, "\n".join(twins.report(english, twin))


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_no_translated_cell_is_left_in_english(english):
    left = twins.build(english).english
    assert not left, f"{english.name}: English left in cell(s) {left}"


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_no_translation_is_for_a_cell_that_is_gone(english):
    unused = twins.build(english).unused
    assert not unused, f"{english.name}: translations for cells no longer there: {unused}"


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_the_committed_twin_is_what_the_build_makes_now(english):
    built = twins.serialize(twins.build(english).notebook)
    assert twins.twin_path(english).read_text(encoding="utf-8") == built, (
        f"{english.name}: the twin was edited by hand or not rebuilt; python -m workbook.authoring.twins"
    )


# -- the build itself ---------------------------------------------------------------------------------

NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# s01 — The loop\n", "Why."]},
        {
            "cell_type": "code",
            "id": "run",
            "metadata": {},
            "execution_count": 1,
            "outputs": [{"name": "stdout", "output_type": "stream", "text": ["hi\n"]}],
            "source": ["print('hi')"],
        },
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def translated(text: str, english: str = "# s01 — The loop\nWhy.") -> dict:
    return {"intro": twins.Translation(text, twins.fingerprint(english))}


def test_markdown_is_swapped_and_code_is_copied():
    twin = twins.build_twin(NOTEBOOK, translated("# s01 — 循环\n为什么。"))
    assert twin.complete
    assert twin.notebook["cells"][0]["source"] == ["# s01 — 循环\n", "为什么。"]
    assert twin.notebook["cells"][1] == NOTEBOOK["cells"][1]
    assert NOTEBOOK["cells"][0]["source"][0] == "# s01 — The loop\n"  # the English is left alone


def test_a_cell_with_no_translation_is_named_and_keeps_its_english():
    twin = twins.build_twin(NOTEBOOK, {})
    assert twin.missing == ["intro"] and twin.notebook["cells"][0] == NOTEBOOK["cells"][0]


def test_a_translation_of_english_that_changed_since_is_named_stale():
    twin = twins.build_twin(NOTEBOOK, translated("# s01 — 循环", english="# s01 — The old loop\nWhy."))
    assert twin.stale == ["intro"] and not twin.complete


def test_a_translation_that_names_code_nobody_has_is_named_though_its_marker_matches():
    """A section left behind by the code it names: `wait_for` is in neither its English cell nor the
    code, while `stream_reply` (s06) and `agent_loop()` are."""
    text = "# s01 — 循环\n`stream_reply` 和 `agent_loop()` 之外，`wait_for` 也在等。"
    twin = twins.build_twin(NOTEBOOK, translated(text))
    assert twin.unknown == {"intro": ["wait_for"]} and not twin.complete and not twin.stale


@pytest.mark.parametrize("english", ENGLISH, ids=NAMES)
def test_no_translation_names_code_that_neither_its_english_nor_the_code_has(english):
    twin = twins.build(english)
    assert twin.unknown == {}, twins.report(english, twin)


def test_a_translation_for_a_cell_that_is_gone_is_named():
    translations = {**translated("# s01 — 循环"), "gone": twins.Translation("旧的", "00000000")}
    assert twins.build_twin(NOTEBOOK, translations).unused == ["gone"]


@pytest.mark.parametrize(
    "text",
    [
        "运行 `python -m workbook serve fixtures/s01_hello_agent.json --host 0.0.0.0` 即可。",
        "模型回答 “Done: hello_agent.txt is created and reads it back.”，循环结束。",
        "> Look at the files here, create hello_agent.txt containing Hello from Agent Loop\n\n这是任务。",
        "```python\nfor block in response.content: print(block)\n```\n循环的核心。",
        "见 Claude Code 或 Codex 的循环。",
    ],
)
def test_code_commands_quotes_and_names_may_stay_english(text):
    assert twins.english_left(text) == ""


@pytest.mark.parametrize(
    "text",
    [
        "# s01 — The loop\n\nThe model asks; the harness runs the tool.",
        "循环：call the model and run its tools。",
    ],
)
def test_an_english_sentence_is_caught(text):
    assert twins.english_left(text)


def test_a_translation_file_reads_back_by_cell_id(tmp_path):
    path = tmp_path / "s01.md"
    sections = (
        "\n<!-- cell a from 1234abcd -->\n第一段\n\n<!-- cell b from 5678abcd -->\n第二段\n\n```\ncode\n```\n"
    )
    path.write_text(twins.HEADER.format(name="s01") + sections, encoding="utf-8")
    assert twins.read_translations(path) == {
        "a": twins.Translation("第一段", "1234abcd"),
        "b": twins.Translation("第二段\n\n```\ncode\n```", "5678abcd"),
    }


def test_a_cell_translated_twice_is_one_line(tmp_path):
    path = tmp_path / "s01.md"
    path.write_text(
        "<!-- cell a from 1234abcd -->\n一\n<!-- cell a from 1234abcd -->\n二\n", encoding="utf-8"
    )
    with pytest.raises(twins.TwinError) as refused:
        twins.read_translations(path)
    assert str(refused.value) == "s01.md: cell a is translated twice; keep one section"


@pytest.fixture
def small_repo(tmp_path, monkeypatch):
    """The build's folders moved to tmp_path, holding one English notebook."""
    english = tmp_path / "notebooks"
    monkeypatch.setattr(twins, "ENGLISH", english)
    monkeypatch.setattr(twins, "TWINS", english / "zh-CN")
    monkeypatch.setattr(twins, "TRANSLATIONS", english / "zh-CN" / "translations")
    monkeypatch.setattr(twins, "ROOT", tmp_path)
    english.mkdir()
    (english / "s01.ipynb").write_text(twins.serialize(NOTEBOOK), encoding="utf-8")
    return english


def test_todo_then_translate_then_build_then_check(small_repo, capsys):
    assert twins.main(["--todo"]) == 1  # the section added holds English: still to translate
    source = small_repo / "zh-CN" / "translations" / "s01.md"
    assert "# s01 — The loop" in source.read_text(encoding="utf-8")
    assert "cell intro is still English" in capsys.readouterr().out
    marker = re.search(r"<!-- cell intro from \w+ -->", source.read_text(encoding="utf-8")).group(0)
    source.write_text(f"{marker}\n# s01 — 循环\n为什么。\n", encoding="utf-8")
    assert twins.main([]) == 0
    assert twins.main(["--check"]) == 0
    (small_repo / "zh-CN" / "s01.ipynb").write_text("{}", encoding="utf-8")
    assert twins.main(["--check"]) == 1
    assert "differs from its build" in capsys.readouterr().out


def edit_english(small_repo, cells: list[dict]) -> None:
    (small_repo / "s01.ipynb").write_text(twins.serialize({**NOTEBOOK, "cells": cells}), encoding="utf-8")


def test_an_english_edit_or_a_new_cell_after_translation_is_named_by_id(small_repo, capsys):
    source = small_repo / "zh-CN" / "translations" / "s01.md"
    source.parent.mkdir(parents=True)
    source.write_text(twins.section(NOTEBOOK["cells"][0], "# s01 — 循环\n为什么。"), encoding="utf-8")
    assert twins.main([]) == 0
    changed = {**NOTEBOOK["cells"][0], "source": ["# s01 — The loop\n", "Why it loops."]}
    added = {"cell_type": "markdown", "id": "outro", "metadata": {}, "source": ["Exercises."]}
    edit_english(small_repo, [changed, NOTEBOOK["cells"][1], added])
    capsys.readouterr()
    assert twins.main(["--todo"]) == 1
    out = capsys.readouterr().out
    new_hash = twins.fingerprint("# s01 — The loop\nWhy it loops.")
    assert (
        "cell intro changed in English since it was translated; update the Chinese and its marker to "
        f"`from {new_hash}`" in out
    )
    assert "English now ---\n# s01 — The loop\nWhy it loops." in out
    assert "cell outro is still English" in out  # --todo added its section, in English until translated
    assert "<!-- cell outro from" in source.read_text(encoding="utf-8")


def test_a_notebook_without_cell_ids_is_one_line(small_repo, capsys):
    (small_repo / "s01.ipynb").write_text('{"cells": [{"cell_type": "markdown", "source": []}]}')
    assert twins.main(["--check"]) == 1
    assert capsys.readouterr().err.strip() == (
        "error: s01.ipynb: every cell needs an id (nbformat 4.5); open and save it in Jupyter"
    )


# -- the fault table ----------------------------------------------------------------------------------

FAULTS = (ROOT / "docs" / "faults.md").read_text(encoding="utf-8")
FAULTS_ZH = (ROOT / "docs" / "faults.zh-CN.md").read_text(encoding="utf-8")
TEST_REFERENCE = re.compile(r"tests/(?:\w+/)*test_\w+\.py::\w+")  # tests/<area>/test_x.py::test_y


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and TEST_REFERENCE.search(line)]


@pytest.mark.parametrize("row", table_rows(FAULTS), ids=lambda row: row.split("|")[1].strip()[:40])
def test_every_fault_row_has_a_chinese_row_naming_the_same_tests(row):
    tests = set(TEST_REFERENCE.findall(row))
    matches = [zh for zh in table_rows(FAULTS_ZH) if set(TEST_REFERENCE.findall(zh)) == tests]
    assert matches, f"docs/faults.zh-CN.md has no row naming exactly the tests of: {row[:100]}…"


def test_the_chinese_fault_table_has_no_row_the_english_lacks():
    english = [set(TEST_REFERENCE.findall(row)) for row in table_rows(FAULTS)]
    assert english, "no row of docs/faults.md names a test: does TEST_REFERENCE still match their paths?"
    extra = [row for row in table_rows(FAULTS_ZH) if set(TEST_REFERENCE.findall(row)) not in english]
    assert not extra, (
        f"docs/faults.zh-CN.md: rows for faults docs/faults.md no longer lists: {extra[0][:100]}"
    )
