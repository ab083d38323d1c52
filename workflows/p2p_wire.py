"""Where does a GPU block's point-to-point time go? One run prints the whole study.

On 2 x H200 (NVLink NV18) a 1 GiB CuPy block moved by Dask from worker 0 to worker 1 took
0.0174 s over ucx (57.5 GiB/s) while ``cudaMemcpyPeer`` moves 1 GiB in 2.72 ms (367 GiB/s).
This script measures each layer between the wire and Dask, so the missing time can be
assigned to one of them. Every measurement runs in a child process of its own (fresh
environment, its own timeout; a hang or crash becomes an ``error`` row, never the end of the
run), and the JSON is rewritten after every case, so a run cut short keeps what it measured.

Sections (``--sections``; every row has section, case, size_bytes, median_s, min_s, GiBps,
pct_of_wire, note / error; times_s keeps every timed round, warmup_s the untimed ones):

``wire``      One process, both GPUs: ``cudaMemcpyPeerAsync`` device 0 -> 1 of each size,
              first WITHOUT peer access enabled (the driver may stage it), then with
              ``deviceEnablePeerAccess`` both ways; timed on the host (synchronize +
              perf_counter, like every other row) and with CUDA events; plus a same-GPU copy
              for reference. The host-timed peer-access copy is the ``wire``: ``pct_of_wire``
              of every other row of the same size is wire time / that row's time.
``ucxx``      UCX without Dask. Two spawned processes (sender on GPU 0, receiver on GPU 1;
              each sees both GPUs, rotated, as dask-cuda's workers do) talk through the
              ``ucxx`` async API (listener + endpoint). Two modes per size:
              ``prepost``  the receiver posts ``ep.recv`` into a preallocated buffer, says
                           "ready", the sender times ``ep.send`` of the block: UCX alone;
              ``dask_like`` what distributed-ucxx does per message: two small host header
                           messages, then the receiver allocates the buffer
                           (``rmm.DeviceBuffer``, as distributed-ucxx's ``device_array``),
                           synchronizes, receives; the sender synchronizes before sending.
              One-way time = receiver's completion minus sender's start (both
              ``perf_counter``, i.e. CLOCK_MONOTONIC, one clock for all processes of a
              machine). Run under a grid of UCX settings (``UCXX_CASES``): the default (what
              Dask gets: ucxx's own settings, blocking progress), thread progress, rendezvous
              schemes, TLS lists (``^cuda_ipc`` switches cuda_ipc off: if that changes
              nothing, cuda_ipc was not the transport), the IPC cache, rails, fragment size,
              each process seeing only its own GPU, the rendezvous pipeline allowed with error
              handling, RMM pools of 4 GiB and of 0.8 of the GPU (gpuscale's: is registering /
              IPC-mapping one huge allocation the cost?). ``recv_alloc_median_s`` is the
              receiver's allocation time inside the dask_like transfer; ``net_s`` / ``net_GiBps``
              are net of the same case's 8-byte time.
              Also ``ucx_perftest`` (C, no Python; from the libucx wheel) tag_lat (one-way time
              of one message) / tag_bw between two processes on the two GPUs: with ucxx's
              settings and endpoint error handling (``-e``, as ucxx always creates endpoints:
              UCX then uses only transports / protocols supporting it; on a CPU this alone
              turns shared memory into tcp), without it, and with UCX's own defaults.
``dask``      ``row_p2p`` of workflows/bench_vs_peer.py, several clusters: a block made on
              worker 0 (GPU 0), then the wall time of a dependent task on worker 1 that reads
              its first element; two untimed rounds first. Sizes: 8 bytes (the fixed cost:
              scheduler round trips, task run) and the ``--sizes``; ``net_s`` = time minus the
              8-byte time, ``net_GiBps`` its bandwidth. ``worker_in_median_s``: the receiving
              worker's own transfer time (distributed's transfer_incoming_log: request sent
              to data deserialized), ``worker_out_median_s``: the sending worker's (write and
              the "OK" reply, no serialization). Cases (``DASK_CASES``): gpuscale's session
              over ucx (gpuscale's setting: RMM pool 0.8 of the GPU, CuPy through RMM),
              dask-cuda without an RMM pool, with a small pool, distributed-ucxx's
              multi-buffer send, thread progress, comm offload off, the best UCX setting of
              the ucxx section if it beat the default by 10%, Dask's batched-message
              intervals at 0 and at Dask's own (``cluster.message-interval``), and tcp for
              reference. ``hops_ms``: the round trip hop by hop (client -> scheduler,
              scheduler -> w1, w1 gathers, w1 runs, w1 -> scheduler, scheduler -> client),
              medians from the scheduler's transition log and w1's stimulus log.
              ``workers`` records each worker's UCX environment, progress mode, allocator.
``serialize`` One GPU, no comm: distributed's ``serialize`` / ``dumps`` of the get_data
              reply / ``loads`` of a block (``zero_copy``: the frame is the array's own
              memory), the host path tcp takes (the "dask" serializer: device -> host copy),
              and what a receiver pays before UCX can write: ``rmm.DeviceBuffer`` without
              and with a pool, ``cupy.empty``, cudaMalloc + cudaFree, an idle synchronize.
``info``      ``ucx_info -v`` / ``-d`` / ``-c`` (selected keys) from the libucx wheel,
              ``nvidia-smi topo -m``, and one
              ucxx transfer with ``UCX_PROTO_INFO=y``: UCX prints its protocol choice per
              message size and memory type (e.g. "rendezvous zero-copy read from remote ...
              cuda_ipc" vs a pipeline staged through bounce buffers / host memory); the tables
              for GPU memory are kept in ``info.proto_info``, likewise one ``ucx_perftest`` run
              in ``info.proto_info_perftest``.

How to read it: the wire row is the ceiling. ``ucxx prepost`` near the wire means UCX itself
is fine and the loss is above it; far below it with ``TLS=^cuda_ipc`` equal to the default
means cuda_ipc was not used (check ``info.proto_info``: the transport named per size range).
``ucx_perftest`` with ``-e`` much slower than without means endpoint error handling (always
on in ucxx / Dask) excludes the fast path. ``dask_like`` minus ``prepost`` is allocation +
headers + synchronization. Dask's ``worker_in`` minus ucxx ``dask_like`` is the event loop,
offload threads and (de)serialization; Dask's total minus ``worker_in`` is the scheduler and
the dependent task (about the 8-byte row). The targets: p2p 1 GiB >= 180 GiB/s,
and >= 50% of the wire at 64 MiB (``targets`` in the JSON, the last lines of the table).

Time: ``--budget`` (330 s) bounds the run; sections get at most 60 (wire), 45 (serialize),
125 (ucxx), 40 (info) s, the dask section what is left; each child has its own timeout, a case
that cannot start in time is listed under ``skipped``. Order: wire, serialize, ucxx, info, dask.

    python workflows/p2p_wire.py --out $OUT/p2p.json          # 2+ GPUs, about 5 minutes
    python workflows/p2p_wire.py --quick                     # a smaller grid, fewer rounds
    python workflows/p2p_wire.py --sections wire,ucxx --rounds 20
    python workflows/p2p_wire.py --smoke                     # CPU: dask (tcp, NumPy) + serialize
    python workflows/p2p_wire.py --smoke --sections ucxx,info # CPU with ucxx: host-memory plumbing
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve()
ROOT = HERE.parent.parent
KiB, MiB, GiB = 2**10, 2**20, 2**30
TINY = 8
"""Bytes of the tiny block whose time is the fixed cost of one transfer."""
REFERENCE_WIRE_GiBps = 1.0 / 0.00272
"""The reference wire figure (1 GiB in 2.72 ms on 2 x H200; ``wire_reference_GiBps`` of
docs/bench-h200x2/p2p-wire/layers.json), used only where this run has no wire row."""
SECTIONS = ("wire", "ucxx", "dask", "serialize", "info")

# (label, UCX / ucxx environment, options). Options: progress_mode (distributed-ucxx uses
# "blocking"), devices {"send": CUDA_VISIBLE_DEVICES, "recv": ...}, rmm_pool (bytes, or a
# fraction of the GPU; CuPy and the receive buffers then come from the pool). Endpoint
# error handling stays on, as in distributed-ucxx: ucxx's listener creates its endpoints with it
# (a client without it is refused: "error handling level mismatch"), and with it UCX uses only
# the transports / protocols that support it (the rendezvous pipeline needs
# RNDV_PIPELINE_ERROR_HANDLING=y, a case of its own).
UCXX_CASES = [  # most telling first: a run short of time drops the last ones
    ("default", {}, {}),
    ("TLS=^cuda_ipc (cuda_ipc off)", {"UCX_TLS": "^cuda_ipc"}, {}),
    ("RNDV_SCHEME=get_zcopy", {"UCX_RNDV_SCHEME": "get_zcopy"}, {}),
    ("RNDV_SCHEME=put_zcopy", {"UCX_RNDV_SCHEME": "put_zcopy"}, {}),
    ("progress thread", {}, {"progress_mode": "thread"}),
    ("CUDA_IPC_CACHE=n", {"UCX_CUDA_IPC_CACHE": "n"}, {}),
    ("own GPU only visible", {}, {"devices": {"send": "0", "recv": "1"}}),
    ("RNDV_PIPELINE_ERROR_HANDLING=y", {"UCX_RNDV_PIPELINE_ERROR_HANDLING": "y"}, {}),
    ("RMM pool 4 GiB both sides", {}, {"rmm_pool": 4 * GiB}),
    ("RMM pool 0.8 of the GPU both sides (gpuscale's)", {}, {"rmm_pool": 0.8}),
    ("TLS=tcp,cuda_copy,cuda_ipc", {"UCX_TLS": "tcp,cuda_copy,cuda_ipc"}, {}),
    ("MAX_RNDV_RAILS=2 (ucxx sets 1)", {"UCX_MAX_RNDV_RAILS": "2"}, {}),
    ("RNDV_FRAG_SIZE=host:512K,cuda:256M", {"UCX_RNDV_FRAG_SIZE": "host:512K,cuda:256M"}, {}),
]
UCXX_QUICK = (
    "default",
    "progress thread",
    "TLS=^cuda_ipc (cuda_ipc off)",
    "RNDV_SCHEME=get_zcopy",
    "own GPU only visible",
)

# (label, cluster spec, environment). cluster: gpuscale (gpuscale.session, bench_vs_peer.py's row_p2p),
# cuda (dask_cuda.LocalCUDACluster as given), local (distributed.LocalCluster, CPU).
DASK_CASES = [
    ("gpuscale ucx (RMM pool 0.8, CuPy via RMM)", {"cluster": "gpuscale", "protocol": "ucx"}, {}),
    ("dask-cuda ucx, no RMM pool", {"cluster": "cuda", "protocol": "ucx"}, {}),
    (
        "dask-cuda ucx, RMM pool 4GB, CuPy via RMM",
        {"cluster": "cuda", "protocol": "ucx", "rmm_pool_size": "4GB", "external_libs": ["cupy"]},
        {},
    ),
    (
        "gpuscale ucx + multi-buffer",
        {"cluster": "gpuscale", "protocol": "ucx"},
        {"DASK_DISTRIBUTED_UCXX__MULTI_BUFFER": "True"},
    ),
    (
        "gpuscale ucx + UCXPY_PROGRESS_MODE=thread",
        {"cluster": "gpuscale", "protocol": "ucx"},
        {"UCXPY_PROGRESS_MODE": "thread"},
    ),
    (
        "gpuscale ucx + comm offload off",
        {"cluster": "gpuscale", "protocol": "ucx"},
        {"DASK_DISTRIBUTED__COMM__OFFLOAD": "False"},
    ),
    ("gpuscale ucx + best ucxx env", {"cluster": "gpuscale", "protocol": "ucx", "best_ucxx": True}, {}),
    (
        "gpuscale ucx, message interval 0",
        {"cluster": "gpuscale", "protocol": "ucx"},
        {"DASK_GPUSCALE__CLUSTER__MESSAGE_INTERVAL": "0"},
    ),
    (
        "gpuscale ucx, Dask's message intervals",
        {"cluster": "gpuscale", "protocol": "ucx"},
        {"DASK_GPUSCALE__CLUSTER__MESSAGE_INTERVAL": "dask"},
    ),
    ("gpuscale tcp (reference)", {"cluster": "gpuscale", "protocol": "tcp", "max_rounds": 3}, {}),
]
DASK_QUICK = (
    "gpuscale ucx (RMM pool 0.8, CuPy via RMM)",
    "dask-cuda ucx, no RMM pool",
    "gpuscale ucx + best ucxx env",
    "gpuscale ucx, message interval 0",
    "gpuscale ucx, Dask's message intervals",
    "gpuscale tcp (reference)",
)
DASK_SMOKE = [
    ("LocalCluster tcp (NumPy)", {"cluster": "local", "protocol": "tcp"}, {}),
    ("gpuscale cpu tcp (NumPy)", {"cluster": "gpuscale", "protocol": "tcp"}, {}),
    (
        "gpuscale cpu tcp (NumPy), message interval 0",
        {"cluster": "gpuscale", "protocol": "tcp"},
        {"DASK_GPUSCALE__CLUSTER__MESSAGE_INTERVAL": "0"},
    ),
]
UCX_CONFIG_KEYS = (
    "TLS",
    "RNDV_SCHEME",
    "RNDV_THRESH",
    "RNDV_FRAG_SIZE",
    "RNDV_FRAG_MEM_TYPES",
    "MAX_RNDV_RAILS",
    "CUDA_IPC_CACHE",
    "MEMTYPE_CACHE",
    "MEMTYPE_REG_WHOLE_ALLOC_TYPES",
    "PROTO_ENABLE",
    "CUDA_COPY_MAX_REG_RATIO",
    "RNDV_PIPELINE_SHM_ENABLE",
)
UCXX_DEFAULTS = {
    "UCX_MAX_RNDV_RAILS": "1",
    "UCX_RNDV_THRESH": "8192",
    "UCX_RNDV_FRAG_MEM_TYPE": "cuda",
    "UCX_MEMTYPE_CACHE": "n",
}
"""What ``import ucxx`` puts in the environment when unset (ucxx/__init__.py, 0.52)."""


# --------------------------------------------------------------------------------------- helpers
def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64MiB, 1GiB, 8)")
    unit = m.group(2).upper().replace("I", "").replace("B", "")
    return int(float(m.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": 2**40}[unit])


def fmt_size(n: int | None) -> str:
    if n is None:
        return ""
    for unit, f in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def make_row(
    section: str,
    case: str,
    size: int | None,
    times=None,
    *,
    warmup=None,
    note: str = "",
    error: str | None = None,
    bw: bool = True,
    **extra,
) -> dict:
    times = [float(t) for t in (times or [])]
    med = statistics.median(times) if times else None
    row = {
        "section": section,
        "case": case,
        "size_bytes": size,
        "median_s": med,
        "min_s": min(times) if times else None,
        "GiBps": size / med / GiB if (bw and med and size) else None,
        "pct_of_wire": None,
        "note": note,
        "error": error,
        "times_s": times,
    }
    if warmup is not None:
        row["warmup_s"] = [float(t) for t in warmup]
    row.update(extra)
    return row


def err_text(e: BaseException | str, limit: int = 600) -> str:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    return text.strip()[-limit:]


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _sync(xp) -> None:
    if getattr(xp, "__name__", "") == "cupy":
        xp.cuda.runtime.deviceSynchronize()


def _ptr(obj):
    """Address of an array / frame's first byte (device or host), or None."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    try:
        import numpy as np

        return int(np.frombuffer(obj, dtype=np.uint8).ctypes.data)
    except Exception:  # noqa: BLE001 - not a buffer: no address to compare
        return None


