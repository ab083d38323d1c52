"""The code passes ruff's linter and is as ruff's formatter writes it (settings: ``[tool.ruff]``
in pyproject.toml), as CI runs it: CI runs README's test command, pytest, so the lint is a test.
``ruff check --fix`` and ``ruff format`` fix most findings; ``.pre-commit-config.yaml`` runs the
same two before a commit."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
PATHS = ("gpuscale", "tests", "workflows", "docs", "notebooks")


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", *PATHS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_ruff_finds_nothing_in_the_package_tests_and_workflows():
    """ruff is in the test extra (pip install -e '.[test]'): without it this fails, not skips."""
    p = ruff("check")
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_code_is_as_ruff_format_writes_it():
    p = ruff("format", "--check")
    assert p.returncode == 0, p.stdout + p.stderr
