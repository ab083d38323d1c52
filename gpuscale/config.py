"""Configuration: the settings' one declaration, and their layers merged and validated.

Every setting is declared once, as a field of :class:`Settings` (or of one of its sections),
with its keyword and CLI flag in a :class:`Knob` in its annotation. Everything else is written
from that: the defaults (:data:`DEFAULTS`, merged into ``dask.config`` under ``gpuscale`` on
import; ``gpuscale/gpuscale.yaml`` is their commented copy), the keyword map
(:data:`KEYWORDS`), the CLI flags and the settings reference.

:func:`resolve` builds the settings for one run, with this precedence (highest first)::

    flag / keyword  >  dask.config.set(...)  >  env var  >  profile  >  user YAML  >  defaults

and remembers which layer every value came from (``Resolved.sources``). Validation is the
same pydantic model (:class:`Settings`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import pathlib
import re
import textwrap
from typing import Annotated, Any, Literal, Union, get_args

import dask.config
import yaml
from dask.utils import parse_timedelta
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from . import fielddocs, trust
from .errors import UserError, shown

HERE = pathlib.Path(__file__).resolve().parent
DEFAULTS_FILE = HERE / "gpuscale.yaml"
"""The defaults written out with their descriptions (:func:`defaults_yaml`), for reading and
for copying into a Dask config folder; the package merges :data:`DEFAULTS`, not this file."""
PROFILE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Flag:
    """A setting's command-line flag; ``cli.options.setting_options`` builds the click option from it."""

    help: str
    """The flag's ``--help`` line."""
    panel: str
    """The section of ``--help`` it is listed in (a key of ``cli.base.PANELS``)."""
    scope: Literal["cluster", "client", "run"] = "cluster"
    """The commands that take it: ``cluster`` (run, explain, cluster show and cluster up),
    ``client`` (those but cluster up, whose flag of that name is where it writes) or ``run``
    (run and explain)."""
    kind: Literal["text", "int", "float", "choice", "count", "repeat", "switch", "pair", "backend"] = "text"
    """How the value is read: ``text`` as given (the settings schema checks it), ``int`` /
    ``float`` converted where they convert, ``choice`` one of the setting's Literal values,
    ``count`` a whole number >= 0 and ``repeat`` one >= 1 or auto (checked at the flag), ``switch``
    a flag without value that sets :attr:`value`, ``pair`` ``--NAME/--no-NAME``, ``backend`` a
    backend name (the registry's)."""
    metavar: str | None = None
    spelled: str | None = None
    """The flag when it is not ``--`` and the keyword (``--no-memory-check``)."""
    value: Any = True
    """What a ``switch`` sets."""


@dataclasses.dataclass(frozen=True)
class Knob:
    """Who may set a setting beyond the layers every setting has (the defaults, Dask's YAML
    files, ``dask.config.set`` and ``DASK_GPUSCALE__...`` environment variables)."""

    keyword: str | bool = True
    """Its keyword in the Python API (``session(workers=2)``, ``cluster_settings``): True for
    the field's own name, a name, or False for none."""
    flag: Flag | None = None
    """Its CLI flag, None for none."""
    in_profile: bool = True
    """Whether a profile may set it."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One declared setting, as :data:`SETTINGS` lists it."""

    key: str
    """Its dotted key under ``gpuscale`` (``cluster.workers``)."""
    field: FieldInfo
    knob: Knob

    @property
    def keyword(self) -> str | None:
        kw = self.knob.keyword
        return (self.key.rpartition(".")[2].replace("-", "_") if kw is True else kw) or None

    @property
    def name(self) -> str:
        """The flag's parameter name: its keyword, else the field's name."""
        return self.keyword or self.key.rpartition(".")[2].replace("-", "_")

    @property
    def flag(self) -> Flag | None:
        return self.knob.flag

    @property
    def opts(self) -> tuple[str, ...]:
        """The flag as typed (``--nvlink``, ``--no-nvlink``); none without a flag."""
        if self.flag is None:
            return ()
        flag = self.flag.spelled or "--" + self.name.replace("_", "-")
        return (flag, "--no-" + flag[2:]) if self.flag.kind == "pair" else (flag,)

    @property
    def env(self) -> str:
        return "DASK_GPUSCALE__" + self.key.replace("-", "_").replace(".", "__").upper()


def _hyphen(name: str) -> str:
    return name.replace("_", "-")


def normalize(d: Any) -> Any:
    """Keys in hyphen form at every level (env vars arrive with underscores)."""
    if isinstance(d, dict):
        return {_hyphen(str(k)).lower(): normalize(v) for k, v in d.items()}
    return d


class _Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=_hyphen,
        populate_by_name=True,
        frozen=True,
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A field's docstring is its description: the settings reference
        (docs/reference/settings.md) is generated from these models."""
        super().__pydantic_init_subclass__(**kwargs)
        fielddocs.describe(cls)

    @field_validator("*", mode="before")
    @classmethod
    def _true_false_only_where_asked(cls, v: Any, info: ValidationInfo) -> Any:
        """true / false only for a setting that takes it (pydantic would read ``workers: true``
        as 1)."""
        if isinstance(v, bool) and not _takes_bool(cls.model_fields[info.field_name].annotation):
            raise ValueError("true / false is no value here: give a number or a word")
        return v


def _takes_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_takes_bool(a) for a in get_args(annotation))


Size = Union[PositiveInt, float, str, None]


def _comma_list(cls, v):
    """``"a, b"`` (a flag or env var) is ``("a", "b")``."""
    if isinstance(v, str):
        return tuple(p.strip() for p in v.split(",") if p.strip())
    return v


class UcxSettings(_Section):
    nvlink: Annotated[
        bool | None, Knob(flag=Flag("force UCX NVLink on/off (default: UCX chooses)", "gpu", kind="pair"))
    ] = None
    """UCX over NVLink between GPUs: true / false forces it; null lets UCX choose (recommended)."""
    infiniband: Annotated[bool | None, Knob(flag=Flag("force UCX InfiniBand on/off", "gpu", kind="pair"))] = (
        None
    )
    """UCX over InfiniBand: true / false forces it; null lets UCX choose."""
    rdmacm: bool | None = None
    """UCX's RDMA connection manager: true / false forces it; null lets UCX choose."""


