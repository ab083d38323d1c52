"""A captured window as a Chrome / Perfetto trace (``{"traceEvents": [...]}``).

Layout: process 0 is ``gpuscale`` (the client's phases; a nested phase one track down);
process i >= 1 is the i-th worker by address, with one track per worker thread (its tasks'
compute), then ``other`` lanes (disk-read / disk-write and any other task action), then
``transfers in`` lanes (incoming transfers, named by their source worker, with bytes and
bandwidth in ``args``). Events that would overlap on one track are spread over lanes, because
complete events on one track must nest. Every duration event is ``ph: "X"`` with name, ph,
ts, dur, pid, tid (and cat, args), in microseconds since the window opened, clipped to the
window; naming events are ``ph: "M"`` with name, ph, pid, tid, args.
"""

from __future__ import annotations

from typing import Any, Iterable

US = 1e6


def clip(start: float, stop: float, window: tuple[float, float]) -> tuple[float, float] | None:
    """(start, stop) cut to the window, or None when nothing of it is inside."""
    s, e = max(start, window[0]), min(stop, window[1])
    return (s, e) if e >= s and stop >= window[0] and start <= window[1] else None


def pack(items: Iterable[tuple[float, float, Any]]) -> list[list[tuple[float, float, Any]]]:
    """Spread (start, stop, payload) over as few lanes as possible, none overlapping in a lane."""
    lanes: list[list[tuple[float, float, Any]]] = []
    ends: list[float] = []
    for item in sorted(items, key=lambda x: (x[0], x[1])):
        for i, end in enumerate(ends):
            if item[0] >= end:
                lanes[i].append(item)
                ends[i] = item[1]
                break
        else:
            lanes.append([item])
            ends.append(item[1])
    return lanes


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _x(
    name: str, cat: str, start: float, stop: float, t0: float, pid: int, tid: int, args: dict[str, Any]
) -> dict[str, Any]:
    ts = round((start - t0) * US, 3)  # both ends rounded: a task that starts as another stops still does
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": round(round((stop - t0) * US, 3) - ts, 3),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def worker_order(workers: dict[str, dict], *extra: Iterable[str]) -> list[str]:
    """Worker addresses in a stable order: the scheduler's workers by name (numbers as
    numbers), then any other address seen."""

    def key(addr: str):
        name = str(workers[addr].get("name", addr))
        return (0, int(name), addr) if name.isdigit() else (1, name, addr)

    seen = set(workers)
    more = sorted({a for it in extra for a in it if a and a not in seen})
    return sorted(workers, key=key) + more


def chrome_trace(
    window: tuple[float, float],
    phases: list[dict],
    tasks: list[dict],
    transfers: dict[str, list[dict]],
    workers: dict[str, dict],
    clock: dict[str, float] | None = None,
) -> dict[str, Any]:
    t0 = window[0]
    ev: list[dict[str, Any]] = [
        _meta("process_name", 0, 0, name="gpuscale"),
        _meta("process_sort_index", 0, 0, sort_index=0),
    ]
    depths = sorted({p["depth"] for p in phases}) or [0]
    for d in depths:
        ev.append(_meta("thread_name", 0, 1 + d, name="phases" if d == 0 else f"phases (nested {d})"))
    for p in phases:
        c = clip(p["start"], p["stop"], window)
        if c:
            ev.append(_x(p["name"], "phase", *c, t0, 0, 1 + p["depth"], dict(p.get("args") or {})))

    order = worker_order(workers, (t.get("worker") for t in tasks), transfers)
    pid_of = {a: i + 1 for i, a in enumerate(order)}
    name_of = {a: workers.get(a, {}).get("name", a) for a in order}
    for addr in order:
        pid = pid_of[addr]
        ev.append(_meta("process_name", pid, 0, name=f"worker {name_of[addr]} ({addr})"))
        ev.append(_meta("process_sort_index", pid, 0, sort_index=pid))
        by_thread: dict[Any, list] = {}
        other: list = []
        for t in tasks:
            if t.get("worker") != addr:
                continue
            for s in t["startstops"]:
                if s["action"] == "transfer":
                    continue  # the transfer logs hold these, with bytes
                c = clip(s["start"], s["stop"], window)
                if not c:
                    continue
                into = by_thread.setdefault(t.get("thread"), []) if s["action"] == "compute" else other
                into.append((*c, (t["group"], s["action"], {"key": t["key"], "action": s["action"]})))
        tid = 0
        for thread in sorted(by_thread, key=lambda x: (x is None, str(x))):
            for i, lane in enumerate(pack(by_thread[thread])):
                tid += 1
                label = f"thread {thread}" + (f" (overlap {i})" if i else "")
                ev.append(_meta("thread_name", pid, tid, name=label))
                ev.append(_meta("thread_sort_index", pid, tid, sort_index=tid))
                ev += [_x(g, a, s, e, t0, pid, tid, args) for s, e, (g, a, args) in lane]
        for i, lane in enumerate(pack(other)):
            tid += 1
            ev.append(_meta("thread_name", pid, tid, name=f"other {i}"))
            ev.append(_meta("thread_sort_index", pid, tid, sort_index=tid))
            ev += [_x(f"{a} {g}", a, s, e, t0, pid, tid, args) for s, e, (g, a, args) in lane]
        items = [
            (
                *c,
                {
                    "source": tr["source"],
                    "destination": addr,
                    "bytes": tr["bytes"],
                    "keys": tr["keys"],
                    "bandwidth_bytes_per_s": tr["bytes"] / max(tr["stop"] - tr["start"], 1e-9),
                },
            )
            for tr in transfers.get(addr, ())
            if (c := clip(tr["start"], tr["stop"], window))
        ]
        for i, lane in enumerate(pack(items)):
            tid += 1
            ev.append(_meta("thread_name", pid, tid, name=f"transfers in {i}"))
            ev.append(_meta("thread_sort_index", pid, tid, sort_index=tid))
            ev += [
                _x(f"from {name_of.get(a['source'], a['source'])}", "transfer", s, e, t0, pid, tid, a)
                for s, e, a in lane
            ]
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ms",
        "otherData": {
            "source": "gpuscale",
            "window_s": window[1] - window[0],
            "clock": "scheduler time; ts in microseconds since the window opened",
            "client_clock": clock or {},
        },
    }
