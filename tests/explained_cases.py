"""The explain / record cases whose output must not change when code moves between layers.

``tests/data/explained.json`` holds what ``gpuscale explain`` (the whole plan) and real CPU
runs (the record's ``explained`` section) give for :data:`EXPLAIN` and :data:`RUNS`;
``tests/test_explained.py`` compares today's output with it (git's history of the file says
what changed in it and why). Regenerate only for
an intended change of output:

    python tests/explained_cases.py  > tests/data/explained.json

Facts of the machine are masked (:func:`normalize`) so the file holds on any host with the
same core count: sizes (``12.3 GiB``, byte counts of memory limits) and where the packaged
profiles are (``<profiles>/gpu-tcp.yaml``: the checkout's clusters/ or an installed copy). The
core count stays: the thread layout is what is compared.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any

EXPLAIN: list[dict[str, Any]] = [
    {"workload": "svd", "backend": "cpu"},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"workers": 2, "threads_per_worker": 1}},
    {
        "workload": "svd",
        "backend": "cpu",
        "cluster_settings": {"workers": 1},
        "rows": 50_000,
        "cols": 20,
        "condition": 1e6,
    },
    {
        "workload": "svd",
        "backend": "cpu",
        "cluster_settings": {"threads_per_worker": 2, "memory_limit": "1GB"},
    },
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"memory_limit": 0.25, "nvlink": True}},
    {"workload": "groupby", "backend": "cpu", "rows": 200_000, "keys": 50_000},
    {
        "workload": "groupby",
        "backend": "cpu",
        "cluster_settings": {"workers": 2, "threads_per_worker": 1},
        "rows": 200_000,
        "keys": 1000,
        "split_out": 2,
    },
    {
        "workload": "groupby",
        "backend": "cpu",
        "protocol": "tcp",
        "cluster_settings": {"rmm_pool_size": "2GB"},
    },
    {"workload": "transpose_sum", "backend": "cpu", "n": 2000},
    {"workload": "merge", "backend": "cpu", "cluster_settings": {"memory_limit": "300MB", "workers": 1}},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"scheduler": "tcp://127.0.0.1:8786"}},
    {"workload": "groupby", "backend": "cpu", "profile": "scheduler"},
    {
        "workload": "svd",
        "backend": "cpu",
        "cluster_settings": {"scheduler": "127.0.0.1:8786", "in_cluster": False},
    },
    {
        "workload": "svd",
        "backend": "cpu",
        "cluster_settings": {"scheduler": "tcp://127.0.0.1:8786"},
        "trace": "somewhere",
    },
    {"workload": "svd", "backend": "gpu"},
    {"workload": "groupby", "backend": "gpu", "protocol": "ucx", "rows": 1_000_000},
    {"workload": "svd", "profile": "gpu-ucx-nvlink"},
    {"workload": "svd", "backend": "cupy", "cluster_settings": {"rmm_pool_size": "none"}},
    {"workload": "svd", "backend": "gpu", "cluster_settings": {"rmm_pool_size": 0.5, "memory_limit": "4GB"}},
    {
        "workload": "fft",
        "backend": "gpu",
        "protocol": "ucx",
        "cluster_settings": {"nvlink": False, "infiniband": True},
    },
    {"workload": "groupby", "profile": "cpu"},
    {"workload": "svd", "backend": "cpu", "cluster_settings": {"deploy": "ssh", "ssh_hosts": "a,b,b,c"}},
    {
        "workload": "groupby",
        "backend": "gpu",
        "protocol": "ucx",
        "cluster_settings": {
            "deploy": "ssh",
            "ssh_hosts": "a,b,c",
            "security": "off",
            "device_memory_limit": 0.7,
        },
    },
    {"workload": "svd", "backend": "gpu", "cluster_settings": {"deploy": "slurm", "slurm_jobs": 2}},
]
"""Keyword sets for :func:`gpuscale.api.explain`."""

RUNS: list[dict[str, Any]] = [
    {
        "workload": "svd",
        "backend": "cpu",
        "rows": 20_000,
        "cols": 10,
        "cluster_settings": {"workers": 2, "threads_per_worker": 1},
    },
    {
        "workload": "groupby",
        "backend": "cpu",
        "rows": 100_000,
        "keys": 1000,
        "cluster_settings": {"workers": 2},
    },
    {
        "workload": "transpose_sum",
        "backend": "cpu",
        "n": 500,
        "cluster_settings": {"threads_per_worker": 1, "memory_limit": "1GB"},
    },
]
"""Keyword sets for :func:`gpuscale.api.run` (repeat 1, no warm-up, no record written)."""

REPO = str(pathlib.Path(__file__).resolve().parents[1])
_PROFILE = re.compile(r"[^\s'\"]*/clusters/([\w.-]+\.ya?ml)")
"""A packaged profile's path: the source checkout's clusters/ or the installed package's copy."""
_SIZE = re.compile(r"\d+(?:\.\d+)? ?(?:[kMGTP]i?B|bytes)\b")
_MACHINE_KEYS = {
    "memory_limit_bytes",
    "capacity_bytes",
    "worker_limit_bytes",
    "per_worker_bytes",
    "free_bytes",
    "headroom_bytes",
    "worker_bytes",
    "usable_bytes",
    "limit",
    "spill_space",
    "peak_bytes",
    "spill_bytes_per_worker",
}


