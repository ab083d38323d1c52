"""The memory model of a run, and its verdict: fits / spills / streams / does not fit.

Per worker, against the smallest worker's limit ``L``: the baseline (a started worker plus the
family's ``worker_growth_bytes``), the working set (``threads x`` one task's peak) and the data
(the workload's estimate spread over the workers).

* **fits**: the three <= ``spill x L``;
* **spills**: baseline + working set + what cannot spill + the data kept (:func:`kept_bytes`)
  <= the pause line (:data:`PAUSE_MARGIN`), and the rest fits the spill space;
* **streams**: the data is made block by block in each pass, so baseline + working set + the
  blocks made ahead (:func:`made_ahead`) must fit; a ``stream_first`` family streams what
  would spill;
* **does not fit**: otherwise (:func:`error`).

:meth:`Budget.cap` caps block sizes by the same budget. What the workers hold is measured in
:mod:`gpuscale.memory_measured` (docs/guide/larger-than-memory.md).
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from typing import Any

import dask.config
from dask.utils import format_bytes, parse_bytes

from .errors import UserError

UNSPILLABLE_PARTS = ("shuffle_buffers", "validation")
"""Parts of a workload's estimate that distributed cannot spill, held like the working set
(rule ``memory.unspillable``)."""

PAUSE_MARGIN = {"host": 1.0, "device": 0.9}
"""The share of the pause line (host memory) or of the device's memory that the baseline, the
running tasks and the data kept may reach (rule ``memory.pause-line``)."""
TASK_SHARE = 0.5
"""One worker's running tasks get at most this share of its memory above the baseline."""
MIN_BLOCK_BYTES = 2**20
"""Blocks are never capped below this (a worker with no room left is refused by the verdict)."""
MAX_STREAMED = 1000
"""Generated data that streams may be at most this many times the cluster's memory."""
MAX_PASS_S = 300
"""A run whose data does not fit the cluster's memory is refused where one pass over it would take
longer than this at the family's pace (rule ``memory.pace``)."""
DEFAULT_FRACTIONS = {"target": 0.6, "spill": 0.7, "pause": 0.8, "terminate": 0.95}


