"""Every cluster decision for a set of CPU cases, as (value, source, rule id) with the machine
facts the rules read, on any machine: ``tests/data/decisions.json`` holds them and
``tests/test_decisions.py`` compares today's with it.

The cases run in a process of their own, held to :data:`CORES` cores (its CPU affinity, which
:func:`gpuscale.machine.cpu` reads as the usable cores), so the thread layouts are the same on
every machine with at least that many. The host's memory still shows in memory limits: a byte
count a rule derived from it is written as its share of the host's memory (``{"host_share":
0.5}``), and the spill target of such a limit and the system's temp folder as ``<host>``.
Sentences are not compared: a decision is its value, its source and its rule id.

Regenerate only for an intended change of decisions::

    python tests/decision_cases.py > tests/data/decisions.json
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

CORES = 2
REPO = str(pathlib.Path(__file__).resolve().parents[1])

EXPLAIN: list[dict[str, Any]] = [
    {"workload": "svd", "backend": "cpu"},
    {"workload": "groupby", "backend": "cpu"},
    {"workload": "svd", "backend": "cpu", "protocol": "tcp"},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"workers": 2, "threads_per_worker": 1}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"workers": 1}},
    {"workload": "groupby", "backend": "cpu", "cluster_settings": {"threads_per_worker": 1}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"memory_limit": "1GB"}},
    {"workload": "groupby", "backend": "cpu", "cluster_settings": {"memory_limit": 0.25, "workers": 1}},
    {"workload": "merge", "backend": "cpu", "cluster_settings": {"memory_limit": "300MB", "workers": 1}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"rmm_pool_size": "2GB", "nvlink": True}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"message_interval": "dask"}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"scheduler": "tcp://127.0.0.1:8786"}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"deploy": "ssh", "ssh_hosts": "a,b,b,c"}},
    {
        "workload": "groupby",
        "backend": "cpu",
        "cluster_settings": {"deploy": "ssh", "ssh_hosts": "a,b", "threads_per_worker": 3, "security": "off"},
    },
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"deploy": "slurm", "slurm_jobs": 2}},
]
"""Keyword sets for :func:`gpuscale.api.explain`: the cluster's knobs of its plan."""

SESSIONS: list[dict[str, Any]] = [
    {"backend": "cpu"},
    {"backend": "cpu", "collection": "array"},
    {"backend": "cpu", "collection": "dataframe"},
    {"backend": "cpu", "protocol": "tcp", "collection": "dataframe"},
    {"backend": "cpu", "workers": 2},
    {"backend": "cpu", "threads_per_worker": 2, "collection": "dataframe"},
    {"backend": "cpu", "workers": 1, "threads_per_worker": 2, "memory_limit": "512MB"},
    {"backend": "cpu", "memory_limit": 0.5},
    {"backend": "cpu", "deploy": "srun", "collection": "array"},
]
"""Keyword sets for :func:`gpuscale.runs.session.configure` (``collection``: ``--for``): the
spec a session or ``cluster up`` builds."""


def _host_share(value: Any, host: int) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return {"host_share": round(value / host, 6)}
    return value


def decisions(choices: dict[str, Any], host: int, ids: dict[str, str | None] | None = None) -> dict[str, Any]:
    """``choices`` (name -> recorded choice or decision) as name -> value, source, rule id (a
    decision's, else the record's or ``ids``'), with the host's memory taken out of the values
    derived from it."""
    import tempfile

    out = {}
    limit = choices.get("memory_limit") or {}
    from_host = limit.get("setting") == "auto" or isinstance(limit.get("setting"), float)
    for name, c in choices.items():
        value = c.get("value")
        if name == "memory_limit" and from_host:
            value = _host_share(value, host)
        elif name == "memory_target_fraction" and from_host:
            value = "<host>"
        elif name == "spill_directory" and value == tempfile.gettempdir():
            value = "<tmp>"
        rule_id = getattr(c, "rule_id", None) or c.get("rule_id") or (ids or {}).get(name)
        out[name] = {"value": value, "source": c.get("source"), "rule_id": rule_id}
    return out


def layout(spec, host: int) -> dict[str, Any]:
    """The numbers of the spec the decisions gave: its workers, threads and memory limit."""
    limit = spec.memory_limit_bytes
    auto = spec.memory_limit == "auto" or isinstance(spec.memory_limit, float)
    return {
        "kind": spec.kind,
        "cls": spec.cls,
        "protocol": spec.protocol,
        "workers": spec.workers,
        "threads_per_worker": spec.threads_per_worker,
        "memory_limit_bytes": _host_share(limit, host) if auto else limit,
    }


def collect() -> dict[str, Any]:
    """Every case's decisions and layout, in this process (held to :data:`CORES` cores)."""
    import gpuscale.api as api
    from gpuscale import config, machine, workloads
    from gpuscale.runs.session import configure

    facts = machine.cpu()
    host = facts["memory_bytes"]
    out: dict[str, Any] = {"machine": {"usable_cores": facts["usable_cores"]}, "explain": [], "sessions": []}
    for case in EXPLAIN:
        kw = dict(case)
        plan = api.explain(kw.pop("workload"), **kw)
        cluster = dict(plan["explained"]["cluster"])
        cluster.pop("runner", None)  # where the runner runs: not the cluster layer's
        settings = config.merge_keywords(kw.get("cluster_settings"), backend=kw.get("backend"))
        collection = workloads.get(case["workload"]).collection
        _, _, spec = configure(collection=collection, check=False, protocol=kw.get("protocol"), **settings)
        ids = {k: getattr(v, "rule_id", None) for k, v in spec.choices.items()}
        out["explain"].append({"case": case, "decisions": decisions(cluster, host, ids)})
    for case in SESSIONS:
        kw = dict(case)
        _, _, spec = configure(collection=kw.pop("collection", None), check=False, **kw)
        out["sessions"].append(
            {"case": case, "decisions": decisions(spec.choices, host), "layout": layout(spec, host)}
        )
    return json.loads(json.dumps(out, default=str))


def run_held() -> dict[str, Any]:
    """:func:`collect` in a new Python process held to :data:`CORES` of this one's cores, with no
    SLURM task of its own (srun's rules read ``SLURM_*``)."""
    cores = sorted(os.sched_getaffinity(0))[:CORES]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [env.get("PYTHONPATH")])])
    code = (
        f"import os, sys, json; os.sched_setaffinity(0, {cores!r}); sys.path.insert(0, {REPO!r}); "
        "sys.path.insert(0, os.path.join(" + repr(REPO) + ", 'tests')); import decision_cases; "
        "json.dump(decision_cases.collect(), sys.stdout)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    if p.returncode:
        raise RuntimeError(p.stderr)
    return json.loads(p.stdout)


if __name__ == "__main__":
    json.dump(run_held(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
