"""Workloads describe; routes compute.

A workload (:mod:`.base`) is a class: a pydantic ``Params`` model, cross-field ``check``,
``plan`` (tuned choices with their sources), ``estimate_bytes`` (for the memory check),
``generate`` (data on the active backend), ``compute`` (a route of :mod:`gpuscale.linalg` /
:mod:`gpuscale.dataframe`) and ``validate`` (against an independent reference); it imports no
GPU library at top level. :mod:`.registry` finds built-ins and plugins by name: installed
packages add workloads through the ``gpuscale.workloads`` entry-point group, notebooks with
``@gpuscale.workload`` (:mod:`.decorator`).
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