@dataclasses.dataclass
class Budget:
    """What one worker has for the work: the smallest worker's limit, the largest baseline."""

    workers: int | None
    limit: int | None
    """Memory per worker that holds the chunks (bytes; None = unknown or unlimited)."""
    baseline: int
    baseline_source: str
    threads: int
    fractions: dict[str, float]
    spill_to: str | None = None
    spill_space: int | None = None
    """Bytes each worker may spill (free disk of its local directory / workers sharing it)."""
    memory: str = "host"
    """Where the chunks live (the family's ``memory``): "host" or "device"."""
    stream_first: str | None = None
    """Why the family streams what would spill (None: it spills first)."""
    states: dict[str, dict] = dataclasses.field(default_factory=dict, repr=False)
    """What :func:`measure` read on each worker (peaks reset then): :class:`Watch` starts there."""

    @property
    def task_room(self) -> int | None:
        """Bytes one worker's running tasks may hold at once (None: unlimited)."""
        if not self.limit:
            return None
        above = self.limit * self.fractions["spill"] - self.baseline
        return max(0, int(above * TASK_SHARE))

    def cap(self, knob: int, copies: float, what: str) -> tuple[int, str | None]:
        """A block size: the family's ``knob``, capped so ``threads x copies`` blocks take at most
        :attr:`task_room`, and why when the cap binds (None otherwise)."""
        room = self.task_room
        if room is None:
            return knob, None
        cap = max(MIN_BLOCK_BYTES, int(room // max(1, self.threads) // copies))
        if cap >= knob:
            return knob, None
        return cap, (
            f"{what} capped at {format_bytes(cap)} by worker memory: {self.threads} thread(s) x "
            f"{copies:g} block(s) each within {format_bytes(room)} ({TASK_SHARE:g} of "
            f"{self.fractions['spill']:g} x {format_bytes(self.limit)} less the baseline "
            f"{format_bytes(self.baseline)})"
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("states")
        return d


DEVICE_FRACTIONS = {"target": 0.9, "spill": 0.9, "pause": 1.0, "terminate": 1.0}
"""Device memory that does not spill (``--device-memory-limit 0``): the chunks' share of it."""
DASK_CUDA_DEFAULT = 0.8
"""dask-cuda's ``device_memory_limit="default"``: the share of the device above which it spills."""


def device_spill_fraction(setting, device_bytes: int | None) -> float | None:
    """The share of the device above which a GPU worker spills to host (None: it does not spill)."""
    if setting is None or (isinstance(setting, str) and setting.strip().lower() in ("default", "auto")):
        return DASK_CUDA_DEFAULT
    try:
        v = float(setting)
    except ValueError:
        v = float(parse_bytes(setting))
    if v == 0:
        return None
    if v <= 1:
        return v
    return min(1.0, v / device_bytes) if device_bytes else 1.0  # a size on an unknown device: it spills


def memory_fractions(
    config_get, family=None, device_setting="default", device_bytes=None
) -> dict[str, float]:
    """A worker's memory fractions: a device family's from its device memory limit, else distributed's."""
    if family is not None and family.on_device:
        f = device_spill_fraction(device_setting, device_bytes)
        if f is None:
            return dict(DEVICE_FRACTIONS)
        return {"target": f, "spill": f, "pause": 1.0, "terminate": 1.0}
    out = {}
    for k, default in DEFAULT_FRACTIONS.items():
        v = config_get(f"distributed.worker.memory.{k}", default)
        try:
            out[k] = float(v) if v not in (None, False) else 1.0
        except (TypeError, ValueError):
            raise UserError(
                f"dask setting distributed.worker.memory.{k} is {v!r}, not a fraction of the worker's memory",
                f"set it to a number from 0 to 1 or false (e.g. DASK_DISTRIBUTED__WORKER__MEMORY__"
                f"{k.upper()}={default}), or unset it",
            ) from None
    return out


def planned(spec, family, limits: list[int]) -> Budget:
    """The budget a planned cluster would have (``gpuscale explain``): limits from the spec, the
    baseline assumed (:data:`PLANNED_BASELINE` for host memory, plus the family's growth)."""
    growth = family.knobs.worker_growth_bytes
    base = (0 if family.on_device else PLANNED_BASELINE) + growth
    limit = min(limits) if limits else None
    fractions, spill_to = family_fractions(_with(spec), family, spec, limit)
    space = _planned_spill_space(spill_to, len(limits) or 1)
    if spill_to == "host" and space is not None:
        space += int(getattr(spec, "memory_limit_bytes", None) or 0)
    return Budget(
        workers=len(limits) or None,
        limit=limit,
        baseline=base,
        baseline_source=f"assumed ({format_bytes(base)}: a started worker, plus "
        f"{format_bytes(growth)} its first tasks add)",
        threads=spec.threads_per_worker or 1,
        fractions=fractions,
        spill_to=spill_to,
        spill_space=space,
        memory=family.memory,
        stream_first=family.stream_first if spill_to else None,
    )


def family_fractions(config_get, family, spec, device_bytes) -> tuple[dict[str, float], str | None]:
    """The memory fractions and where data spills: distributed's for a host family; for a
    device family, from ``cluster.device-memory-limit`` (0: no spilling)."""
    if not family.on_device:
        return memory_fractions(config_get), family.spill_to
    setting = (getattr(spec, "kwargs", None) or {}).get("device_memory_limit", "default")
    fr = memory_fractions(config_get, family, setting, device_bytes)
    return fr, (family.spill_to if device_spill_fraction(setting, device_bytes) is not None else None)


PLANNED_BASELINE = 80 * 2**20
"""A started CPU worker's resident memory, assumed where none is running (rule
``memory.worker-growth``)."""


BLOCK_COPIES = 3
"""Blocks one running task holds at its peak, for the spill target's rule."""
MIN_TARGET = 0.05


def target_fraction(limit: int | None, threads: int, family) -> tuple[float | None, str]:  # host families
    """The spill target (``distributed.worker.memory.target``) for workers of ``limit`` bytes,
    and its rule: what the spill threshold leaves after the baseline and the running tasks'
    blocks, at least :data:`MIN_TARGET`. None: distributed's own value stands."""
    fr = memory_fractions(dask.config.get)
    if family.spill_to is None or not limit or family.on_device:
        return None, "distributed's default (no limit, or a family that does not spill)"
    base = PLANNED_BASELINE + family.knobs.worker_growth_bytes
    block = min(family.knobs.chunk_bytes, family.knobs.partition_bytes)
    tasks = min(threads * BLOCK_COPIES * block, int(TASK_SHARE * max(0, limit * fr["spill"] - base)))
    t = max(MIN_TARGET, round(fr["spill"] - (base + tasks) / limit, 3))
    why = (
        f"spill {fr['spill']:g} - (baseline {format_bytes(base)} + {threads} thread(s) x {BLOCK_COPIES} "
        f"block(s), at most {TASK_SHARE:g} of the room: {format_bytes(tasks)}) / {format_bytes(limit)}"
    )
    if t >= fr["target"]:
        return None, (
            f"distributed's {fr['target']:g}: the baseline and the running tasks' blocks leave "
            f"at least that under the spill threshold (rule: {why}, if lower)"
        )
    return t, f"{why} = {t:g} (at least {MIN_TARGET:g}; distributed's {fr['target']:g} would leave no room)"


def _with(spec):
    """dask.config.get, with the settings the planned cluster starts its workers under."""
    extra = getattr(spec, "dask_config", None) or {}
    return lambda key, default=None: extra[key] if key in extra else dask.config.get(key, default)


def _planned_spill_space(spill_to: str | None, workers: int) -> int | None:
    """Free disk per worker where workers spill (None: they do not)."""
    if spill_to is None:
        return None
    d = dask.config.get("temporary-directory", None) or tempfile.gettempdir()
    try:
        return shutil.disk_usage(d).free // max(1, workers)
    except OSError:
        return None


def assess(workload, p, ctx, budget: Budget | None) -> dict[str, Any]:
    """The estimate against the budget: the verdict and every number behind it."""
    parts = {k: int(v) for k, v in workload.estimate_memory(p, ctx).items()}
    estimate = sum(parts.values())
    task = int(workload.task_bytes(p, ctx))
    out: dict[str, Any] = {
        "estimate_bytes": estimate,
        "parts": parts,
        "task_bytes": task,
        "override": "--no-memory-check (memory_check=False)",
    }
    if budget is None or not budget.limit or not budget.workers:
        host = _past_this_host(workload, p, ctx, budget, estimate)
        if host is not None:
            out.update(verdict="does not fit", fits=False, host_bytes=host, capacity_bytes=host)
            return out
        out.update(
            verdict="fits",
            fits=True,
            workers=budget.workers if budget else None,
            per_worker_bytes=None,
            worker_limit_bytes=None,
            usable_bytes=None,
            capacity_bytes=0,
            rule="worker memory unknown here (a running scheduler's, or no limit): not checked",
        )
        return out
    b = budget
    host = b.memory == "host"
    n = b.workers
    held = -(-sum(v for k, v in parts.items() if k in UNSPILLABLE_PARTS) // n)
    data = -(-(estimate - held * n) // n) if held else -(-estimate // n)
    working = b.threads * task
    fixed = b.baseline + working + held
    in_memory = int(b.limit * b.fractions["spill"])
    pause = int(b.limit * b.fractions["pause"] * PAUSE_MARGIN[b.memory])
    to_spill = max(0, fixed + data - in_memory)
    kept = kept_bytes(b.to_dict(), data)  # managed data a spilling worker keeps in memory
    out.update(
        workers=n,
        per_worker_bytes=data,
        worker_limit_bytes=b.limit,
        usable_bytes=in_memory,
        capacity_bytes=b.limit * n,
        baseline_bytes=b.baseline,
        baseline_source=b.baseline_source,
        working_set_bytes=working,
        held_bytes=held,
        budget=b.to_dict(),
    )
    spills = (
        bool(b.spill_to) and fixed + kept <= pause and (b.spill_space is None or to_spill <= b.spill_space)
    )
    streams = workload.streams(p, ctx) if to_spill and (b.stream_first or not spills) else None
    if streams and estimate > MAX_STREAMED * b.limit * n:
        streams = None
        out["too_large"] = MAX_STREAMED * b.limit * n
    ahead = made_ahead(b.threads, int(workload.stream_block_bytes(p, ctx)), data) if streams else 0
    if to_spill == 0:
        verdict = "fits"
    elif streams and fixed + ahead <= pause:  # nothing held between passes: only the blocks in flight
        verdict = "streams"
        out["streams"] = (
            streams
            + (f"; streamed rather than spilled: {b.stream_first}" if spills else "")
            + f"; per worker {format_bytes(ahead)} of blocks made ahead of their consumers "
            "(distributed's root-task queuing: ceil(threads x worker-saturation) at a time)"
        )
        out["spill_bytes_per_worker"] = to_spill
        out["peak_bytes"] = fixed + ahead
        out["made_ahead_bytes"] = ahead
    elif spills:
        verdict = "spills"
        out["spill_bytes_per_worker"] = to_spill
        out["peak_bytes"] = fixed + kept
    else:
        verdict = "does not fit"
        out["spill_bytes_per_worker"] = to_spill
    pace = ctx.family.knobs.pace_bytes_per_thread_s if getattr(ctx, "family", None) else None
    if verdict in ("spills", "streams") and pace:
        seconds = estimate / (pace * b.threads * n)
        if seconds > MAX_PASS_S:
            verdict = "does not fit"
            out["too_slow"] = {
                "pass_s": round(seconds),
                "pace_bytes_per_thread_s": pace,
                "threads": b.threads * n,
                "sizes": _sizes(p),
            }
    out["verdict"], out["fits"] = verdict, verdict != "does not fit"
    out.setdefault("peak_bytes", fixed + data)
    out["rule"] = (
        f"per worker: baseline {format_bytes(b.baseline)} + working set {b.threads} thread(s) x "
        f"{format_bytes(task)}"
        + (
            f" + what cannot spill ({', '.join(k for k in parts if k in UNSPILLABLE_PARTS and parts[k])}) "
            f"{format_bytes(held * n)} / {n} worker(s)"
            if held
            else ""
        )
        + f" + data {format_bytes(estimate - held * n)} / {n} worker(s); fits under "
        f"{b.fractions['spill']:g} x the smallest worker's {format_bytes(b.limit)} "
        + ("(distributed's spill fraction)" if host else "of device memory (where dask-cuda spills)")
        + (
            f"; beyond it spills to {b.spill_to} if baseline + working set + the data kept in memory "
            f"(target {b.fractions['target']:g}) stay under "
            + (f"pause {b.fractions['pause']:g}" if host else f"{PAUSE_MARGIN['device']:g} x the device")
            + " and the spill space holds the rest"
            + (
                f"; generated data that would spill streams instead ({b.stream_first})"
                if b.stream_first
                else ""
            )
            if b.spill_to
            else "; no spilling (--device-memory-limit 0): the data must fit"
        )
    )
    return out


def made_ahead(threads: int, block: int, data: int) -> int:
    """Bytes of blocks a streaming worker holds beside its running tasks: its
    ``ceil(threads x worker-saturation)`` queued first tasks' blocks, at most ``data``; all of
    ``data`` without queuing (a saturation of ``inf``; rule ``memory.made-ahead``)."""
    sat = dask.config.get("distributed.scheduler.worker-saturation", 1.1)
    try:
        sat = float(sat)
    except (TypeError, ValueError):
        sat = math.inf
    if not math.isfinite(sat):
        return data
    return min(data, math.ceil(max(1, threads) * sat) * block)


def kept_bytes(b: dict[str, Any], data: int) -> int:
    """Managed data a spilling worker keeps in memory (``b``: :meth:`Budget.to_dict`): up to the
    spill target (rule ``memory.kept-target``)."""
    return min(data, int(b["limit"] * b["fractions"]["target"]))


def _past_this_host(workload, p, ctx, budget: Budget | None, estimate: int) -> int | None:
    """This machine's memory where workers with no memory limit (``--memory-limit 0``) of a
    cluster started here would hold more than it has and the data does not stream; else None."""
    spec = getattr(ctx, "spec", None)
    if budget is None or budget.memory != "host" or getattr(spec, "kind", None) != "local":
        return None
    from . import machine

    host = int(machine.cpu()["memory_bytes"])
    if estimate <= host or workload.streams(p, ctx):
        return None
    return host


def _sizes(p) -> dict[str, int]:
    """The workload parameters of ``p`` that are large counts (a million or more), by flag."""
    dump = p.model_dump() if hasattr(p, "model_dump") else {}
    return {
        "--" + k.replace("_", "-"): v
        for k, v in dump.items()
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1_000_000
    }


def error(workload_name: str, h: dict[str, Any]) -> UserError:
    """The one line of a run that does not fit: the numbers, and the fix."""
    parts = " + ".join(f"{k} {format_bytes(v)}" for k, v in h["parts"].items() if v)
    if h.get("host_bytes"):
        return UserError(
            f"{workload_name} at these sizes holds about {format_bytes(h['estimate_bytes'])} ({parts}), more "
            f"than this machine's {format_bytes(h['host_bytes'])}, and workers with no memory limit "
            "never spill: the system would kill them",
            "use smaller sizes, or give the workers a --memory-limit so that they can spill to disk",
        )
    b = h["budget"]
    if h.get("too_slow"):
        s = h["too_slow"]
        flags = ", ".join(f"{k} {v}" for k, v in s["sizes"].items())
        sizes = f"these sizes ({flags})" if flags else "these sizes"
        return UserError(
            f"{workload_name} at {sizes} makes about {format_bytes(h['estimate_bytes'])} "
            f"of data, more than the cluster's {format_bytes(h['capacity_bytes'])} of memory: one pass "
            f"would take about {s['pass_s'] / 60:.0f} min at {format_bytes(s['pace_bytes_per_thread_s'])}/s "
            f"per worker thread ({s['threads']} thread(s)), and the warm-up, each repeat and the "
            "validation each take one",
            "use smaller sizes, or --no-memory-check to run it anyway",
        )
    if h.get("too_large"):
        return UserError(
            f"{workload_name} at these sizes makes about {format_bytes(h['estimate_bytes'])} of data "
            f"({parts}), more than {MAX_STREAMED} x the cluster's {format_bytes(h['capacity_bytes'])} "
            "of memory: even block by block, every pass would take days",
            "use smaller sizes",
        )
    held = h.get("held_bytes") or 0
    fixed = h["baseline_bytes"] + h["working_set_bytes"] + held
    margin = PAUSE_MARGIN[b.get("memory", "host")]
    pause = int(b["limit"] * b["fractions"]["pause"] * margin)
    kept = kept_bytes(b, h["per_worker_bytes"])
    host = b.get("memory", "host") == "host"
    if b["spill_to"] and fixed + kept > pause:
        why = (
            f"each worker's baseline {format_bytes(h['baseline_bytes'])} + working set "
            f"{format_bytes(h['working_set_bytes'])}"
            + (f" + what cannot spill {format_bytes(held)}" if held else "")
            + (f" + data kept in memory {format_bytes(kept)}" if kept else "")
            + " is over "
            f"{format_bytes(pause)} of its {format_bytes(b['limit'])}, so it would "
            + ("pause with nothing left to spill" if host else "run out of device memory")
        )
        room = b["fractions"]["pause"] * margin - b["fractions"]["target"]
        need = int(fixed / room) + 1 if room > 0 else None
        # a working set capped by Budget.cap grows with the limit: solve for that too
        task_room = TASK_SHARE * (b["limit"] * b["fractions"]["spill"] - h["baseline_bytes"])
        grows = room - TASK_SHARE * b["fractions"]["spill"]
        if need is not None and h["working_set_bytes"] >= 0.9 * task_room and grows > 0:
            need = max(need, int((h["baseline_bytes"] * (1 - TASK_SHARE) + held) / grows) + 1)
        need = h.get("need_limit_bytes") or need  # found with the check itself, where it could be
        if h.get("no_limit_fits_bytes"):  # none this machine can give (limits adding up past it)
            fix = (
                f"no --memory-limit up to this machine's {format_bytes(h['no_limit_fits_bytes'])} per worker "
                "admits it: use smaller sizes, fewer workers or threads per worker, or --no-memory-check "
                "to try anyway"
            )
        else:
            fix = (
                f"give each worker at least {format_bytes(need)} (--memory-limit), " if need else ""
            ) + "or fewer threads per worker, or --no-memory-check to try anyway"
    elif b["spill_to"]:
        why = (
            f"{format_bytes(h['spill_bytes_per_worker'])} per worker would spill to {b['spill_to']}, "
            f"but only {format_bytes(b['spill_space'] or 0)} per worker is free there"
        )
        fix = (
            "free disk space where the workers spill (dask's temporary-directory), use smaller sizes or "
            "more memory (--memory-limit, --workers), or --no-memory-check to try anyway"
        )
    else:
        why = (
            f"{format_bytes(h['per_worker_bytes'])} per worker over {h['workers']} worker(s) plus the "
            f"baseline {format_bytes(h['baseline_bytes'])} and working set "
            f"{format_bytes(h['working_set_bytes'])}"
            + (f" and what cannot spill {format_bytes(held)}" if held else "")
            + f" is over {format_bytes(h['usable_bytes'])} usable of "
            f"{format_bytes(h['worker_limit_bytes'])}, and the workers do not spill"
        )
        fix = (
            "use smaller sizes or more workers (--gpus), let the workers spill (--device-memory-limit "
            "default), or --no-memory-check to try anyway"
        )
    return UserError(
        f"{workload_name} at these sizes needs about {format_bytes(h['estimate_bytes'])} ({parts}); {why}",
        fix,
    )


def _estimated(h: dict[str, Any]) -> str:
    """What the memory check had estimated, for the line of a run that ran out of memory."""
    if not h.get("estimate_bytes"):
        return ""
    per = h.get("per_worker_bytes")
    return f"; the memory check estimated {format_bytes(h['estimate_bytes'])} in all" + (
        f", {format_bytes(per)} per worker, verdict '{h.get('verdict')}'" if per else ""
    )


def ran_out(workload_name: str, h: dict[str, Any], family, exc: BaseException) -> UserError:
    """The one line for a run whose task raised ``MemoryError``: what it asked for, the check's
    estimate, and the fix."""
    where = "device" if family.on_device else "host"
    said = " ".join(str(exc).split())[:200] or type(exc).__name__
    fix = (
        "use smaller sizes or more GPUs (--gpus), let the workers spill (--device-memory-limit default, "
        "or lower it so they spill earlier)"
        if where == "device"
        else "use smaller sizes, more memory per worker (--memory-limit) or more workers"
    )
    return UserError(
        f"{workload_name}: a worker ran out of {where} memory during the run "
        f"({type(exc).__name__}: {said}){_estimated(h)}",
        fix + "; the cluster is still up for the next run",
    )


def killed(workload_name: str, h: dict[str, Any], exc: BaseException) -> UserError:
    """The one line for a run whose workers died under its tasks (distributed's ``KilledWorker``):
    what the check had estimated, and the fix."""
    task = getattr(exc, "task", None) or "a task"
    tries = getattr(exc, "allowed_failures", None)
    times = f" {tries + 1} time(s)" if isinstance(tries, int) else ""
    return UserError(
        f"{workload_name}: the workers running {task} died{times} (a worker past "
        f"{DEFAULT_FRACTIONS['terminate']:g} of its memory limit is restarted by "
        f"its nanny){_estimated(h)}",
        "give each worker more memory (--memory-limit), fewer threads per worker, or use smaller "
        "sizes; the workers' log lines are under logs/ in the results folder",
    )


def check(workload, p, ctx, enforce: bool) -> dict[str, Any]:
    """:func:`assess` against ``ctx.memory``; refuse what does not fit unless told not to."""
    h = assess(workload, p, ctx, getattr(ctx, "memory", None))
    h["checked"] = bool(enforce)
    if enforce and not h["fits"]:
        raise error(workload.name, h)
    return h
