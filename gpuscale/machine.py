"""What this machine is: CPU, memory, GPUs and their NVLink topology, InfiniBand ports,
library versions. GPU facts come from NVML (no CUDA context).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import platform

import psutil

from . import _dask_compat
from ._version import __version__

# optional stacks: import name -> distribution names to look for (first found wins)
STACKS: dict[str, tuple[str, ...]] = {
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "cudf": ("cudf-cu13", "cudf-cu12", "cudf"),
    "dask_cudf": ("dask-cudf-cu13", "dask-cudf-cu12", "dask-cudf"),
    "dask_cuda": ("dask-cuda",),
    "distributed_ucxx": ("distributed-ucxx-cu13", "distributed-ucxx-cu12", "distributed-ucxx"),
    "ucxx": ("ucxx-cu13", "ucxx-cu12", "ucxx"),
    "libucx": ("libucx-cu13", "libucx-cu12"),  # the UCX library itself (1.22 lets go of sent pools)
    "rmm": ("rmm-cu13", "rmm-cu12", "rmm"),
    "pynvml": ("nvidia-ml-py", "pynvml"),
    "numba": ("numba",),
}
CORE = ("dask", "distributed", "numpy", "pandas", "pyarrow")


def _dist_version(names: tuple[str, ...]) -> str | None:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def distribution(module: str) -> str:
    """The installed distribution that provides ``module`` (``cupy`` -> ``cupy-cuda13x``): the
    names :data:`STACKS` lists and the module's own name first, then every installed
    distribution's file list (slow); the module's own name when none provides it."""
    top = module.partition(".")[0]
    for name in (*STACKS.get(top, ()), top, top.replace("_", "-")):
        if _dist_version((name,)) is not None:
            return name
    names = _providers().get(top) or []
    return names[0] if names else top


@functools.cache
def _providers() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions providing it (scanned once)."""
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:  # noqa: BLE001 - broken metadata: ask by module name
        return {}


def stacks() -> dict[str, dict]:
    """Which optional stacks are importable here, with versions (nothing is imported)."""
    out = {}
    for module, dists in STACKS.items():
        found = importlib.util.find_spec(module) is not None
        out[module] = {"importable": found, "version": _dist_version(dists) if found else None}
    return out


@functools.lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str | None], ...]:
    v = _dask_compat.local_versions()
    for name in CORE:
        v.setdefault(name, _dist_version((name,)))
    for module, info in stacks().items():
        v[module.replace("_", "-")] = info["version"]
    v["gpuscale"] = __version__
    return tuple(v.items())


def versions() -> dict[str, str | None]:
    """Versions of the stack this process runs (read once per process)."""
    return dict(_versions())


def cpu() -> dict:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return {
        "model": model,
        "cores": os.cpu_count() or 1,
        "usable_cores": usable,
        "memory_bytes": int(psutil.virtual_memory().total),
        "platform": platform.platform(),
    }


def usable_cores() -> int:
    return cpu()["usable_cores"]


@functools.lru_cache(maxsize=1)
def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _visible(index: int, uuid: str) -> bool:
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return True
    items = [p.strip() for p in cvd.split(",") if p.strip()]
    return str(index) in items or any(uuid.startswith(p) for p in items if p.startswith("GPU-"))


def gpus() -> list[dict]:
    """Visible GPUs: index, name, memory, UUID and the indices of NVLink peers."""
    nv = _nvml()
    if nv is None:
        return []
    try:
        count = nv.nvmlDeviceGetCount()
    except Exception:
        return []
    handles, out = [], []
    for i in range(count):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        uuid = nv.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        if not _visible(i, uuid):
            continue
        name = nv.nvmlDeviceGetName(h)
        handles.append((i, h))
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        out.append(
            {
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_bytes": int(mem.total),
                "free_bytes": int(mem.free),
                "uuid": uuid,
                "nvlink_peers": [],
            }
        )
    for a, (i, hi) in zip(out, handles):
        for j, hj in handles:
            if i == j:
                continue
            try:
                status = nv.nvmlDeviceGetP2PStatus(hi, hj, nv.NVML_P2P_CAPS_INDEX_NVLINK)
            except Exception:
                continue
            if status == nv.NVML_P2P_STATUS_OK:
                a["nvlink_peers"].append(j)
    return out


def holders(index: int) -> list[tuple[int, int]]:
    """``(pid, bytes)`` of the processes holding memory on GPU ``index``; [] where NVML cannot tell."""
    nv = _nvml()
    if nv is None:
        return []
    try:
        procs = nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return []
    return [(int(p.pid), int(p.usedGpuMemory or 0)) for p in procs]