class RmmSettings(_Section):
    pool_size: Annotated[
        Size,
        Knob(
            "rmm_pool_size",
            Flag("RMM pool per GPU worker: bytes, '40GB', a fraction, or none", "gpu", metavar="SIZE"),
        ),
    ] = "auto"
    """RMM pool per GPU worker: auto (the family's default), bytes, a size like ``"40GB"``, a
    fraction of the device, or null (no pool)."""
    maximum_pool_size: Size = None
    """Largest size the RMM pool may grow to (null: RMM's default)."""
    external_libs: list[str] = Field(default_factory=lambda: ["cupy"])
    """Libraries whose allocations are routed through RMM, so they share its pool."""
    allocator: Literal["pool", "async"] = "pool"
    """How each GPU worker's RMM allocates: ``pool`` (RMM's pool of ``pool-size``, dask-cuda's
    ``rmm_pool_size``) or ``async`` (CUDA's stream-ordered allocator, dask-cuda's ``rmm_async``;
    ``pool-size`` is then its initial size)."""

    @field_validator("pool_size", "maximum_pool_size", mode="before")
    @classmethod
    def _none_words(cls, v):
        """ "none" / "null" (from a flag or env var) mean no pool; numeric strings are numbers."""
        if isinstance(v, str):
            if v.strip().lower() in ("none", "null", "off", "0"):
                return None
            try:
                f = float(v)
            except ValueError:
                return v
            return int(f) if f.is_integer() and f > 1 else f
        return v


class SshSettings(_Section):
    """``cluster.deploy: ssh`` (:mod:`gpuscale.cluster.ssh`, distributed's SSHCluster)."""

    hosts: Annotated[
        tuple[str, ...] | None,
        Knob(
            "ssh_hosts",
            Flag(
                "with --deploy ssh: the scheduler's host, then one entry per worker process",
                "hosts",
                metavar="H0,H1,...",
            ),
        ),
    ] = None
    """The scheduler's host first, then one entry per worker process (repeat a host for more)."""
    username: str | None = None
    """The ssh user (null: yours, or your ssh configuration's)."""
    port: PositiveInt = 22
    """The ssh port of every host."""
    client_keys: tuple[str, ...] | None = None
    """Private key files (null: asyncssh's defaults, ``~/.ssh/id_*``)."""
    known_hosts: str | None = None
    """asyncssh's known_hosts file (None: ~/.ssh/known_hosts)."""
    remote_python: str | None = None
    """The Python on the hosts (None: the same path as this one's)."""

    _lists = field_validator("hosts", "client_keys", mode="before")(classmethod(_comma_list))


class SlurmSettings(_Section):
    """``cluster.deploy: slurm`` (:mod:`gpuscale.cluster.slurm`, dask-jobqueue's SLURMCluster):
    what each job asks SLURM for and runs."""

    jobs: Annotated[
        PositiveInt,
        Knob(
            "slurm_jobs",
            Flag(
                "with --deploy slurm: SLURM jobs to submit (default 1; cores, memory, partition: "
                "cluster.slurm.* settings)",
                "hosts",
                metavar="N",
            ),
        ),
    ] = 1
    """Jobs submitted at start (each runs ``processes`` worker processes)."""
    queue: str | None = None
    """The partition (``#SBATCH -p``); None: the cluster's default."""
    account: str | None = None
    """The account charged (``#SBATCH -A``); null: your default."""
    walltime: str = "01:00:00"
    """Time limit of each job (``#SBATCH -t``)."""
    cores: PositiveInt = 1
    """Cores per job (``--cpus-per-task``), shared by its worker processes as threads."""
    memory: str = "2GB"
    """Memory per job (``--mem``), shared by its worker processes."""
    processes: PositiveInt = 1
    """Worker processes per job (GPU: ``dask cuda worker`` starts one per GPU; keep 1)."""
    job_extra: tuple[str, ...] = ()
    """Further ``#SBATCH`` directives, e.g. ``--gres=gpu:4``."""
    python: str | None = None
    """The Python on the compute nodes (None: the same path as this one's)."""
    log_directory: str | None = None
    """Where the jobs' stdout/stderr go (None: SLURM's default, the submit folder)."""

    _list = field_validator("job_extra", mode="before")(classmethod(_comma_list))


def _duration(v, words: tuple[str, ...], lo: float, hi: float, message: str):
    """A setting that is one of ``words`` or a duration (Dask's "60s", seconds as a number)
    from ``lo`` to ``hi`` seconds: the word, or the seconds as a float; ValueError(message)."""
    if isinstance(v, str) and v.strip().lower() in words:
        return v.strip().lower()
    try:
        seconds = parse_timedelta(v, default="s") if not isinstance(v, bool) else None
    except (ValueError, TypeError, KeyError):
        seconds = None
    if seconds is None or not lo <= seconds <= hi:
        raise ValueError(message)
    return float(seconds)


