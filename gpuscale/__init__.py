"""gpuscale: the same Dask array / DataFrame work on CPUs or GPUs, by changing one flag.

The folders follow the data: ``config`` -> ``backends/`` -> ``cluster/`` -> ``workloads/`` ->
``routes/`` -> ``runs/`` -> ``records/``; ``data/`` reads inputs and writes outputs, ``audit``
and ``trace/`` watch any of it.
"""

from __future__ import annotations

try:
    from . import config  # noqa: F401  (merges the defaults into dask.config first)
except ValueError:
    # Dask could not read one of the user's config files: Dask raises it again where gpuscale
    # first uses Dask, and the command line says it in one line (gpuscale._entry)
    pass
from ._version import __version__
from .errors import UserError  # noqa: E402

_LAZY = {
    "session": "gpuscale.api",
    "run": "gpuscale.api",
    "Session": "gpuscale.api",
    "explain": "gpuscale.api",
    "workload": "gpuscale.workloads.decorator",
}
"""Top-level names, from the module that holds them, imported on first use."""
_MODULES = ("linalg", "dataframe", "workloads", "backends", "cluster", "results", "report", "trace", "audit")
"""Modules reachable as ``gpuscale.NAME``, imported on first use."""


def __getattr__(name):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _MODULES:
        return importlib.import_module(f"gpuscale.{name}")
    raise AttributeError(f"module 'gpuscale' has no attribute {name!r}")


__all__ = [
    "session",
    "run",
    "Session",
    "explain",
    "UserError",
    "workload",
    "linalg",
    "dataframe",
    "__version__",
]
