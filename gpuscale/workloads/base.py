"""What a workload is: its parameters (:class:`Params`), the :class:`Context` it plans and runs
in (choices recorded with their sources), the :class:`Workload` hooks, and the
:class:`Validation` / :class:`Output` it returns."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import _dask_compat
from ..decision import Decision
from ..errors import UserError, shown


class Params(BaseModel):
    """Base for workload parameters: unknown names are errors, values are checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Dtype = Literal["float64", "float32"]


def dtype_field():
    return Field("float64", description="element type")


def seed_field():
    return Field(0, description="random seed")


def block_field(
    what: str = "chunk side", default: str = "from the backend's chunk size and the cluster's threads"
):
    """A block-size parameter: None, the default, leaves it to the plan."""
    return Field(None, description=f"{what} (default: {default})")


@dataclasses.dataclass
class Check:
    name: str
    ok: bool
    value: float | int | str | None = None
    limit: float | int | str | None = None
    detail: str = ""

    @classmethod
    def within(cls, name: str, value, limit, detail: str = "") -> Check:
        """The check that ``value`` is at most ``limit``."""
        return cls(name, value <= limit, value, limit, detail)


@dataclasses.dataclass
class Validation:
    """The outcome of checking a result against an independent reference."""

    method: str
    checks: list[Check]
    level: str | None = None
    """``fast`` / ``full`` where the workload has levels (``--validate``), ``off`` when skipped."""

    @property
    def valid(self) -> bool | None:
        """True / False; None when validation was switched off (``--validate off``)."""
        if self.level == "off":
            return None
        return bool(self.checks) and all(c.ok for c in self.checks)

    @classmethod
    def off(cls) -> "Validation":
        return cls("not validated (--validate off)", [], "off")

    def to_dict(self) -> dict:
        d = {
            "valid": self.valid,
            "method": self.method,
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }
        if self.level is not None:
            d["level"] = self.level
        return d


@dataclasses.dataclass
class Output:
    """What one timed run produced: Dask collections to persist, plus what it learned."""

    collections: dict[str, Any]
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Context:
    """What a workload may know about where it runs."""

    family: Any  # backends.Family
    spec: Any  # cluster.ClusterSpec
    client: Any = None  # distributed.Client (None while only planning)
    choices: dict[str, Decision] = dataclasses.field(default_factory=dict)
    decisions: dict[str, Decision] = dataclasses.field(default_factory=dict)
    """Choices a route could only make at run time (from the data), by the same names as the
    planned ``choices`` they settle (e.g. svd's ``route``: planned "auto", decided "gram")."""
    data: Any = None  # the user's data (inputs.Source), None for generated data
    validate: str | None = None  # off | fast | full; None: the workload's default
    data_description: dict | None = None  # the record's ``data`` for user data (set by from_data)
    memory: Any = None  # memory.Budget: what each worker has (None: unknown)

    @property
    def knobs(self):
        return self.family.knobs

    @property
    def total_threads(self) -> int:
        if self.client is not None:
            info = _dask_compat.workers(self.client)
            return max(1, sum(w.get("nthreads", 1) for w in info.values()))
        return max(1, (self.spec.workers or 1) * (self.spec.threads_per_worker or 1))

    def capped(self, knob: int, copies: float, what: str) -> tuple[int, str | None]:
        """A family block size ``knob`` capped by the workers' memory (``copies`` blocks per
        running task), and why when the cap binds (:meth:`gpuscale.memory.Budget.cap`)."""
        return (knob, None) if self.memory is None else self.memory.cap(knob, copies, what)

    def choose(self, name: str, value: Any, source: str, rule: str | None = None) -> Any:
        """Record a tuned choice (value, where it came from, and the rule if one chose it)."""
        self.choices[name] = Decision(value, source, rule)
        return value

    def value(self, name: str, default: Any = None) -> Any:
        """The value of the planned choice ``name``; ``default`` where none was made."""
        made = self.choices.get(name)
        return default if made is None else made.value

    def choose_knob(self, name: str, if_none: str, knob: str | None = None) -> Any:
        """Record the family's knob ``knob`` (default: ``name``) as the choice ``name``;
        ``if_none``: what the knob's None means."""
        value = getattr(self.knobs, knob or name)
        return self.choose(name, value, "family", f"None: {if_none}" if value is None else None)

    def choose_size(
        self, name: str, given: int | None, knob: int, copies: float, what: str, rule: typing.Callable
    ) -> int:
        """A block size: the flag ``given``, else ``rule(budget)`` -> (value, why) with the family
        block size ``knob`` capped by the workers' memory (:meth:`capped`), the cap in the why."""
        if given is not None:
            return self.choose(name, given, "flag")
        budget, capped = self.capped(knob, copies, what)
        value, why = rule(budget)
        return self.choose(name, value, "rule", why + (f" ({capped})" if capped else ""))

    def decide(self, name: str, decision: Decision) -> Any:
        """Record what a planned choice became at run time, returning its value (``gpuscale
        explain`` shows the plan; the record's ``explained`` shows both)."""
        self.decisions[name] = decision
        return decision.value


