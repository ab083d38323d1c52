"""The code passes ruff (settings: ``[tool.ruff]`` in pyproject.toml), as CI runs it: CI runs
README's test command, pytest, so the lint is a test. ``ruff check --fix`` fixes most findings;
``.pre-commit-config.yaml`` runs the same check before a commit."""
from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_package_tests_and_workflows():
    """ruff is in the test extra (pip install -e '.[test]'): without it this fails, not skips."""
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "gpuscale", "tests", "workflows"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
