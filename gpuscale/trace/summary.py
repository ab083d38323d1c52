"""What a captured window says, as numbers: the comm matrix, the summary, and comparisons.

Wall time split (seconds of wall time; the three add up to ``wall_s``):

* ``compute_s``: time during which at least one worker thread was computing a task;
* ``transfer_s``: time during which no thread computed but a transfer was in flight;
* ``idle_s``: the rest: scheduling, client round trips, waiting, and gpuscale's own overhead.

Alongside: ``task_thread_s`` (compute summed over threads) and ``utilization``
(task_thread_s / (wall_s x threads)). Bandwidth is bytes over the summed durations of the
transfers (what Dask's own bandwidth counters mean); ``transfer_share`` in comm.json is the
fraction of the wall time with any transfer in flight.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import pathlib
from collections import defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._version import __version__
from ..errors import UserError
from .events import clip, worker_order
from .intervals import length, minus, union

SCHEMA = "gpuscale.trace"
SCHEMA_VERSION = 1
FILES = ("performance-report.html", "trace.json", "comm.json", "summary.json", "index.html")
TOP_GROUPS = 10
OPERATIONS: dict[str, tuple[str, ...]] = {
    "shuffle": (
        "shuffle-transfer",
        "hash-join-transfer",
        "shuffle-barrier",
        "p2pshuffle",
        "split-taskshuffle",
        "group-taskshuffle",
        "taskshuffle",
        "shuffle-split",
        "shuffle-group",
        "disk-shuffle",
    ),
    "merge": ("hashjoinp2p", "blockwisemerge", "broadcastjoin", "merge", "join"),
    "read": (
        "readparquet",
        "fusedparquetio",
        "fusedio",
        "read-parquet",
        "readcsv",
        "read-csv",
        "frompandas",
        "fromdict",
        "frommap",
    ),
}
"""Task-group prefixes (``dask.utils.key_split`` of the group's name) by the kind of operation
they belong to: a trace's ``operations`` adds up each kind's task time, so a slow shuffle or
merge in the user's own code stands out."""
SLOW_SHARE = 0.5
"""A kind of operation above this share of the task time gets a note in the summary."""


class Summary(BaseModel):
    """summary.json. Fields about a workload are null for ``Session.trace`` / bare captures."""

    model_config = ConfigDict(populate_by_name=True)

    schema_name: str = Field(SCHEMA, alias="schema")
    schema_version: int = SCHEMA_VERSION
    created: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat())
    gpuscale_version: str
    result_id: str | None = None
    workload: str | None = None
    backend: str | None = None
    family: str | None = None
    protocol: str | None = None
    scheduler: str | None = None
    workers: int
    threads: int
    wall_s: float
    compute_s: float
    transfer_s: float
    idle_s: float
    task_thread_s: float
    utilization: float
    tasks: int
    top_task_groups: list[dict[str, Any]]
    bytes_moved: int
    transfers: int
    transfer_busy_s: float
    bandwidth_bytes_per_s: float | None
    transfer_share: float
    p2p_bytes_sent: int
    pairs: list[dict[str, Any]]
    memory: dict[str, dict[str, Any]]
    phases: list[dict[str, Any]]
    files: dict[str, str]
    notes: list[str] = Field(default_factory=list)
    audit: dict[str, Any] | None = None
    """The backend audit of the window (schema ``gpuscale.audit``; ``gpuscale audit report DIR``)."""
    operations: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Task time by kind of operation (:data:`OPERATIONS`): ``{"shuffle": {"seconds", "tasks",
    "share"}, ...}``; groups of no listed kind count as ``other``."""
    clock: dict[str, Any] = Field(default_factory=dict)
    """Clock alignment: ``client`` (offset of the client's phase marks to the scheduler's
    clock, and the round trip it was measured over) and, per worker, the range of Dask's own
    ``scheduler_delay`` correction during the window (task and transfer times carry it; on one
    host the true value is 0, so its size is the error of those times)."""

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1, default=str)


def comm_matrix(
    window: tuple[float, float],
    transfers: dict[str, list[dict]],
    workers: dict[str, dict],
    p2p_sent: dict[str, int],
) -> dict[str, Any]:
    """comm.json: bytes and bandwidth per (source, destination) from the incoming transfer logs."""
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    spans = []
    for dest, items in transfers.items():
        for tr in items:
            c = clip(tr["start"], tr["stop"], window)
            if not c:
                continue
            spans.append(c)
            p = pairs.setdefault((tr["source"], dest), {"bytes": 0, "transfers": 0, "busy_s": 0.0})
            p["bytes"] += tr["bytes"]
            p["transfers"] += 1
            p["busy_s"] += max(tr["stop"] - tr["start"], 0.0)
    order = worker_order(workers, *[[s for s, _ in pairs], [d for _, d in pairs]])
    index = {a: i for i, a in enumerate(order)}
    matrix = [[0] * len(order) for _ in order]
    rows = []
    for (src, dst), p in sorted(pairs.items()):
        matrix[index[src]][index[dst]] = p["bytes"]
        bandwidth = p["bytes"] / p["busy_s"] if p["busy_s"] > 0 else None
        rows.append({"source": src, "destination": dst, **p, "bandwidth_bytes_per_s": bandwidth})
    wall = window[1] - window[0]
    in_flight = length(union(spans))
    return {
        "schema": "gpuscale.trace.comm",
        "schema_version": SCHEMA_VERSION,
        "workers": order,
        "names": {a: workers.get(a, {}).get("name", a) for a in order},
        "pairs": rows,
        "bytes_matrix": matrix,
        "bytes_moved": sum(p["bytes"] for p in pairs.values()),
        "transfers": sum(p["transfers"] for p in pairs.values()),
        "transfer_busy_s": sum(p["busy_s"] for p in pairs.values()),
        "wall_s": wall,
        "transfer_in_flight_s": in_flight,
        "transfer_share": in_flight / wall if wall > 0 else 0.0,
        "p2p_bytes_sent": {a: int(v) for a, v in sorted(p2p_sent.items())},
        "note": "from the workers' incoming transfer logs (task dependencies fetched between "
        "workers); P2P shuffle traffic goes through its own comms and is counted only "
        "per sender in p2p_bytes_sent",
    }


def build(
    window: tuple[float, float],
    phases: list[dict],
    tasks: list[dict],
    workers: dict[str, dict],
    transfers: dict[str, list[dict]],
    comm: dict[str, Any],
    memory: dict[str, dict],
    *,
    labels: dict[str, Any],
    scheduler: str | None,
    files: dict[str, str],
    notes: list[str],
    clock: dict[str, Any] | None = None,
) -> Summary:
    t0, t1 = window
    wall = t1 - t0
    compute_spans = []
    groups: dict[str, dict[str, Any]] = defaultdict(lambda: {"seconds": 0.0, "tasks": 0})
    for t in tasks:
        secs = 0.0
        for s in t["startstops"]:
            if s["action"] != "compute":
                continue
            c = clip(s["start"], s["stop"], window)
            if c:
                compute_spans.append(c)
                secs += c[1] - c[0]
        if secs or any(s["action"] == "compute" for s in t["startstops"]):
            groups[t["group"]]["seconds"] += secs
            groups[t["group"]]["tasks"] += 1
    transfer_spans = [
        c for items in transfers.values() for tr in items if (c := clip(tr["start"], tr["stop"], window))
    ]
    compute_u = union(compute_spans)
    task_thread_s = sum(e - s for s, e in compute_spans)
    threads = sum(int(w.get("nthreads") or 0) for w in workers.values())
    compute_s = length(compute_u)
    transfer_s = length(minus(union(transfer_spans), compute_u))
    top = sorted(groups.items(), key=lambda kv: -kv[1]["seconds"])[:TOP_GROUPS]
    ops = operations(groups, task_thread_s)
    notes = notes + [
        f"{kind}s took {o['share'] * 100:.0f}% of the task time ({o['tasks']} task(s)): the "
        "trace's operations and top task groups show which"
        for kind, o in ops.items()
        if kind != "other" and o["share"] > SLOW_SHARE
    ]
    busy = comm["transfer_busy_s"]
    return Summary(
        gpuscale_version=__version__,
        scheduler=scheduler,
        **labels,
        workers=len(workers),
        threads=threads,
        wall_s=wall,
        compute_s=compute_s,
        transfer_s=transfer_s,
        idle_s=max(0.0, wall - compute_s - transfer_s),
        task_thread_s=task_thread_s,
        utilization=task_thread_s / (wall * threads) if wall > 0 and threads else 0.0,
        tasks=sum(g["tasks"] for g in groups.values()),
        top_task_groups=[
            {"name": k, **v, "share": v["seconds"] / task_thread_s if task_thread_s else 0.0} for k, v in top
        ],
        bytes_moved=comm["bytes_moved"],
        transfers=comm["transfers"],
        transfer_busy_s=busy,
        bandwidth_bytes_per_s=comm["bytes_moved"] / busy if busy > 0 else None,
        transfer_share=comm["transfer_share"],
        p2p_bytes_sent=sum(comm["p2p_bytes_sent"].values()),
        pairs=[
            {
                **p,
                "source_name": comm["names"].get(p["source"]),
                "destination_name": comm["names"].get(p["destination"]),
            }
            for p in comm["pairs"]
        ],
        memory={a: {"name": workers.get(a, {}).get("name", a), **m} for a, m in sorted(memory.items())},
        phases=[
            {
                "name": p["name"],
                "start_s": p["start"] - t0,
                "duration_s": p["stop"] - p["start"],
                "depth": p["depth"],
                **({"args": p["args"]} if p.get("args") else {}),
            }
            for p in sorted(phases, key=lambda p: (p["start"], p["depth"]))
        ],
        operations=ops,
        files=files,
        notes=notes,
        clock=clock or {},
    )


def operation_of(group: str) -> str:
    """The kind of operation (:data:`OPERATIONS`) a task group belongs to, or ``other``."""
    from dask.utils import key_split

    prefix = key_split(group)
    for kind, prefixes in OPERATIONS.items():
        if prefix in prefixes or any(prefix.startswith(p + "-") for p in prefixes):
            return kind
    return "other"


def operations(groups: dict[str, dict[str, Any]], task_thread_s: float) -> dict[str, dict[str, Any]]:
    """Task time and tasks by kind of operation, each with its share of all task time."""
    out: dict[str, dict[str, Any]] = {}
    for name, g in groups.items():
        o = out.setdefault(operation_of(name), {"seconds": 0.0, "tasks": 0})
        o["seconds"] += g["seconds"]
        o["tasks"] += g["tasks"]
    for o in out.values():
        o["share"] = o["seconds"] / task_thread_s if task_thread_s else 0.0
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["seconds"]))


def _read(directory: str | os.PathLike) -> tuple[pathlib.Path, dict[str, Any]]:
    d = pathlib.Path(directory).expanduser()
    fix = "give a folder written by `gpuscale run ... --trace DIR` or Session.trace(DIR)"
    if not d.is_dir():
        raise UserError(f"trace folder '{d}' does not exist or is not a folder", fix)
    f = d / "summary.json"
    if not f.is_file():
        raise UserError(f"'{d}' is not a gpuscale trace folder (no summary.json)", fix)
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"'{f}' is not readable JSON ({type(e).__name__})", fix) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"'{f}' is not a gpuscale trace summary (schema is not '{SCHEMA}')", fix)
    return d, data


def _validate(d: pathlib.Path, data: dict[str, Any]) -> Summary:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UserError(
            f"'{d}' holds a trace of schema version {version!r}; this gpuscale reads "
            f"version {SCHEMA_VERSION}",
            "use the gpuscale version that wrote it, or re-capture",
        )
    try:
        return Summary.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"])) or "?"
        raise UserError(
            f"'{d / 'summary.json'}' is not a valid trace summary ({where}: {err['msg']})",
            "re-capture it with --trace",
        ) from None


def load(directory: str | os.PathLike) -> Summary:
    """The summary of a trace folder; UserError for anything that is not one of this version."""
    return _validate(*_read(directory))


COMPARED = (
    ("wall_s", "wall", "s"),
    ("compute_s", "compute", "s"),
    ("transfer_s", "transfer", "s"),
    ("idle_s", "idle + overhead", "s"),
    ("task_thread_s", "task thread time", "s"),
    ("bytes_moved", "bytes moved", "bytes"),
    ("transfers", "transfers", "count"),
    ("bandwidth_bytes_per_s", "bandwidth", "bytes/s"),
    ("transfer_share", "transfer share", "ratio"),
    ("p2p_bytes_sent", "P2P bytes sent", "bytes"),
)


def compare(a: str | os.PathLike, b: str | os.PathLike) -> dict[str, Any]:
    """Two trace folders side by side: every number of ``COMPARED`` with the ratio B / A
    (null where A is 0 or either is missing). Refuses folders of different schema versions."""
    (da, ra), (db, rb) = _read(a), _read(b)
    va, vb = ra.get("schema_version"), rb.get("schema_version")
    if va != vb:
        raise UserError(
            f"'{da}' is trace schema version {va!r} but '{db}' is version {vb!r}",
            "compare traces written by the same gpuscale version",
        )
    sa, sb = _validate(da, ra), _validate(db, rb)
    rows = []
    for key, label, unit in COMPARED:
        x, y = getattr(sa, key), getattr(sb, key)
        ratio = y / x if x and y is not None else None
        rows.append({"metric": key, "label": label, "unit": unit, "a": x, "b": y, "ratio": ratio})
    about = {
        k: [getattr(sa, k), getattr(sb, k)]
        for k in ("workload", "backend", "family", "protocol", "workers", "threads", "result_id")
    }
    return {"a": str(da), "b": str(db), "schema_version": va, "about": about, "rows": rows}
