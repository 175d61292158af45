"""The README's step table tells the truth: every step listed exists, with the sizes it really has."""

import re
import subprocess
import sys

from workbook.authoring import stepdiff

from conftest import ROOT, STEPS, offline_env

ROWS = re.findall(r"^\| \[(s\d\d)_\w+\.py\]\(.*?\| ([^|]+) \|$", (ROOT / "README.md").read_text(), re.M)


def test_the_step_table_lists_every_step_that_exists():
    assert [step for step, _ in ROWS] == [name[:3] for name in STEPS]


def test_sizes_match_stepdiff():
    scripts = stepdiff.scripts()
    steps = sorted(scripts)
    for i, (step, size) in enumerate(ROWS):
        script = scripts[step]
        want = f"{len(script.read_text().splitlines())}, loop {len(stepdiff.loop_source(script))}"
        if i:
            want += " (+{} −{})".format(*stepdiff.stat(scripts[steps[i - 1]], script))
        assert size.strip() == want, f"README says {size.strip()} for {step}: run stepdiff --stat"


def sample_output(readme: str) -> str:
    """The output a README shows under its first command, `python s01_agent_loop.py`."""
    after = (ROOT / readme).read_text().split("python s01_agent_loop.py\n```", 1)[1]
    return after.split("```text\n", 1)[1].split("```", 1)[0]


def test_the_sample_output_is_what_s01_really_prints_at_80_columns():
    env = offline_env() | {"COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "s01_agent_loop.py"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    printed = "".join(line.rstrip() + "\n" for line in done.stdout.splitlines())
    for readme in ("README.md", "README.zh-CN.md"):
        assert sample_output(readme) == printed, (
            f"{readme}: paste the output of `COLUMNS=80 python s01_agent_loop.py`"
        )


def test_the_readmes_list_every_notebook():
    for readme in ("README.md", "README.zh-CN.md"):
        text = (ROOT / readme).read_text()
        assert "epilogue_tool_runner.ipynb" in text, f"{readme} does not list the epilogue notebook"


def test_the_venv_the_readme_creates_is_ignored_by_git():
    assert ".venv/" in (ROOT / ".gitignore").read_text().split()


def test_the_zh_cn_readme_says_each_paragraph_once():
    paragraphs = [p.strip() for p in (ROOT / "README.zh-CN.md").read_text().split("\n\n") if p.strip()]
    twice = {p for p in paragraphs if paragraphs.count(p) > 1 and not p.startswith("|")}
    assert not twice, f"said twice: {sorted(twice)[0][:80]}"
    assert (ROOT / "README.zh-CN.md").read_text().count("python -m workbook grade --") == 1
