"""Memory measured on the workers: what a started worker holds (:func:`measure`), and what the
workers held and spilled during the work (:class:`Watch`)."""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

from dask.utils import format_bytes

from .memory import Budget, family_fractions, memory_fractions

_PRE_IMPORTED_BYTES = 0
"""What :func:`pre_import` added to this process's resident memory."""


def pre_import(modules) -> None:
    """Import ``modules`` now (a worker's preload), noting what they add to this process's
    resident memory: :func:`measure` takes that off the worker's start (rule
    ``memory.worker-growth``). A module that fails is left to the task that needs it."""
    import importlib

    import psutil

    global _PRE_IMPORTED_BYTES
    before = psutil.Process().memory_info().rss
    for m in modules:
        try:
            importlib.import_module(m)
        except Exception:  # noqa: BLE001 - reported by the import that needs it
            continue
    _PRE_IMPORTED_BYTES += max(0, psutil.Process().memory_info().rss - before)


def worker_state(dask_worker, reset_peak: bool = False) -> dict[str, Any]:
    """On a worker (``client.run``): its memory, threads, memory fractions, local disk and what
    it has spilled so far; ``reset_peak``: then start the peak afresh."""
    import dask
    import psutil

    mm = getattr(dask_worker, "memory_manager", None)
    fr = memory_fractions(dask.config.get)
    if mm is not None:
        for k in ("target", "spill", "pause"):
            v = getattr(mm, f"memory_{k}_fraction", None)
            fr[k] = float(v) if v not in (None, False) else 1.0
    d = getattr(dask_worker, "local_directory", None)
    try:
        st = os.stat(d) if d else None
        free = shutil.disk_usage(d).free if d else None
    except OSError:
        st = free = None
    metrics = getattr(getattr(dask_worker, "data", None), "cumulative_metrics", None) or {}
    peak = _peak()
    if reset_peak:
        _release_free()
        _reset_peak()
    return {
        "rss": psutil.Process().memory_info().rss,
        "pre_imported": _PRE_IMPORTED_BYTES,
        "host_limit": getattr(mm, "memory_limit", None),
        "peak": peak,
        "threads": dask_worker.state.nthreads,
        "fractions": fr,
        "disk": (st.st_dev if st else None),
        "disk_free": free,
        "spilled_bytes": int(metrics.get(("disk-write", "bytes"), 0)),
        "unspilled_bytes": int(metrics.get(("disk-read", "bytes"), 0)),
        "spill_s": float(
            sum(v for (label, unit), v in metrics.items() if unit == "seconds" and label.startswith("disk"))
        ),
    }


