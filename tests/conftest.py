"""Shared test helpers: the repo on sys.path, running a step script as a reader would."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

STEPS = sorted(p.stem for p in ROOT.glob("s0*_*.py"))  # the step scripts that exist


def offline_env(**extra) -> dict:
    """The environment of a reader with no API key (so scripts replay), plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MODEL_ID")
    }
    env.update(COLUMNS="120", PYTHONIOENCODING="utf-8", **extra)
    return env


def run_script(*args, timeout: float = 60, **env) -> subprocess.CompletedProcess:
    """Run `python <args>` from the repo root, as a reader would type it."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=offline_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def root() -> Path:
    return ROOT
