"""What a run tells the concerns that watch it: the :class:`Observer` hooks, the :class:`Step`
each is given, the :class:`Run` and :class:`Outcome` they see, and the :class:`RunOptions` a run
is asked with."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, ContextManager

PREPARE, GENERATE, WARMUP, COMPUTE, VALIDATE = "prepare", "generate", "warmup", "compute", "validate"
"""The kinds of step, in the order a run takes them (also the trace's phase names)."""


@dataclasses.dataclass
class Step:
    """One step of a run; ``name`` is what an interruption in it names."""

    kind: str
    """:data:`PREPARE`, :data:`GENERATE`, :data:`WARMUP`, :data:`COMPUTE` or :data:`VALIDATE`."""
    name: str
    index: int = 0
    """The repeat's index among those of its kind (0 for the other steps)."""
    number: int = 0
    """The repeat's number among all repeats, warm-ups first (1-based; 0 for the other steps)."""
    cursor: int | None = None
    """For a timed repeat: the scheduler's task-stream cursor as it started (None: none)."""

    @property
    def repeat(self) -> bool:
        return self.kind in (WARMUP, COMPUTE)


Progress = Callable[[str, int], ContextManager[Callable[[], None]]]
"""How a caller watches the repeats: ``progress(description, total)`` is a context manager
around them that yields the function called after each one (:class:`~.progress.Tracker`)."""


@dataclasses.dataclass
class Run:
    """A run under way, as its observers see it."""

    workload: Any
    """The :class:`gpuscale.workloads.Workload` run."""
    p: Any
    """Its parsed parameters."""
    ctx: Any
    """Its :class:`gpuscale.workloads.Context` (client, family, spec, choices)."""
    warmup: int
    policy: Any
    """How many timed repeats: a :class:`gpuscale.runs.repeats.Policy`."""
    memory: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The memory check (:func:`gpuscale.memory.check`), once the run is planned."""

    @property
    def client(self):
        return self.ctx.client

    @property
    def family(self):
        return self.ctx.family

    @property
    def most(self) -> int:
        """The most repeats this run takes, warm-ups included."""
        return self.warmup + self.policy.most

    @property
    def total(self) -> str:
        """:attr:`most` as a step names it: ``4``, or ``at most 23`` (``repeat: auto``)."""
        return f"{self.most}" if not self.policy.auto else f"at most {self.most}"

    @property
    def label(self) -> str:
        """What progress shows: ``svd (cpu)``, ``svd (cpu, repeat auto)``."""
        return f"{self.workload.name} ({self.family.name}{', repeat auto' if self.policy.auto else ''})"


@dataclasses.dataclass
class Outcome:
    """What a run measured and what its observers saw: the record is built from it."""

    times_s: list[float]
    warmup_s: list[float]
    generate_s: float
    info: dict[str, Any]
    settle_warnings: int
    validate_s: float = 0.0
    validation: Any = None
    """The workload's :class:`gpuscale.workloads.Validation`."""
    estimate_bytes: int = 0
    capacity_bytes: int = 0
    audit: dict[str, Any] | None = None
    """The backend audit of generate + warm-up + timed repeats (:mod:`gpuscale.audit`)."""
    memory: dict[str, Any] | None = None
    """The memory check (:func:`gpuscale.memory.check`), with ``measured``."""
    output: Any = None
    """The last repeat's result, persisted (a :class:`gpuscale.workloads.Output`)."""
    repeats: dict[str, Any] | None = None
    """How many timed repeats were taken and why they stopped (:meth:`repeats.Policy.describe`)."""
    disturbed: dict[int, str] = dataclasses.field(default_factory=dict)
    """Timed repeats (index into ``times_s``) that were disturbed, and how (:mod:`gpuscale.runs.watch`)."""


class Observer:
    """Hooks the runner calls on every observer of its list, in order (``failed`` only where
    ``start`` was); an observer keeps what it needs of the :class:`Run`, never the run."""

    def start(self, run: Run) -> None:
        """The run is planned (``run.memory`` set), inside the prepare step, before the data exists."""

    def before_step(self, step: Step) -> None:
        """Before the work of a step (generate, each repeat, validate); raising stops the run."""

    def measuring(self, step: Step) -> ContextManager[Any]:
        """A context around exactly what a step measures (and around the prepare step)."""
        return contextlib.nullcontext()

    def after_step(self, step: Step, elapsed: float) -> None:
        """After a step's work; ``elapsed``: the seconds it measured."""

    def after_repeats(self, run: Run, outcome: Outcome) -> None:
        """The timed repeats are over, validation not started: what was seen goes into ``outcome``."""

    def finish(self, run: Run, outcome: Outcome) -> None:
        """The run is over, validated; last additions to ``outcome``."""

    def failed(self, run: Run, exc: BaseException) -> None:
        """The run is ending on ``exc`` (raised again afterwards): release what was taken."""


@dataclasses.dataclass
class RunOptions:
    """How a workload is run (:meth:`~.session.Session.run`'s options); None: the setting's value."""

    repeat: int | str | None = None
    warmup: int | None = None
    memory_check: bool | None = None
    results_dir: str | None = None
    write: bool = True
    trace: str | None = None
    data: Any = None
    validate: str | None = None
    output: str | None = None
    overwrite: bool = False
    strict_backend: bool | None = None
    audit: bool = True
    cancelled: Callable[[], bool] | None = None
    progress: Progress | None = None

    KEYWORD_SOURCES = (
        ("repeat", "run.repeat"),
        ("warmup", "run.warmup"),
        ("memory_check", "run.memory-check"),
        ("results_dir", "results-dir"),
        ("strict_backend", "run.strict-backend"),
    )
    """The options that override a setting, with its name (its source is then ``keyword``)."""

    def keyword_sources(self) -> dict[str, str]:
        """``{setting: "keyword"}`` for each setting these options override."""
        return {key: "keyword" for field, key in self.KEYWORD_SOURCES if getattr(self, field) is not None}