class ClusterSettings(_Section):
    workers: Annotated[
        PositiveInt | None,
        Knob(flag=Flag("number of workers (GPU: at most one per GPU)", "cluster", kind="int")),
    ] = None
    """Number of workers; null: the family chooses (CPU: from the cores; GPU: one per GPU)."""
    threads_per_worker: Annotated[
        PositiveInt | None, Knob(flag=Flag("threads per worker", "cluster", kind="int"))
    ] = None
    """Threads per worker; null: the family chooses, for the workload's collection."""
    memory_limit: Annotated[
        Size,
        Knob(
            flag=Flag("host memory per worker: auto, bytes, '8GB' or a fraction", "cluster", metavar="SIZE")
        ),
    ] = "auto"
    """Host memory per worker: auto, bytes, a size like ``"8GB"``, or a fraction of this
    machine's memory."""
    device_memory_limit: Annotated[
        Size,
        Knob(
            flag=Flag(
                "GPU workers spill device -> host above this: default (0.8 of the device), '16GB', "
                "a fraction, or 0 (no spilling)",
                "gpu",
                metavar="SIZE",
            )
        ),
    ] = "default"
    """GPU workers: device memory above which task outputs spill to host (dask-cuda's
    ``device_memory_limit``): default (dask-cuda's 0.8 of the device), a size, a fraction, or
    0 (no spilling)."""
    device_spill: Annotated[
        Literal["auto", "dask-cuda", "cudf"],
        Knob(
            flag=Flag(
                "how GPU workers spill: auto (the family's rule), dask-cuda or cudf", "gpu", kind="choice"
            )
        ),
    ] = "auto"
    """GPU workers: how data over ``device_memory_limit`` leaves the device (:mod:`gpuscale.cluster.cuda`):
    dask-cuda's whole task outputs, or cuDF's own spilling of single buffers on top of it;
    auto: the family's knob for the work's collection. (dask-cuda 26 removed JIT-unspill.)"""
    gpus: Annotated[
        tuple[NonNegativeInt, ...] | None,
        Knob(flag=Flag("GPUs to use, e.g. 0,1 (default: all visible; groupby: one)", "gpu", metavar="LIST")),
    ] = None
    """The GPUs to use, e.g. ``"0,1"``; null: every visible GPU, but one for a run of a workload
    that gains nothing from more where it fits one (rule ``gpus.work``)."""
    dashboard_address: Annotated[
        str | None,
        Knob(flag=Flag("dashboard bind address (default 127.0.0.1:0)", "cluster", metavar="HOST:PORT")),
    ] = "127.0.0.1:0"
    """Where a cluster started here serves its dashboard, ``[HOST]:PORT`` (port 0: any free one)."""
    processes: Annotated[
        Literal["auto", "yes", "no"],
        Knob(
            flag=Flag(
                "a CPU cluster started here runs its workers as processes (yes), as threads of this "
                "process (no), or auto: threads of this process for small work on generated data",
                "cluster",
                metavar="auto|yes|no",
            )
        ),
    ] = "auto"
    """Whether a CPU cluster started on this machine runs its workers as processes (``yes``), as
    threads of this process (``no``), or ``auto``: one worker of this process's threads, without
    a dashboard, for a run on generated data whose planned memory is small and whose workers,
    threads and memory you did not set (rule ``processes.small-work``,
    :mod:`gpuscale.plan.layout`); processes otherwise."""
    connect_timeout: float = Field(10.0, gt=0)
    """Seconds to wait for a running scheduler to answer."""
    host: Annotated[
        str | None,
        Knob(
            flag=Flag(
                "bind address of a cluster started here (default: the protocol's; tcp: 127.0.0.1); "
                "other hosts reach it there",
                "cluster",
                metavar="ADDRESS",
            )
        ),
    ] = None
    """Address a cluster this process starts binds its scheduler and workers to (None: the
    protocol's, loopback for tcp); another host reaches it there."""
    security: Annotated[
        Literal["auto", "tls", "off"],
        Knob(
            flag=Flag(
                "auto | tls | off: TLS between client, scheduler and workers (auto: on for `cluster up`, "
                "off for a run's own loopback cluster)",
                "hosts",
                metavar="auto|tls|off",
            )
        ),
    ] = "auto"
    """TLS (:mod:`gpuscale.cluster.security`): auto protects a cluster kept up for others
    (``cluster up``) and leaves a run's own loopback cluster plain; tls / off force it."""
    credentials: Annotated[
        str | None,
        Knob(
            flag=Flag(
                "TLS credentials of a client (the *.tls.pem file `cluster up` writes beside its scheduler "
                "file; default: the one beside --scheduler-file)",
                "running",
                metavar="PATH",
            )
        ),
    ] = None
    """A client's TLS credentials (the PEM file ``cluster up`` writes beside its scheduler
    file); None: the one beside ``scheduler-file``."""
    trust_files: Annotated[
        bool,
        Knob(
            "trust_cluster_files",
            Flag(
                "use a scheduler file / credentials that another user can change (a cluster can run "
                "code in its clients; default: refused)",
                "running",
                kind="switch",
            ),
        ),
    ] = False
    """Use a scheduler file or credentials file that another user can change
    (:mod:`gpuscale.trust`); false: refuse them, since a cluster can run code in its clients."""
    bandwidth_probe: Annotated[
        Literal["auto", "on", "off"],
        Knob(
            flag=Flag(
                "with --scheduler: before any work, time a 64 MiB block between worker pairs (one per "
                "host pair, one within each host) and refuse a pair far below its transport (auto: over "
                "ucx only)",
                "running",
                scope="run",
                metavar="auto|on|off",
            )
        ),
    ] = "auto"
    """The preflight's worker-to-worker bandwidth probe on a running cluster
    (:mod:`gpuscale.cluster.preflight`): ``auto`` probes when its workers speak UCX, ``on``
    over any protocol, ``off`` never."""
    message_interval: Annotated[
        Union[Literal["auto", "dask"], float],
        Knob(
            flag=Flag(
                "how long Dask's batched control streams wait between sends (auto: 2 ms; dask: "
                "distributed's 10/5/2/2 ms; e.g. 2ms)",
                "cluster",
                metavar="auto|dask|DURATION",
            )
        ),
    ] = "auto"
    """The send interval of Dask's batched control streams (:mod:`gpuscale.wire.messages`):
    auto (2 ms on the streams gpuscale can set), dask (distributed's own 10/5/2/2 ms), or a
    duration ("2ms", seconds as a number) from 0 to 1 s."""
    worker_ttl: Annotated[
        Union[Literal["dask"], float],
        Knob(
            flag=Flag(
                "how long the scheduler of a cluster started here waits for a worker's heartbeat "
                "before it removes the worker (dask: distributed's 5 minutes; e.g. 60s)",
                "cluster",
                metavar="DURATION|dask",
            )
        ),
    ] = 60.0
    """How long the scheduler of a cluster gpuscale starts waits for a worker's heartbeat before
    it removes the worker and runs its tasks elsewhere (:mod:`gpuscale.wire.liveness`): a
    duration from 1 s to 1 hour ("60s", seconds as a number), or dask (distributed's own
    ``distributed.scheduler.worker-ttl``, 5 minutes unless your Dask config says otherwise)."""
    gather: Annotated[
        Literal["auto", "direct", "scheduler"],
        Knob(
            flag=Flag(
                "how results reach this client: direct (from the worker that holds them), scheduler "
                "(relayed by it, Dask's default) or auto (direct where the workers run on this machine)",
                "cluster",
                metavar="auto|direct|scheduler",
            )
        ),
    ] = "auto"
    """How this client fetches results (:mod:`gpuscale.wire.gather`): ``direct`` from the
    workers, ``scheduler`` relayed by the scheduler, ``auto`` direct for a cluster started on
    this machine and Dask's own elsewhere."""
    deploy: Annotated[
        Literal["local", "ssh", "slurm", "srun"],
        Knob(
            flag=Flag(
                "local | ssh | slurm | srun: start the cluster on this machine, over ssh on --ssh-hosts "
                "(distributed's SSHCluster), in SLURM jobs (dask-jobqueue's SLURMCluster), or on the "
                "tasks of `srun -n N gpuscale ...` (its SLURMRunner: rank 0 scheduler, rank 1 client, "
                "others workers)",
                "hosts",
                metavar="local|ssh|slurm|srun",
            )
        ),
    ] = "local"
    """Where a cluster this process starts runs: on this machine (the family's local cluster),
    on ``ssh.hosts`` through distributed's SSHCluster, in SLURM jobs through dask-jobqueue's
    SLURMCluster (``slurm``), or on the tasks of the ``srun`` this process is one of, through
    its SLURMRunner (``srun``)."""
    ssh: SshSettings = SshSettings()
    """``deploy: ssh``: the hosts and how to reach them."""
    slurm: SlurmSettings = SlurmSettings()
    """``deploy: slurm``: what each job asks SLURM for and runs."""
    ucx: UcxSettings = UcxSettings()
    """UCX transports (``protocol: ucx``)."""
    rmm: RmmSettings = RmmSettings()
    """The RMM memory pool of GPU workers."""

    @field_validator("gpus", mode="before")
    @classmethod
    def _parse_gpus(cls, v):
        if isinstance(v, str):
            try:
                return tuple(int(p) for p in v.replace(" ", "").split(",") if p != "")
            except ValueError:
                raise ValueError("must be GPU indices like '0,1'") from None
        if isinstance(v, int) and not isinstance(v, bool):
            return (v,)
        return v

    @field_validator("security", mode="before")
    @classmethod
    def _security_word(cls, v):
        if isinstance(v, bool):
            return "tls" if v else "off"
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("message_interval", mode="before")
    @classmethod
    def _interval(cls, v):
        return _duration(v, ("auto", "dask"), 0, 1, "must be auto, dask or a duration from 0 to 1 s like 1ms")

    @field_validator("worker_ttl", mode="before")
    @classmethod
    def _ttl(cls, v):
        return _duration(v, ("dask",), 1, 3600, "must be dask or a duration from 1 s to 1 hour like 60s")

    @field_validator("processes", mode="before")
    @classmethod
    def _processes_word(cls, v):
        return _switch_word(v, "yes", "no")

    @field_validator("bandwidth_probe", mode="before")
    @classmethod
    def _probe_word(cls, v):
        return _switch_word(v, "on", "off")