def _text(x) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def _flush_c_stdio() -> None:
    """Flush C stdio (UCX prints with printf) before os._exit, which skips it."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


# --------------------------------------------------------------------------------------- children
class Emitter:
    """A child's result file, rewritten after every measurement (a killed child keeps its rows)."""

    def __init__(self, path: str):
        self.path = pathlib.Path(path)
        self.data = {"rows": [], "extra": {}, "complete": False}

    def row(self, r: dict) -> None:
        self.data["rows"].append(r)
        self.save()

    def extra(self, **kw) -> None:
        self.data["extra"].update(kw)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".part")
        tmp.write_text(json.dumps(self.data, default=str))
        tmp.replace(self.path)


def run_child(kind: str, spec: dict, timeout: float, env: dict | None = None) -> tuple[dict, str, str | None]:
    """Run one measurement in a fresh process group; returns (result, output tail, error)."""
    with tempfile.TemporaryDirectory(prefix=f"p2p-{kind}-") as d:
        out = pathlib.Path(d) / "result.json"
        full_env = {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        full_env["PYTHONUNBUFFERED"] = "1"
        spec = {**spec, "tmpdir": d, "timeout": timeout}
        cmd = [
            sys.executable,
            str(HERE),
            "--_child",
            kind,
            "--_spec",
            json.dumps(spec),
            "--_result",
            str(out),
        ]
        error = None
        p = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
            cwd=d,
            start_new_session=True,
            errors="replace",
        )
        try:
            output, _ = p.communicate(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            output, _ = p.communicate()
            error = f"timed out after {timeout:.0f} s (process group killed)"
        else:
            # the child's own children (workers, UCX peers) must not outlive it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            if p.returncode != 0:
                error = f"exit code {p.returncode}: " + err_text((output or "").strip()[-400:] or "no output")
        result = {"rows": [], "extra": {}, "complete": False}
        if out.exists():
            with contextlib.suppress(ValueError):
                result = json.loads(out.read_text())
        if error and result.get("complete"):
            error = None  # the results were all written; only the shutdown was cut
        return result, output or "", error


def child_wire(spec: dict, em: Emitter) -> None:
    import cupy as cp

    rt = cp.cuda.runtime
    n = rt.getDeviceCount()
    if n < 2:
        raise RuntimeError(f"{n} GPU(s) visible: the wire needs 2")
    rounds, warm = spec["rounds"], 2
    em.extra(
        can_access_peer={
            "0->1": bool(rt.deviceCanAccessPeer(0, 1)),
            "1->0": bool(rt.deviceCanAccessPeer(1, 0)),
        },
        devices=[_text(rt.getDeviceProperties(i).get("name")) for i in range(2)],
    )
    bufs = {}
    for size in spec["sizes"]:
        with cp.cuda.Device(0):
            src = cp.full(size, 7, dtype=cp.uint8)
        with cp.cuda.Device(1):
            dst = cp.zeros(size, dtype=cp.uint8)
        bufs[size] = (src, dst)

    def sync_both():
        for d in (0, 1):
            with cp.cuda.Device(d):
                rt.deviceSynchronize()

    def peer_copy(size):
        src, dst = bufs[size]
        host, dev = [], []
        with cp.cuda.Device(0):
            stream = cp.cuda.Stream(non_blocking=True)
            for _ in range(warm + rounds):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                sync_both()
                t0 = time.perf_counter()
                e0.record(stream)
                rt.memcpyPeerAsync(dst.data.ptr, 1, src.data.ptr, 0, size, stream.ptr)
                e1.record(stream)
                stream.synchronize()
                host.append(time.perf_counter() - t0)
                dev.append(cp.cuda.get_elapsed_time(e0, e1) / 1e3)
        with cp.cuda.Device(1):
            ok = int(dst[0]) == 7 and int(dst[-1]) == 7
            dst.fill(0)
        return host, dev, ok

    def measure(label, note):
        for size in spec["sizes"]:
            try:
                host, dev, ok = peer_copy(size)
                err = None if ok else "copied data is wrong"
                em.row(
                    make_row(
                        "wire",
                        f"memcpyPeer 0->1, {label}",
                        size,
                        host[warm:],
                        warmup=host[:warm],
                        note=note + "; host-timed (synchronize + perf_counter)",
                        error=err,
                    )
                )
                em.row(
                    make_row(
                        "wire",
                        f"memcpyPeer 0->1, {label}, CUDA events",
                        size,
                        dev[warm:],
                        warmup=dev[:warm],
                        note="device-timed",
                        error=err,
                    )
                )
            except Exception as e:  # noqa: BLE001 - one failed copy is a row, not the end
                em.row(make_row("wire", f"memcpyPeer 0->1, {label}", size, error=err_text(e)))

    measure("no peer access", "before deviceEnablePeerAccess: the driver's own path")
    for a, b in ((0, 1), (1, 0)):
        with cp.cuda.Device(a):
            try:
                rt.deviceEnablePeerAccess(b)
            except Exception as e:  # noqa: BLE001 - "already enabled" is fine
                if "AlreadyEnabled" not in str(e) and "already" not in str(e).lower():
                    em.extra(**{f"enable_peer_{a}{b}": err_text(e)})
    measure("peer access", "the wire: pct_of_wire of every row of this size is relative to this one")
    for size in spec["sizes"]:
        try:
            src, _ = bufs[size]
            with cp.cuda.Device(0):
                other = cp.empty_like(src)
                stream = cp.cuda.Stream(non_blocking=True)
                times = []
                for _ in range(warm + rounds):
                    rt.deviceSynchronize()
                    t0 = time.perf_counter()
                    other.data.copy_from_device_async(src.data, size, stream)
                    stream.synchronize()
                    times.append(time.perf_counter() - t0)
                del other
            em.row(
                make_row(
                    "wire",
                    "same-GPU copy on GPU 0 (reference)",
                    size,
                    times[warm:],
                    warmup=times[:warm],
                    note="device memory read + write on one GPU",
                )
            )
        except Exception as e:  # noqa: BLE001
            em.row(make_row("wire", "same-GPU copy on GPU 0 (reference)", size, error=err_text(e)))


# ----- ucxx alone
def _schedule(spec: dict) -> list[tuple[str, int, int]]:
    return [
        (mode, size, r)
        for mode in spec["modes"]
        for size in spec["sizes"]
        for r in range(spec["warmup"] + spec["rounds"])
    ]


def _ucxx_peer(role: str, spec: dict, q, port, path: str) -> None:
    """One side of the ucxx-alone transfer (a spawned process; its own GPU view)."""
    res = {
        "role": role,
        "t": {},
        "tdone": {},
        "alloc": {},
        "bad": 0,
        "error": None,
        "info": {},
        "done": False,
    }
    told = False

    def save():
        pathlib.Path(path).write_text(json.dumps(res, default=str))

    try:
        devices = (spec.get("devices") or {}).get(role)
        if devices is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = devices
        import asyncio

        import numpy as np

        gpu = spec["xp"] == "cupy"
        rmm = None
        if gpu:
            try:  # as distributed-ucxx does: the CUDA context exists before UCX starts
                from ucxx._cuda_context import ensure_cuda_context

                ensure_cuda_context(0)
            except Exception as e:  # noqa: BLE001 - cupy makes one below anyway
                res["info"]["ensure_cuda_context"] = err_text(e)
            import cupy as xp

            xp.cuda.Device(0).use()
            xp.empty(1)
            try:
                import rmm
            except ImportError:
                rmm = None
            pool = spec.get("rmm_pool")
            if pool and rmm is not None:
                from rmm.allocators.cupy import rmm_cupy_allocator

                if pool <= 1:  # a fraction of the device, as gpuscale's rmm_pool_size 0.8
                    pool = int(pool * xp.cuda.runtime.memGetInfo()[1])
                pool = pool // 256 * 256
                rmm.reinitialize(pool_allocator=True, initial_pool_size=pool)
                xp.cuda.set_allocator(rmm_cupy_allocator)
                res["info"]["rmm_pool_bytes"] = pool
        else:
            xp = np
        import ucxx

        ucxx.init(options={}, env_takes_precedence=True, progress_mode=spec.get("progress_mode"))
        res["info"]["progress_mode"] = spec.get("progress_mode") or os.environ.get(
            "UCXPY_PROGRESS_MODE", "thread"
        )
        res["info"]["recv_alloc"] = (
            "rmm.DeviceBuffer" if (gpu and rmm is not None) else f"{xp.__name__}.empty"
        )
        if spec.get("info") and role == "recv":
            with contextlib.suppress(Exception):
                res["info"]["active_transports"] = sorted(ucxx.get_active_transports())
            with contextlib.suppress(Exception):
                res["info"]["ucp_context_info"] = ucxx.get_ucp_context_info()[-4000:]
            with contextlib.suppress(Exception):
                cfg = ucxx.get_config()
                res["info"]["config"] = {k: v for k, v in cfg.items() if k in UCX_CONFIG_KEYS}
        res["info"]["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")
        res["info"]["UCX_env"] = {k: v for k, v in os.environ.items() if k.startswith(("UCX_", "UCXPY_"))}

        def alloc(n):
            if gpu and rmm is not None:
                return rmm.DeviceBuffer(size=n)
            return xp.empty(n, dtype=xp.uint8)

        def first_last(buf):
            a = xp.asarray(buf) if gpu else np.frombuffer(buf, dtype=np.uint8)
            return int(a[0]), int(a[-1])

        hdr_fmt = "?Q"
        hdr_n = struct.calcsize(hdr_fmt)

        async def recv_loop(ep):
            ready = np.ones(8, dtype=np.uint8)
            pre = {}
            for mode, size, r in _schedule(spec):
                key = f"{mode}:{size}"
                v = r % 250 + 1
                if mode == "prepost":
                    buf = pre.get(size)
                    if buf is None:
                        buf = pre[size] = xp.empty(size, dtype=xp.uint8)
                        _sync(xp)
                    fut = asyncio.ensure_future(ep.recv(buf))
                    await asyncio.sleep(0)
                    await ep.send(ready)
                    await fut
                    t1 = time.perf_counter()
                    a = 0.0
                else:
                    await ep.send(ready)
                    h1 = np.empty(hdr_n, dtype=np.uint8)
                    await ep.recv(h1)
                    h2 = np.empty(hdr_n, dtype=np.uint8)
                    await ep.recv(h2)
                    _, n = struct.unpack(hdr_fmt, h2.tobytes())
                    ta = time.perf_counter()
                    buf = alloc(n)
                    _sync(xp)
                    a = time.perf_counter() - ta
                    await ep.recv(buf)
                    t1 = time.perf_counter()
                res["t"].setdefault(key, []).append(t1)
                res["alloc"].setdefault(key, []).append(a)
                _sync(xp)
                if first_last(buf) != (v, v):
                    res["bad"] += 1
                del buf
            await ep.send(ready)  # the sender may stop now
            res["done"] = True

        async def send_loop(ep):
            ready = np.empty(8, dtype=np.uint8)
            src = {}
            for mode, size, r in _schedule(spec):
                key = f"{mode}:{size}"
                if size not in src:
                    src[size] = xp.empty(size, dtype=xp.uint8)
                s = src[size]
                s.fill(r % 250 + 1)
                _sync(xp)
                await ep.recv(ready)
                t0 = time.perf_counter()
                if mode == "prepost":
                    await ep.send(s)
                else:
                    await ep.send(np.frombuffer(struct.pack(hdr_fmt, False, 1), dtype=np.uint8).copy())
                    await ep.send(np.frombuffer(struct.pack(hdr_fmt, gpu, size), dtype=np.uint8).copy())
                    _sync(xp)
                    await ep.send(s)
                res["tdone"].setdefault(key, []).append(time.perf_counter() - t0)
                res["t"].setdefault(key, []).append(t0)
            await ep.recv(ready)
            res["done"] = True

        async def main():
            nonlocal told
            if role == "recv":
                finished = asyncio.Event()

                async def handler(ep):
                    try:
                        await recv_loop(ep)
                    except BaseException:  # noqa: BLE001 - recorded, the peer ends
                        res["error"] = err_text(traceback.format_exc(), 2000)
                    finally:
                        finished.set()

                lf = ucxx.create_listener(handler, port=0, endpoint_error_handling=spec["error_handling"])
                q.put(int(lf.port))
                told = True
                await asyncio.wait_for(finished.wait(), timeout=spec["peer_timeout"])
                del lf
            else:
                eh = spec["error_handling"]
                try:
                    ep = await ucxx.create_endpoint("127.0.0.1", port, endpoint_error_handling=eh)
                except Exception as e:  # noqa: BLE001 - loopback refused: the host's own address
                    res["info"]["loopback_connect"] = err_text(e)
                    ep = await ucxx.create_endpoint(ucxx.get_address(), port, endpoint_error_handling=eh)
                await asyncio.wait_for(send_loop(ep), timeout=spec["peer_timeout"])

        # run_until_complete without closing the loop (as ucxx's benchmarks): closing would
        # cancel UCX's progress tasks, which can raise or hang; os._exit ends the process
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main())
        with contextlib.suppress(Exception):
            ucxx.stop_notifier_thread()
    except BaseException:  # noqa: BLE001 - reported in the result, never raised past here
        if res["done"]:
            res["teardown_error"] = err_text(traceback.format_exc(), 1000)
        else:
            res["error"] = res["error"] or err_text(traceback.format_exc(), 2000)
    if role == "recv" and not told:
        with contextlib.suppress(Exception):
            q.put("receiver failed before listening: " + (res["error"] or "")[-300:])
    save()
    sys.stdout.flush()
    sys.stderr.flush()
    _flush_c_stdio()
    os._exit(0)  # UCX / progress-thread teardown can hang; the results are written


