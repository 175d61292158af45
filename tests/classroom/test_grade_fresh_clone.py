"""The grader passes the course's own answers from a fresh clone, as a newcomer runs it: the project's
files copied to a new folder with no runs/ (a clone has none), `python -m workbook grade` started there
in bubblewrap (the grader's one sandbox: without it, `grade` refuses), each step graded on the rungs of
its own step. (test_ladder.py climbs each step up the rungs below its own, in this process.)

In a fresh clone, a step's live run (which a graded run is) keeps its files in runs/, a folder that does
not exist yet (under the Landlock fallback that issue 47 retired, s03 scored 0 of 4 for it)."""

import json
import shutil
import subprocess
import sys

from workbook import paths

import pytest
from conftest import ROOT, STEPS, offline_env
from system_tools import needs

# What a fresh clone lacks: files a run, a test or an install left beside the sources.
LEFT_BY_USE = shutil.ignore_patterns(".git", "runs", "node_modules", "__pycache__", ".ci", ".venv", "*.pyc")
# s07 declares the API's web search only under --web-search (docs/teaching.md, Grading, says why), and
# the pause-turn rung's recorded reply uses it.
FLAGS = {"s07_really_done": ["--web-search"]}
GRADED = [step for step in STEPS if step < "s08"]  # s08, s09: no rung of their own (test_ladder.py)


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    clone = tmp_path_factory.mktemp("clone") / "workbook"
    shutil.copytree(ROOT, clone, ignore=LEFT_BY_USE, symlinks=True)
    assert not (clone / "runs").exists()
    return clone


@needs("bwrap")
@pytest.mark.parametrize("step", GRADED)
def test_each_step_passes_its_own_rungs_from_a_fresh_clone(fresh_clone, step):
    own = step.split("_")[0]
    step_run = (
        [f"{step}.py"] if step in paths.SIX else ["-m", paths.step_module(step)]
    )  # from the clone's root
    program = [sys.executable, *step_run, *FLAGS.get(step, [])]
    done = subprocess.run(
        [sys.executable, "-m", "workbook", "grade", "--json", "--only", own, "--", *program],
        cwd=fresh_clone,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = json.loads(done.stdout)["rungs"]
    assert rows and {row["name"]: row["reason"] for row in rows if not row["passed"]} == {}
    assert done.returncode == 0, done.stderr