class Workload:
    """Base class. Subclasses set the class attributes and implement the methods.

    A workload that runs on the user's data names its ``input_formats`` and implements
    ``check_input`` (before any cluster) and ``from_data``; ``generation_params`` /
    ``input_params`` are left out of the other kind's record; ``output_formats`` are the
    ``--output`` suffixes; ``validation_levels``: it honours ``--validate fast|full``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    collection: ClassVar[str]  # "array" or "dataframe"
    Params: ClassVar[type[Params]]
    input_formats: ClassVar[tuple[str, ...]] = ()
    output_formats: ClassVar[tuple[str, ...]] = ()
    generation_params: ClassVar[tuple[str, ...]] = ()
    input_params: ClassVar[tuple[str, ...]] = ()
    validation_levels: ClassVar[bool] = False
    one_gpu: ClassVar[str | None] = None
    """Why a run of this workload on generated data takes one GPU of several where its planned
    memory fits one (rule ``gpus.work`` in docs/decisions.md); None: every GPU selected."""

    def check(self, p) -> None:
        """Cross-parameter checks that need no cluster; raise UserError."""

    def plan(self, p, ctx: Context) -> None:
        """Record tuned choices with ``ctx.choose`` (may need ctx.client for cluster facts)."""

    def estimate_bytes(self, p, ctx: Context) -> int:
        """Peak bytes. Default: the parts of an overriding ``estimate_memory`` added up, else 0."""
        if type(self).estimate_memory is Workload.estimate_memory:
            return 0
        return sum(self.estimate_memory(p, ctx).values())

    def streams(self, p, ctx: Context) -> str | None:
        """Why this run's data can be made again block by block inside each pass instead of
        held, or None (the memory check streams a run whose data would not fit)."""
        return None

    def stream_block_bytes(self, p, ctx: Context) -> int:
        """Bytes of one block a streaming pass makes. Default 0."""
        return 0

    def task_bytes(self, p, ctx: Context) -> int:
        """One task's peak memory (the working set is threads x this; it cannot spill).
        Default 0: the data parts carry the whole estimate."""
        return 0

    def estimate_memory(self, p, ctx: Context) -> dict[str, int]:
        """Peak memory by part (``inputs`` / ``intermediates`` / ``results`` where the
        workload knows them); the parts add up to the peak. Default: ``estimate_bytes`` as
        one ``peak`` part."""
        return {"peak": int(self.estimate_bytes(p, ctx))}

    def generate(self, p, ctx: Context) -> Any:
        raise NotImplementedError

    def compute(self, data, p, ctx: Context) -> Output:
        raise NotImplementedError

    def validate(self, out: Output, data, p, ctx: Context) -> Validation:
        raise NotImplementedError

    def describe_data(self, p) -> dict:
        return {}

    def check_input(self, p, source) -> None:
        """Check the parameters against the user's data (a :class:`gpuscale.data.inputs.Source`)
        without a cluster; raise UserError."""

    def from_data(self, source, p, ctx: Context) -> Any:
        """The user's data, opened or converted onto ``ctx.family``, in the form ``compute``
        takes (like ``generate``'s); sets ``ctx.data_description`` for the record."""
        raise UserError(f"workload '{self.name}' runs on generated data only")

    def output_value(self, out: Output, p, suffix: str) -> Any:
        """What ``--output`` writes: a host pandas frame, or a dict of host NumPy arrays."""
        raise UserError(f"workload '{self.name}' writes no --output")

    def load(self, p, ctx: Context) -> Any:
        """The data to time the work on: the user's (``ctx.data``) or generated."""
        return self.generate(p, ctx) if ctx.data is None else self.from_data(ctx.data, p, ctx)

    def check_loaded(self, data, p, ctx: Context) -> None:
        """Checks of the loaded user data that need the workers, once after ``load``, untimed."""

    def record_params(self, p, ctx: Context) -> dict:
        """The record's ``params``: without those that only describe the other kind of data."""
        drop = set(self.generation_params if ctx.data is not None else self.input_params)
        return {k: v for k, v in p.model_dump(mode="json").items() if k not in drop}

    def record_data(self, p, ctx: Context) -> dict:
        """The record's ``data``: the user's data as described, else the generation's."""
        if ctx.data is None:
            return self.describe_data(p)
        return ctx.data_description or ctx.data.describe()

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
                data = "give your data as data= (--input on the command line); " if field == "input" else ""
                raise UserError(
                    f"workload '{cls.name}' has no parameter {flag}",
                    f"{data}its parameters: {', '.join(parameter_flags(cls))}",
                ) from None
            msg = err["msg"].removeprefix("Value error, ")
            raise UserError(
                f"{cls.name} {flag}: {msg} (got {shown(err.get('input'))})",
                f"see `gpuscale workloads` for {cls.name}'s parameters",
            ) from None
        _check_sizes(cls.name, p)
        cls().check(p)
        return p


MAX_SIZE = 2**53
"""The largest whole-number parameter (other than a seed) a workload takes: what a float64
counts exactly."""


def _check_sizes(name: str, p) -> None:
    """Refuse a size past :data:`MAX_SIZE` in one line naming the flag."""
    for field, value in p:
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and field != "seed"
            and abs(value) > MAX_SIZE
        ):
            flag = "--" + field.replace("_", "-")
            raise UserError(
                f"{name} {flag} {value} is beyond any machine (at most 2**53 = {MAX_SIZE})",
                f"use a smaller {flag}",
            )