def _release_free() -> None:
    """Hand back what Arrow's memory pool and glibc's heap hold free (rule ``memory.release-free``)."""
    import ctypes
    import sys

    pa = sys.modules.get("pyarrow")  # only where something has used it
    if pa is not None:
        with contextlib.suppress(Exception):  # an older pyarrow or another pool: leave it
            pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _peak() -> int | None:
    """This process's peak resident memory (Linux VmHWM), since the last :func:`_reset_peak`."""
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def _reset_peak() -> None:
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(client, family, limits: dict[str, int], spec=None) -> Budget:
    """The budget of the running cluster's workers (``limits``: ``Family.worker_memory``;
    ``spec``: the cluster's, for a GPU worker's device memory limit)."""
    import dask

    growth = family.knobs.worker_growth_bytes
    states = client.run(worker_state, reset_peak=True) if limits else {}
    lim = [v for v in limits.values() if v]
    threads = max((s["threads"] for s in states.values()), default=1)
    fractions, spill_to = family_fractions(dask.config.get, family, spec, min(lim) if lim else None)
    if not family.on_device and states:
        fractions = next(iter(states.values()))["fractions"]
        # the pre-import's bytes are in the growth: taken off the start, not counted twice
        rss, pre = max(
            (s["rss"] - s.get("pre_imported", 0), s.get("pre_imported", 0)) for s in states.values()
        )
        held = f"holds {format_bytes(rss)} at start"
        if pre:
            held = (
                f"holds {format_bytes(rss + pre)} at start, less the {format_bytes(pre)} of the "
                "libraries it imported before joining (the growth counts them)"
            )
        base = rss + growth
        source = f"measured: the largest worker {held}, plus {format_bytes(growth)} its first tasks add"
    else:
        base, source = growth, f"assumed ({format_bytes(growth)})"
    space = None
    if spill_to is not None and states:
        by_disk: dict[Any, list[dict]] = {}
        for s in states.values():
            by_disk.setdefault(s["disk"], []).append(s)
        space = min(
            (min(s["disk_free"] or 0 for s in group) // len(group) for group in by_disk.values()),
            default=None,
        )
        if spill_to == "host" and space is not None:  # the host buffer first, then its disk
            space += min(s["host_limit"] or 0 for s in states.values())
    return Budget(
        workers=len(limits) or None,
        limit=min(lim) if lim else None,
        baseline=base,
        baseline_source=source,
        threads=threads,
        fractions=fractions,
        spill_to=spill_to,
        spill_space=space,
        memory=family.memory,
        stream_first=family.stream_first if spill_to else None,
        states=states,
    )


class Watch:
    """What the workers held and spilled during the work: :meth:`read` gives each worker's peak
    (resident memory on the host, the allocator's on a device) and bytes spilled since the
    start, and the largest peak against the estimate's."""

    def __init__(self, client, family, budget: Budget | None):
        self.client, self.family = client, family
        self.device = family.on_device
        self.baseline = budget.baseline if budget is not None else 0
        self.start: dict[str, dict] = {}
        if self.device:
            try:
                self.start = family.device_watch(client, True)
            except Exception:  # noqa: BLE001 - nothing measured; the run goes on
                self.start = {}
        elif budget is not None:
            self.start = budget.states

    def read(self, estimate: dict[str, Any] | None) -> dict[str, Any]:
        if not self.start:
            return {}
        if self.device:
            return self._read_device(estimate)
        try:
            now = self.client.run(worker_state)
        except Exception:  # noqa: BLE001 - a cluster that went away: nothing measured
            return {}
        per = {}
        for addr, s in now.items():
            s0 = self.start.get(addr, {})
            per[addr] = {
                "peak_bytes": s["peak"],
                "spilled_bytes": s["spilled_bytes"] - s0.get("spilled_bytes", 0),
                "unspilled_bytes": s["unspilled_bytes"] - s0.get("unspilled_bytes", 0),
                "spill_s": round(s["spill_s"] - s0.get("spill_s", 0.0), 3),
            }
        peaks = [w["peak_bytes"] for w in per.values() if w["peak_bytes"]]
        out: dict[str, Any] = {
            "workers": per,
            "peak_bytes": max(peaks) if peaks else None,
            "spilled_bytes": sum(w["spilled_bytes"] for w in per.values()),
            "how": "peak resident memory of each worker process (Linux VmHWM, reset before "
            "the data loads); bytes spilled to disk and read back (distributed's "
            "SpillBuffer metrics)",
        }
        if estimate and estimate.get("peak_bytes") and peaks:
            expected = estimate["peak_bytes"]
            out["estimated_peak_bytes"] = expected
            out["peak_over_estimate"] = round(max(peaks) / expected, 3)
        return out

    def _read_device(self, estimate: dict[str, Any] | None) -> dict[str, Any]:
        try:
            now = self.family.device_watch(self.client, False)
        except Exception:  # noqa: BLE001 - a cluster that went away: nothing measured
            return {}
        per = {}
        for addr, s in now.items():
            s0 = self.start.get(addr, {})
            w = {"peak_bytes": s.get("peak_bytes")}
            for k in ("device_to_host_bytes", "host_to_disk_bytes", "cudf_device_to_host_bytes"):
                if k in s:
                    w[k] = s[k] - s0.get(k, 0)
            if "allocator" in s:  # why the allocator's peak could not be read there
                w["allocator"] = s["allocator"]
            if "cudf_spill_s" in s:
                w["cudf_spill_s"] = round(s["cudf_spill_s"] - s0.get("cudf_spill_s", 0.0), 3)
            w["spilled_bytes"] = w.get("device_to_host_bytes", 0) + w.get("cudf_device_to_host_bytes", 0)
            per[addr] = w
        peaks = [w["peak_bytes"] for w in per.values() if w.get("peak_bytes")]
        out: dict[str, Any] = {
            "workers": per,
            "peak_bytes": max(peaks) if peaks else None,
            "spilled_bytes": sum(w["spilled_bytes"] for w in per.values()),
            "memory": "device",
            "how": "device memory the run allocated at its peak on each worker, beyond what "
            "the worker held before it (RMM's statistics adaptor; the CUDA context "
            "and libraries are outside it); bytes moved device -> host and host -> "
            "disk by dask-cuda's buffers, device -> host by cuDF's spill manager",
        }
        if estimate and estimate.get("peak_bytes") and peaks:
            expected = max(1, int(estimate["peak_bytes"]) - int(self.baseline or 0))
            out["estimated_peak_bytes"] = expected
            out["peak_over_estimate"] = round(max(peaks) / expected, 3)
        return out
