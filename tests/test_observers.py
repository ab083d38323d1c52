"""The runner's observers (:mod:`gpuscale.runs.observe`) on a real 2-worker CPU cluster: every
hook at its step, in the order of the run; a failing step named once; what a failing run's
observers give back on the cluster; nothing of a finished run kept past its outcome."""

from __future__ import annotations

import gc
import time
import weakref

import pytest

from gpuscale import errors, workloads
from gpuscale.runs import runner
from gpuscale.runs.observe import COMPUTE, Observer, RunOptions

SVD = dict(rows=20_000, cols=20)


class Log(Observer):
    """Notes every hook with the step it was given."""

    def __init__(self):
        self.seen: list[tuple] = []
        self.cursors: list[int | None] = []
        self.elapsed: dict[str, list[float]] = {}

    def start(self, run):
        self.seen.append(("start", run.label, run.total))

    def before_step(self, step):
        self.seen.append(("before", step.kind, step.index, step.name))

    def measuring(self, step):
        self.seen.append(("measuring", step.kind, step.index))
        return super().measuring(step)

    def after_step(self, step, elapsed):
        self.seen.append(("after", step.kind, step.index))
        self.elapsed.setdefault(step.kind, []).append(elapsed)
        if step.kind == COMPUTE:
            self.cursors.append(step.cursor)

    def after_repeats(self, run, outcome):
        self.seen.append(("after_repeats", len(outcome.times_s), outcome.validation))

    def finish(self, run, outcome):
        self.seen.append(("finish", outcome.validation.valid))

    def failed(self, run, exc):
        self.seen.append(("failed", str(exc)))


def _execute(session, observers, warmup=1, repeat=2):
    cls = workloads.get("svd")
    ctx = workloads.Context(session.family, session.spec, session.client)
    return runner.execute(cls(), cls.parse(SVD), ctx, warmup=warmup, repeat=repeat, observers=observers)


def _plugins(client) -> list[str]:
    """The plugins gpuscale left on the scheduler and on the workers."""
    on_scheduler = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins))
    on_workers = client.run(lambda dask_worker: list(dask_worker.plugins))
    names = on_scheduler + [n for found in on_workers.values() for n in found]
    return sorted(n for n in names if str(n).startswith("gpuscale-"))


def _steps(kind, index, name):
    return [("before", kind, index, name), ("measuring", kind, index), ("after", kind, index)]


def test_every_hook_is_called_at_its_step_in_the_order_of_the_run(cpu_session):
    log = Log()
    before = _plugins(cpu_session.client)
    outcome = _execute(cpu_session, [*runner.default_observers(), log])
    assert log.seen == [
        ("measuring", "prepare", 0),
        ("start", "svd (cpu)", "3"),
        *_steps("generate", 0, "generate (loading the data)"),
        *_steps("warmup", 0, "warm-up 1 of 1"),
        *_steps("compute", 0, "timed repeat 1 of 2"),
        *_steps("compute", 1, "timed repeat 2 of 2"),
        ("after_repeats", 2, None),  # before validation
        *_steps("validate", 0, "validation"),
        ("finish", True),
    ]
    assert log.elapsed["compute"] == outcome.times_s and log.elapsed["warmup"] == outcome.warmup_s
    assert log.elapsed["generate"] == [outcome.generate_s]
    assert log.elapsed["validate"] == [outcome.validate_s]
    # what the default observers gave the outcome
    assert outcome.info["time_split"]["available"] is (None not in log.cursors)
    assert outcome.info["disturbance_checks"]["tasks"] is True and outcome.disturbed == {}
    assert outcome.audit["runs"] == {"generate": 1, "compute": 3}
    assert outcome.memory["verdict"] and outcome.memory["measured"]["peak_bytes"] > 0
    assert _plugins(cpu_session.client) == before


class StopAt(Observer):
    def __init__(self, kind, index):
        self.kind, self.index = kind, index

    def before_step(self, step):
        if (step.kind, step.index) == (self.kind, self.index):
            raise RuntimeError(f"stopped before {step.name}")


def test_a_step_that_fails_is_named_and_the_started_observers_release_the_cluster(cpu_session):
    log = Log()
    before = _plugins(cpu_session.client)
    with pytest.raises(RuntimeError) as got:
        _execute(cpu_session, [*runner.default_observers(), StopAt(COMPUTE, 1), log])
    assert errors.phase_of(got.value) == "timed repeat 2 of 2"
    assert log.seen[-1] == ("failed", "stopped before timed repeat 2 of 2")
    assert not any(seen[0] in ("after_repeats", "finish") for seen in log.seen)
    assert _plugins(cpu_session.client) == before  # the audit's worker plugin and the disturbance watch


def test_cancelled_stops_the_run_before_the_next_repeat(cpu_session):
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) == 3  # before the second timed repeat

    before = _plugins(cpu_session.client)
    with pytest.raises(runner.Cancelled, match="called off before run 3 of 3"):
        _execute(cpu_session, runner.default_observers(cancelled=cancelled))
    assert _plugins(cpu_session.client) == before


def test_a_finished_run_holds_nothing_past_its_outcome(cpu_session):
    """The run's data and last result are freed with its outcome, not at the next garbage
    collection: kept alive past their run, the next run of the same data on this process is
    handed their frames (Dask reuses a live expression of the same name)."""
    client = cpu_session.client
    gc.disable()
    try:
        outcome = _execute(cpu_session, runner.default_observers())
        last = weakref.ref(outcome.output)
        assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) > 0
        del outcome
        assert last() is None
        deadline = time.monotonic() + 10
        while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
            assert time.monotonic() < deadline, "the run's keys are still on the scheduler"
            time.sleep(0.05)
    finally:
        gc.enable()


def test_keywords_name_the_settings_they_override():
    options = RunOptions(repeat=5, memory_check=False, trace="t", write=False)
    assert options.keyword_sources() == {"run.repeat": "keyword", "run.memory-check": "keyword"}
    assert RunOptions().keyword_sources() == {}
