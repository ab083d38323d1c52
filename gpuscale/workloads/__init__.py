"""Workloads describe; routes compute.

A workload is a small class: a pydantic ``Params`` model (defaults and range checks), cross-
field ``check``s, ``plan`` (the tuned choices, recorded with where they came from),
``estimate_bytes`` (for the memory check), ``generate`` (data on the active backend),
``compute`` (calls a route in :mod:`gpuscale.linalg` / :mod:`gpuscale.dataframe`) and
``validate`` (against an independent reference). It imports no GPU library at top level.

Built-ins are registered here; installed packages add workloads through the
``gpuscale.workloads`` entry-point group (an entry point names a :class:`Workload` subclass),
and notebooks with the ``@gpuscale.workload`` decorator (:mod:`.decorator`).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import types
import typing
import warnings
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import UserError


class Params(BaseModel):
    """Base for workload parameters: unknown names are errors, values are checked."""
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclasses.dataclass
class Check:
    name: str
    ok: bool
    value: float | int | str | None = None
    limit: float | int | str | None = None
    detail: str = ""


@dataclasses.dataclass
class Validation:
    """The outcome of checking a result against an independent reference."""
    method: str
    checks: list[Check]

    @property
    def valid(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict:
        return {"valid": self.valid, "method": self.method,
                "checks": [dataclasses.asdict(c) for c in self.checks]}


@dataclasses.dataclass
class Output:
    """What one timed run produced: Dask collections to persist, plus what it learned."""
    collections: dict[str, Any]
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Context:
    """What a workload may know about where it runs."""
    family: Any                       # backends.Family
    spec: Any                         # cluster.ClusterSpec
    client: Any = None                # distributed.Client (None while only planning)
    choices: dict[str, dict] = dataclasses.field(default_factory=dict)

    @property
    def knobs(self):
        return self.family.knobs

    @property
    def total_threads(self) -> int:
        if self.client is not None:
            info = self.client.scheduler_info(n_workers=-1)["workers"]
            return max(1, sum(w.get("nthreads", 1) for w in info.values()))
        return max(1, (self.spec.workers or 1) * (self.spec.threads_per_worker or 1))

    def choose(self, name: str, value: Any, source: str, rule: str | None = None) -> Any:
        """Record a tuned choice (value, where it came from, and the rule if one chose it)."""
        self.choices[name] = {"value": value, "source": source, "rule": rule}
        return value


class Workload:
    """Base class. Subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    description: ClassVar[str]
    collection: ClassVar[str]          # "array" or "dataframe"
    Params: ClassVar[type[Params]]

    def check(self, p) -> None:
        """Cross-parameter checks that need no cluster; raise UserError."""

    def plan(self, p, ctx: Context) -> None:
        """Record tuned choices with ``ctx.choose`` (may need ctx.client for cluster facts)."""

    def estimate_bytes(self, p, ctx: Context) -> int:
        return 0

    def generate(self, p, ctx: Context) -> Any:
        raise NotImplementedError

    def compute(self, data, p, ctx: Context) -> Output:
        raise NotImplementedError

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        raise NotImplementedError

    def describe_data(self, p) -> dict:
        return {}

    # -- parameters ---------------------------------------------------------------------
    @classmethod
    def parse(cls, params: dict[str, Any]):
        """Validate parameters into ``Params``; one-line errors naming the flag and the fix."""
        clean = {k.replace("-", "_"): v for k, v in params.items() if v is not None}
        try:
            p = cls.Params(**clean)
        except ValidationError as e:
            err = e.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else "?"
            flag = "--" + field.replace("_", "-")
            if err["type"] == "extra_forbidden":
                raise UserError(f"workload '{cls.name}' has no parameter {flag}",
                                f"its parameters: {', '.join(parameter_flags(cls))}") from None
            msg = err["msg"].removeprefix("Value error, ")
            raise UserError(f"{cls.name} {flag}: {msg} (got {err.get('input')!r})",
                            f"see `gpuscale workloads` for {cls.name}'s parameters") from None
        cls().check(p)
        return p


def parameter_flags(cls) -> list[str]:
    return ["--" + f.replace("_", "-") for f in cls.Params.model_fields]


def choices(annotation) -> list | None:
    """The allowed values of a ``Literal`` parameter (also inside Optional / Union), else None."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    found = [c for a in typing.get_args(annotation) for c in (choices(a) or [])]
    return found or None


def describe(cls) -> dict:
    """Name, description and parameters (with defaults and, for fixed sets, the choices) of a
    workload, for listings."""
    params = {}
    for fname, field in cls.Params.model_fields.items():
        ann = field.annotation
        params[fname.replace("_", "-")] = {
            "default": field.default, "type": getattr(ann, "__name__", str(ann)).replace("typing.", ""),
            "choices": choices(ann), "help": field.description or ""}
    return {"name": cls.name, "collection": cls.collection, "description": cls.description,
            "params": params}


# ---------------------------------------------------------------------------------------
_REGISTRY: dict[str, type[Workload]] = {}
_LOADED = False
_BUILTINS_LOADED = False
BUILTINS = ("gpuscale.workloads.svd", "gpuscale.workloads.groupby",
            "gpuscale.workloads.transpose_sum", "gpuscale.workloads.matmul", "gpuscale.workloads.fft",
            "gpuscale.workloads.reduction", "gpuscale.workloads.slicing", "gpuscale.workloads.map_overlap",
            "gpuscale.workloads.stencil", "gpuscale.workloads.lombscargle",
            "gpuscale.workloads.merge", "gpuscale.workloads.shuffle")


def register(cls: type[Workload]) -> type[Workload]:
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for mod in BUILTINS:
        importlib.import_module(mod)


def _load() -> None:
    """Built-ins, then the ``gpuscale.workloads`` entry points: each names a Workload class
    (``@gpuscale.workload`` returns one) or a module whose import registers its workloads.
    A plugin that fails to load is skipped with a warning naming it."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    _load_builtins()
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
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(f"unknown workload '{name}'", f"use one of: {', '.join(names())}") from None


def __getattr__(name):  # ``gpuscale.workloads.workload``: the decorator, imported on first use
    if name in ("workload", "unregister"):
        from . import decorator
        return getattr(decorator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