def nvlink_connected(indices: list[int] | None = None) -> bool:
    """True when every pair of the given GPUs (default: all visible) is NVLink-connected."""
    gs = {g["index"]: g for g in gpus()}
    idx = list(indices) if indices is not None else list(gs)
    if len(idx) < 2:
        return False
    return all(j in gs.get(i, {}).get("nvlink_peers", []) for i in idx for j in idx if i != j)


IB_ROOT = "/sys/class/infiniband"
"""Where Linux lists RDMA devices (InfiniBand, and RoCE: the same device on Ethernet)."""


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def infiniband(root: str = IB_ROOT) -> list[dict]:
    """The RDMA ports this host has, read from sysfs: per port its device, port number,
    ``state``, ``phys_state``, ``rate`` as the kernel words it, ``rate_gbps`` and
    ``link_layer`` (``InfiniBand``, or ``Ethernet`` for RoCE). [] when there are none."""
    out = []
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return out
    for dev in devices:
        ports_dir = os.path.join(root, dev, "ports")
        try:
            ports = sorted(os.listdir(ports_dir), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            continue
        for port in ports:
            base = os.path.join(ports_dir, port)
            state = _read(os.path.join(base, "state")) or ""
            phys = _read(os.path.join(base, "phys_state")) or ""
            rate = _read(os.path.join(base, "rate"))
            number = None
            if rate:
                with contextlib.suppress(ValueError, IndexError):
                    number = float(rate.split()[0])
            out.append(
                {
                    "device": dev,
                    "port": int(port) if port.isdigit() else port,
                    # "4: ACTIVE" / "5: LinkUp": the word after the code
                    "state": state.split(":", 1)[-1].strip() or None,
                    "phys_state": phys.split(":", 1)[-1].strip() or None,
                    "rate": rate,
                    "rate_gbps": number,
                    "link_layer": _read(os.path.join(base, "link_layer")),
                }
            )
    return out


def hardware() -> dict:
    return {"cpu": cpu(), "gpus": gpus()}


def _no_plots(state: str, devices: int | None, message: str) -> dict:
    return {"available": False, "state": state, "devices": devices, "message": message}


def gpu_dashboard() -> dict:
    """Whether GPU workers here can feed the dashboard's GPU plots: ``{"available", "state",
    "devices", "message"}``, the message naming the fix."""
    import dask.config

    if not dask.config.get("distributed.diagnostics.nvml", True):
        return _no_plots(
            "disabled-by-config",
            None,
            "no GPU plots: dask config distributed.diagnostics.nvml is false; set it to true "
            "(DASK_DISTRIBUTED__DIAGNOSTICS__NVML=True) for GPU plots",
        )
    if importlib.util.find_spec("pynvml") is None:
        return _no_plots(
            "pynvml-missing",
            None,
            "no GPU plots: pynvml is not installed, so no GPU can be seen here "
            "(on a GPU machine: pip install nvidia-ml-py, part of gpuscale[gpu])",
        )
    try:
        count, state, wsl_minimum = _dask_compat.nvml_status()
    except Exception as e:  # noqa: BLE001 - any NVML failure means no plots
        return _no_plots("error", None, f"no GPU plots: NVML failed ({type(e).__name__}: {e})")
    if state == "disabled-by-config":  # the config changed after NVML was first asked
        return _no_plots(
            "disabled-by-config",
            None,
            "no GPU plots: dask config distributed.diagnostics.nvml was false when NVML was "
            "first used in this process; set it to true for GPU plots",
        )
    if state == "no-nvml-library":
        return _no_plots(
            "no-nvml-library",
            0,
            "no GPU plots, no GPU: pynvml is installed but the NVIDIA driver's NVML library was "
            "not found (no NVIDIA driver here)",
        )
    if state == "wsl-driver":
        return _no_plots(
            "wsl-driver",
            None,
            f"no GPU plots: the WSL NVIDIA driver is older than {wsl_minimum}; update the Windows driver",
        )
    if not count:
        return _no_plots(
            "no-device",
            0,
            "no GPU plots, no GPU: NVML sees no device (check CUDA_VISIBLE_DEVICES and nvidia-smi)",
        )
    return {
        "available": True,
        "state": "on",
        "devices": int(count),
        "message": f"GPU plots on: {count} GPU(s) through distributed.diagnostics.nvml (dashboard pages "
        "/individual-gpu-memory, /individual-gpu-utilization)",
    }
