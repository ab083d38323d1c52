"""A run says what it is doing (gpuscale/runs/progress.py), real CLI runs on real LocalClusters:
where stderr is not a terminal, a line every GPUSCALE_PROGRESS_EVERY seconds naming the phase,
the runs done, the elapsed time and what is left; large work says its size before the work and
its estimate after the first run; on a terminal one line redrawn in place names every phase."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

import pytest
from conftest import _clean_environ

GROUPBY = (
    "run",
    "groupby",
    "--backend",
    "cpu",
    "--workers",
    "2",
    "--threads-per-worker",
    "1",
    "--rows",
    "12000000",
    "--keys",
    "100000",
    "--split-out",
    "1",
    "--repeat",
    "2",
    "--warmup",
    "1",
)
PHASES = ("the cluster's start-up", "generate (loading the data)", "validation")
"""The phases that last over a second here; "starting", before the cluster's start-up, is
shown only when it lasts one interval (0.1 s below): the command's imports come before it."""


def progress_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("gpuscale: progress: ")]


def test_a_piped_run_says_every_phase_its_runs_and_what_is_left(cli, results_dir):
    p = cli(
        *GROUPBY,
        "--results-dir",
        results_dir,
        timeout=300,
        env={"GPUSCALE_PROGRESS_EVERY": "0.1", "GPUSCALE_PROGRESS_LARGE": "1"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stderr.splitlines()
    assert all(x.startswith(("gpuscale: progress: ", "gpuscale: estimate: ")) for x in lines), lines
    said = progress_lines(p.stderr)
    phases = {x.removeprefix("gpuscale: progress: ").split(",")[0] for x in said}
    assert set(PHASES) <= phases, phases
    runs = [x for x in said if re.search(r": (warm-up 1 of 1|timed repeat [12] of 2), [0-2]/3 runs, ", x)]
    assert runs, said
    bad = [
        x
        for x in runs
        if not re.search(r", [\d.hms ]+ elapsed, (about [\d.hms ]+ left before validation|left unknown)$", x)
    ]
    assert not bad, bad
    # the plan before the work, its estimate once the first run ended (a time measured, not assumed)
    first = next(i for i, x in enumerate(lines) if "generate" in x or "warm-up" in x)
    assert any("its time is unknown until the first run ends" in x for x in lines[:first]), lines
    assert any(
        re.match(r"gpuscale: estimate: the first run took [\d.]+ s; the 2 left take about", x) for x in lines
    ), lines
    assert [x for x in said if x.startswith("gpuscale: progress: validation, 3/3 runs, ")], said
    assert any(re.search(r"\b\d[\d,]* of [1-9][\d,]* tasks", x) for x in said), said  # from the scheduler


def test_by_default_a_short_piped_run_prints_nothing(cli, results_dir):
    """One line a minute, and the estimate from 8 GiB of data: a run of seconds stays quiet."""
    p = cli(*GROUPBY, "--results-dir", results_dir, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stderr[-3000:]


def test_on_a_terminal_one_redrawn_line_names_the_phases(tmp_path):
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "gpuscale", *GROUPBY, "--results-dir", tmp_path / "res"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=slave,
        env=_clean_environ({"COLUMNS": "200"}),
    )
    os.close(slave)
    raw = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    assert p.wait(timeout=300) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw.decode(errors="replace"))
    frames = [x.strip() for x in re.split(r"[\r\n]", text) if x.strip()]
    assert frames and all("━" in x for x in frames), frames  # the bar only: nothing left behind
    for phase in ("the cluster's start-up", "generate (loading the data)", "groupby (cpu): validation"):
        assert any(x.startswith(phase) for x in frames), (phase, frames)
    assert any(re.match(r"groupby \(cpu\): (warm-up|timed repeat) .*\b[0-2]/3\b", x) for x in frames), frames


@pytest.mark.parametrize("every", ["-1", "1e-6", "0", "nan"])
def test_a_progress_interval_from_the_environment_is_bounded(cli, results_dir, every):
    """A negative, tiny or senseless GPUSCALE_PROGRESS_EVERY does not flood stderr: lines come at
    most every 0.1 s (NaN: the default)."""
    p = cli(*GROUPBY, "--results-dir", results_dir, timeout=300, env={"GPUSCALE_PROGRESS_EVERY": every})
    assert p.returncode == 0, p.stderr[-3000:]
    said = progress_lines(p.stderr)
    assert len(said) <= 600, len(said)  # the run takes seconds: at most ten lines a second
    assert said or every == "nan"  # NaN: the default interval, a minute
    assert len(p.stderr) < 100_000
