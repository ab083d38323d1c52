"""README, the documentation pages and CI stay in step with each other and with the code."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
from conftest import _clean_environ

from gpuscale import config, workloads
from gpuscale.cli.cluster import cluster
from gpuscale.cli.run import run

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
WORKLOADS_PAGE = (DOCS / "reference" / "workloads.md").read_text()
CLI_PAGE = (DOCS / "reference" / "cli.md").read_text()
SETTINGS_PAGE = (DOCS / "reference" / "settings.md").read_text()
CI = REPO / ".ci" / "run"
INSTALL_AND_RUN = "pip install . && gpuscale run svd"
TEST_COMMAND = 'pip install ".[test]" && pytest'


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_readme_has_the_install_and_test_commands():
    assert INSTALL_AND_RUN in README
    assert TEST_COMMAND in README
    lines = [ln.split("#")[0].strip() for b in bash_blocks(README) for ln in b.splitlines()]
    assert INSTALL_AND_RUN in lines and TEST_COMMAND in lines  # as commands in bash blocks


def _executed(line: str) -> str | None:
    """A command the script runs (not a comment or an echo), with pip's -q/--quiet dropped."""
    line = line.strip()
    if not line or line.startswith("#") or line.startswith("echo "):
        return None
    words = [w for w in shlex.split(line) if w not in ("-q", "--quiet")]
    return shlex.join(words)


def test_ci_runs_both_readme_commands():
    if not CI.exists():
        pytest.skip(".ci/run does not exist yet")
    text = CI.read_text()
    executed = {c for c in map(_executed, text.splitlines()) if c}
    for command in (INSTALL_AND_RUN, TEST_COMMAND):
        assert shlex.join(shlex.split(command)) in executed, command
    # and in this order: install + main job first, tests after
    lines = [c for c in map(_executed, text.splitlines()) if c]
    assert lines.index(shlex.join(shlex.split(INSTALL_AND_RUN))) < lines.index(
        shlex.join(shlex.split(TEST_COMMAND))
    )


def test_readme_default_job_matches_the_defaults():
    p = workloads.get("svd").parse({})
    assert "200,000 x 100" in README
    assert (p.rows, p.cols) == (200_000, 100)
    assert config.DEFAULTS["gpuscale"]["backend"] == "auto"
    assert "./gpuscale-results/" in README
    assert config.DEFAULTS["gpuscale"]["results-dir"] == "gpuscale-results"


@pytest.mark.parametrize("name", workloads.names())
def test_docs_list_every_workload_parameter(name):
    # the workloads table: | `name`[, `other`] | what | `--flag --flag ...` |
    rows = [
        line
        for line in WORKLOADS_PAGE.splitlines()
        if line.startswith("| `") and f"`{name}`" in line.split("|")[1]
    ]
    assert rows, f"docs/reference/workloads.md's table has no row for {name}"
    documented = {w for w in rows[0].split("|")[3].strip(" `").split() if w.startswith("--")}
    assert set(workloads.parameter_flags(workloads.get(name))) <= documented


def test_docs_cluster_and_run_flags_exist():
    m = re.search(r"Cluster flags:(.*?)Run flags:(.*?)\n\n", CLI_PAGE, flags=re.S)
    assert m
    flags = set()
    for part in re.findall(r"`([^`]*)`", m.group(1) + m.group(2)):
        first = part.split()[0]
        flags.update(f for f in first.split("/") if f.startswith("--"))
    assert {"--backend", "--protocol", "--profile", "--scheduler", "--repeat", "--json"} <= flags
    cmd = run.get_command(None, "svd")
    options = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    assert flags <= options, flags - options
    show = cluster.get_command(None, "show")
    show_options = {o for p in show.params for o in (*p.opts, *p.secondary_opts)}
    run_only = {
        "--repeat",
        "--warmup",
        "--results-dir",
        "--trace",
        "--no-memory-check",
        "--strict-backend",
        "--in-cluster",
        "--no-in-cluster",
        "--target-error",
        "--max-repeats",
        "--max-time",
        "--bandwidth-probe",
    }
    assert flags - run_only <= show_options, (flags - run_only) - show_options


def test_docs_profiles_exist():
    for name in ("cpu", "gpu-tcp", "gpu-ucx", "gpu-ucx-nvlink", "scheduler"):
        assert f"`{name}`" in SETTINGS_PAGE
        assert name in config.profile_names()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _sales_and_x(folder: pathlib.Path) -> None:
    """The files README's own-data block names: sales.parquet (store, price, qty), x.npy."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    pd.DataFrame(
        {"store": rng.integers(0, 20, 5_000), "price": rng.random(5_000), "qty": rng.integers(1, 10, 5_000)}
    ).to_parquet(folder / "sales.parquet")
    np.save(folder / "x.npy", rng.random((20_000, 10)))


def _all_python_blocks() -> list[tuple[str, str]]:
    """(where, block) for each Python block of README and the documentation pages,
    each distinct block once."""
    pages = [
        REPO / "README.md",
        *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts),
    ]
    seen, out = set(), []
    for page in pages:
        for i, block in enumerate(python_blocks(page.read_text())):
            if block not in seen:
                seen.add(block)
                out.append((f"{page.relative_to(REPO)}#{i}", block))
    return out


PYTHON_BLOCKS = _all_python_blocks()


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)), ids=[w for w, _ in PYTHON_BLOCKS])
def test_python_blocks_run_as_written(index, tmp_path):
    """Each Python block of README and the docs, saved as a script and run as written (CPU here:
    "auto" picks it), beside the files it says are yours."""
    where, block = PYTHON_BLOCKS[index]
    _sales_and_x(tmp_path)
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(block)
    p = subprocess.run(
        [sys.executable, str(script)],
        cwd=str(tmp_path),
        env=_clean_environ(),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert p.returncode == 0, f"{where} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    assert "Traceback" not in p.stderr
    records = sorted((tmp_path / "gpuscale-results").glob("*.json"))
    if "s.run(" in block or "gpuscale.run(" in block:
        assert records, "the block's runs wrote no record"
        assert all(json.loads(r.read_text())["valid"] is not False for r in records)