def child_ucxx(spec: dict, em: Emitter) -> None:
    import multiprocessing as mp
    import queue

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    d = pathlib.Path(spec["tmpdir"])
    paths = {"recv": str(d / "recv.json"), "send": str(d / "send.json")}
    label = spec["label"]
    t_start = time.perf_counter()
    deadline = t_start + spec["timeout"] - 3
    spec = {**spec, "peer_timeout": max(5.0, spec["timeout"] - 20)}
    procs = {"recv": ctx.Process(target=_ucxx_peer, args=("recv", spec, q, None, paths["recv"]))}
    procs["recv"].start()
    error = None
    try:
        port = q.get(timeout=min(90.0, max(5.0, deadline - time.perf_counter())))
    except queue.Empty:
        port = "receiver did not start listening in time"
    if isinstance(port, int):
        procs["send"] = ctx.Process(target=_ucxx_peer, args=("send", spec, q, port, paths["send"]))
        procs["send"].start()
        procs["send"].join(timeout=max(1.0, deadline - time.perf_counter()))
        procs["recv"].join(timeout=max(1.0, min(10.0, deadline - time.perf_counter())))
    else:
        error = str(port)
        procs["recv"].join(timeout=5)
    for p in procs.values():
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
            error = error or "a peer did not finish in time (killed)"
    side = {}
    for role, path in paths.items():
        try:
            side[role] = json.loads(pathlib.Path(path).read_text())
        except (OSError, ValueError):
            side[role] = {}
    errors = [f"{role}: {side[role]['error']}" for role in side if side[role].get("error")]
    error = "; ".join(([error] if error else []) + errors) or None
    em.extra(
        peer_info={role: side[role].get("info", {}) for role in side}, setup_s=time.perf_counter() - t_start
    )
    s, r = side.get("send", {}), side.get("recv", {})
    warm = spec["warmup"]
    any_row = False
    for mode in spec["modes"]:
        for size in spec["sizes"]:
            key = f"{mode}:{size}"
            t0, t1 = s.get("t", {}).get(key, []), r.get("t", {}).get(key, [])
            dts = [b - a for a, b in zip(t0, t1)]
            if not dts:
                continue
            any_row = True
            alloc = r.get("alloc", {}).get(key, [])[warm:]
            done = s.get("tdone", {}).get(key, [])[warm:]
            em.row(
                make_row(
                    "ucxx",
                    f"{label} | {mode}",
                    size,
                    dts[warm:],
                    warmup=dts[:warm],
                    note=(
                        "receiver allocates + 2 header messages, as distributed-ucxx"
                        if mode == "dask_like"
                        else "recv preposted into a reused buffer"
                    ),
                    error=error or (f"{r.get('bad')} round(s) received wrong data" if r.get("bad") else None),
                    env=spec.get("env", {}),
                    options=spec.get("options", {}),
                    recv_alloc_median_s=_median(alloc) if mode == "dask_like" else None,
                    sender_done_median_s=_median(done),
                )
            )
    if not any_row:
        em.row(
            make_row(
                "ucxx",
                f"{label}",
                None,
                error=error or "no transfer completed",
                env=spec.get("env", {}),
                options=spec.get("options", {}),
            )
        )