_TARGET = re.compile(r"= \d\.\d+ \(at least")
"""The spill target's rule ends with its value, which follows the worker's memory limit."""
_FRACTION_KEYS = {"target", "distributed.worker.memory.target"}
_CAPPED_BLOCK = re.compile(r"((?:chunk budget <size> / \d+ B\)|per lane) = )\d+")
"""A chunk rule whose budget is capped by worker memory: its block count follows the worker's
measured baseline (the cap's own sizes are ``<size>`` already)."""


def normalize(obj: Any, key: str | None = None) -> Any:
    """``obj`` with sizes and byte counts replaced by ``<size>``: the machine's memory shows
    in them (memory limits, headroom), while their rules and sources must not change."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "memory_limit" and isinstance(v, dict) and "value" in v:
                v = {**v, "value": "<size>" if isinstance(v["value"], int) else v["value"]}
            if k == "memory_target_fraction" and isinstance(v, dict) and isinstance(v.get("value"), float):
                v = {**v, "value": "<fraction>"}
            out[k] = normalize(v, k)
        return out
    if isinstance(obj, list):
        return [normalize(v, key) for v in obj]
    if isinstance(obj, str):
        text = _TARGET.sub(
            "= <fraction> (at least",
            _SIZE.sub(
                "<size>",
                _PROFILE.sub(
                    r"<profiles>/\1", obj.replace(sys.executable, "<python>").replace(REPO, "<repo>")
                ),
            ),
        )
        return _CAPPED_BLOCK.sub(r"\1<n>", text) if "capped at <size> by worker memory" in text else text
    if isinstance(obj, float) and key in _FRACTION_KEYS:
        return "<fraction>"
    if isinstance(obj, int) and not isinstance(obj, bool) and key in _MACHINE_KEYS:
        return "<size>"
    return obj


def explain_case(case: dict[str, Any]) -> dict[str, Any]:
    import gpuscale.api as api

    kw = dict(case)
    plan = api.explain(kw.pop("workload"), **kw)
    return normalize(plan)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    import gpuscale.api as api

    kw = dict(case)
    settings = {"repeat": 1, "warmup": 0, **kw.pop("cluster_settings", {})}
    result = api.run(kw.pop("workload"), write=False, cluster_settings=settings, **kw)
    assert result.valid, result.validation
    return normalize(result.explained)


def collect() -> dict[str, Any]:
    return {"explain": [explain_case(c) for c in EXPLAIN], "runs": [run_case(c) for c in RUNS]}


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    json.dump(collect(), sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")