def _switch_word(v: Any, yes: str, no: str) -> Any:
    """A yes / no setting's value as its own two words: a bool, or any of true / on / yes / 1
    and false / off / no / 0; anything else is left to the setting's type to refuse."""
    if isinstance(v, bool):
        return yes if v else no
    if isinstance(v, str):
        w = v.strip().lower()
        return yes if w in ("true", "on", "yes", "1") else no if w in ("false", "off", "no", "0") else w
    return v


def repeat_value(v: Any) -> int | str:
    """A ``repeat`` (setting, flag, keyword or bench spec): a whole number >= 1 or ``"auto"``.
    Checked here, not by a pydantic union (whose errors would name its members)."""
    if isinstance(v, str):
        w = v.strip().lower()
        if w == "auto":
            return w
        with contextlib.suppress(ValueError):
            v = int(w)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("must be a whole number >= 1 or auto")
    if v > MAX_REPEAT:
        raise ValueError(f"must be at most {MAX_REPEAT} (or auto)")
    return v


class AutoRepeatSettings(_Section):
    """``run.repeat: auto`` (:mod:`gpuscale.runs.repeats`): repeat until the median's relative
    error is at most ``target_error``, with at least ``min_repeats`` and at most ``max_repeats``
    repeats and ``max_time`` seconds of timed repeats."""

    target_error: Annotated[
        float,
        Knob(
            flag=Flag(
                "--repeat auto: relative standard error of the median to reach (default 2%)",
                "run",
                scope="run",
                metavar="PCT",
            )
        ),
    ] = Field(0.02, gt=0, lt=1)
    """Relative error of the median to reach: 0.02 or ``"2%"`` (half-width of its
    distribution-free 68 % interval over the median)."""
    min_repeats: Annotated[int, Knob()] = Field(3, ge=3)
    """At least this many timed repeats."""
    max_repeats: Annotated[
        PositiveInt,
        Knob(
            flag=Flag(
                "--repeat auto: at most this many timed repeats (default 50)", "run", scope="run", kind="int"
            )
        ),
    ] = 50
    """At most this many timed repeats."""
    max_time: Annotated[
        float,
        Knob(
            flag=Flag(
                "--repeat auto: at most this many seconds of timed repeats (default 60)",
                "run",
                scope="run",
                kind="float",
            )
        ),
    ] = Field(60.0, gt=0)
    """Seconds of timed repeats at most: stop before a repeat would pass it."""

    @field_validator("target_error", mode="before")
    @classmethod
    def _percent(cls, v):
        """ "2%" (a flag or env var) is 0.02."""
        if isinstance(v, str) and v.strip().endswith("%"):
            try:
                return float(v.strip()[:-1]) / 100
            except ValueError:
                raise ValueError("must be a fraction like 0.02 or a percentage like 2%") from None
        return v

    @model_validator(mode="after")
    def _ordered(self):
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"max-repeats ({self.max_repeats}) must be >= min-repeats ({self.min_repeats})")
        return self


