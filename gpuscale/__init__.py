"""gpuscale: the same Dask array / DataFrame work on CPUs or GPUs, by changing one flag."""
from __future__ import annotations

__version__ = "0.1.0"

from . import config  # noqa: E402,F401  (merges gpuscale.yaml into dask.config first)
from .errors import UserError  # noqa: E402


def __getattr__(name):  # lazy: importing gpuscale starts nothing and imports no GPU library
    if name in ("session", "run", "Session"):
        from . import api
        return getattr(api, name)
    if name == "workload":
        from .workloads.decorator import workload
        return workload
    if name in ("linalg", "dataframe", "workloads", "backends", "cluster", "results", "trace"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'gpuscale' has no attribute {name!r}")


__all__ = ["session", "run", "Session", "UserError", "workload", "linalg", "dataframe", "__version__"]
