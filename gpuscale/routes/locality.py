"""Where blocks live: group a persisted collection's blocks by the worker that holds them, so
a route's reduction combines each worker's blocks first and moves one partial per worker.
"""

from __future__ import annotations

from dask.core import flatten

from .. import _dask_compat


def blocks_by_worker(collection, keys: list) -> list[list[int]] | None:
    """Indices into ``keys`` (the collection's keys, or the futures' own keys that
    :func:`in_memory` gives) grouped by the worker holding each block, in key order, or None
    when the blocks are not all futures of a running client already in memory (nothing
    persisted, or still computing: nothing is waited for)."""
    placed = placement(collection, keys)
    return placed[0] if placed else None


def placement(collection, keys: list) -> tuple[list[list[int]], list[int]] | None:
    """(:func:`blocks_by_worker`'s groups, the threads of each group's worker), read in one
    call to the scheduler; None as there."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return None
    futures = _futures_by_key(collection)
    if not futures or any(k not in futures for k in keys):
        return None
    workers, threads_all = _dask_compat.size(client)
    if workers == 1 and all(futures[k].status == "finished" for k in keys):
        return [list(range(len(keys)))], [threads_all]
    try:
        held = client.run_on_scheduler(_holders, [futures[k].key for k in keys])
    except Exception:  # noqa: BLE001 - a scheduler that runs no functions: threads unknown
        who = client.who_has([futures[k] for k in keys])
        held = [(sorted(who[futures[k].key])[0], None) if who.get(futures[k].key) else None for k in keys]
    groups: dict[str, list[int]] = {}
    threads: dict[str, int] = {}
    for i, h in enumerate(held):
        if h is None:
            return None
        groups.setdefault(h[0], []).append(i)
        threads[h[0]] = h[1]
    return list(groups.values()), [threads[a] for a in groups]


def _holders(keys: list, dask_scheduler=None) -> list:
    """On the scheduler: for each key, (the first worker holding it, that worker's threads),
    or None where no worker holds it."""
    out = []
    for k in keys:
        ts = dask_scheduler.tasks.get(k)
        who = sorted(ts.who_has or (), key=lambda ws: ws.address) if ts is not None else ()
        out.append((who[0].address, who[0].nthreads) if who else None)
    return out


def _futures_by_key(collection) -> dict | None:
    """Every key of the collection, and the key of the future it stands for (through aliases),
    mapped to that future; None unless every block is a future."""
    try:
        from dask.task_spec import Alias
        from distributed import Future
    except ImportError:
        return None
    graph = collection.__dask_graph__()
    out: dict = {}
    for key in flatten(collection.__dask_keys__()):
        target, node = key, graph.get(key)
        for _ in range(8):  # alias chains are short; a cycle is not followed
            if not isinstance(node, Alias):
                break
            target, node = node.target, graph.get(node.target)
        if not isinstance(node, Future):
            return None
        out[key] = out[target] = node
    return out


def in_memory(collection) -> tuple[dict, list] | None:
    """(a graph holding only the futures, their keys in block order) for a collection whose
    every block is in memory on a cluster, so tasks skip the alias tasks; None otherwise."""
    futures = _futures_by_key(collection)
    if futures is None:
        return None
    targets = [futures[k].key for k in flatten(collection.__dask_keys__())]
    return {k: futures[k] for k in targets}, targets


def graph_and_keys(collection) -> tuple[dict, list]:
    """(graph, keys in block order) for building tasks on a collection's blocks by hand: the
    futures' own keys when every block is in memory (:func:`in_memory`), else the optimized
    graph's (projections and fusion, as ``compute`` would do)."""
    held = in_memory(collection)
    if held:
        return held
    c = collection.optimize()
    return dict(c.__dask_graph__()), list(c.__dask_keys__())


def memory_state(collection) -> list[str]:
    """The keys of ``collection`` that are futures, sorted; empty for a lazy collection. Routes
    put it in their task names: Dask names a persisted collection like its lazy self, and a
    scheduler that still knows a released key keeps its old task when a new graph reuses it."""
    try:
        from distributed import futures_of
    except ImportError:
        return []
    return sorted(str(f.key) for f in futures_of(collection))


def balance(groups: list[list[int]]) -> list[list[int]]:
    """Even out groups with the fewest moves: each keeps at most ceil(total / groups) of its
    own blocks, and the excess goes to the groups that are short (docs/decisions.md, rule
    ``routes.balance``)."""
    total = sum(len(g) for g in groups)
    if not groups or total == 0:
        return groups
    target = -(-total // len(groups))
    kept = [sorted(g)[:target] for g in groups]
    spare = sorted(i for g in groups for i in sorted(g)[target:])
    for g in kept:
        while spare and len(g) < target:
            g.append(spare.pop(0))
    return [sorted(g) for g in kept if g]