MAX_REPEAT = 100_000
"""``run.repeat`` above this is refused before anything starts (a typo, not a measurement)."""
MAX_WARMUP = 1_000


class RunSettings(_Section):
    warmup: Annotated[
        NonNegativeInt,
        Knob(flag=Flag("untimed warm-up runs (default 1)", "run", scope="run", kind="count")),
    ] = Field(1, le=MAX_WARMUP)
    """Untimed repeats before the timed ones."""
    repeat: Annotated[
        Union[PositiveInt, Literal["auto"]],
        Knob(
            flag=Flag(
                "timed repeats: a number (default 3) or auto: repeat until the median's relative error "
                "is <= --target-error, capped by --max-repeats / --max-time",
                "run",
                scope="run",
                kind="repeat",
            )
        ),
    ] = 3
    """Timed repeats: a whole number, or ``auto`` (see ``auto_repeat``)."""
    auto_repeat: AutoRepeatSettings = AutoRepeatSettings()
    """``repeat: auto``: when to stop repeating."""
    memory_check: Annotated[
        bool,
        Knob(
            flag=Flag(
                "run even if the size looks too big for the cluster's memory",
                "run",
                scope="run",
                kind="switch",
                spelled="--no-memory-check",
                value=False,
            )
        ),
    ] = True
    """Refuse, before any work, sizes that cannot fit the cluster's memory."""
    strict_backend: Annotated[
        bool,
        Knob(
            flag=Flag(
                "fail (exit 2) when the backend audit sees chunks of another family than the backend's "
                "(NumPy / pandas under a GPU backend, CuPy / cuDF under a CPU one)",
                "run",
                scope="run",
                kind="switch",
            )
        ),
    ] = False
    """Fail the run (exit 2, after writing the record) when the backend audit sees chunks of
    another family."""
    in_cluster: Annotated[
        Union[bool, Literal["auto"]],
        Knob(
            flag=Flag(
                "with --scheduler: run the runner on a worker of that cluster, which has its libraries "
                "loaded (default: auto, when the run writes no file but its record)",
                "running",
                scope="run",
                kind="pair",
            )
        ),
    ] = "auto"
    """With a running scheduler: run the runner on one of its workers (``runs.remote.placement``)."""

    @field_validator("repeat", mode="before")
    @classmethod
    def _auto_or_count(cls, v):
        return repeat_value(v)

    @field_validator("in_cluster", mode="before")
    @classmethod
    def _auto_or_bool(cls, v):
        w = _switch_word(v, True, False)
        if isinstance(w, bool) or v == "auto":
            return w
        raise ValueError("must be auto, true or false")


