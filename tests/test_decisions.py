"""Every cluster decision of a set of CPU cases stays what ``tests/data/decisions.json`` holds:
its value, its source and its rule id (tests/decision_cases.py makes both, on any machine with
at least its cores)."""

from __future__ import annotations

import json
import os
import pathlib

import decision_cases as cases
import pytest

GOLDEN = json.loads((pathlib.Path(__file__).parent / "data" / "decisions.json").read_text())

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < cases.CORES, reason=f"the cases are held to {cases.CORES} cores"
)


@pytest.fixture(scope="module")
def today():
    return cases.run_held()


def _compare(got: dict, want: dict) -> list[str]:
    """What differs between two cases' decisions: a name missing or added, a value, a source,
    a rule id (one the golden file has; a decision may gain one)."""
    out = [f"{n}: missing" for n in want if n not in got] + [f"{n}: new" for n in got if n not in want]
    for name in set(got) & set(want):
        g, w = got[name], want[name]
        for key in ("value", "source", "rule_id"):
            if g[key] != w[key] and not (key == "rule_id" and w[key] is None):
                out.append(f"{name}.{key}: {g[key]!r} != {w[key]!r}")
    return out


def test_the_cases_ran_on_the_cores_they_were_held_to(today):
    assert today["machine"] == GOLDEN["machine"] == {"usable_cores": cases.CORES}


def test_explains_cluster_decisions_are_unchanged(today):
    assert [c["case"] for c in today["explain"]] == [c["case"] for c in GOLDEN["explain"]]
    for got, want in zip(today["explain"], GOLDEN["explain"]):
        assert _compare(got["decisions"], want["decisions"]) == [], want["case"]


def test_a_sessions_cluster_decisions_and_layout_are_unchanged(today):
    assert [c["case"] for c in today["sessions"]] == [c["case"] for c in GOLDEN["sessions"]]
    for got, want in zip(today["sessions"], GOLDEN["sessions"]):
        assert _compare(got["decisions"], want["decisions"]) == [], want["case"]
        assert got["layout"] == want["layout"], want["case"]


def _plan(collection=None, facts=None, slurm=None, **settings):
    from gpuscale import backends, config
    from gpuscale.plan.cluster import plan_cluster

    nested = config.keywords_to_nested({"backend": "cpu", **settings})
    if slurm:
        nested["cluster"]["slurm"] = slurm
    resolved = config.resolve(None, nested)
    return plan_cluster(resolved, backends.select("cpu").family, collection, facts=facts)


def test_a_decision_reads_as_the_choice_it_records():
    """A spec's decisions are frozen Decisions that read (and pickle, for a runner on a worker)
    as the record's ``{"value", "source", "rule"}``; a documented rule adds its id to both."""
    import dataclasses
    import pickle

    from gpuscale.plan import Decision
    from gpuscale.runs.session import configure

    _, _, spec = configure(backend="cpu", protocol="auto", workers=1, check=False)
    protocol, workers = spec.choices["protocol"], spec.choices["workers"]
    assert isinstance(protocol, Decision) and isinstance(workers, Decision)
    assert dict(protocol) == {
        "value": "tcp",
        "source": "rule",
        "rule": "protocol.tcp: auto: the cpu family's clusters talk TCP (distributed's default)",
        "setting": "auto",
        "rule_id": "protocol.tcp",
    }
    assert dict(workers) == {"value": 1, "source": "flag", "rule": None} and workers.rule_id == "layout.set"
    assert json.loads(json.dumps(dict(workers))) == dict(workers) == pickle.loads(pickle.dumps(workers))
    with pytest.raises(AttributeError):
        workers.value = 2
    other = dataclasses.replace(workers, rule_id="layout.fill")
    assert dict(other) == dict(workers) and other != workers  # one record, two rules


