"""A backend family: its chunk libraries and where their chunks live, the cluster kind that
runs them, and the knobs that make them fast (:class:`Knobs`); subclass :class:`Family` to
change how it probes, synchronizes or sizes memory."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import _dask_compat
from ..errors import UserError, missing_module

HOST_CHUNKS: Mapping[str, str] = {"array": "numpy", "dataframe": "pandas"}
"""The chunk library of the collections Dask builds from host objects, by collection kind:
``da.from_array(numpy_array)``, ``dd.from_pandas``, ``dask.datasets.timeseries``, readers and
``from_map`` / ``from_delayed`` whose parts are pandas (see
:mod:`gpuscale.backends.host_collections`)."""


@dataclass(frozen=True)
class Knobs:
    """What makes a family fast. Each value is recorded with every run."""

    threads_per_worker: Mapping[str, int | None]
    """Threads per worker by collection kind ("array", "dataframe", "session": a cluster for any
    work, e.g. ``cluster up`` without ``--for``); :meth:`Family.worker_layout` applies it."""
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
    least this fraction of its rows; below it, partials combine in a tree. 0: always per-worker
    (the GPU: one task at a time per device, and Dask's tree costs more than the work)."""
    rmm_pool_size: float | None = None
    """RMM pool per worker as a fraction of device memory (None: no pool)."""
    protocol: str | None = None
    """Transport of a cluster the family starts on this machine when ``protocol`` is ``auto``
    and the transport is installed (None: TCP); :func:`gpuscale.cluster.protocols.choose`
    applies it (rule ``protocol.family`` in docs/decisions.md)."""
    pre_import: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Libraries each worker imports at start, by collection kind."""
    worker_environ: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Environment of the worker processes by protocol, set before they start (read when their
    libraries import: Dask's own ``DASK_*`` settings, ``UCX_*``), with the measurement behind
    each in the family's module."""
    device_spill: Mapping[str, str] = field(default_factory=dict)
    """How a device family's workers spill, by collection kind (``cluster.device-spill: auto``):
    "dask-cuda" (whole task outputs over the device memory limit) or "cudf" (cuDF spills single
    buffers, also inside a running task, on top of that; CuPy arrays are not its buffers)."""
    device_spill_reason: str = ""
    """Why the family spills that way (the measurement), for ``explain``."""
    fft_work_copies: float = 0.0
    """Copies of one FFT task's input block its library holds beyond the input and the complex
    output (the workload's data): 0 where the transform works lane by lane in the output."""
    worker_growth_bytes: int = 128 * 2**20
    """What a worker's first tasks add to the memory it holds at start (the chunk library's
    imports, one allocator arena per thread, memory the allocator keeps), added to the
    measured baseline by the memory check (:mod:`gpuscale.memory`). Measured on the CPU: a
    worker at 72 MiB at start peaked 60-100 MiB above its data and blocks in svd and groupby
    runs that spilled."""

    def as_dict(self, collection: str | None = None) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        key = collection or "session"
        d["threads_per_worker"] = self.threads_per_worker.get(key)
        d["pre_import"] = list(self.pre_import.get(key, ()))
        return d


