"""Preflight: before any work on a running cluster (``run --scheduler / --scheduler-file``, a
session joining one), check that it can run this client's work, and refuse in one line naming
the host and the fix when it cannot.

* Every worker the scheduler lists answers it: distributed's :meth:`Client.get_versions`
  broadcasts from the scheduler to every worker and leaves out the ones it cannot reach.
* Each worker's versions match the client's, as :meth:`Client.get_versions` reports them (the
  installed distributions' metadata, Dask's own way): Python, Dask's required packages (dask,
  distributed, cloudpickle, msgpack, tornado, toolz: a graph pickled by one is read by the
  other), gpuscale, and the family's chunk libraries (NumPy / pandas, CuPy / cuDF, under their
  distribution names, e.g. cupy-cuda13x). ``get_versions(check=True)`` only warns, with a table
  of every package that differs anywhere; here the ones that matter refuse the work.
* GPUs seen per host (:func:`gpuscale.machine.gpus` on each worker): a GPU family's worker
  that sees none is refused; the counts go into the record (``cluster.preflight``).
"""
from __future__ import annotations

import functools
import time
from typing import Any

from ..errors import UserError


@functools.cache
def _providers() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions providing it (~0.2 s to scan: once)."""
    import importlib.metadata
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:  # noqa: BLE001 - broken metadata somewhere on the path: ask by module name
        return {}


def _distribution(module: str) -> str:
    """The installed distribution that provides ``module`` (``cupy`` -> ``cupy-cuda13x``),
    the name :func:`distributed.versions.get_versions` looks up; the module's own name when
    none is found."""
    top = module.partition(".")[0]
    names = _providers().get(top) or []
    return names[0] if names else top


def packages(family) -> list[str]:
    """What must match between client and workers besides Dask's required packages."""
    out = ["gpuscale"]
    for module in (family.array_module, family.dataframe_module):
        name = _distribution(module)
        if name not in out:
            out.append(name)
    return out


def _host(address: str) -> str:
    from distributed.comm import get_address_host
    try:
        return get_address_host(address)
    except Exception:  # noqa: BLE001 - an address of an unknown scheme: show it whole
        return address


def _worker_gpus() -> dict[str, Any]:
    """On a worker: its host name and the GPUs it sees."""
    import socket
    from gpuscale import machine
    return {"hostname": socket.gethostname(), "gpus": len(machine.gpus())}


def check(client, family) -> dict[str, Any]:
    """Check the running cluster behind ``client`` for ``family``'s work; raise a one-line
    :class:`UserError` naming the first host that fails, else return what was seen: per host
    its workers and GPUs, the packages compared, seconds taken."""
    from distributed.versions import required_packages
    t0 = time.perf_counter()
    listed = client.scheduler_info(n_workers=-1)["workers"]
    names = packages(family)
    versions = client.get_versions(check=False, packages=names)
    answered = versions["workers"]
    for address in sorted(listed):
        if address not in answered:
            raise UserError(f"worker {address} on host {_host(address)} is listed by the scheduler but does not "
                            "answer it (network, firewall, or the host is down)",
                            f"make {_host(address)} reachable from the scheduler's host, or stop that worker")
    mine = versions["client"]["packages"]
    compared = ["python", *required_packages, *names]
    for address in sorted(answered):
        theirs = (answered[address] or {}).get("packages") or {}
        wrong = [(p, theirs.get(p), mine.get(p)) for p in compared if theirs.get(p) != mine.get(p)]
        if wrong:
            what = ", ".join(f"{p} {w or 'missing'} (this client: {c or 'missing'})" for p, w, c in wrong)
            p, _, c = wrong[0]
            fix = (f"install {p}=={c} in the workers' environment on {_host(address)}" if c else
                   f"use a client with {p} installed, or remove it on {_host(address)}")
            raise UserError(f"worker {address} on host {_host(address)} has {what}",
                            f"{fix}, or run this client from the workers' environment")
    seen = client.run(_worker_gpus) if answered else {}
    hosts: dict[str, dict[str, Any]] = {}
    for address, w in sorted(seen.items()):
        h = hosts.setdefault(_host(address), {"hostname": w["hostname"], "workers": 0, "gpus": []})
        h["workers"] += 1
        h["gpus"].append(w["gpus"])
        if family.cluster_kind == "cuda" and w["gpus"] == 0:
            raise UserError(f"worker {address} on host {_host(address)} ({w['hostname']}) sees no GPU, but the "
                            f"{family.name} family's work runs on GPUs",
                            "start that host's workers with `dask cuda worker` on a GPU node (check "
                            "CUDA_VISIBLE_DEVICES there), or use --backend cpu")
    return {"ok": True, "workers": len(answered), "hosts": hosts, "compared": compared,
            "seconds": round(time.perf_counter() - t0, 3)}