def test_a_plan_on_given_facts_lays_out_their_cores():
    """The layout is decided once from the machine's facts: 8 cores give the CPU family 2
    workers x 4 threads for array work and 8 x 1 for frames, and the kind's spec reads it."""
    from gpuscale.cluster import kind
    from gpuscale.plan import Facts

    facts = Facts(cores=8, memory_bytes=64 * 2**30)
    for collection, (workers, threads) in (("array", (2, 4)), ("dataframe", (8, 1))):
        plan = _plan(collection, facts)
        assert (plan.layout.workers.value, plan.layout.threads.value) == (workers, threads)
        assert plan.layout.threads.rule_id == "layout.family" and plan.layout.cores == 8
        spec = kind(plan.kind).spec(plan)
        assert (spec.kwargs["n_workers"], spec.kwargs["threads_per_worker"]) == (workers, threads)
        assert spec.choices["threads_per_worker"] == plan.layout.threads


@pytest.mark.parametrize(
    ("settings", "threads", "rule_id"),
    [
        ({"deploy": "ssh", "ssh_hosts": "a,b"}, 4, "layout.family"),
        ({"deploy": "ssh", "ssh_hosts": "a,b", "threads_per_worker": 3}, 3, "layout.set"),
        ({"deploy": "srun", "threads_per_worker": 3}, 3, "layout.set"),
        ({"deploy": "slurm", "slurm": {"cores": 8, "processes": 2}}, 4, "layout.slurm-job"),
    ],
)
def test_every_cluster_kind_takes_its_threads_from_the_plans_layout(settings, threads, rule_id):
    from gpuscale.cluster import kind

    plan = _plan("array", **settings)
    spec = kind(plan.kind).spec(plan)
    assert spec.threads_per_worker == plan.layout.threads.value == threads
    assert spec.choices["threads_per_worker"].rule_id == rule_id


def test_each_cluster_kind_is_a_kind_of_its_name():
    from gpuscale.cluster import KINDS, kind
    from gpuscale.cluster.kind import Kind

    for name in KINDS:
        k = kind(name)
        assert isinstance(k, Kind) and k.name == name


def test_the_gpus_of_a_gpu_cluster_are_decided_in_the_plan_from_the_machines_facts():
    """Which GPUs a GPU cluster takes, and its one worker per GPU, are the plan's decisions made
    from the facts (visible GPUs and their memory), so the cluster kind only words them."""
    from gpuscale import backends, config
    from gpuscale.cluster import kind
    from gpuscale.errors import UserError
    from gpuscale.plan import Facts
    from gpuscale.plan.cluster import plan_cluster

    family = backends.select("gpu", "array", check=False).family
    facts = Facts(cores=16, memory_bytes=64 * 2**30, gpus=((0, 80 * 2**30), (1, 40 * 2**30), (3, 80 * 2**30)))

    def plan(**settings):
        resolved = config.resolve(None, config.keywords_to_nested({"backend": "gpu", **settings}))
        return plan_cluster(resolved, family, "array", facts=facts)

    every = plan()
    assert every.gpus.value == [0, 1, 3] and every.gpus.rule_id == "gpus.visible"
    assert every.layout.workers.value == 3 and every.layout.workers.rule_id == "layout.per-gpu"
    spec = kind(every.kind).spec(every)
    assert spec.kwargs["CUDA_VISIBLE_DEVICES"] == "0,1,3" and spec.kwargs["n_workers"] == 3
    assert spec.choices["gpus"] is every.gpus and spec.choices["workers"] is every.layout.workers
    pooled = plan(rmm_pool_size=0.5)
    rule = kind("cuda").spec(pooled).choices["rmm_pool_size"].rule
    assert rule.endswith("0.5 x 40.00 GiB = 20.00 GiB per GPU")  # of the smallest GPU

    two = plan(workers=2)
    assert two.gpus.value == [0, 1] and two.layout.workers.rule_id == "layout.set"
    chosen = plan(gpus="3")
    assert chosen.gpus.value == [3] and chosen.gpus.rule_id == "gpus.set"
    with pytest.raises(UserError, match=r"GPU\(s\) \[2\] are not visible here \(visible: \[0, 1, 3\]\)"):
        plan(gpus="2,3")
    with pytest.raises(UserError, match="--workers 4 exceeds the 3 GPU"):
        plan(workers=4)