# ----- dask
def _make_block(module: str, nbytes: int, seed: int):
    import importlib

    xp = importlib.import_module(module)
    a = xp.full(max(1, nbytes // 8), float(seed))
    _sync(xp)
    return a


def _first_element(a) -> float:
    return float(a[:1].sum())


def _transfer_logs(dask_worker) -> dict:
    def conv(e):
        return {
            "duration": e.get("duration"),
            "total": e.get("total"),
            "who": str(e.get("who")),
            "keys": [str(k) for k in (e.get("keys") or {})],
        }

    return {
        "in": [conv(e) for e in list(dask_worker.transfer_incoming_log)],
        "out": [conv(e) for e in list(dask_worker.transfer_outgoing_log)],
    }


def _worker_events(keys: list[str], dask_worker=None) -> dict:
    """When this worker handled each event about ``keys`` (wall clock, seconds): the compute
    order, the gathered data and the task's end, from its state machine's stimulus log."""
    want = set(keys)
    out: dict = {}
    for ev in list(dask_worker.state.stimulus_log):
        name = type(ev).__name__
        key = getattr(ev, "key", None)
        hits = [str(key)] if key is not None and str(key) in want else []
        hits += [str(k) for k in (getattr(ev, "data", None) or {}) if str(k) in want]
        for k in hits:
            out.setdefault(k, {}).setdefault(name, ev.handled)
    return out


def _scheduler_events(keys: list[str], dask_scheduler=None) -> dict:
    """When the scheduler made each transition of ``keys`` (wall clock, seconds)."""
    want = set(keys)
    out: dict = {}
    for t in list(dask_scheduler.transition_log):
        if str(t[0]) in want:
            out.setdefault(str(t[0]), {}).setdefault(f"{t[1]}->{t[2]}", t[-1])
    return out


HOPS = (
    ("client -> scheduler", "t0", "s:released->waiting"),
    ("scheduler -> w1", "s:waiting->processing", "w:ComputeTaskEvent"),
    ("w1 gathers the block", "w:ComputeTaskEvent", "w:GatherDepSuccessEvent"),
    ("w1 runs the task", "w:GatherDepSuccessEvent", "w:ExecuteSuccessEvent"),
    ("w1 -> scheduler", "w:ExecuteSuccessEvent", "s:processing->memory"),
    ("scheduler -> client", "s:processing->memory", "t1"),
)
"""The dependent task's round trip, hop by hop: (name, from event, to event)."""


def hop_medians(rounds: list[dict], wev: dict, sev: dict) -> dict:
    """Median milliseconds of each hop over ``rounds`` ({t0, t1, f, g}: the client's wall clock
    around submit -> result and the block's and the task's keys); a hop whose events were
    not logged is left out. One clock: every process of one machine reads the same wall clock."""
    per: dict = {name: [] for name, _, _ in HOPS}
    for r in rounds:
        ev = {"t0": r["t0"], "t1": r["t1"]}
        ev |= {f"s:{k}": v for k, v in sev.get(r["g"], {}).items()}
        ev |= {f"w:{k}": v for k, v in wev.get(r["g"], {}).items()}
        if "GatherDepSuccessEvent" in wev.get(r["f"], {}):
            ev["w:GatherDepSuccessEvent"] = wev[r["f"]]["GatherDepSuccessEvent"]
        for name, a, b in HOPS:
            if a in ev and b in ev:
                per[name].append((ev[b] - ev[a]) * 1e3)
    return {name: round(statistics.median(v), 3) for name, v in per.items() if v}


def _worker_state(dask_worker=None) -> dict:
    """What transport settings this worker process really runs with."""
    out = {
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "env": {
            k: v
            for k, v in os.environ.items()
            if k.startswith(("UCX_", "UCXPY_", "DASK_DISTRIBUTED_UCXX", "DASK_DISTRIBUTED__COMM"))
        },
    }
    with contextlib.suppress(Exception):
        import distributed_ucxx.ucxx as du

        out["multi_buffer"] = du.multi_buffer
        if du.ucxx is not None:
            ctx = du.ucxx.core._ctx
            out["progress_mode"] = getattr(ctx, "progress_mode", None)
            with contextlib.suppress(Exception):
                out["active_transports"] = sorted(du.ucxx.get_active_transports())
    with contextlib.suppress(Exception):
        import rmm

        out["rmm_resource"] = type(rmm.mr.get_current_device_resource()).__name__
    with contextlib.suppress(Exception):
        import cupy

        alloc = cupy.cuda.get_allocator()
        out["cupy_allocator"] = getattr(alloc, "__qualname__", None) or repr(alloc)[:80]
    with contextlib.suppress(Exception):
        from distributed.comm import utils as cu

        out["offload_threshold"] = cu.OFFLOAD_THRESHOLD
    return out


def child_dask(spec: dict, em: Emitter) -> None:
    from distributed import Client, LocalCluster, wait

    xp = spec["xp"]
    label = spec["label"]
    t_start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if spec["cluster"] == "gpuscale":
            import gpuscale

            kw = {"gpus": "0,1"} if xp == "cupy" else {"workers": 2, "threads_per_worker": 1}
            s = stack.enter_context(
                gpuscale.session("gpu" if xp == "cupy" else "cpu", spec["protocol"], collection="array", **kw)
            )
            client = s.client
        elif spec["cluster"] == "cuda":
            from dask_cuda import LocalCUDACluster

            kwargs = {
                "CUDA_VISIBLE_DEVICES": "0,1",
                "n_workers": 2,
                "threads_per_worker": 1,
                "protocol": spec["protocol"],
                "dashboard_address": ":0",
            }
            if spec.get("rmm_pool_size"):
                kwargs["rmm_pool_size"] = spec["rmm_pool_size"]
            if spec.get("external_libs"):
                kwargs["rmm_allocator_external_lib_list"] = list(spec["external_libs"])
            cluster = stack.enter_context(LocalCUDACluster(**kwargs))
            client = stack.enter_context(Client(cluster))
        else:
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=2,
                    threads_per_worker=1,
                    processes=True,
                    protocol=spec["protocol"],
                    dashboard_address=":0",
                )
            )
            client = stack.enter_context(Client(cluster))
        workers = client.scheduler_info(n_workers=-1)["workers"]
        order = sorted(workers, key=lambda a: (str(workers[a].get("name")), a))
        if len(order) < 2:
            raise RuntimeError(f"{len(order)} worker(s) came up, 2 are needed")
        w0, w1 = order[:2]
        state = {}
        with contextlib.suppress(Exception):
            state = client.run(_worker_state, workers=[w0, w1])
        em.extra(
            startup_s=time.perf_counter() - t_start,
            scheduler=client.scheduler.address,
            workers={
                "w0 (sender)": {"address": w0, "name": workers[w0].get("name"), **state.get(w0, {})},
                "w1 (receiver)": {"address": w1, "name": workers[w1].get("name"), **state.get(w1, {})},
            },
        )
        rounds = min(spec["rounds"], spec.get("max_rounds") or spec["rounds"])
        keys_by_size = {}
        rows = []
        for size in [TINY] + list(spec["sizes"]):
            times, warm, keys, wrong, walls = [], [], [], 0, []
            try:
                for r in range(rounds + 2):  # two untimed rounds: connections, IPC handles, pools
                    f = client.submit(
                        _make_block, xp, size, r + 1, workers=[w0], allow_other_workers=False, pure=False
                    )
                    wait(f, timeout=60)
                    w_0, t0 = time.time(), time.perf_counter()
                    g = client.submit(_first_element, f, workers=[w1], allow_other_workers=False, pure=False)
                    got = g.result(timeout=60)  # a hung transfer fails this size, not the case
                    dt = time.perf_counter() - t0
                    if got != float(r + 1):
                        wrong += 1
                    (times if r >= 2 else warm).append(dt)
                    if r >= 2:
                        keys.append(str(f.key))
                        walls.append({"t0": w_0, "t1": w_0 + dt, "f": str(f.key), "g": str(g.key)})
                    del f, g
                hops = {}
                with contextlib.suppress(Exception):  # the breakdown is extra, never the row's end
                    logged = [k for w in walls for k in (w["f"], w["g"])]
                    wev = client.run(_worker_events, logged, workers=[w1])[w1]
                    sev = client.run_on_scheduler(_scheduler_events, logged)
                    hops = hop_medians(walls, wev, sev)
                keys_by_size[size] = keys
                row = make_row(
                    "dask",
                    label,
                    size,
                    times,
                    warmup=warm,
                    error=f"{wrong} round(s) read a wrong value" if wrong else None,
                    note="submit dependent task on w1 -> result (row_p2p)",
                    net_s=None,
                    net_GiBps=None,
                    hops_ms=hops,
                )
            except Exception as e:  # noqa: BLE001 - the size fails, the case goes on
                row = make_row("dask", label, size, times, warmup=warm, error=err_text(e))
            rows.append(row)
            em.row(row)
        try:
            logs = client.run(_transfer_logs, workers=[w0, w1])
            inc = {k: e["duration"] for e in logs.get(w1, {}).get("in", []) for k in e["keys"]}
            out = {k: e["duration"] for e in logs.get(w0, {}).get("out", []) for k in e["keys"]}
            for row in rows:
                keys = keys_by_size.get(row["size_bytes"], [])
                row["worker_in_median_s"] = _median([inc.get(k) for k in keys])
                row["worker_out_median_s"] = _median([out.get(k) for k in keys])
                row["worker_in_s"] = [inc.get(k) for k in keys]
            em.save()
        except Exception as e:  # noqa: BLE001
            em.extra(transfer_logs_error=err_text(e))
        em.data["complete"] = True  # the rows are in; closing the cluster may still be cut
        em.save()


