"""Workloads describe; routes compute. A workload (:mod:`.base`) plans, generates, computes
through a route and validates against an independent reference, importing no GPU library at
top level; :mod:`.registry` finds built-ins, entry points and ``@gpuscale.workload``
(:mod:`.decorator`) by name.
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