class SessionSettings(_Section):
    host_collections: Annotated[Literal["convert", "warn", "strict", "off"], Knob()] = "convert"
    """Collections that Dask builds from host objects inside a session's block
    (``dd.from_pandas``, ``da.from_array(numpy)``, ``dask.datasets.timeseries``...), under a
    family whose chunks are not NumPy / pandas: ``convert`` them on the workers, ``warn`` once
    per call site, raise (``strict``) or leave them (``off``)."""
    shuffle_method: Annotated[Literal["auto", "dask", "tasks", "p2p", "disk"], Knob()] = "auto"
    """Dask DataFrame shuffles of all the work in a session's block
    (:mod:`gpuscale.backends.session_knobs`): ``auto`` (the family's), ``dask`` (Dask's own
    choice) or a method Dask knows."""
    merge_meta: Annotated[Literal["cached", "dask"], Knob()] = "cached"
    """The metadata of Dask merges in a session's block (:mod:`gpuscale.backends.merge_meta`):
    ``cached`` (computed once per pair of input schemas and arguments) or ``dask`` (by every
    merge expression Dask's optimizer makes)."""
    engine: Annotated[Literal["auto", "polars", "dask"], Knob()] = "auto"
    """The engine that runs the Dask DataFrame collections computed in a session's block
    (:mod:`gpuscale.engines`): ``auto`` (Polars on the CPU family, cudf-polars on the GPU
    family, wherever the plan translates; Dask where it does not, with the reason), ``polars``
    (the same, and an error where a plan does not translate) or ``dask``."""

    @field_validator("host_collections", "shuffle_method", "merge_meta", "engine", mode="before")
    @classmethod
    def _word(cls, v):
        return v.strip().lower() if isinstance(v, str) else v


class Settings(_Section):
    profile: Annotated[
        str | None,
        Knob(
            False,
            Flag("a profile name from clusters/ or a YAML path", "cluster", metavar="NAME|PATH"),
            in_profile=False,
        ),
    ] = None
    """A profile from ``clusters/`` (or a YAML path) merged above the package defaults."""
    backend: Annotated[str, Knob(flag=Flag("", "cluster", kind="backend"))] = "auto"
    """The family (``auto``, ``cpu``, ``gpu``) or a chunk library (``numpy``, ``pandas``,
    ``cupy``, ``cudf``), or an installed family; auto: the GPU when one is usable, else the CPU."""
    protocol: Annotated[
        str,
        Knob(
            flag=Flag(
                "auto (default: the family's transport, tcp for cpu and gpu) | tcp | ucx",
                "cluster",
                metavar="auto|tcp|ucx",
            )
        ),
    ] = "auto"
    """How workers talk: ``auto`` (the family's transport for a cluster started here, TCP for
    both built-in families; rule ids ``protocol.*``), ``tcp`` or ``ucx`` (or an installed
    transport)."""
    scheduler: Annotated[
        str | None,
        Knob(
            flag=Flag(
                "address of a running scheduler to use instead of a new cluster", "running", metavar="ADDRESS"
            )
        ),
    ] = None
    """Address of a running scheduler to use; null: start a cluster."""
    scheduler_file: Annotated[
        str | None,
        Knob(
            flag=Flag(
                "use the running cluster whose Dask scheduler file this is (e.g. from `cluster up "
                "--scheduler-file`); its TLS credentials are read from beside it",
                "running",
                scope="client",
                metavar="PATH",
            )
        ),
    ] = None
    """Dask's scheduler file of a running cluster (``cluster up --scheduler-file``); its TLS
    credentials are read from beside it."""
    results_dir: Annotated[
        str,
        Knob(
            flag=Flag(
                "where to write the result record (default ./gpuscale-results)",
                "run",
                scope="run",
                metavar="DIR",
            )
        ),
    ] = "gpuscale-results"
    """Where records (and Dask's log lines) are written."""
    cluster: ClusterSettings = ClusterSettings()
    """The cluster: its workers, memory, transports and where it runs."""
    run: RunSettings = RunSettings()
    """How a run times and checks the work."""
    session: SessionSettings = SessionSettings()
    """What a session does to the Dask code in its block."""

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v):
        from . import backends

        if v not in backends.names():
            raise ValueError(f"unknown backend; choose one of: {backends.vocabulary()}")
        return v

    @field_validator("scheduler")
    @classmethod
    def _scheduler_address(cls, v):
        """[SCHEME://]HOST:PORT, read as distributed reads it."""
        if v is None:
            return v
        from . import _dask_compat

        try:
            _dask_compat.check_address(str(v))
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"not a scheduler address ({str(e).strip().rstrip('.')}): give [tcp://]HOST:PORT, "
                "e.g. tcp://127.0.0.1:8786"
            ) from None
        return v

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, v):
        from .wire import protocols

        if v != protocols.AUTO and v not in protocols.names():
            raise ValueError(
                f"unknown protocol; choose one of: {', '.join([protocols.AUTO, *protocols.names()])}"
            )
        return v


def _section_of(field: FieldInfo | None) -> type[BaseModel] | None:
    """The section model a field holds; None for a setting."""
    ann = getattr(field, "annotation", None)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _declared(model: type[BaseModel], prefix: str = "") -> list[Setting]:
    out: list[Setting] = []
    for name, field in model.model_fields.items():
        key = prefix + _hyphen(name)
        if section := _section_of(field):
            out += _declared(section, key + ".")
        else:
            knob = next((m for m in field.metadata if isinstance(m, Knob)), Knob(keyword=False))
            out.append(Setting(key, field, knob))
    return out


SETTINGS: tuple[Setting, ...] = tuple(_declared(Settings))
"""Every setting, in declaration order."""

BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}

KEYWORDS: dict[str, str] = {s.keyword: s.key for s in SETTINGS if s.keyword}
"""Keyword -> dotted key: the names shared by the CLI flags and the Python API."""

FLAGS: dict[str, Setting] = {s.name: s for s in SETTINGS if s.flag is not None}
"""The settings that have a CLI flag, by the flag's parameter name (``cli.options.setting_options``)."""

PROFILE_FLAG = BY_KEY["profile"].name
"""The flag that names the profile layer: the API takes it as ``profile=``, beside the keywords."""