def parameter_flags(cls) -> list[str]:
    return ["--" + f.replace("_", "-") for f in cls.Params.model_fields]


def choices(annotation) -> list | None:
    """The allowed values of a ``Literal`` parameter (also inside Optional / Union), else None."""
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    found = [c for a in typing.get_args(annotation) for c in (choices(a) or [])]
    return found or None


def _plain(annotation) -> list:
    """The member types of an annotation, Optional / Union / Annotated unwrapped (None dropped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _plain(typing.get_args(annotation)[0])
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return [m for a in typing.get_args(annotation) if a is not type(None) for m in _plain(a)]
    return [annotation]


def value_kind(annotation) -> tuple[str, list | None]:
    """What a parameter's flag takes, from its annotation: ``("bool", None)``, ``("int", None)``,
    ``("float", None)``, ``("choice", values)`` (a Literal), ``("int-or-choice", values)``
    (``Literal["auto"] | int``) or ``("text", None)`` (anything else)."""
    members = _plain(annotation)
    lits = [v for m in members if typing.get_origin(m) is typing.Literal for v in typing.get_args(m)]
    others = [m for m in members if typing.get_origin(m) is not typing.Literal]
    if members == [bool]:
        return "bool", None
    if lits and not others:
        return "choice", lits
    if lits and others == [int]:
        return "int-or-choice", lits
    if others == [int] and not lits:
        return "int", None
    if others and set(others) <= {int, float} and not lits:
        return "float", None
    return "text", None


def describe(cls) -> dict:
    """Name, description and parameters (with defaults and, for fixed sets, the choices) of a
    workload, for listings."""
    params = {}
    for fname, field in cls.Params.model_fields.items():
        ann = field.annotation
        params[fname.replace("_", "-")] = {
            "default": field.default,
            "type": getattr(ann, "__name__", str(ann)).replace("typing.", ""),
            "choices": choices(ann),
            "help": field.description or "",
        }
    return {"name": cls.name, "collection": cls.collection, "description": cls.description, "params": params}
