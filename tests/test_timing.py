"""The timed repeats are not disturbed by the runner's own process: Python's garbage collector
is held out of them (a full collection once landed on the same repeat of every run, 5 x the
others)."""

from __future__ import annotations

import gc
import json
import statistics

from gpuscale.runs.runner import collector_held


def test_no_automatic_collection_inside_a_paused_block():
    seen = []

    def note(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        with collector_held() as paused:
            seen.clear()  # the full collection before freezing is not inside a repeat
            with paused():
                junk = []
                for _ in range(200_000):  # far past the collector's allocation thresholds
                    a = []
                    a.append(a)
                    junk.append(a)
                inside = list(seen)
                del junk
            after = list(seen)
    finally:
        gc.callbacks.remove(note)
    assert inside == []
    assert after and after[0] == 0  # the youngest generation is collected on the way out
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_no_repeat_of_a_cpu_svd_run_is_twice_the_median(cli, results_dir):
    """10 repeats of a ~20 ms svd: max / median < 2 (a second run is allowed for the noise of a
    shared machine; the collection this guards against hit every run at the same repeat)."""
    ratios = []
    for _ in range(2):
        p = cli(
            "run",
            "svd",
            "--backend",
            "cpu",
            "--rows",
            "100000",
            "--cols",
            "50",
            "--repeat",
            "10",
            "--json",
            "--results-dir",
            results_dir,
        )
        assert p.returncode == 0, p.stderr
        t = json.loads(p.stdout)["times_s"]
        ratios.append(max(t) / statistics.median(t))
        if ratios[-1] < 2:
            break
    assert min(ratios) < 2, ratios
