"""A backend family: its chunk libraries, where their chunks live, the cluster kind that runs
them and its :class:`Knobs`."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import _dask_compat
from ..errors import UserError, missing_module

HOST_CHUNKS: Mapping[str, str] = {"array": "numpy", "dataframe": "pandas"}
"""The chunk library of the collections Dask builds from host objects (``dd.from_pandas``...),
by collection kind (see :mod:`gpuscale.backends.host_collections`)."""


@dataclass(frozen=True)
class Knobs:
    """What makes a family fast. Each value is recorded with every run."""

    threads_per_worker: Mapping[str, int | None]
    """Threads per worker by collection kind ("array", "dataframe", "session": a cluster for any
    work, e.g. ``cluster up`` without ``--for``); :meth:`Family.layout_rule` applies it."""
    chunk_bytes: int
    """Target bytes of one array chunk (row block)."""
    partition_bytes: int
    """Target bytes of one DataFrame partition."""
    shuffle_method: str | None
    """Shuffle used when a groupby result must be split ("tasks" keeps cuDF on the device;
    None leaves Dask's default)."""
    split_out_budget_bytes: int
    """A groupby result estimated under this stays in one partition (tree reduction)."""
    split_every: int | None
    """Fan-in of tree reductions; None = all partials in one combine."""
    groupby_concat_min_fraction: float = 0.05
    """A decomposable groupby under the result budget runs "per-worker" (each worker concatenates
    its partitions and aggregates once; one task on one worker) when a partition's groups are at
    least this fraction of its rows; below it, partials combine in a tree. 0: always per-worker."""
    rmm_pool_size: float | None = None
    """RMM pool per worker as a fraction of device memory (None: no pool)."""
    protocol: str | None = None
    """Transport of a cluster the family starts on this machine when ``protocol`` is ``auto``
    and the transport is installed (None: TCP); :func:`gpuscale.wire.protocols.choose`
    applies it (rule ``protocol.family`` in docs/decisions.md)."""
    pre_import: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Libraries each worker imports at start, by collection kind."""
    worker_environ: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Environment of the worker processes by protocol, set before they start (read when their
    libraries import: Dask's own ``DASK_*`` settings, ``UCX_*``)."""
    device_spill: Mapping[str, str] = field(default_factory=dict)
    """How a device family's workers spill, by collection kind (``cluster.device-spill: auto``):
    "dask-cuda" (whole task outputs over the device memory limit) or "cudf" (also single cuDF
    buffers, inside a running task)."""
    device_spill_reason: str = ""
    """Why the family spills that way, for ``explain``."""
    fft_work_copies: float = 0.0
    """Copies of one FFT task's input block its library holds beyond the input and the complex
    output (the workload's data): 0 where the transform works lane by lane in the output."""
    pace_bytes_per_thread_s: float | None = None
    """How fast one worker thread makes and works through data that does not fit its memory
    (spilled or made again block by block), bytes a second: a run whose one pass would take
    longer than :data:`gpuscale.memory.MAX_PASS_S` at this pace is refused up front (rule
    ``memory.pace``); None: not measured, no such bound."""
    read_keywords: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Keywords a session adds to the user's Dask readers, by function name
    (:func:`gpuscale.backends.host_collections.family_keywords`), where the call sets none of
    :data:`~gpuscale.backends.host_collections.PARTITIONING`: how the family cuts files into
    partitions."""
    worker_growth_bytes: int = 100 * 2**20
    """What a worker's first tasks add to the memory it holds at start (imports, allocator
    arenas), added to the measured baseline by the memory check (see docs/decisions.md, rule
    ``memory.worker-growth``)."""

    def as_dict(self, collection: str | None = None) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        key = collection or "session"
        d["threads_per_worker"] = self.threads_per_worker.get(key)
        d["pre_import"] = list(self.pre_import.get(key, ()))
        return d


@dataclass(frozen=True)
class LossyWriter:
    """A writer of a family's chunk library that does not keep the data: what it loses, and
    the column dtypes it loses it for (empty: every frame)."""

    reason: str
    dtypes: tuple[str, ...] = ()

    def loses(self, meta) -> list[str]:
        """The columns of ``meta`` (a frame or series of the chunk library) it loses."""
        dtypes = meta.dtypes.items() if hasattr(meta, "columns") else [(meta.name, meta.dtype)]
        return [str(c) for c, dt in dtypes if not self.dtypes or str(dt) in self.dtypes]


@dataclass(frozen=True)
class Family:
    """A backend family. Subclass to change how it probes, synchronizes or sizes memory."""

    name: str
    description: str
    names: tuple[str, ...]
    array_backend: str
    dataframe_backend: str
    array_module: str
    dataframe_module: str
    cluster_kind: str
    knobs: Knobs
    requires: Mapping[str, str] = field(default_factory=dict)
    """module -> install command, needed for any use."""
    requires_dataframe: Mapping[str, str] = field(default_factory=dict)
    """module -> install command, needed for DataFrame work only."""
    auto_priority: int = 0
    """``--backend auto`` takes the available family with the highest priority."""
    nvtx_phases: bool = False
    """Traces mark gpuscale's phases with NVTX ranges (when the ``nvtx`` package is importable)."""
    memory: str = "host"
    """Where this family's chunks live: ``"host"`` (NumPy, pandas) or ``"device"`` (CuPy, cuDF).
    The backend audit names a change between families of different memory by it
    (``host -> device``)."""
    spill_to: str | None = None
    """Where a worker puts data that does not fit its memory: ``"disk"`` (distributed's
    spilling), ``"host"`` (a device family's) or None (data must fit)."""
    stream_first: str | None = None
    """Set (to the reason) when making a workload's generated data again in every pass is
    cheaper than spilling it: the memory check then streams a run that would spill, where the
    workload can (:meth:`gpuscale.workloads.Workload.streams`). None: spill first."""
    lossy_writers: Mapping[str, LossyWriter] = field(default_factory=dict)
    """Dask DataFrame writers (``"to_csv"``) whose partitions, written by this family's chunk
    library, lose data (:class:`LossyWriter`); a session writes them through the host library."""

    def missing(self, collection: str | None = None) -> tuple[str, str] | None:
        """The first required module that is not importable, with its install command."""
        needs = dict(self.requires)
        if collection == "dataframe":
            needs.update(self.requires_dataframe)
        for module, install in needs.items():
            if importlib.util.find_spec(module.split(".")[0]) is None:
                return module, install
        return None

    def probe(self) -> tuple[bool, str]:
        """Whether this family can run here, and why (used by ``auto``); imports nothing big."""
        miss = self.missing()
        if miss:
            return False, f"{miss[0]} is not installed"
        return True, f"{self.name} libraries are importable"

    def check(self, requested: str, collection: str | None = None, *, devices: bool = True) -> None:
        """Raise a one-line UserError if this family cannot run ``collection`` work here: its
        libraries are not installed, or (``devices``) this machine lacks what its chunks need
        (:meth:`probe`). A client whose workers run elsewhere needs the libraries alone."""
        miss = self.missing(collection)
        if miss:
            raise missing_module(miss[0], f"backend '{requested}'", miss[1])
        if not devices:
            return
        ok, why = self.probe()
        if not ok:
            raise UserError(f"backend '{requested}' cannot run here: {why}", "use --backend cpu (or auto)")

    @property
    def on_device(self) -> bool:
        """Its chunks live in device memory (:attr:`memory` ``"device"``)."""
        return self.memory == "device"

    def synchronize(self, client) -> None:
        """Block until every worker's queued device work is done (no-op on the CPU)."""

    def synchronized(self, collection):
        """``collection`` with every output block done on its device when its task ends, or
        None where this family cannot do so for it. Host families: the collection itself."""
        return collection

    def worker_memory(self, client) -> dict[str, int]:
        """Memory per worker that holds this family's chunks (host memory limit on CPU)."""
        return {addr: int(w.get("memory_limit") or 0) for addr, w in _dask_compat.workers(client).items()}

    def device_watch(self, client, start: bool) -> dict[str, dict]:
        """Per worker, what its device memory did during a run (:class:`gpuscale.memory_measured.Watch`):
        ``start=True`` begins counting, ``start=False`` reads and ends it. Host families: {}."""
        return {}

    def warm_up(self, client, then=None) -> float:
        """Pay every worker's first-use costs now (imports, a first small operation through
        each chunk library, then the caller's ``then()``) and the scheduler's imports, for a
        cluster kept up for later runs. Returns the seconds taken."""
        t0 = time.perf_counter()
        client.run(_warm_worker, self.array_module, self.dataframe_module, then)
        modules = {self.array_module, self.dataframe_module}.union(*self.knobs.pre_import.values())
        client.run_on_scheduler(_warm_scheduler, sorted(modules))
        self.synchronize(client)
        return time.perf_counter() - t0

    def warm_workers(self, client, collection: str | None) -> None:
        """Start, on each worker of a session that just opened, what pays the worker's first-use
        costs in the background (for ``collection`` work; None: any). Nothing here."""

    def import_in_background(self, collection: str | None) -> threading.Thread | None:
        """Start importing ``knobs.pre_import[collection]`` in this process (to overlap a
        cluster's start): :func:`import_in_thread`; where that includes the frame library,
        :meth:`first_here` follows (rule ``gpu.session-pre-import``)."""
        modules = self.knobs.pre_import.get(collection or "session", ())
        return import_in_thread(modules, then=self.first_here if self.frames_for(collection) else None)

    def frames_for(self, collection: str | None) -> bool:
        """Whether a cluster for ``collection`` work (None: any) imports the frame library as it
        starts (``knobs.pre_import``): its first uses are then paid as it opens."""
        return self.dataframe_module in self.knobs.pre_import.get(collection or "session", ())

    def first_here(self) -> None:
        """The frame library's first uses in this process, after its import in a thread as the
        cluster starts: a small Parquet plan through Dask (:func:`_first_plan`)."""
        _first_plan(self.dataframe_backend)

    def chunk_module(self, collection: str) -> str:
        """This family's chunk library for ``collection`` ("array" or "dataframe")."""
        return self.array_module if collection == "array" else self.dataframe_module

    def host_native(self, collection: str | None = None) -> bool:
        """Whether the chunks of collections Dask builds from host objects (:data:`HOST_CHUNKS`)
        are this family's already, for ``collection`` (None: both kinds)."""
        kinds = (collection,) if collection else tuple(HOST_CHUNKS)
        return all(self.chunk_module(k).partition(".")[0] == HOST_CHUNKS[k] for k in kinds)

    def lossy_writer(self, writer: str, meta) -> tuple[LossyWriter, list[str]] | None:
        """The loss (and the columns it hits) when ``writer`` writes partitions like ``meta``
        with this family's chunk library; None when the writer keeps them whole."""
        lossy = self.lossy_writers.get(writer)
        own = type(meta).__module__.partition(".")[0] == self.dataframe_module.partition(".")[0]
        if lossy is None or not own:
            return None
        columns = lossy.loses(meta)
        return (lossy, columns) if columns else None

    def dask_config(self) -> dict[str, str]:
        """The dask.config values this family sets (scoped to a session or run)."""
        return {"array.backend": self.array_backend, "dataframe.backend": self.dataframe_backend}

    def worker_threads(self, collection: str | None) -> int | None:
        """This family's threads per worker for ``collection`` work (None: a cluster for any
        work, the ``session`` entry); None where the family leaves it to the cluster kind."""
        return self.knobs.threads_per_worker.get(collection or "session")

    def layout_rule(
        self,
        collection: str | None,
        cores: int,
        gpus: int = 0,
        *,
        workers: int | None = None,
        threads: int | None = None,
    ) -> tuple[int, int, str, str]:
        """(workers, threads per worker, why, rule id) of a cluster of processes on ``cores``
        cores, for every command that lays one out (:func:`gpuscale.plan.layout` applies it).

        ``workers`` / ``threads``: what the user set (None: not set). Unset, the family's
        ``threads_per_worker`` for ``collection`` (None: ``session``) decides and workers fill
        the cores; a family without one gets distributed's default split."""
        if workers and threads:
            return workers, threads, "set by you", "layout.set"
        if workers:
            why = "workers set by you, threads fill the cores"
            return workers, max(1, cores // workers), why, "layout.fill"
        if threads:
            why = "threads set by you, workers fill the cores"
            return max(1, cores // threads), threads, why, "layout.fill"
        tpw = self.worker_threads(collection)
        if tpw is None:
            n, t = _dask_compat.default_split(cores)
            return n, t, f"distributed's default split of {cores} cores", "layout.distributed"
        tpw = max(1, min(tpw, cores))
        why = f"{self.name} family for {collection or 'session'} work: {tpw} thread(s) per worker"
        return max(1, cores // tpw), tpw, f"{why} on {cores} cores", "layout.family"


def import_in_thread(modules, name: str = "gpuscale-import", then=None) -> threading.Thread | None:
    """Start importing ``modules`` (those not imported yet and installed) in a daemon thread,
    then ``then()``, and return it; None: nothing to do. Errors are left to the real
    import. The caller joins the thread before its own code may import from the same packages:
    an import of a submodule beside the thread's can meet a module half-initialized."""
    todo = [
        m for m in modules if m not in sys.modules and importlib.util.find_spec(m.split(".")[0]) is not None
    ]
    if not todo and then is None:
        return None

    def _import():
        try:
            for m in todo:
                importlib.import_module(m)
            if then is not None:
                then()
        except Exception:  # noqa: BLE001 - reported by the import or the plan that needs it
            return

    t = threading.Thread(target=_import, name=name, daemon=True)
    t.start()
    return t


def _first_plan(backend: str) -> None:
    """Builds and optimizes a small Dask DataFrame plan over a Parquet file in ``backend``, in
    this process: the first use of Dask's Parquet metadata, its optimizer and the frame
    library's metadata (on cuDF, the CUDA context), paid while the cluster starts."""
    import pandas as pd

    with tempfile.TemporaryDirectory(prefix="gpuscale-") as folder:
        day = pd.Timestamp("2024-01-01")
        pd.DataFrame({"k": [1, 2, 1], "v": [0.5, 1.5, 2.5], "t": [day] * 3}).to_parquet(f"{folder}/0.parquet")
        frame = _dask_compat.parquet_reader(backend)(folder)
        frame = frame[frame.t <= day].assign(w=frame.v * 2)
        frame.groupby("k").agg({"v": ["sum", "mean"], "w": "count"}).reset_index().optimize()
        frame.merge(frame[["k", "w"]], on="k").optimize()


def _warm_worker(array_module: str, dataframe_module: str, then=None) -> None:
    """Runs on each worker (:meth:`Family.warm_up`): imports and a first small operation through
    each chunk library (the frame library is optional), then the caller's ``then()``."""
    importlib.import_module("gpuscale.machine").versions()
    xp = importlib.import_module(array_module)
    rs = xp.random.RandomState(0)
    keys = rs.randint(0, 10, size=1000, dtype="int64")
    values = rs.random_sample(1000)
    float(values @ values) + float(keys.sum())  # waits for the device
    if importlib.util.find_spec(dataframe_module.split(".")[0]) is not None:
        lib = importlib.import_module(dataframe_module)
        frame = lib.DataFrame({"k": keys, "v": values})
        frame.groupby("k", sort=True).agg({"v": ["max", "count", "mean", "sum"]})
        lib.concat([frame, frame]).sort_values("v").merge(frame, on="k", how="inner")
        counts = frame["k"].value_counts(sort=False)  # what validation runs
        counts.groupby(level=0).sum().sort_index()
        frame[frame["k"].isin([1, 2])].sort_index()
    if then is not None:
        then()


def _warm_scheduler(modules: list[str]) -> None:
    """Runs in the scheduler (:meth:`Family.warm_up`): imports what unpacking a graph of each
    collection kind needs."""
    for module in ("dask.array", "dask.dataframe", "gpuscale.workloads", *modules):
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            importlib.import_module(module)