# ----- serialize
def child_serialize(spec: dict, em: Emitter) -> None:
    import importlib

    from distributed.protocol import Serialize, deserialize, dumps, loads, serialize

    xp = importlib.import_module(spec["xp"])
    gpu = spec["xp"] == "cupy"
    fam = ("cuda", "dask", "pickle", "error") if gpu else ("dask", "pickle", "error")
    rounds, warm = spec["rounds"], 1

    def timed(fn, n=None):
        ts = []
        out = None
        for _ in range(warm + (n or rounds)):
            _sync(xp)
            t0 = time.perf_counter()
            out = fn()
            _sync(xp)
            ts.append(time.perf_counter() - t0)
        return ts[warm:], ts[:warm], out

    def attempt(case, size, fn, *, bw=False, note="", **extra):
        try:
            ts, w, out = timed(fn)
            em.row(make_row("serialize", case, size, ts, warmup=w, note=note, bw=bw, **extra))
            return out
        except Exception as e:  # noqa: BLE001
            em.row(make_row("serialize", case, size, error=err_text(e)))
            return None

    for size in spec["sizes"]:
        x = xp.full(size // 8, 1.0)
        _sync(xp)
        xptr = _ptr(x)
        try:
            header, frames = serialize(x, serializers=fam)
            zero = bool(frames) and _ptr(frames[0]) == xptr
            attempt(
                f"serialize ({header.get('serializer')})",
                size,
                lambda: serialize(x, serializers=fam),
                note=f"{len(frames)} frame(s); zero_copy={zero}",
                frames=len(frames),
                zero_copy=zero,
            )
        except Exception as e:  # noqa: BLE001
            em.row(make_row("serialize", "serialize", size, error=err_text(e)))
        msg = {"status": "OK", "data": {"block": Serialize(x)}}
        frames = attempt("dumps get_data reply", size, lambda: dumps(msg, serializers=fam))
        if frames is not None:
            sizes = [getattr(f, "nbytes", None) or len(f) for f in frames]
            dev = sum(1 for f in frames if hasattr(f, "__cuda_array_interface__"))
            em.data["rows"][-1].update(
                frames=len(frames),
                device_frames=dev,
                frame_bytes=sizes[:20],
                zero_copy=any(_ptr(f) == xptr for f in frames),
                note=f"{len(frames)} frame(s), {dev} on the device; largest {fmt_size(max(sizes))}",
            )
            em.save()
            back = attempt(
                "loads (deserialize) get_data reply", size, lambda: loads(frames, deserializers=fam)
            )
            if back is not None:
                y = back["data"]["block"]
                same = any(_ptr(f) == _ptr(y) for f in frames)
                em.data["rows"][-1].update(
                    zero_copy=same,
                    result_type=type(y).__name__,
                    note=f"result {type(y).__name__}; zero_copy={same}",
                )
                em.save()
        if gpu:
            attempt(
                "dask serializer (host copy: the tcp path)",
                size,
                lambda: serialize(x, serializers=("dask",)),
                bw=True,
                note="device -> host copy of the block",
            )
        attempt(
            "serialize + deserialize round trip",
            size,
            lambda: deserialize(*serialize(x, serializers=fam), deserializers=fam),
            note="in one process, no comm",
        )
        msg = frames = back = None
        if gpu:
            try:
                import rmm
            except ImportError as e:
                rmm = None
                em.row(make_row("serialize", "rmm.DeviceBuffer alloc", size, error=err_text(e)))
            if rmm is not None:
                attempt(
                    "rmm.DeviceBuffer alloc+free, default resource (receiver, no pool)",
                    size,
                    lambda: rmm.DeviceBuffer(size=size),
                    note="distributed-ucxx's device_array without a pool: cudaMalloc + cudaFree",
                )
            attempt("cupy.empty alloc+free (CuPy pool)", size, lambda: xp.empty(size, dtype=xp.uint8))
            rt = xp.cuda.runtime

            def raw():
                p = rt.malloc(size)
                rt.free(p)

            attempt("cudaMalloc + cudaFree", size, raw)
        x = None  # free the block before the next size
    if gpu:
        xp.get_default_memory_pool().free_all_blocks()
        attempt(
            "deviceSynchronize, idle",
            None,
            lambda: None,
            note="what each synchronize costs when nothing runs",
        )
        try:
            import rmm

            biggest = max(spec["sizes"])
            pool = ((2 * biggest + 256 * MiB) // 256) * 256
            rmm.reinitialize(pool_allocator=True, initial_pool_size=pool)
            for size in spec["sizes"]:
                attempt(
                    "rmm.DeviceBuffer alloc+free, RMM pool",
                    size,
                    lambda: rmm.DeviceBuffer(size=size),
                    note=f"pool of {fmt_size(pool) or pool}",
                )
        except Exception as e:  # noqa: BLE001
            em.row(make_row("serialize", "rmm.DeviceBuffer alloc+free, RMM pool", None, error=err_text(e)))


CHILDREN = {"wire": child_wire, "ucxx": child_ucxx, "dask": child_dask, "serialize": child_serialize}


def child_main(kind: str, spec_text: str, result: str) -> int:
    em = Emitter(result)
    em.save()
    try:
        CHILDREN[kind](json.loads(spec_text), em)
        em.data["complete"] = True
    except BaseException as e:  # noqa: BLE001 - recorded; the parent reads the file
        em.data["error"] = err_text(traceback.format_exc(), 2000)
        print(em.data["error"], file=sys.stderr)
        em.save()
        return 0 if isinstance(e, KeyboardInterrupt) else 1
    em.save()
    return 0


# --------------------------------------------------------------------------------------- UCX tools
def ucx_tool(name: str) -> tuple[str | None, dict, str]:
    """(path, environment, why not) of a UCX binary from the libucx wheel, else from PATH."""
    import importlib.util

    env = dict(os.environ)
    try:
        spec = importlib.util.find_spec("libucx")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        base = pathlib.Path(list(spec.submodule_search_locations)[0])
        exe = base / "bin" / name
        if exe.exists():
            libs = [str(base / "lib")] + [str(p) for p in base.parent.glob("libucx*.libs")]
            env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(
                os.pathsep
            )
            path = str(exe)
            if not os.access(path, os.X_OK):
                copy = pathlib.Path(tempfile.gettempdir()) / f"p2p-{name}"
                shutil.copy(path, copy)
                copy.chmod(0o755)
                path = str(copy)
            return path, env, ""
    found = shutil.which(name)
    return (found, env, "") if found else (None, env, f"{name}: not in the libucx wheel nor on PATH")


def run_tool(cmd: list[str], env: dict, timeout: float) -> tuple[int | None, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, errors="replace")
        return p.returncode, (p.stdout or "") + (p.stderr or "")
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out + f"\n[timed out after {timeout:.0f} s]"
    except OSError as e:
        return None, err_text(e)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def perftest(
    label: str,
    test: str,
    size: int,
    env_extra: dict,
    timeout: float,
    iters: int,
    mem: str = "cuda",
    flags: tuple = (),
) -> tuple[dict, str]:
    """One ucx_perftest client/server pair: server on GPU 1, client on GPU 0 (both see both)."""
    exe, env, why = ucx_tool("ucx_perftest")
    case = f"ucx_perftest {test} ({label})"
    if exe is None:
        return make_row("ucxx", case, size, error=why), ""
    env = {**env, **env_extra}
    port = free_port()
    server = None
    output = ""
    cmd: list[str] = []
    try:
        server = subprocess.Popen(
            [exe, "-p", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**env, "CUDA_VISIBLE_DEVICES": "1,0"},
            start_new_session=True,
            errors="replace",
        )
        time.sleep(1.5)
        cmd = [
            exe,
            "127.0.0.1",
            "-p",
            str(port),
            "-t",
            test,
            "-m",
            mem,
            "-s",
            str(size),
            "-n",
            str(iters),
            "-w",
            str(max(2, iters // 4)),
            *flags,
        ]
        rc, output = run_tool(cmd, {**env, "CUDA_VISIBLE_DEVICES": "0,1"}, timeout)
        if rc != 0 and "connect" in output.lower():
            time.sleep(2)
            rc, output = run_tool(cmd, {**env, "CUDA_VISIBLE_DEVICES": "0,1"}, timeout)
    finally:
        if server is not None:
            try:
                s_out, _ = server.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(server.pid, signal.SIGKILL)
                s_out, _ = server.communicate()
            output += "\n[server]\n" + (s_out or "")[-1500:]
    final = None
    for line in output.splitlines():
        if line.strip().startswith("Final:"):
            with contextlib.suppress(ValueError):
                final = [float(x) for x in line.split(":", 1)[1].split()]
            break
    if not final or len(final) < 6:
        return make_row(
            "ucxx",
            case,
            size,
            error="no 'Final:' line: " + err_text(output[-500:]),
            env=env_extra,
            cmd=" ".join(cmd),
        ), output
    # columns: iterations, latency 50%ile / average / overall (usec), bandwidth average / overall
    # (MB/s: perftest's MB is 2^20 bytes), message rate average / overall
    if test.endswith("_lat"):
        t = final[1] * 1e-6
        row = make_row(
            "ucxx",
            case,
            size,
            [t],
            note="one-way latency (perftest's half round trip, 50th "
            f"percentile) of {int(final[0])} ping-pongs",
            env=env_extra,
        )
    else:
        bw = final[5] / 1024.0
        row = make_row(
            "ucxx",
            case,
            size,
            [size / (bw * GiB)] if bw > 0 else [],
            note=f"streaming tag_bw, window of outstanding sends; {final[5]:.0f} MB/s overall over "
            f"{int(final[0])} iterations",
            env=env_extra,
        )
    row["perftest_final"] = final
    return row, output


# --------------------------------------------------------------------------------------- parent
class Study:
    def __init__(self, a, ngpus: int, device: str):
        self.a = a
        self.t0 = time.perf_counter()
        self.rows: list[dict] = []
        self.info: dict = {}
        self.skipped: list[str] = []
        self.cases: list[dict] = []
        self.device = device
        self.ngpus = ngpus
        self.section_end: float | None = None
        self.xp = "numpy" if a.smoke else "cupy"
        self.mem = "host" if a.smoke else "cuda"  # ucx_perftest's memory type
        self.versions = {}
        with contextlib.suppress(Exception):
            from gpuscale import machine

            self.versions = machine.versions()

    def left(self) -> float:
        return self.a.budget - (time.perf_counter() - self.t0)

    def timeout(self, want: float, need: float = 10.0) -> float | None:
        """``want`` seconds, cut to the budget left (the run's and the section's); None when
        less than ``need`` remain."""
        left = self.left() - 5
        if self.section_end is not None:
            left = min(left, self.section_end - time.perf_counter())
        return None if left < need else min(want, left)

    def save(self, complete: bool = False) -> None:
        if not self.a.out:
            return
        data = {
            "device": self.device,
            "gpus": self.ngpus,
            "versions": self.versions,
            "args": {k: v for k, v in vars(self.a).items() if not k.startswith("_")},
            "elapsed_s": time.perf_counter() - self.t0,
            "complete": complete,
            "wire_reference_GiBps": wire_reference(self.rows),
            "targets": targets(self.rows),
            "rows": self.rows,
            "cases": self.cases,
            "info": self.info,
            "skipped": self.skipped,
        }
        path = pathlib.Path(self.a.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".part")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(path)

    def add(self, rows: list[dict]) -> None:
        annotate(rows, self.rows)
        self.rows.extend(rows)
        for r in rows:
            what = (
                f"median {r['median_s']:.5f} s" + (f", {r['GiBps']:.1f} GiB/s" if r.get("GiBps") else "")
                if r.get("median_s") is not None
                else ""
            )
            print(
                f"[p2p] {r['section']:9} {r['case'][:70]:70} {fmt_size(r['size_bytes']):>8} {what}"
                + (f"  ERROR {r['error'][:140]}" if r.get("error") else ""),
                file=sys.stderr,
                flush=True,
            )
        self.save()

    def child(
        self, kind: str, label: str, spec: dict, want: float, env: dict | None = None, need: float = 15.0
    ) -> tuple[dict, str] | None:
        t = self.timeout(want, need)
        if t is None:
            self.skipped.append(
                f"{kind} / {label}: time budget spent (run {self.a.budget:.0f} s, or the section's share)"
            )
            self.save()
            return None
        t_case = time.perf_counter()
        result, output, error = run_child(kind, {**spec, "label": label}, t, env)
        rows = list(result.get("rows", []))
        why = "; ".join(x for x in (error, result.get("error")) if x)
        if why and not result.get("complete"):
            # the rows measured before the failure stand; the failure is a row of its own
            rows.append(
                make_row(kind, f"{label} (case failed)" if rows else label, None, error=err_text(why, 1500))
            )
        self.cases.append(
            {
                "section": kind,
                "case": label,
                "env": env or {},
                "spec": spec,
                "wall_s": time.perf_counter() - t_case,
                "extra": result.get("extra", {}),
                "error": why or None,
                "output_tail": output[-1500:] if why else "",
            }
        )
        self.add(rows)
        return result, output


def wire_reference(rows: list[dict]) -> dict:
    ref = {}
    for r in rows:
        if (
            r["section"] == "wire"
            and r["case"] == "memcpyPeer 0->1, peer access"
            and r.get("GiBps")
            and not r.get("error")
        ):
            ref[str(r["size_bytes"])] = r["GiBps"]
    return ref


def annotate(new: list[dict], old: list[dict]) -> None:
    """pct_of_wire (this run's wire, else the reference 1 GiB figure), and for dask / ucxx rows the
    time net of the same case's 8-byte time (``net_s``, ``net_GiBps``)."""
    ref = wire_reference(old + new)
    for r in new:
        if r.get("GiBps") and r["section"] in ("wire", "ucxx", "dask"):
            w = ref.get(str(r["size_bytes"]))
            if w is None and r["size_bytes"] == GiB:
                w = REFERENCE_WIRE_GiBps
                r["wire_from"] = "reference (367 GiB/s)"
            if w:
                r["pct_of_wire"] = 100.0 * r["GiBps"] / w
    tiny = {
        (r["section"], r["case"]): r["median_s"]
        for r in old + new
        if r["section"] in ("dask", "ucxx") and r["size_bytes"] == TINY and r.get("median_s")
    }
    for r in new:
        base = tiny.get((r["section"], r["case"]))
        if r["size_bytes"] not in (None, TINY) and r.get("median_s") and base:
            net = r["median_s"] - base
            r["net_s"] = net
            r["net_GiBps"] = r["size_bytes"] / net / GiB if net > 0 else None


def targets(rows: list[dict]) -> list[dict]:
    """The p2p targets on each UCX case of the dask section, submit to result (1 GiB >= 180
    GiB/s, 64 MiB >= 50 % of the wire), and beside them the same share of the wire for the
    transfer alone (the receiving worker's own time), where this run measured the wire."""
    out = []
    wire = wire_reference(rows)
    for r in rows:
        if r["section"] != "dask" or "ucx" not in r["case"] or r.get("error") or not r.get("GiBps"):
            continue
        ref, took = wire.get(str(r["size_bytes"])), r.get("worker_in_median_s")
        if ref and took and r["size_bytes"] in (64 * MiB, GiB):
            pct = r["size_bytes"] / took / GiB / ref * 100
            out.append(
                {
                    "target": f"{r['case']}: {fmt_size(r['size_bytes'])}, the transfer alone >= 50% of wire",
                    "value": pct,
                    "ok": pct >= 50,
                }
            )
        if r["size_bytes"] == GiB:
            out.append(
                {
                    "target": f"{r['case']}: 1 GiB p2p >= 180 GiB/s",
                    "value": r["GiBps"],
                    "ok": r["GiBps"] >= 180,
                }
            )
        if r["size_bytes"] == 64 * MiB and r.get("pct_of_wire") is not None:
            out.append(
                {
                    "target": f"{r['case']}: 64 MiB >= 50% of wire",
                    "value": r["pct_of_wire"],
                    "ok": r["pct_of_wire"] >= 50,
                }
            )
    return out


def section_wire(st: Study) -> None:
    st.child("wire", "wire", {"sizes": st.a.sizes, "rounds": st.a.rounds}, 90)


def _ucxx_spec(
    st: Study, label: str, options: dict, modes=("prepost", "dask_like"), rounds=None, sizes=None
) -> dict:
    gpu = st.xp == "cupy"
    return {
        "xp": st.xp,
        "sizes": sizes or [TINY] + st.a.sizes,
        "rounds": rounds or st.a.rounds,
        "warmup": 2,
        "modes": list(modes),
        "progress_mode": options.get("progress_mode", "blocking"),
        "devices": options.get("devices", {"send": "0,1", "recv": "1,0"}) if gpu else {},
        "rmm_pool": options.get("rmm_pool"),
        "info": options.get("info", False),
        "options": options,
        "error_handling": options.get("error_handling", True),
    }


def section_ucxx(st: Study) -> None:
    cases = [c for c in UCXX_CASES if not st.a.quick or c[0] in UCXX_QUICK]
    # UCX without Python between the same two GPUs (after the default case: both are cheap)
    # -e: endpoints with error handling, as ucxx / distributed-ucxx always create them (UCX then
    # uses only transports and protocols that support it)
    ucxx_env, big = dict(UCXX_DEFAULTS), max(st.a.sizes)
    plan = [
        ("ucxx's settings, error handling (-e)", ucxx_env, size, "tag_lat", 10, ("-e",))
        for size in st.a.sizes
    ]
    plan += [("ucxx's settings", ucxx_env, size, "tag_lat", 10, ()) for size in st.a.sizes]
    plan += [("UCX defaults", {}, big, "tag_lat", 10, ()), ("UCX defaults", {}, big, "tag_bw", 20, ())]
    if st.a.quick:
        plan = [p for p in plan if p[2] == big][:2]
    for i, (label, env, options) in enumerate(cases):
        st.child(
            "ucxx", f"ucxx {label}", {**_ucxx_spec(st, label, options), "env": env}, 60, env=env, need=20
        )
        if i == 0:
            for cfg_label, penv, size, test, iters, flags in plan:
                t = st.timeout(20, 8)
                if t is None:
                    st.skipped.append(f"ucx_perftest {test} {cfg_label} {fmt_size(size)}: time budget spent")
                    continue
                try:
                    row, _ = perftest(cfg_label, test, size, penv, t, iters, flags=flags, mem=st.mem)
                except Exception as e:  # noqa: BLE001
                    row = make_row("ucxx", f"ucx_perftest {test} ({cfg_label})", size, error=err_text(e))
                st.add([row])


def best_ucxx_env(st: Study) -> tuple[dict, str]:
    """The env-only ucxx case that beat the default's dask_like time at the largest size by 10%."""
    size = max(st.a.sizes)
    med = {}
    for r in st.rows:
        if (
            r["section"] == "ucxx"
            and r["case"].endswith("| dask_like")
            and r["size_bytes"] == size
            and r.get("median_s")
            and not r.get("error")
            and not r.get("options")
        ):
            med[r["case"].split(" | ")[0]] = (r["median_s"], r.get("env", {}))
    base = med.get("ucxx default")
    if not base:
        return {}, "no ucxx default row to compare with"
    best = min(((m, env, c) for c, (m, env) in med.items() if env), default=None, key=lambda x: x[0])
    if best is None or best[0] > 0.9 * base[0]:
        return {}, "no UCX setting beat the default by 10% in the ucxx section"
    return best[1], f"{best[2]}: {best[0] * 1e3:.2f} ms vs default {base[0] * 1e3:.2f} ms at {fmt_size(size)}"


def wait_gpus_free(st: Study, limit: float = 20.0) -> None:
    """Wait (up to ``limit`` s) until the GPUs' memory is free again after a cluster exits."""
    try:
        from gpuscale import machine
    except Exception:  # noqa: BLE001
        return
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        gpus = machine.gpus()
        if not gpus or all(g.get("free_bytes", 0) >= 0.85 * g["memory_bytes"] for g in gpus[:2]):
            return
        time.sleep(1.0)
    st.skipped.append("GPU memory was still held 20 s after a cluster exited (next case may fail)")


def section_dask(st: Study) -> None:
    if st.a.smoke:
        cases = DASK_SMOKE
    else:
        cases = [c for c in DASK_CASES if not st.a.quick or c[0] in DASK_QUICK]
    xp = st.xp
    for label, cluster, env in cases:
        env = dict(env)
        if cluster.get("best_ucxx"):
            best, why = best_ucxx_env(st)
            st.info.setdefault("best_ucxx_env", {"env": best, "why": why})
            if not best:
                st.skipped.append(f"dask / {label}: {why}")
                st.save()
                continue
            env.update(best)
            label = f"{label} ({', '.join(f'{k}={v}' for k, v in best.items())})"
        if not st.a.smoke:
            wait_gpus_free(st)
        spec = {
            "xp": xp,
            "sizes": st.a.sizes,
            "rounds": st.a.rounds,
            **{k: v for k, v in cluster.items() if k != "best_ucxx"},
        }
        st.child("dask", label, spec, 120 if cluster["protocol"] == "tcp" else 90, env=env, need=40)


def section_serialize(st: Study) -> None:
    xp = st.xp
    st.child(
        "serialize",
        f"serialize ({xp})",
        {"xp": xp, "sizes": st.a.sizes, "rounds": st.a.rounds},
        60,
        env=None if st.a.smoke else {"CUDA_VISIBLE_DEVICES": "0"},
    )


def section_info(st: Study) -> None:
    info = st.info
    exe, env, why = ucx_tool("ucx_info")
    if exe is None:
        info["ucx_info"] = why
    else:
        for flag in ("-v", "-d", "-c"):
            t = st.timeout(20, 5)
            if t is None:
                break
            rc, out = run_tool([exe, flag], env, t)
            if flag == "-d":
                keep = [
                    ln
                    for ln in out.splitlines()
                    if re.search(
                        r"Transport:|Device:|Memory domain:|Component:|bandwidth|latency|"
                        r"System device|max_zcopy|reg_cost|Type:",
                        ln,
                    )
                ]
                out = "\n".join(keep)
            elif flag == "-c":
                keep = [
                    ln
                    for ln in out.splitlines()
                    if any(ln.startswith(f"UCX_{k}=") for k in UCX_CONFIG_KEYS) or "CUDA_IPC" in ln
                ]
                out = "\n".join(keep)
            info[f"ucx_info {flag}"] = {"rc": rc, "output": out[:12000]}
    smi = shutil.which("nvidia-smi")
    if smi and st.timeout(15, 5):
        rc, out = run_tool([smi, "topo", "-m"], dict(os.environ), 15)
        info["nvidia-smi topo -m"] = {"rc": rc, "output": out[:4000]}
    st.save()
    # the protocols UCX chose, printed by UCX itself, on one ucxx transfer and one ucx_perftest run
    spec = _ucxx_spec(
        st, "proto info", {"info": True}, modes=("prepost",), rounds=1, sizes=sorted({TINY, *st.a.sizes})
    )
    res = st.child(
        "ucxx",
        "ucxx UCX_PROTO_INFO=y",
        {**spec, "env": {"UCX_PROTO_INFO": "y"}},
        60,
        env={"UCX_PROTO_INFO": "y"},
        need=20,
    )
    if res is not None:
        result, output = res
        info["ucxx_peer_info"] = result.get("extra", {}).get("peer_info")
        info["proto_info"] = proto_tables(output)
    if exe is not None and st.timeout(30, 12):
        size = max(st.a.sizes)
        try:
            row, output = perftest(
                "ucxx's settings, error handling (-e), UCX_PROTO_INFO=y",
                "tag_lat",
                size,
                {**UCXX_DEFAULTS, "UCX_PROTO_INFO": "y"},
                st.timeout(30, 12) or 12,
                5,
                flags=("-e",),
                mem=st.mem,
            )
            st.add([row])
            info["proto_info_perftest"] = proto_tables(output)
        except Exception as e:  # noqa: BLE001
            info["proto_info_perftest"] = err_text(e)
    st.save()


def proto_tables(output: str, limit: int = 12000) -> str:
    """UCX's protocol tables (UCX_PROTO_INFO=y) from a run's output, deduplicated: those for GPU
    memory first (their titles name cuda), then the tagged-message ones, up to ``limit``."""
    prefix = re.compile(r"^\[[^\]]*\]\s*\[[^\]]*\]\s*")
    tables, cur = [], None
    for raw in output.splitlines():
        ln = prefix.sub("", raw).rstrip()
        if not ln.lstrip().startswith(("|", "+")):
            if cur:
                tables.append(cur)
            cur = None
        elif "cfg#" in ln:
            if cur:
                tables.append(cur)
            cur = [ln]
        elif cur is not None:
            cur.append(ln)
    if cur:
        tables.append(cur)
    seen, gpu, tag = set(), [], []
    for t in tables:
        key = re.sub(r"cfg#\d+", "cfg#", "\n".join(t))
        if key in seen:
            continue
        seen.add(key)
        if re.search(r"cuda|GPU", t[0]):
            gpu.append(t)
        elif "tag" in t[0]:
            tag.append(t)
    text = "\n\n".join("\n".join(t) for t in gpu + tag)
    if not text:
        text = "no UCX protocol table found; output tail:\n" + output[-2000:]
    return text[:limit] + ("\n[... cut]" if len(text) > limit else "")


def print_table(st: Study) -> None:
    cols = ("section", "case", "size", "median s", "min s", "GiB/s", "% wire", "net GiB/s", "note / error")
    lines = []
    for r in st.rows:
        lines.append(
            (
                r["section"],
                r["case"],
                fmt_size(r["size_bytes"]),
                f"{r['median_s']:.5f}" if r.get("median_s") is not None else "",
                f"{r['min_s']:.5f}" if r.get("min_s") is not None else "",
                f"{r['GiBps']:.1f}" if r.get("GiBps") else "",
                f"{r['pct_of_wire']:.0f}%" if r.get("pct_of_wire") is not None else "",
                f"{r['net_GiBps']:.1f}" if r.get("net_GiBps") else "",
                ("ERROR " + r["error"].replace("\n", " ")[:100]) if r.get("error") else extra_note(r),
            )
        )
    widths = [min(70, max([len(c)] + [len(x[i]) for x in lines])) for i, c in enumerate(cols[:-1])]
    print(
        f"\np2p study on {st.device}; versions: "
        + ", ".join(
            f"{k} {st.versions.get(k)}"
            for k in ("dask", "distributed", "dask-cuda", "cupy")
            if st.versions.get(k)
        )
    )
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)) + "  " + cols[-1])
    prev = None
    for x in lines:
        if prev is not None and x[0] != prev:
            print()
        prev = x[0]
        print("  ".join(v[:w].ljust(w) for v, w in zip(x, widths)) + "  " + x[-1])
    hopped = [r for r in st.rows if r.get("hops_ms")]
    if hopped:
        names = [name for name, _, _ in HOPS]
        print("\nthe dependent task's round trip hop by hop, median ms (" + " | ".join(names) + "):")
        for r in hopped:
            vals = " | ".join(f"{r['hops_ms'][n]:.2f}" if n in r["hops_ms"] else "-" for n in names)
            print(f"  {r['case'][:50]:50} {fmt_size(r['size_bytes']):>8}  {vals}")
    goals = targets(st.rows)
    if goals:
        print("\ntargets:")
        for g in goals:
            unit = "%" if "wire" in g["target"] else " GiB/s"
            print(f"  {'met ' if g['ok'] else 'NOT '} {g['target']}: {g['value']:.1f}{unit}")
    if st.info.get("best_ucxx_env"):
        print(f"\nbest UCX setting from the ucxx section: {st.info['best_ucxx_env']}")
    for s in st.skipped:
        print(f"skipped: {s}")
    print(
        f"\n{len(st.rows)} rows, {sum(1 for r in st.rows if r.get('error'))} with errors, "
        f"{time.perf_counter() - st.t0:.0f} s" + (f"; JSON: {st.a.out}" if st.a.out else "")
    )


def extra_note(r: dict) -> str:
    bits = []
    if r.get("worker_in_median_s") is not None:
        bits.append(f"w1 transfer {r['worker_in_median_s'] * 1e3:.2f} ms")
    if r.get("worker_out_median_s") is not None:
        bits.append(f"w0 send {r['worker_out_median_s'] * 1e3:.2f} ms")
    if r.get("recv_alloc_median_s") is not None:
        bits.append(f"recv alloc {r['recv_alloc_median_s'] * 1e3:.3f} ms")
    if r.get("zero_copy") is not None:
        bits.append(f"zero_copy={r['zero_copy']}")
    if r.get("note") and not bits:
        bits.append(r["note"])
    return "; ".join(bits)[:140]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", "--json", dest="out", default="p2p-wire.json", help="JSON written after every case"
    )
    ap.add_argument("--sizes", default=None, help="block sizes, e.g. 64MiB,1GiB (smoke: 64KiB,4MiB)")
    ap.add_argument(
        "--rounds", type=int, default=None, help="timed rounds per measurement (default 10; smoke 3)"
    )
    ap.add_argument(
        "--sections",
        default=None,
        help=f"any of {','.join(SECTIONS)} (default: all; smoke: "
        "dask,serialize; ucxx,info also run there on host "
        "memory where ucxx is installed)",
    )
    ap.add_argument("--quick", action="store_true", help="the grid's main cases only, 5 rounds")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="CPU: the dask section over tcp with NumPy blocks and the serialize section (CI)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=330.0,
        help="seconds for the whole run; later cases are skipped once it is spent (default 330)",
    )
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    ap.add_argument("--_spec", help=argparse.SUPPRESS)
    ap.add_argument("--_result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a._child:
        return child_main(a._child, a._spec, a._result)
    a.sizes = [
        parse_size(s) for s in (a.sizes or ("64KiB,4MiB" if a.smoke else "64MiB,1GiB")).split(",") if s
    ]
    a.rounds = a.rounds or (3 if a.smoke else 5 if a.quick else 10)
    a.sections = a.sections or ("dask,serialize" if a.smoke else ",".join(SECTIONS))
    wanted = [s.strip() for s in a.sections.split(",") if s.strip()]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown section(s) {sorted(unknown)}: use {','.join(SECTIONS)}")
    try:
        from gpuscale import machine

        gpus = machine.gpus()
    except Exception:  # noqa: BLE001 - no NVML: no GPUs to use
        gpus = []
    if a.smoke:
        wanted = [s for s in wanted if s != "wire"]  # the rest run on host memory
        device = "CPU (smoke)"
    else:
        if len(gpus) < 2:
            print(f"p2p_wire: needs 2 GPUs, this machine has {len(gpus)} (use --smoke on a CPU)")
            return 2
        nv = gpus[0].get("nvlink_peers")
        device = f"{len(gpus)} x {gpus[0]['name']}" + (
            f" (GPU 0 NVLink peers {nv})" if nv is not None else ""
        )
    st = Study(a, len(gpus), device)
    st.save()
    # each section's share of the budget at most (the dask section, last, gets what is left)
    shares = {"wire": 60, "serialize": 45, "ucxx": 125, "info": 40, "dask": None}
    for name, fn in (
        ("wire", section_wire),
        ("serialize", section_serialize),
        ("ucxx", section_ucxx),
        ("info", section_info),
        ("dask", section_dask),
    ):
        if name not in wanted:
            continue
        share = shares[name] if len(wanted) > 1 else None
        st.section_end = time.perf_counter() + share if share else None
        try:
            fn(st)
        except Exception as e:  # noqa: BLE001 - a section's bug is a row, the study goes on
            st.add(
                [
                    make_row(
                        name,
                        f"{name} section",
                        None,
                        error=err_text(traceback.format_exc(), 1500)
                        if not isinstance(e, KeyboardInterrupt)
                        else "interrupted",
                    )
                ]
            )
    st.save(complete=True)
    print_table(st)
    return 0 if any(r.get("median_s") is not None for r in st.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
