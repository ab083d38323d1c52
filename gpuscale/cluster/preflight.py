"""Preflight: before any work on a running cluster, check that it can run this client's
work (:func:`check`), or refuse in one line naming the host or worker pair and the fix. The
bandwidth probe (:func:`probe`) follows docs/decisions.md, rule ``bandwidth-probe.auto``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any

from .. import _dask_compat, machine
from ..decision import Decision
from ..errors import UserError

MiB = 2**20
GiB = 2**30
PROBE_BYTES = 64 * MiB
"""The block each probed pair moves."""
PROBE_TRIES = 3
"""Transfers per pair; the fastest is the pair's bandwidth (the first opens the connection)."""
PROBE_BUDGET_S = 5.0
"""Seconds for the whole probe; pairs not begun when it is spent are not measured."""
PROBE_TIMEOUT_S = 10.0
"""One transfer that has not finished in this long fails its pair."""
FAR_BELOW = 10
"""A pair measured under 1/FAR_BELOW of its expectation is refused."""
PAIRS_BY_WORKER_UP_TO = 8
"""The record lists every worker pair up to this many workers, else one entry per host pair."""
PROBE_SETTING = "cluster.bandwidth-probe"


def packages(family) -> list[str]:
    """What must match between client and workers besides Dask's required packages."""
    out = ["gpuscale"]
    for module in (family.array_module, family.dataframe_module):
        name = machine.distribution(module)
        if name not in out:
            out.append(name)
    return out


def _host(address: str) -> str:
    scheme, _, rest = address.rpartition("://")
    if scheme in ("tcp", "tls", "ucx", "ucxx") and ":" in rest:
        return rest.rsplit(":", 1)[0].strip("[]")
    from distributed.comm import get_address_host

    try:
        return get_address_host(address)
    except Exception:  # noqa: BLE001 - a scheme this process has no backend for
        rest = address.split("://", 1)[-1]
        return rest.rsplit(":", 1)[0].strip("[]") if ":" in rest else rest


def _scheme(address: str) -> str:
    return address.split("://", 1)[0] if "://" in address else "tcp"


def _own_gpu(gpus: list[dict]) -> dict | None:
    """The GPU a worker holds: the first of its ``CUDA_VISIBLE_DEVICES``; None without one."""
    import os

    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")[0].strip()
    if not first:
        return None
    for g in gpus:
        if (first.isdigit() and g["index"] == int(first)) or (
            first.startswith("GPU-") and g["uuid"].startswith(first)
        ):
            return g
    return None


def _worker_facts() -> dict[str, Any]:
    """On a worker: its host name, the GPUs it sees, the GPU it holds and the host's RDMA ports."""
    import socket

    gs = machine.gpus()
    own = _own_gpu(gs)
    return {
        "hostname": socket.gethostname(),
        "gpus": len(gs),
        "gpu": own["index"] if own else None,
        "gpu_name": own["name"] if own else None,
        "nvlink_peers": {str(g["index"]): list(g["nvlink_peers"]) for g in gs},
        "infiniband": machine.infiniband(),
    }


def facts(client) -> dict[str, dict[str, Any]]:
    """What every worker of ``client``'s cluster sees (:func:`_worker_facts`), by address."""
    return dict(client.run(_worker_facts))


def _nvlink_all(peers: dict[str, list[int]]) -> bool | None:
    """Whether every pair of these GPUs is NVLink-connected; None under two GPUs."""
    idx = [int(i) for i in peers]
    if len(idx) < 2:
        return None
    return all(j in peers[str(i)] for i in idx for j in idx if i != j)


def _active_ib(ports: list[dict]) -> list[dict]:
    return [p for p in ports or [] if p.get("state") == "ACTIVE" and p.get("link_layer") != "Ethernet"]


