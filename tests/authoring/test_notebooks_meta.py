"""Every notebook tells its step's story from the script itself, with outputs that reproduce.

nbval (plain `pytest`) re-runs each notebook and compares its outputs; these tests check what nbval
cannot: that the outputs are there at all, that the notebook is about its step and imports it, and that
nothing run-dependent (temp paths, terminal control codes, a spinner's frames) was committed.
"""

import io
import json
import re

from workbook import display, paths, scratch
from workbook.replay import fixtures
from workbook.replay import transport as replay

import pytest
from conftest import ROOT
from rich.console import Console

import s01_agent_loop

NOTEBOOKS = sorted((ROOT / "notebooks").glob("s[0-9][0-9]_*.ipynb"))


def cells(path, kind: str) -> list[dict]:
    return [
        cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == kind
    ]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def output_text(path) -> str:
    """Everything a notebook's code cells printed or displayed, as one string."""
    parts = []
    for cell in cells(path, "code"):
        for output in cell["outputs"]:
            text = output.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else text)
            for value in output.get("data", {}).values():
                parts.append("".join(value) if isinstance(value, list) else str(value))
    return "\n".join(parts)


def test_the_first_step_has_a_notebook():
    assert ROOT / "notebooks" / "s01_agent_loop.ipynb" in NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_belongs_to_a_step_script(path):
    assert paths.step_file(path.stem).exists(), f"{path.name} has no script {path.stem}.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_are_committed_from_one_top_to_bottom_run(path):
    code = cells(path, "code")
    assert code, f"{path.name} has no code cells"
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), (
        f"{path.name}: execute it top to bottom in a fresh kernel before committing"
    )
    with_output = [cell for cell in code if cell["outputs"]]
    assert len(with_output) * 2 >= len(code), (
        f"{path.name}: most code cells show nothing; were outputs cleared?"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_committed_output_is_an_error(path):
    errors = [out for cell in cells(path, "code") for out in cell["outputs"] if out["output_type"] == "error"]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_cell_is_markdown_naming_its_step(path):
    step = path.stem.split("_")[0]  # "s01"
    first = json.loads(path.read_text(encoding="utf-8"))["cells"][0]
    assert first["cell_type"] == "markdown", f"{path.name}: the first cell should be markdown (title, goals)"
    assert source(first).lstrip().startswith(f"# {step}"), f"{path.name}: the title should name {step}"
    assert f"[{step}]" in source(first), f"{path.name}: the first cell should show where {step} sits"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_imports_its_script_instead_of_copying_the_loop(path):
    code = "\n".join(source(cell) for cell in cells(path, "code"))
    step = rf"({path.stem}|workbook\.later import {path.stem})\b"  # the six at the root, the rest in later/
    assert re.search(rf"^\s*(import|from) {step}", code, re.MULTILINE), f"{path.name}: import {path.stem}"
    assert not re.search(r"^\s*def agent_loop\(", code, re.MULTILINE), (
        f"{path.name} defines its own agent_loop"
    )
    assert "inspect.getsource" in code, f"{path.name}: show the script's code with inspect.getsource"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_hold_nothing_that_changes_between_runs_or_machines(path):
    text = output_text(path)
    assert "\x1b" not in text, (
        f"{path.name}: terminal control codes in outputs (rich console not made plain?)"
    )
    assert "\r" not in text, f"{path.name}: carriage returns in outputs (a spinner or live display?)"
    for marker in ("/tmp/", "workbook-", str(ROOT)):
        assert marker not in text, f"{path.name}: outputs contain {marker!r}, which differs from run to run"


def test_a_plain_console_shows_the_loop_without_spinner_frames(monkeypatch):
    """The notebooks' recipe for deterministic rich output: the spinner leaves nothing behind."""
    out = io.StringIO()
    plain = Console(file=out, force_terminal=False, force_jupyter=False, width=100, highlight=False)
    monkeypatch.setattr(display, "console", plain)
    fixture = fixtures.load_fixture(ROOT / "fixtures" / "s01_hello_agent.json")
    client, _ = replay.replay_client(fixture, "s01_hello_agent.json")
    messages = [{"role": "user", "content": fixture["task"]}]
    s01_agent_loop.agent_loop(
        client, messages, s01_agent_loop.Settings(scratch.copy_workspace(fixture["workspace"]))
    )
    text = out.getvalue()
    assert "tokens in 114 / out 65" in text and "tokens in 671 / out 22" in text
    assert "waiting for the model" not in text
    assert "\x1b" not in text and "\r" not in text


SEED = re.compile(
    r"\bseeds?\b", re.IGNORECASE
)  # the word with a number after it, or "the seed reports"; not "seeded"


def reader_facing_texts():
    """What a reader reads: the notebooks' cells, both READMEs, every fixture's description and note."""
    for path in NOTEBOOKS:
        yield path.name, "\n".join(source(cell) for cell in json.loads(path.read_text())["cells"])
    for name in ("README.md", "README.zh-CN.md"):
        yield name, (ROOT / name).read_text()
    for path in sorted((ROOT / "fixtures").glob("*.json")):
        fixture = json.loads(path.read_text())
        yield path.name, f"{fixture.get('description', '')}\n{fixture.get('provenance_note', '')}"


READER_TEXTS = dict(reader_facing_texts())


@pytest.mark.parametrize("name", sorted(READER_TEXTS))
def test_no_reader_is_sent_to_a_seed_they_do_not_have(name):
    found = SEED.search(READER_TEXTS[name])
    assert not found, f"{name}: {found.group(0)!r} — cite the article by its title instead"


def output_lines(path) -> list[str]:
    """Every line of text a notebook's code cells printed or displayed (images left out)."""
    lines = []
    for cell in cells(path, "code"):
        for output in cell["outputs"]:
            texts = [output.get("text", "")]
            texts += [value for key, value in output.get("data", {}).items() if key.startswith("text/")]
            for text in texts:
                lines += ("".join(text) if isinstance(text, list) else text).splitlines()
    return lines


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_output_line_is_wider_than_200_characters(path):
    wide = [line for line in output_lines(path) if len(line) > 200]
    assert not wide, f"{path.name}: {len(wide)} output lines over 200 characters, e.g. {wide[0][:80]!r}…"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_shows_its_fixture_request_by_request_as_the_list_grows(path):
    lines = output_lines(path)
    requests = [int(line.split()[1]) for line in lines if re.match(r"REQUEST \d+  model=", line)]
    counts = [int(m.group(1)) for line in lines if (m := re.match(r"  messages: (\d+)", line))]
    assert 1 in requests and len(counts) >= 2, f"{path.name}: no request-by-request view (notebook_view)"
    assert any(later > earlier for earlier, later in zip(counts, counts[1:])), (
        f"{path.name}: the messages: counts never grow"
    )


@pytest.mark.parametrize("name", ["s05_budget", "s08_full_context"])
def test_the_token_charts_are_real_images(name):
    path = ROOT / "notebooks" / f"{name}.ipynb"
    images = [
        out for cell in cells(path, "code") for out in cell["outputs"] if "image/png" in out.get("data", {})
    ]
    assert images, f"{path.name}: no chart"


# -- the epilogue notebook keeps every notebook's rules (NOTEBOOKS globs sNN_ files only) -----

EPILOGUE = ROOT / "notebooks" / "epilogue_tool_runner.ipynb"


def test_the_epilogue_notebook_keeps_the_rules_every_notebook_keeps():
    test_outputs_are_committed_from_one_top_to_bottom_run(EPILOGUE)
    test_no_committed_output_is_an_error(EPILOGUE)
    test_outputs_hold_nothing_that_changes_between_runs_or_machines(EPILOGUE)
    first = source(cells(EPILOGUE, "markdown")[0])
    assert first.startswith("# Epilogue to s06") and "[epilogue]" in first
    code = "\n".join(source(cell) for cell in cells(EPILOGUE, "code"))
    assert "import s01_agent_loop" in code and "inspect.getsource(s01_agent_loop.agent_loop)" in code
    assert "tool_runner(" in code and 'match="shape"' in code


def test_the_epilogue_shows_a_continue_carrying_only_the_new_messages():
    text = output_text(EPILOGUE)
    assert "tool_runner:        REQUEST 2  thread: continue from msg_01HzF7…" in text
    assert re.search(r"REQUEST 2  thread: continue .*\n  messages: 1 ", text)
    assert re.search(r"hand-written loop:  REQUEST 2  no thread .*\n  messages: 3 ", text)
