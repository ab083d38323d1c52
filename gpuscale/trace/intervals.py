"""Interval arithmetic over the task stream's start and stop times, shared by a trace's summary
and a record's time split. A worker's clock offset estimate moves between heartbeats, so a
thread's task can seem to start before its previous one stopped: :func:`one_task_per_thread`
puts it back after its predecessor.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

Span = tuple[float, float]


def union(intervals: Iterable[Span]) -> list[Span]:
    """The sorted, disjoint intervals covering ``intervals``."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: Iterable[Span]) -> float:
    return sum(e - s for s, e in intervals)


def minus(a: list[Span], b: list[Span]) -> list[Span]:
    """Parts of the (disjoint, sorted) intervals ``a`` not covered by the disjoint sorted ``b``."""
    out = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def one_task_per_thread(tasks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The task-stream records (``worker``, ``thread``, ``startstops``) with each thread's
    compute intervals one after another: a compute interval that seems to start before the
    previous one of its thread stopped is moved to start when that one stopped. Records
    without a thread, and intervals other than compute, are kept as they are."""
    out = [dict(t) for t in tasks]
    by_thread: dict[tuple[Any, Any], list[tuple[float, int, int]]] = defaultdict(list)
    for i, t in enumerate(out):
        t["startstops"] = [dict(s) for s in t.get("startstops", ())]
        if t.get("thread") is not None:
            by_thread[(t.get("worker"), t["thread"])] += [
                (s["start"], i, j) for j, s in enumerate(t["startstops"]) if s.get("action") == "compute"
            ]
    for items in by_thread.values():
        end = None
        for _, i, j in sorted(items):
            s = out[i]["startstops"][j]
            if end is not None and s["start"] < end:
                s["start"], s["stop"] = end, end + (s["stop"] - s["start"])
            end = s["stop"]
    return out