DEFAULTS: dict = {"gpuscale": Settings().model_dump(mode="json", by_alias=True)}
dask.config.update_defaults(DEFAULTS)


def defaults_yaml() -> str:
    """:data:`DEFAULTS` as commented YAML (``gpuscale/gpuscale.yaml``): each setting under its
    description."""
    lines = [
        "# gpuscale's defaults, written from the settings' declaration (gpuscale.config.Settings);",
        f"# rewrite with: {REWRITE_DEFAULTS}",
        "# gpuscale merges them into dask.config under `gpuscale` when it is imported. Override them",
        "# with your own Dask YAML files (this one copied into ~/.config/dask/, say), a profile",
        "# (--profile NAME|PATH), DASK_GPUSCALE__... environment variables, dask.config.set, or",
        "# flags / keywords (highest); `gpuscale cluster show` prints the result and where each",
        "# value came from.",
        "gpuscale:",
    ]
    _yaml_section(Settings, DEFAULTS["gpuscale"], "  ", lines)
    return "\n".join(lines) + "\n"


def write_defaults_yaml(path: pathlib.Path = DEFAULTS_FILE) -> None:
    """Write :func:`defaults_yaml` to ``path`` (``gpuscale/gpuscale.yaml``)."""
    path.write_text(defaults_yaml())


REWRITE_DEFAULTS = 'python -c "from gpuscale import config; config.write_defaults_yaml()"'
"""The command that rewrites ``gpuscale/gpuscale.yaml`` from the declaration."""


def _yaml_section(model: type[BaseModel], values: dict, indent: str, lines: list[str]) -> None:
    for name, field in model.model_fields.items():
        key = _hyphen(name)
        text = re.sub(r":\w+:`~?([^`]+)`", r"\1", " ".join((field.description or "").split()))
        text = text.replace("``", "`")
        lines += textwrap.wrap(
            text, 100 - len(indent), initial_indent=indent + "# ", subsequent_indent=indent + "# "
        )
        if section := _section_of(field):
            lines.append(f"{indent}{key}:")
            _yaml_section(section, values[key], indent + "  ", lines)
        else:
            flow = yaml.safe_dump([values[key]], default_flow_style=True, width=1_000).strip()
            lines.append(f"{indent}{key}: {flow[1:-1]}")


def keywords_to_nested(kwargs: dict[str, Any]) -> dict:
    """``{"workers": 2}`` -> ``{"cluster": {"workers": 2}}``; None means "not given"."""
    out: dict = {}
    for key, value in kwargs.items():
        if value is None:
            continue
        if key not in KEYWORDS:
            raise UserError(f"unknown setting '{key}'", f"use one of: {', '.join(sorted(KEYWORDS))}")
        _set_path(out, KEYWORDS[key].split("."), value)
    return out


def merge_keywords(settings: dict[str, Any] | None = None, **given: Any) -> dict[str, Any]:
    """One flat keyword dict for :func:`keywords_to_nested`: ``settings`` (the API's
    ``cluster_settings``) with the keywords given explicitly (not None) on top."""
    return {**(settings or {}), **{k: v for k, v in given.items() if v is not None}}


def _set_path(d: dict, path: list[str], value: Any) -> None:
    for p in path[:-1]:
        d = d.setdefault(p, {})
    d[path[-1]] = value


def _drop_path(d: dict, path: list[str]) -> None:
    for p in path[:-1]:
        d = d.get(p) if isinstance(d.get(p), dict) else {}
    d.pop(path[-1], None)


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def profile_dirs() -> list[pathlib.Path]:
    """Where named profiles live: the packaged copy, then a source checkout's clusters/."""
    return [p for p in (HERE / "clusters", HERE.parent / "clusters") if p.is_dir()]


def profile_names() -> list[str]:
    """The names of the profiles in :func:`profile_dirs`."""
    return sorted({p.stem for d in profile_dirs() for p in d.glob("*.yaml")})


def _profile_path(name_or_path: str) -> pathlib.Path:
    p = pathlib.Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if not p.is_file():
            raise UserError(
                f"profile file '{name_or_path}' does not exist",
                "give an existing YAML file or one of the names: " + ", ".join(profile_names()),
            )
        return p
    for d in profile_dirs():
        if (d / f"{name_or_path}.yaml").is_file():
            return d / f"{name_or_path}.yaml"
    raise UserError(
        f"unknown profile '{name_or_path}'",
        f"use one of: {', '.join(profile_names())} (or a path to a YAML file)",
    )


def load_profile(name_or_path: str) -> tuple[str, dict]:
    """Read a profile: ``version: 1`` plus a ``gpuscale:`` mapping. Returns (label, settings)."""
    path = _profile_path(name_or_path)
    if path.parent not in profile_dirs():  # a named profile is part of the installed package
        trust.warn_if_others_can_change(path, "profile")
    try:
        data = trust.load_yaml(trust.read_bounded(path, "profile"), f"profile {path}")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(
            f"profile {path} is not valid YAML{where}", "fix the YAML syntax (indentation, colons, quotes)"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("gpuscale"), dict):
        raise UserError(
            f"profile {path} has no 'gpuscale:' mapping", "put the settings under a top-level 'gpuscale:' key"
        )
    unknown = set(data) - {"gpuscale", "version", "description"}
    if unknown:
        raise UserError(
            f"profile {path} has unknown top-level key(s): {', '.join(sorted(unknown))}",
            "valid top-level keys: version, description, gpuscale",
        )
    version = data.get("version", PROFILE_VERSION)
    if version != PROFILE_VERSION:
        raise UserError(
            f"profile {path} has version {version!r}; this gpuscale reads version {PROFILE_VERSION}",
            f"set 'version: {PROFILE_VERSION}'",
        )
    return str(path), normalize(data["gpuscale"])


