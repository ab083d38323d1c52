"""The registry of workloads: built-ins by name (imported one at a time), then the
``gpuscale.workloads`` entry points."""

from __future__ import annotations

import importlib
import importlib.metadata
import types
import warnings

from ..errors import UserError
from .base import Workload

PACKAGE = "gpuscale.workloads"

_REGISTRY: dict[str, type[Workload]] = {}
DECORATED: set[str] = set()
"""Names registered by ``@gpuscale.workload``: decorating one again replaces it."""
_LOADED = False
_BUILTINS_LOADED = False
BUILTINS = {
    "svd": "svd",
    "groupby": "groupby",
    "transpose_sum": "transpose_sum",
    "matmul": "matmul",
    "fft": "fft",
    "reduction": "reduction",
    "slice": "slicing",
    "map_overlap": "map_overlap",
    "stencil": "stencil",
    "lombscargle": "lombscargle",
    "merge": "merge",
    "shuffle": "shuffle",
}
"""Built-in workload name -> its module under ``gpuscale.workloads``. ``get(name)`` imports only
that module, not every workload's libraries; it must equal what the modules register."""


def register(cls: type[Workload]) -> type[Workload]:
    _REGISTRY[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove a workload from the registry (a notebook's or a test's own)."""
    _REGISTRY.pop(name, None)
    DECORATED.discard(name)


def registered(name: str) -> type[Workload] | None:
    """The workload registered under ``name`` now (None: none; nothing is loaded)."""
    return _REGISTRY.get(name)


def load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for mod in BUILTINS.values():
        importlib.import_module(f"{PACKAGE}.{mod}")


def _load() -> None:
    """Built-ins, then the ``gpuscale.workloads`` entry points: each names a Workload class
    (``@gpuscale.workload`` returns one) or a module whose import registers its workloads.
    A plugin that fails to load is skipped with a warning naming it."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    load_builtins()
    for ep in importlib.metadata.entry_points(group="gpuscale.workloads"):
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, Workload):
                register(obj)
            elif not isinstance(obj, types.ModuleType):
                raise TypeError(f"it names a {type(obj).__name__}, not a Workload class or a module")
        except Exception as e:  # noqa: BLE001  (one broken plugin must not hide the others)
            warnings.warn(f"gpuscale: skipped workload plugin '{ep.name}' ({ep.value}): {e}", stacklevel=2)


def names() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get(name: str) -> type[Workload]:
    if name not in _REGISTRY and name in BUILTINS:
        importlib.import_module(f"{PACKAGE}.{BUILTINS[name]}")
    if name not in _REGISTRY:
        _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown workload '{name}'", f"use one of: {', '.join(names())}") from None


def readers() -> list[str]:
    """The workloads that run on the user's own data (``input_formats``)."""
    return [n for n in names() if get(n).input_formats]
