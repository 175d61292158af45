"""One name for each thing in the Chinese text: docs/glossary.zh-CN.md lists the name to use and the
variants not to use ("不用（not:）"); none of those variants may appear in README.zh-CN.md, the Chinese
docs, the notebooks' Chinese translations or the markdown of the Chinese notebooks built from them.
Code, inline code, link targets and quotes of the articles (「…」) are not the workbook's own words, so
they are not read."""

import json
import re

import pytest
from conftest import ROOT

GLOSSARY = ROOT / "docs" / "glossary.zh-CN.md"
CHINESE_TEXT = sorted(
    [
        ROOT / "README.zh-CN.md",
        *(p for p in (ROOT / "docs").glob("*.zh-CN.md") if p != GLOSSARY),
        *(ROOT / "notebooks" / "zh-CN" / "translations").glob("*.md"),
    ]
)
CHINESE_NOTEBOOKS = sorted((ROOT / "notebooks" / "zh-CN").glob("*.ipynb"))
NOT_THESE = "不用（not:）"


def glossary_rows() -> list[dict]:
    """Each row of the glossary's tables, as {column heading: cell}."""
    rows, headings = [], None
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            headings = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if headings is None:
            headings = cells
        elif not set("".join(cells)) <= set("-: "):
            rows.append(dict(zip(headings, cells)))
    return rows


def banned() -> dict[str, str]:
    """variant -> the name to use instead."""
    return {
        variant.strip(): row["中文"]
        for row in glossary_rows()
        for variant in row.get(NOT_THESE, "").split("、")
        if variant.strip()
    }


def own_words(text: str) -> str:
    """The text with what is not the workbook's own Chinese taken out: code blocks, inline code, HTML
    comments, link targets, and quotes of the articles (「…」, which may nest)."""
    for kept, left in (
        (r"```.*?```", " "),
        (r"<!--.*?-->", " "),
        (r"`[^`\n]*`", " "),
        (r"\]\([^)]*\)", "] "),
    ):
        text = re.sub(kept, left, text, flags=re.DOTALL)
    while True:
        unquoted = re.sub(r"「[^「」]*」", " ", text)
        if unquoted == text:
            return text
        text = unquoted


def test_the_glossary_has_the_terms_the_issue_settled():
    chosen = {row["English"]: row["中文"] for row in glossary_rows()}
    assert chosen["workbook"] == "练习册" and chosen["permission gate"] == "权限闸门"
    assert chosen["transition"] == "转移" and chosen["fixture"] == "fixture"
    assert {"工作簿", "本书", "权限关卡", "夹具", "录音", "具名的转移"} <= set(banned())


def test_recovery_and_resume_have_a_word_each():
    chosen = {row["English"]: row["中文"] for row in glossary_rows()}
    assert chosen["recovery"].startswith("恢复") and chosen["resume"].startswith("继续")
    assert {"恢复运行", "恢复对话", "恢复后的回复"} <= set(banned())  # 恢复 in the sense of resume


def test_the_words_the_issue_retired_are_banned():
    chosen = {row["English"]: row["中文"] for row in glossary_rows()}
    assert chosen["escalate"] == "提高上限"
    retired = banned()
    assert retired["提额"] == "提高上限" and retired["轮次"] == "轮"
    assert retired["system 提示词"] == "系统提示"


def test_the_readme_links_the_glossary():
    assert "docs/glossary.zh-CN.md" in (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")


def test_own_words_drop_code_and_quotes_only():
    text = "本练习册 `harness` 「模型没有能力「循环」，是 harness 替它循环」 [链接](a/harness.md) harness"
    assert own_words(text).split() == ["本练习册", "[链接]", "harness"]


def notebook_markdown(path) -> str:
    """The markdown cells of a notebook, one after another."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_every_chinese_notebook_has_its_translation_checked():
    checked = {p.stem for p in CHINESE_TEXT if p.parent.name == "translations"}
    assert CHINESE_NOTEBOOKS and {p.stem for p in CHINESE_NOTEBOOKS} <= checked


@pytest.mark.parametrize("path", CHINESE_TEXT + CHINESE_NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_banned_variant_in_the_chinese_text(path):
    text = path.read_text(encoding="utf-8") if path.suffix == ".md" else notebook_markdown(path)
    text = own_words(text)
    found = [
        f"{variant!r} (use {use!r}): …{text[max(0, i - 15) : i + 15]!s}…".replace("\n", " ")
        for variant, use in banned().items()
        for i in [m.start() for m in re.finditer(re.escape(variant), text)]
    ]
    assert not found, f"{path.name}: {len(found)} banned variant(s), see docs/glossary.zh-CN.md: {found[:5]}"