def hosts(seen: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per host: its name, workers, the GPUs each worker sees, its NVLink and its RDMA ports."""
    out: dict[str, dict[str, Any]] = {}
    for address, w in sorted(seen.items()):
        peers = w.get("nvlink_peers") or {}
        h = out.setdefault(
            _host(address),
            {
                "hostname": w["hostname"],
                "workers": 0,
                "gpus": [],
                "nvlink": _nvlink_all(peers),
                "nvlink_peers": peers,
                "infiniband": w.get("infiniband") or [],
            },
        )
        h["workers"] += 1
        h["gpus"].append(w["gpus"])
    return out


def worker_gpus(seen: dict[str, dict[str, Any]]) -> dict[str, int | None]:
    """The GPU each worker holds (NVML index; None: none known), by address."""
    return {a: w.get("gpu") for a, w in sorted(seen.items())}


def seen_from(checked: dict[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """The per-worker facts :func:`transport` reads, back from a preflight's result; None without one."""
    if not checked or "worker_gpus" not in checked:
        return None
    hs = checked.get("hosts") or {}
    return {
        a: {
            "gpu": g,
            "nvlink_peers": (hs.get(_host(a)) or {}).get("nvlink_peers") or {},
            "infiniband": (hs.get(_host(a)) or {}).get("infiniband") or [],
        }
        for a, g in checked["worker_gpus"].items()
    }


def _nvlink_pair(a: dict | None, b: dict | None) -> bool | None:
    """Whether the GPUs two workers of one host hold are NVLink peers; None when not known."""
    if not a or not b or a.get("gpu") is None or b.get("gpu") is None:
        return None
    if a["gpu"] == b["gpu"]:
        return None
    return b["gpu"] in (a.get("nvlink_peers") or {}).get(str(a["gpu"]), [])


def transport(a: str, b: str, seen: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The transport between workers ``a`` and ``b``: the address scheme, whether they share a
    host, NVLink between their GPUs, InfiniBand active on both hosts, and a short label."""
    seen = seen or {}
    scheme, same = _scheme(a), _host(a) == _host(b)
    fa, fb = seen.get(a), seen.get(b)
    nvlink = _nvlink_pair(fa, fb) if same else None
    ib = None
    if not same and scheme == "ucx" and fa is not None and fb is not None:
        ib = bool(_active_ib(fa.get("infiniband"))) and bool(_active_ib(fb.get("infiniband")))
    label = f"{scheme}, {'same host' if same else 'between hosts'}"
    if nvlink:
        label += ", NVLink"
    elif nvlink is False:
        label += ", no NVLink between their GPUs"
    if ib:
        label += ", InfiniBand active on both"
    return {"transport": scheme, "same_host": same, "nvlink": nvlink, "infiniband": ib, "label": label}


def expectation(a: str, b: str, seen: dict[str, dict[str, Any]], gpu: bool) -> tuple[float, str]:
    """What moving a block from worker ``a`` to ``b`` should give at least, in bytes/s, and why."""
    t = transport(a, b, seen)
    if t["transport"] == "ucx":
        if t["same_host"]:
            if gpu and t["nvlink"]:
                return 20 * GiB, "UCX between GPUs of one host over NVLink (cuda_ipc): at least 20 GiB/s"
            if gpu:
                return 2 * GiB, (
                    "UCX between GPUs of one host without NVLink (PCIe peer-to-peer or staged "
                    "through host memory): at least 2 GiB/s"
                )
            return 2 * GiB, "UCX within one host (shared memory): at least 2 GiB/s"
        if t["infiniband"]:
            rates = [min(p["rate_gbps"] or 0 for p in _active_ib(seen[w]["infiniband"])) for w in (a, b)]
            gbps = min(rates)
            if gbps > 0:
                return gbps * 1e9 / 8 / 2, (
                    f"UCX over InfiniBand: at least half the slower host's active port "
                    f"rate ({gbps:g} Gb/s / 8 / 2 = {gbps / 16:g} GB/s)"
                )
        return 100 * MiB, (
            "UCX between hosts without InfiniBand active on both (TCP underneath): at least "
            "100 MiB/s (a 1 GbE link)"
        )
    if t["same_host"]:
        return 500 * MiB, f"{t['transport'].upper()} within one host (loopback): at least 500 MiB/s"
    return 100 * MiB, f"{t['transport'].upper()} between hosts: at least 100 MiB/s (a 1 GbE link)"


def probe_pairs(addresses: list[str]) -> list[tuple[str, str]]:
    """The (from, to) worker pairs the probe times: one within each host, one per pair of hosts."""
    by_host = _by_host(addresses)
    names = list(by_host)
    out = [(ws[0], ws[1]) for ws in by_host.values() if len(ws) > 1]
    out += [(by_host[h][0], by_host[k][0]) for i, h in enumerate(names) for k in names[i + 1 :]]
    return out


def _by_host(addresses: list[str]) -> dict[str, list[str]]:
    """The workers of each host, hosts and workers in order."""
    out: dict[str, list[str]] = {}
    for a in sorted(addresses):
        out.setdefault(_host(a), []).append(a)
    return dict(sorted(out.items()))


def pairs(
    addresses: list[str],
    seen: dict[str, dict[str, Any]] | None = None,
    probe: dict[str, Any] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The record's ``cluster.pairs``: the transport between every two workers (up to
    :data:`PAIRS_BY_WORKER_UP_TO` workers), else between every two hosts and within each host,
    with the ``probe``'s measurement where it timed that pair."""
    source = source or ("preflight" if seen else "addresses")
    measured = {}
    for p in (probe or {}).get("pairs") or []:
        if p.get("gib_s") is not None:
            measured[frozenset((p["from"], p["to"]))] = p["gib_s"]
            measured[frozenset((_host(p["from"]), _host(p["to"])))] = p["gib_s"]
    addresses = sorted(addresses)
    if len(addresses) <= PAIRS_BY_WORKER_UP_TO:
        items = [
            {"between": [a, b], **transport(a, b, seen), "gib_s": measured.get(frozenset((a, b)))}
            for i, a in enumerate(addresses)
            for b in addresses[i + 1 :]
        ]
        return {"by": "worker", "from": source, "pairs": items}
    by_host = _by_host(addresses)
    names = list(by_host)

    def entry(h: str, k: str, t: dict[str, Any], key: tuple[str, str]) -> dict[str, Any]:
        n = [len(by_host[h]), len(by_host[k])]
        return {"between": [h, k], "workers": n, **t, "gib_s": measured.get(frozenset(key))}

    items = []
    for i, h in enumerate(names):
        ws = by_host[h]
        if len(ws) > 1:
            t = transport(ws[0], ws[1], seen)
            nv = (seen or {}).get(ws[0], {}).get("nvlink_peers")
            t["nvlink"] = _nvlink_all(nv) if nv is not None else None
            items.append(entry(h, h, t, (ws[0], ws[1])))
        items += [entry(h, k, transport(ws[0], by_host[k][0], seen), (h, k)) for k in names[i + 1 :]]
    return {"by": "host", "from": source, "pairs": items}


def _probe_block(module: str, nbytes: int):
    """On the pair's first worker: a block of random float64 values of ``module``."""
    import importlib

    xp = importlib.import_module(module)
    return xp.random.random(nbytes // 8)


async def _probe_fetch(
    key: str, source: str, tries: int, budget_s: float, timeout_s: float, dask_worker=None
) -> dict[str, Any]:
    """On the pair's second worker: fetch ``key`` from ``source`` as Dask moves a task's input,
    ``tries`` times or until ``budget_s`` is spent; the seconds of each and the bytes, or the error."""
    import asyncio

    times: list[float] = []
    nbytes = None
    spent = 0.0
    busy = 0
    while len(times) < tries and (not times or spent < budget_s):
        t0 = time.perf_counter()
        try:
            response = await asyncio.wait_for(
                _dask_compat.fetch_from_worker(dask_worker, key, source), timeout_s
            )
        except asyncio.TimeoutError:
            return {"error": f"no answer within {timeout_s:g} s", "seconds": times}
        except Exception as e:  # noqa: BLE001 - any failure fails the pair
            first = (str(e).strip().splitlines() or [""])[0]
            return {"error": f"{type(e).__name__}: {first}" if first else type(e).__name__, "seconds": times}
        dt = time.perf_counter() - t0
        spent += dt
        if response.get("status") == "busy":
            busy += 1
            if busy > 20:
                return {"error": "the source worker stayed busy (too many transfers)", "seconds": times}
            await asyncio.sleep(0.05)
            continue
        data = (response.get("data") or {}).get(key)
        if data is None:
            return {"error": "the block was gone from the source worker", "seconds": times}
        nbytes = int(getattr(data, "nbytes", 0)) or None
        del data, response
        times.append(dt)
    return {"seconds": times, "bytes": nbytes}


def _probe_decision(setting: str, source: str, scheme: str, workers: int) -> Decision:
    if setting == "off":
        return Decision(False, source, "off: no bandwidth probe")
    if workers < 2:
        return Decision(False, "rule", f"{setting}: one worker, no pair to probe")
    if setting == "on":
        return Decision(True, source, f"on: probe over any protocol (this cluster: {scheme})")
    if scheme == "ucx":
        return Decision(
            True,
            source,
            "auto: the workers speak UCX, which picks NVLink / InfiniBand / shared "
            "memory / TCP itself and falls back silently: probe",
        )
    return Decision(
        False,
        source,
        f"auto: probes over UCX only; over {scheme} the path is the hosts' network, "
        "used as it is (--bandwidth-probe on asks for a probe)",
    )


def probe(
    client,
    family,
    addresses: list[str],
    seen: dict[str, dict[str, Any]],
    decision: Decision,
    *,
    nbytes: int = PROBE_BYTES,
    tries: int = PROBE_TRIES,
    budget_s: float = PROBE_BUDGET_S,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> dict[str, Any]:
    """Time the pairs of :func:`probe_pairs` and refuse, in one line, a pair that cannot move
    the block or moves it under 1/:data:`FAR_BELOW` of its expectation; the decision with what
    was measured."""
    from distributed import wait

    out = {**decision.record(), "block_bytes": nbytes, "tries": tries, "budget_s": budget_s, "pairs": []}
    if not decision.value:
        return out
    t0 = time.perf_counter()
    gpu = family.cluster_kind == "cuda"
    todo = probe_pairs(addresses)
    blocks = {}
    tag = uuid.uuid4().hex[:8]
    for src in dict.fromkeys(s for s, _ in todo):
        blocks[src] = client.submit(
            _probe_block,
            family.array_module,
            nbytes,
            workers=[src],
            allow_other_workers=False,
            pure=False,
            key=f"gpuscale-probe-{tag}-{len(blocks)}",
        )
    try:
        with contextlib.suppress(TimeoutError):  # its pairs are listed as not measured
            wait(list(blocks.values()), timeout=max(timeout_s, budget_s))
        for src, dst in todo:
            entry: dict[str, Any] = {
                "from": src,
                "to": dst,
                "hosts": [_host(src), _host(dst)],
                "transport": transport(src, dst, seen)["label"],
            }
            expected, rule = expectation(src, dst, seen, gpu)
            entry.update(expected_gib_s=round(expected / GiB, 3), expectation=rule)
            out["pairs"].append(entry)
            left = budget_s - (time.perf_counter() - t0)
            fut = blocks[src]
            if fut.status != "finished":
                entry["not_measured"] = (
                    f"the block was not made on {src} ({fut.status}"
                    f"{': ' + repr(fut.exception()) if fut.status == 'error' else ''})"
                )
                continue
            if left <= 0:
                entry["not_measured"] = f"the probe's {budget_s:g} s budget was spent"
                continue
            got = client.run(_probe_fetch, fut.key, src, tries, left, timeout_s, workers=[dst])[dst]
            entry["seconds"] = [round(s, 5) for s in got.get("seconds") or []]
            if "error" in got:
                _refuse_unreachable(src, dst, nbytes, got["error"])
            best = min(got["seconds"])
            size = got.get("bytes") or nbytes
            rate = size / best if best > 0 else float("inf")
            entry.update(bytes=size, gib_s=round(rate / GiB, 3))
            if rate * FAR_BELOW < expected:
                _refuse_slow(src, dst, size, rate, expected, rule)
    finally:
        client.cancel(list(blocks.values()))
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def _fix(a: str, b: str) -> str:
    ha, hb = _host(a), _host(b)
    where = f"between {ha} and {hb}" if ha != hb else f"on {ha}"
    ucx = ", UCX_TLS / UCX_NET_DEVICES and the InfiniBand / NVLink setup" if _scheme(a) == "ucx" else ""
    return (
        f"check the workers' network {where} (firewall, routes{ucx}), or skip this check with "
        "--bandwidth-probe off"
    )


def _size(nbytes: int) -> str:
    return f"{nbytes / MiB:g} MiB"


def _refuse_unreachable(src: str, dst: str, nbytes: int, error: str) -> None:
    raise UserError(
        f"worker {dst} on host {_host(dst)} could not fetch a {_size(nbytes)} block from "
        f"worker {src} on host {_host(src)} over {_scheme(src)} ({error})",
        _fix(src, dst),
    )


def _refuse_slow(src: str, dst: str, nbytes: int, rate: float, expected: float, rule: str) -> None:
    raise UserError(
        f"workers {src} on host {_host(src)} and {dst} on host {_host(dst)} moved a "
        f"{_size(nbytes)} block at {rate / MiB:.1f} MiB/s, under 1/{FAR_BELOW} of the "
        f"{expected / MiB:.0f} MiB/s expected ({rule})",
        _fix(src, dst),
    )


def check(client, family, probe_setting: str = "auto", probe_source: str = "default") -> dict[str, Any]:
    """Check the running cluster behind ``client`` for ``family``'s work: every listed worker
    answers, its versions match the client's, a GPU family's worker sees a GPU, and the
    bandwidth probe passes; a one-line :class:`UserError` naming the first that fails, else
    what was seen."""
    t0 = time.perf_counter()
    listed = _dask_compat.workers(client)
    names = packages(family)
    versions = client.get_versions(check=False, packages=names)
    answered = versions["workers"]
    for address in sorted(listed):
        if address not in answered:
            raise UserError(
                f"worker {address} on host {_host(address)} is listed by the scheduler but does not "
                "answer it (network, firewall, or the host is down)",
                f"make {_host(address)} reachable from the scheduler's host, or stop that worker",
            )
    mine = versions["client"]["packages"]
    compared = ["python", *_dask_compat.required_packages(), *names]
    for address in sorted(answered):
        theirs = (answered[address] or {}).get("packages") or {}
        wrong = [(p, theirs.get(p), mine.get(p)) for p in compared if theirs.get(p) != mine.get(p)]
        if wrong:
            what = ", ".join(f"{p} {w or 'missing'} (this client: {c or 'missing'})" for p, w, c in wrong)
            p, _, c = wrong[0]
            fix = (
                f"install {p}=={c} in the workers' environment on {_host(address)}"
                if c
                else f"use a client with {p} installed, or remove it on {_host(address)}"
            )
            raise UserError(
                f"worker {address} on host {_host(address)} has {what}",
                f"{fix}, or run this client from the workers' environment",
            )
    seen = facts(client) if answered else {}
    for address, w in sorted(seen.items()):
        if family.cluster_kind == "cuda" and w["gpus"] == 0:
            raise UserError(
                f"worker {address} on host {_host(address)} ({w['hostname']}) sees no GPU, but the "
                f"{family.name} family's work runs on GPUs",
                "start that host's workers with `dask cuda worker` on a GPU node (check "
                "CUDA_VISIBLE_DEVICES there), or use --backend cpu",
            )
    addresses = sorted(seen)
    scheme = _scheme(addresses[0]) if addresses else "tcp"
    decision = _probe_decision(probe_setting, probe_source, scheme, len(addresses))
    measured = probe(client, family, addresses, seen, decision)
    return {
        "ok": True,
        "workers": len(answered),
        "hosts": hosts(seen),
        "compared": compared,
        "worker_gpus": worker_gpus(seen),
        "probe": measured,
        "seconds": round(time.perf_counter() - t0, 3),
    }