class Resolved(BaseModel):
    """Validated settings plus the layer every value came from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    settings: Settings
    sources: dict[str, str]
    profile: str | None = None


def _mapping(value: Any, where: str, fix: str) -> dict:
    """``value`` (gpuscale's entry in one Dask config layer) as a dict of settings: none for
    an empty entry, a one-line error for anything that is not a mapping."""
    if value is None or value == {}:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} is {shown(value)}, not a mapping of gpuscale's settings", fix)
    return normalize(value)


def _user_yaml() -> dict:
    merged: dict = {}
    for d in dask.config.collect_yaml(dask.config.paths):
        entry = _mapping(
            d.get("gpuscale"),
            "the gpuscale: entry of a Dask config file",
            "write settings under it (gpuscale: {session: {engine: auto}}) in your Dask config files "
            "(the folders in dask.config.paths)",
        )
        merged = dask.config.merge(merged, entry)
    return merged


def _env_layer() -> dict:
    return _mapping(
        dask.config.collect_env(os.environ).get("gpuscale"),
        "DASK_GPUSCALE",
        "set one setting per variable (DASK_GPUSCALE__SESSION__ENGINE=polars) or unset DASK_GPUSCALE",
    )


_IMPORT_ENV: dict = {}
"""The environment as dask.config saw it when gpuscale was imported."""
with contextlib.suppress(UserError):  # a broken DASK_GPUSCALE is named when settings are read
    _IMPORT_ENV = _env_layer()


def _set_layer(*baselines: dict) -> dict:
    """Values a notebook put in with ``dask.config.set``: those that differ from what the
    files plus the environment give, with the environment read at import (what dask.config
    holds unless refreshed) and now."""
    current = _flatten(
        _mapping(
            dask.config.get("gpuscale", default={}),
            "dask.config's gpuscale entry",
            "set one setting per key (dask.config.set({'gpuscale.session.engine': 'polars'}))",
        )
    )
    bases = [_flatten(b) for b in baselines]
    out: dict = {}
    for k, v in current.items():
        if all(k not in b or b[k] != v for b in bases):
            _set_path(out, k.split("."), v)
    return out


def resolve(profile: str | None = None, overrides: dict | None = None) -> Resolved:
    """Merge every layer, validate, and say where each value came from."""
    defaults = normalize(copy.deepcopy(DEFAULTS["gpuscale"]))
    user = _user_yaml()
    env = _env_layer()  # read now: a variable set after import counts as env, like a restart
    set_layer = _set_layer(
        dask.config.merge(defaults, user, _IMPORT_ENV), dask.config.merge(defaults, user, env)
    )
    flags = normalize(overrides or {})
    # gpuscale.profile selects a layer: named by a flag, else by dask.config / env
    # (DASK_GPUSCALE__PROFILE) / user YAML, like any other setting, and recorded as such.
    if profile:
        flags = {**flags, "profile": profile}
    profile = profile or dask.config.merge(user, env, set_layer).get("profile")
    label, prof = (None, {})
    if profile:
        label, prof = load_profile(profile)
        for setting in SETTINGS:
            if not setting.knob.in_profile:
                _drop_path(prof, setting.key.split("."))

    layers = [
        ("default", defaults),
        ("user-yaml", user),
        ("profile", prof),
        ("env", env),
        ("dask.config", set_layer),
        ("flag", flags),
    ]
    merged: dict = {}
    sources: dict[str, str] = {}
    for name, layer in layers:
        merged = dask.config.merge(merged, layer)
        for key in _flatten(layer):
            sources[key] = name
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as e:
        raise _validation_error(e, sources, label) from None
    return Resolved(settings=settings, sources=sources, profile=label)


def _validation_error(e: ValidationError, sources: dict[str, str], profile: str | None) -> UserError:
    err = e.errors()[0]
    loc = [str(p) for p in err["loc"] if not isinstance(p, int)]
    key = ".".join(loc)
    origin = sources.get(key, "")
    where = {
        "profile": f" (from profile {profile})",
        "env": f" (from env DASK_GPUSCALE__{key.upper().replace('.', '__').replace('-', '_')})",
        "flag": " (from a flag)",
        "user-yaml": " (from your Dask YAML config)",
        "dask.config": " (from dask.config.set)",
    }.get(origin, "")
    if err["type"] == "extra_forbidden":
        section = _section_model(loc[:-1])
        valid = ", ".join(_hyphen(f) for f in section.model_fields)
        return UserError(f"unknown key 'gpuscale.{shown(key, 80)[1:-1]}'{where}", f"valid keys here: {valid}")
    msg = err["msg"].removeprefix("Value error, ")
    return UserError(
        f"invalid value {shown(err.get('input'))} for gpuscale.{key}{where}: {msg}",
        "fix it (see `gpuscale cluster show`)",
    )


def _section_model(path: list[str]) -> type[BaseModel]:
    model: type[BaseModel] = Settings
    for p in path:
        section = _section_of(model.model_fields.get(p.replace("-", "_")))
        if section is None:
            break
        model = section
    return model


def schema_keys(model: type[BaseModel] = Settings, prefix: str = "") -> set[str]:
    """Every dotted key the schema knows (used by the test that keeps YAML and schema in sync)."""
    return {s.key for s in _declared(model, prefix)}


def default_keys() -> set[str]:
    return set(_flatten(normalize(DEFAULTS["gpuscale"])))
