"""Workloads describe; routes compute.

A workload is a small class: a pydantic ``Params`` model (defaults and range checks), cross-
field ``check``s, ``plan`` (the tuned choices, recorded with where they came from),
``estimate_bytes`` (for the memory check), ``generate`` (data on the active backend),
``compute`` (calls a route in :mod:`gpuscale.linalg` / :mod:`gpuscale.dataframe`) and
``validate`` (against an independent reference). It imports no GPU library at top level.

The pieces live in :mod:`.base` (what a workload is) and :mod:`.registry` (built-ins and
plugins by name); installed packages add workloads through the
``gpuscale.workloads`` entry-point group (an entry point names a :class:`Workload` subclass),
and notebooks with the ``@gpuscale.workload`` decorator (:mod:`.decorator`).
"""

from __future__ import annotations

from .base import (
    Check,
    Context,
    Output,
    Params,
    Validation,
    Workload,
    choices,
    describe,
    parameter_flags,
    value_kind,
)
from .registry import BUILTINS, get, names, readers, register, unregister

__all__ = [
    "Check",
    "Context",
    "Output",
    "Params",
    "Validation",
    "Workload",
    "choices",
    "describe",
    "value_kind",
    "parameter_flags",
    "BUILTINS",
    "get",
    "names",
    "readers",
    "register",
    "unregister",
]