@dataclass(frozen=True)
class LossyWriter:
    """A writer of a family's chunk library that does not keep the data: what it loses, and
    the column dtypes it loses it for (empty: every frame). Inside a session the writer's Dask
    function writes through the host library instead, or warns, or refuses, as
    ``session.host-collections`` says (:mod:`gpuscale.backends.host_collections`)."""

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
    spilling to the worker's local directory, under ``distributed.worker.memory.*``) or None
    (not carried yet: data must fit). The memory check's verdict reads it."""
    stream_first: str | None = None
    """Set (to the measurement that says why) when making a workload's generated data again,
    block by block in every pass, is cheaper than spilling it and reading it back: the memory
    check then streams a run that would spill, where the workload can stream
    (:meth:`gpuscale.workloads.Workload.streams`). None: spill first, stream only what cannot
    spill."""
    lossy_writers: Mapping[str, LossyWriter] = field(default_factory=dict)
    """Dask DataFrame writers (``"to_csv"``) whose partitions, written by this family's chunk
    library, lose data (:class:`LossyWriter`); a session writes them through the host library."""

    # -- availability -----------------------------------------------------------------
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

    def check(self, requested: str, collection: str | None = None) -> None:
        """Raise a one-line UserError if this family cannot run ``collection`` work here."""
        miss = self.missing(collection)
        if miss:
            raise missing_module(miss[0], f"backend '{requested}'", miss[1])
        ok, why = self.probe()
        if not ok:
            raise UserError(f"backend '{requested}' cannot run here: {why}", "use --backend cpu (or auto)")

    # -- behaviour ----------------------------------------------------------------------
    @property
    def on_device(self) -> bool:
        """Its chunks live in device memory (:attr:`memory` ``"device"``): each worker holds a
        device, whose memory the memory check budgets and :meth:`device_watch` measures; else
        in the workers' host memory, under distributed's limits and spilling."""
        return self.memory == "device"

    def synchronize(self, client) -> None:
        """Block until every worker's queued device work is done (no-op on the CPU)."""

    def synchronized(self, collection):
        """``collection`` with every output block done on its device when its task ends (so
        waiting for the blocks is waiting for the device, without :meth:`synchronize`'s round
        trip to every worker), or None where this family cannot say so for it. Host families:
        the collection itself (a task's end is its work's end)."""
        return collection

    def worker_memory(self, client) -> dict[str, int]:
        """Memory per worker that holds this family's chunks (host memory limit on CPU)."""
        from ..cluster import workers

        info = workers(client)
        return {addr: int(w.get("memory_limit") or 0) for addr, w in info.items()}

    def device_watch(self, client, start: bool) -> dict[str, dict]:
        """Per worker, what its device memory did during a run (:class:`gpuscale.memory.Watch`):
        ``start=True`` begins counting (the allocator's peak from now, bytes spilled from now),
        ``start=False`` reads and ends it. Host families: {} (their workers' memory is read from
        the process, :func:`gpuscale.memory.worker_state`)."""
        return {}

    def warm_up(self, client) -> float:
        """Pay every worker's first-use costs now, for a cluster kept up for later runs
        (``gpuscale cluster up``): imports of this family's chunk libraries and of gpuscale's
        workloads, and a first small operation through each library (on a GPU: the CUDA
        context, the first kernels, the memory pool's first allocations); on the scheduler, the
        Dask collection modules it needs to unpack a graph. Seconds taken."""
        t0 = time.perf_counter()
        client.run(_warm_worker, self.array_module, self.dataframe_module)
        modules = {
            self.array_module,
            self.dataframe_module,
            *(m for ms in self.knobs.pre_import.values() for m in ms),
        }
        client.run_on_scheduler(_warm_scheduler, sorted(modules))
        self.synchronize(client)
        return time.perf_counter() - t0

    def import_in_background(self, collection: str | None) -> threading.Thread | None:
        """Start importing the libraries this family's workers pre-import for ``collection``
        (``knobs.pre_import``) in a daemon thread of this process, and return it (None: nothing
        to import). A session calls it before starting its cluster: the client needs the same
        libraries to build collections (cuDF takes 2 s to import) and would otherwise import
        them after the cluster is up, while here the import overlaps the workers' start.
        Errors are left to the real import, which reports them."""
        todo = [
            m
            for m in self.knobs.pre_import.get(collection or "session", ())
            if m not in sys.modules and importlib.util.find_spec(m.split(".")[0]) is not None
        ]
        if not todo:
            return None

        def _import():
            for m in todo:
                try:
                    importlib.import_module(m)
                except Exception:  # noqa: BLE001 - reported by the import that needs it
                    return

        t = threading.Thread(target=_import, name="gpuscale-import", daemon=True)
        t.start()
        return t

    def chunk_module(self, collection: str) -> str:
        """This family's chunk library for ``collection`` ("array" or "dataframe")."""
        return self.array_module if collection == "array" else self.dataframe_module

    def host_native(self, collection: str | None = None) -> bool:
        """Whether the collections Dask builds from host objects (:data:`HOST_CHUNKS`: NumPy
        arrays, pandas frames) are this family's already, for ``collection`` (None: both kinds).
        A session of such a family has nothing to convert (the CPU family: NumPy and pandas are
        its own libraries); any other (CuPy / cuDF) converts them, warns or refuses them, as
        ``session.host-collections`` says."""
        kinds = (collection,) if collection else tuple(HOST_CHUNKS)
        return all(self.chunk_module(k).partition(".")[0] == HOST_CHUNKS[k] for k in kinds)

    def lossy_writer(self, writer: str, meta) -> tuple[LossyWriter, list[str]] | None:
        """The loss (and the columns it hits) when ``writer`` writes partitions like ``meta``
        with this family's chunk library; None when the writer keeps them whole."""
        lossy = self.lossy_writers.get(writer)
        if (
            lossy is None
            or type(meta).__module__.partition(".")[0] != self.dataframe_module.partition(".")[0]
        ):
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

    def worker_layout(
        self,
        collection: str | None,
        cores: int,
        gpus: int = 0,
        *,
        workers: int | None = None,
        threads: int | None = None,
    ) -> tuple[int, int, str]:
        """(workers, threads per worker, why) of :meth:`layout_rule`."""
        return self.layout_rule(collection, cores, gpus, workers=workers, threads=threads)[:3]

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
        cores: the one rule behind ``gpuscale run WORKLOAD`` (``collection``: the workload's),
        ``cluster up`` / ``cluster show`` / ``gpuscale.session()`` (``collection`` None, or
        ``--for``) and ``explain``, so the same flags give the same layout everywhere
        (:func:`gpuscale.plan.layout` applies it).

        ``workers`` / ``threads``: what the user set (None: not set). Unset, the family's
        ``threads_per_worker`` for the collection decides and workers fill the cores; a
        cluster for any work (collection None) takes the family's ``session`` value (the CPU
        family's is the array layout's, so ``cluster up`` builds what ``run svd`` builds);
        a family without one gets distributed's default split."""
        if workers and threads:
            return workers, threads, "set by you", "layout.set"
        if workers:
            return (
                workers,
                max(1, cores // workers),
                "workers set by you, threads fill the cores",
                "layout.fill",
            )
        if threads:
            return (
                max(1, cores // threads),
                threads,
                "threads set by you, workers fill the cores",
                "layout.fill",
            )
        tpw = self.worker_threads(collection)
        if tpw is None:
            n, t = _dask_compat.default_split(cores)
            return n, t, f"distributed's default split of {cores} cores", "layout.distributed"
        tpw = max(1, min(tpw, cores))
        return (
            max(1, cores // tpw),
            tpw,
            (
                f"{self.name} family for {collection or 'session'} work: "
                f"{tpw} thread(s) per worker on {cores} cores"
            ),
            "layout.family",
        )


def _warm_worker(array_module: str, dataframe_module: str) -> None:
    """Runs on each worker (:meth:`Family.warm_up`): what the first task would otherwise pay.
    The frame library is optional (array-only installs)."""
    importlib.import_module("gpuscale.workloads").names()  # every workload module (and plugin)
    importlib.import_module("gpuscale.machine").versions()  # what a runner here records (read once)
    xp = importlib.import_module(array_module)
    rs = xp.random.RandomState(0)
    keys = rs.randint(0, 10, size=1000, dtype="int64")
    values = rs.random_sample(1000)
    float(values @ values) + float(keys.sum())  # float(): waits for the device
    if importlib.util.find_spec(dataframe_module.split(".")[0]) is None:
        return
    lib = importlib.import_module(dataframe_module)
    frame = lib.DataFrame({"k": keys, "v": values})
    frame.groupby("k", sort=True).agg({"v": ["max", "count", "mean", "sum"]})
    lib.concat([frame, frame]).sort_values("v").merge(frame, on="k", how="inner")
    # what validation runs (the first kernels of each cost milliseconds on a GPU)
    counts = frame["k"].value_counts(sort=False)
    counts.groupby(level=0).sum().sort_index()
    frame[frame["k"].isin([1, 2])].sort_index()


def _warm_scheduler(modules: list[str]) -> None:
    """Runs in the scheduler (:meth:`Family.warm_up`): unpacking the first graph of each
    collection kind would otherwise import these while the run waits (dask.dataframe: 0.6 s on
    a CPU; cuDF, for a graph whose meta is a cuDF frame: 2 s)."""
    for module in ("dask.array", "dask.dataframe", "gpuscale.workloads", *modules):
        if importlib.util.find_spec(module.split(".")[0]) is not None:
            importlib.import_module(module)
