"""gpuscale: the same Dask array / DataFrame work on CPUs or GPUs, by changing one flag.

The folders follow the data: ``config`` (settings and where each came from) ->
``backends/`` (families: chunk libraries, knobs, conversions) -> ``cluster/`` (the spec and the
choices behind it, then the start) -> ``workloads/`` (describe the work) -> ``routes/`` (compute:
plain functions on your collections) -> ``runs/`` (sessions, the runner, a runner in a running
cluster, clusters kept up) -> ``records/`` (results, what was explained, tables); ``data/``
reads your inputs and writes outputs, ``audit`` and ``trace/`` watch any of it.
"""

from __future__ import annotations

from . import config  # noqa: E402,F401  (merges the settings' defaults into dask.config first)
from ._version import __version__
from .errors import UserError, install_excepthook  # noqa: E402

install_excepthook()  # an uncaught UserError in a script is one line, as on the command line

_LAZY = {
    "session": "gpuscale.api",
    "run": "gpuscale.api",
    "Session": "gpuscale.api",
    "explain": "gpuscale.api",
    "workload": "gpuscale.workloads.decorator",
}
"""Top-level names, from the module that holds them (imported on first use: importing gpuscale
starts nothing and imports no GPU library)."""
_MODULES = ("linalg", "dataframe", "workloads", "backends", "cluster", "results", "report", "trace", "audit")
"""Modules reachable as ``gpuscale.NAME`` (``gpuscale.linalg.svd(x)``), imported on first use; each
is a module of its own too (``import gpuscale.linalg as gl``)."""


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
