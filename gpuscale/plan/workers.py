"""What each GPU worker gets beyond its layout and pool, however it is started: the device
memory limit, the way it spills, the UCX transports and the family's worker environment."""

from __future__ import annotations

import dataclasses
from typing import Any

from dask.utils import parse_bytes

from .. import memory
from ..decision import Decision
from .memory import device_limit_choice, device_spill_choice


@dataclasses.dataclass
class WorkerKnobs:
    """What a GPU worker gets beyond its pool: ``options`` (keyword arguments of the worker
    class), ``environ`` (set in each worker process) and ``choices`` (why)."""

    options: dict[str, Any]
    environ: dict[str, str]
    choices: dict[str, Decision]
    transports: dict[str, bool]
    """The UCX switches among ``options`` (``enable_nvlink``...), for the transports choice."""

    @property
    def dask_config(self) -> dict[str, str]:
        return {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in self.environ.items()}


def worker_knobs(resolved, family, collection, proto, gpu_bytes: list[int]) -> WorkerKnobs:
    """The :class:`WorkerKnobs` of every kind that starts GPU workers (``gpu_bytes``: the memory
    of the workers' GPUs when known here, else [])."""
    c = resolved.settings.cluster
    transports = {k: v for k, v in proto.transport_kwargs(c.ucx).items() if k.startswith("enable_")}
    options: dict[str, Any] = dict(transports)
    dml = c.device_memory_limit
    if not (isinstance(dml, str) and dml.strip().lower() == "default"):
        options["device_memory_limit"] = dml
    spill = device_spill_choice(resolved, family, collection, gpu_bytes)
    environ = dict(family.knobs.worker_environ.get(proto.name, {}))
    env_rule = (
        ", ".join(f"{k}={v}" for k, v in environ.items())
        + f" in each worker process before it starts (measured: backends/{family.name}.py)"
        if environ
        else "nothing set"
    )
    if spill.value == "cudf":
        options["enable_cudf_spill"] = True
        options["cudf_spill_stats"] = 1
        # from the first cuDF buffer: turned on later (dask-cuda's plugin), cuDF makes no manager
        environ["CUDF_SPILL"] = "on"
        limit_bytes = _device_limit_bytes(dml, gpu_bytes)
        if limit_bytes:
            environ["CUDF_SPILL_DEVICE_LIMIT"] = str(limit_bytes)
    return WorkerKnobs(
        options,
        environ,
        {
            "device_memory_limit": device_limit_choice(resolved, gpu_bytes),
            "device_spill": spill,
            "worker_environ": Decision(
                {k: v for k, v in environ.items() if k in family.knobs.worker_environ.get(proto.name, {})},
                "family",
                f"{family.name} family over {proto.name}: {env_rule}",
                "worker-environ.family",
            ),
        },
        transports,
    )


def _device_limit_bytes(setting, gpu_bytes: list[int]) -> int | None:
    """The device memory limit in bytes, where a size is given or the GPUs' memory is known here."""
    if isinstance(setting, str) and setting.strip().lower() not in ("default", "auto"):
        try:
            value = parse_bytes(setting)
        except ValueError:
            value = None
        if value is not None and value > 1:
            return int(value)
    elif isinstance(setting, int) and setting > 1:
        return setting
    smallest = min(gpu_bytes) if gpu_bytes else None
    f = memory.device_spill_fraction(setting, smallest)
    return int(f * smallest) if f is not None and smallest else None
