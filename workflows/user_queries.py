"""User code at GPU speed: the same Dask DataFrame queries, written as a user writes them, in a
gpuscale session and the other ways a user would run them, side by side in one run.

Suites (workflows/queries/): the H2O db-benchmark questions (groupby q1-q10 and join q1-q5)
on data generated to its published generators' specification, and analytic queries over
TPC-H-shaped data from ``tpchgen-cli``. Each run of a query reads the tables it names from
Parquet and is timed warm (``--warmup`` untimed runs, one by default, then ``--repeat`` timed
runs; the median counts); every answer is checked against pandas on the same files (``--reference``:
DuckDB's answers to the queries' SQL where pandas' would not fit in memory). Each side
is opened once and runs every query (workflows/harness.py's Study), or, with ``--rounds N``,
opened again in each of N rounds of alternating order, so that drift hits every side alike;
``--json`` is rewritten after every cell, so ``--resume`` continues a run cut short. A Dask
side's run past ``--hang-after`` seconds (default 300) is a hang: that query is an error, the
side's other queries are not run and its cluster is closed, and ``--resume`` times them again;
a run during which the side's workers are restarted twice for memory is cancelled, that query an
error, and the side's next query runs. pandas' answers are made for the queries a run still times,
before any timing, or (``--answers when-needed``) each when a check first needs one.

Sides (``--sides``, default: every side that can run here):

    dask-cpu      plain Dask: distributed.LocalCluster() on this machine's cores, defaults
    gpuscale-cpu  the same code in ``gpuscale.session(backend="cpu")``
    dask-cudf     dask-cudf set up by hand: dask_cuda.LocalCUDACluster() and
                  dataframe.backend = cudf, defaults
    gpuscale-gpu  the same code in ``gpuscale.session(backend="gpu")``
    polars-gpu    Polars' GPU engine (cudf-polars) on the query's SQL, on the same files
    cudf-polars-dask  the same Polars plans on cudf-polars' DaskEngine over a
                  dask_cuda.LocalCUDACluster() of the machine's GPUs (``gpus=N``: the first N)
    duckdb        DuckDB on the query's SQL, on the same files

A variant of a side adds options after its name, and is a column of its own with its speed-up
over the first side of its base in ``--sides``: ``gpus=N`` (the first N GPUs; gpuscale-gpu,
dask-cudf, cudf-polars-dask), ``protocol=ucx``, ``shuffle=tasks|p2p|disk`` (the session's ``shuffle_method``;
Dask's ``dataframe.shuffle.method`` on a plain side),
``gather=direct|scheduler`` (how a session's answers reach the client: ``cluster.gather``).

    python workflows/user_queries.py                              # H2O 1e7, TPC-H SF10, all sides
    python workflows/user_queries.py --h2o-rows 1e7,1e8 --tpch-scale 10 --json out.json
    python workflows/user_queries.py --h2o-rows 1e4 --tpch-scale 0.01 --sides dask-cpu,gpuscale-cpu
    python workflows/user_queries.py --sides gpuscale-gpu:gpus=1,gpuscale-gpu:gpus=2  # 1 GPU vs 2

Exit 3 when any answer differs from the reference (or a side failed a query), else 0; exit 2, before
any data is made, for a side that is not one or needs more GPUs than there are. Interrupted
(Ctrl-C, or SIGINT from ``timeout -s INT``), it prints the tables of the cells measured so far,
keeps them in ``--json``, and exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Container, Mapping

import dask
import harness
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import queries

from gpuscale import interrupts

GPU_SIDES = ("dask-cudf", "gpuscale-gpu", "polars-gpu", "cudf-polars-dask")
SIDES = (
    "gpuscale-gpu",
    "dask-cudf",
    "cudf-polars-dask",
    "polars-gpu",
    "duckdb",
    "polars-cpu",
    "dask-cpu",
    "gpuscale-cpu",
)
SUITE_SCALES = {"h2o-groupby": "h2o_rows", "h2o-join": "h2o_rows", "tpch": "tpch_scale"}


# ---------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------
def data_sets(args) -> list[tuple[queries.Suite, str, pathlib.Path]]:
    """(suite, size label, folder) for every suite, size and TPC-H layout asked, made when
    missing: TPC-H ``multi`` (several files per table, as ``tpchgen-cli --parts`` writes them;
    its size label is the scale factor) or ``single`` (one file per table; label ``SCALE:single``)."""
    out = []
    for name in args.suites.split(","):
        suite = queries.suites()[name]
        sizes = args.h2o_rows if SUITE_SCALES[name] == "h2o_rows" else args.tpch_scale
        layouts = args.tpch_layouts.split(",") if name == "tpch" else [None]
        for size in str(sizes).split(","):
            scale = int(float(size)) if SUITE_SCALES[name] == "h2o_rows" else float(size)
            for layout in layouts:
                label = size if layout in (None, "multi") else f"{size}:{layout}"
                folder = pathlib.Path(args.data) / f"{name}-{label.replace(':', '-')}"
                if not (folder / ".complete").exists():
                    folder.mkdir(parents=True, exist_ok=True)
                    t0 = time.perf_counter()
                    suite.make(folder, scale, **({"layout": layout} if layout else {}))
                    (folder / ".complete").write_text("")
                    print(f"made {name} {label} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
                out.append((suite, label, folder))
    return out


def paths(suite: queries.Suite, folder: pathlib.Path) -> dict[str, str]:
    """What a Dask or pandas user reads for each table: its file, or its folder of files."""
    return {t: queries.table_path(folder, t) for t in suite.tables}


def globs(suite: queries.Suite, folder: pathlib.Path) -> dict[str, str]:
    """:func:`paths` as Polars and DuckDB take them (a glob of a folder's files)."""
    return {t: queries.table_glob(folder, t) for t in suite.tables}


# ---------------------------------------------------------------------------------------
# Sides: each opens once and returns run(query, suite, folder) -> answer
# ---------------------------------------------------------------------------------------
class Read(dict):
    """The tables of a data set as a Dask user's code reads them: ``dd.read_parquet`` of a table
    when the query first names it (a query pays for the tables it uses, as Polars' and DuckDB's
    lazy scans do)."""

    def __init__(self, paths: dict[str, str]):
        super().__init__()
        self.paths = paths

    def __missing__(self, table: str):
        import dask.dataframe as dd

        self[table] = frame = dd.read_parquet(self.paths[table])
        return frame


def _dask_runner(hang_after: float | None, routed: bool = False):
    """A Dask side's runs; one past ``hang_after`` seconds is a hang (:class:`harness.Hung`).
    ``routed``: computed as the user computes (``.compute()``), which a gpuscale session routes
    to its engine; else through the client, where the hang and memory watch see the work."""

    def run(q, suite, folder):
        out = q.dask(Read(paths(suite, folder)))
        if not dask.is_dask_collection(out):
            return out
        if routed:
            return harness.call_within(out.compute, hang_after)
        return harness.compute_within(out, hang_after)

    return run


OPTIONS = {
    "gpus": (
        ("gpuscale-gpu", "dask-cudf", "cudf-polars-dask"),
        "the first N GPUs",
        lambda v: v.isdigit() and int(v) > 0,
    ),
    "protocol": (
        ("gpuscale-gpu", "dask-cudf", "cudf-polars-dask"),
        "tcp or ucx",
        ("tcp", "ucx").__contains__,
    ),
    "shuffle": (
        ("gpuscale-gpu", "gpuscale-cpu", "dask-cudf", "dask-cpu"),
        "tasks, p2p or disk",
        ("tasks", "p2p", "disk").__contains__,
    ),
    "gather": (
        ("gpuscale-gpu", "gpuscale-cpu"),
        "direct or scheduler: how answers reach the client (cluster.gather)",
        ("direct", "scheduler").__contains__,
    ),
    "executor": (
        ("polars-gpu",),
        "in-memory or streaming: cudf-polars' executor (its default: streaming)",
        ("in-memory", "streaming").__contains__,
    ),
    "engine": (
        ("gpuscale-gpu", "gpuscale-cpu"),
        "auto, polars or dask: the session's engine for the queries (session.engine)",
        ("auto", "polars", "dask").__contains__,
    ),
}
"""A side's variants (``--sides gpuscale-gpu:gpus=2:shuffle=p2p``): what each option takes."""


def side_spec(name: str) -> tuple[str, dict[str, str]]:
    return harness.side_spec(name, SIDES, OPTIONS)


@contextlib.contextmanager
def open_side(name: str, hang_after: float | None = None):
    base, kw = side_spec(name)
    conf = {"dataframe.shuffle.method": kw["shuffle"]} if "shuffle" in kw and base.startswith("dask") else {}
    gpus = list(range(int(kw["gpus"]))) if "gpus" in kw else None
    if base == "dask-cpu":
        from distributed import Client, LocalCluster

        with (
            harness.peer_cluster_config(),
            LocalCluster(dashboard_address=None) as cluster,
            Client(cluster),
            dask.config.set({"dataframe.backend": "pandas", **conf}),
        ):
            yield _dask_runner(hang_after)
    elif base == "dask-cudf":
        from dask_cuda import LocalCUDACluster
        from distributed import Client

        from gpuscale.cluster.cuda import wait_exited, worker_pids

        where = {"CUDA_VISIBLE_DEVICES": gpus} if gpus else {}
        pids: list[int] = []
        try:
            with (
                harness.peer_cluster_config(),
                LocalCUDACluster(
                    dashboard_address=None, protocol=kw.get("protocol"), preload=harness.PEER_PRELOAD, **where
                ) as cluster,
                Client(cluster),
                dask.config.set({"dataframe.backend": "cudf", **conf}),
            ):
                pids = worker_pids(cluster)
                yield _dask_runner(hang_after)
        finally:
            wait_exited(pids)  # the next side's pool needs the GPUs these workers held
    elif base in ("gpuscale-cpu", "gpuscale-gpu"):
        import gpuscale
        from gpuscale.backends import session_knobs

        keywords = {"shuffle_method": kw["shuffle"]} if "shuffle" in kw else {}
        keywords |= {"gpus": ",".join(map(str, gpus))} if gpus else {}
        keywords |= {"gather": kw["gather"]} if "gather" in kw else {}
        keywords |= {"engine": kw["engine"]} if "engine" in kw else {}
        with (
            dask.config.set(conf),  # as the user's own Dask config
            gpuscale.session(backend=base.split("-")[1], protocol=kw.get("protocol"), **keywords) as s,
        ):
            knobs = "; ".join(session_knobs.described(s.applied))
            print(f"{name}: {knobs}", file=sys.stderr)
            run = _dask_runner(hang_after, routed=True)

            def noted(q, suite, folder):
                before = len(s.queries)
                got = run(q, suite, folder)
                return Engined(got, [(e["engine"], e["rule_id"]) for e in s.queries[before:]])

            yield noted
    elif base == "cudf-polars-dask":
        yield from _cudf_polars_dask(gpus, kw.get("protocol"))
    elif base in ("polars-gpu", "polars-cpu"):
        import polars as pl

        executor = {"executor": kw["executor"]} if "executor" in kw else {}
        engine = pl.GPUEngine(raise_on_fail=True, **executor) if base == "polars-gpu" else "streaming"

        def run(q, suite, folder):
            tables = {t: pl.scan_parquet(p) for t, p in globs(suite, folder).items()}
            plan = q.polars(tables) if q.polars is not None else pl.SQLContext(tables).execute(q.sql)
            try:
                return plan.collect(engine=engine)
            except pl.exceptions.ComputeError as e:
                if "GPU not possible" not in str(e):
                    raise
                return OnCpu(plan.collect())  # what Polars does by default where its GPU engine cannot

        yield run
    elif base == "duckdb":

        def run(q, suite, folder):
            con = duckdb_over(suite, folder)
            # the answer as DuckDB materializes it (Arrow), as Polars' side returns its own frame:
            # turning it into pandas is the check's work, not the engine's
            return con.sql(q.sql).to_arrow_table()

        yield run


def duckdb_over(suite: queries.Suite, folder: pathlib.Path, spill: pathlib.Path | None = None):
    """A DuckDB connection with a view of each of the data set's tables, spilling to ``spill``
    (None: DuckDB's default)."""
    import duckdb

    con = duckdb.connect(config={"temp_directory": str(spill)} if spill else {})
    for t, p in globs(suite, folder).items():
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{p}')")
    return con


def _cudf_polars_dask(gpus: list[int] | None, protocol: str | None):
    """cudf-polars' DaskEngine as its docs set it up on a LocalCUDACluster: hardware binding left
    to dask-cuda, each worker one GPU; the same Polars plans as the polars-gpu side."""
    import polars as pl
    from cudf_polars.engine.dask import DaskEngine
    from cudf_polars.engine.hardware_binding import HardwareBindingPolicy
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from gpuscale.cluster.cuda import wait_exited, worker_pids

    where = {"CUDA_VISIBLE_DEVICES": gpus} if gpus else {}
    pids: list[int] = []
    try:
        with (
            harness.peer_cluster_config(),
            LocalCUDACluster(dashboard_address=None, protocol=protocol, **where) as cluster,
            Client(cluster) as client,
        ):
            pids = worker_pids(cluster)
            t0 = time.perf_counter()
            engine = DaskEngine(
                dask_client=client,
                engine_options={
                    "raise_on_fail": True,
                    "hardware_binding": HardwareBindingPolicy(enabled=False),
                },
            )
            print(f"cudf-polars-dask: engine up in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            try:

                def run(q, suite, folder):
                    tables = {t: pl.scan_parquet(p) for t, p in globs(suite, folder).items()}
                    plan = q.polars(tables) if q.polars is not None else pl.SQLContext(tables).execute(q.sql)
                    return plan.collect(engine=engine)

                yield run
            finally:
                engine.shutdown()
    finally:
        wait_exited(pids)


class Engined:
    """A gpuscale side's answer with the engines its session's route took for it (``engines``:
    (engine, rule id) per collection computed)."""

    def __init__(self, answer, engines: list[tuple[str, str]]):
        self.answer, self.engines = answer, engines


class OnCpu:
    """An answer Polars computed on its CPU engine because its GPU engine cannot run the query."""

    def __init__(self, frame):
        self.frame = frame

    def to_pandas(self):
        return self.frame.to_pandas()


def pick_sides(text: str | None) -> list[str]:
    """``--sides`` (each a side or a variant of one), or every side that can run here; a side
    asking for more GPUs than there are ends the run in one line."""
    from gpuscale import machine

    sides = harness.pick_sides(text, SIDES, available_sides() if not text else [], OPTIONS)
    have = len(machine.gpus())
    for name in sides:
        base, kw = side_spec(name)
        if base in GPU_SIDES and int(kw.get("gpus", 1)) > have:
            harness.usage_error(f"side {name!r} needs {kw.get('gpus', 1)} GPU(s); this machine has {have}")
    return sides


def available_sides() -> list[str]:
    """Every side whose libraries are importable here (GPU sides only with a GPU)."""
    from gpuscale import machine

    gpu = bool(machine.gpus())
    need = {
        "dask-cudf": ("dask_cuda", "dask_cudf"),
        "gpuscale-gpu": ("dask_cuda", "dask_cudf"),
        "polars-gpu": ("polars", "cudf_polars"),
        "cudf-polars-dask": ("polars", "cudf_polars", "dask_cuda"),
        "polars-cpu": ("polars",),
        "duckdb": ("duckdb",),
    }
    return [
        s
        for s in SIDES
        if (gpu or s not in GPU_SIDES) and all(importlib.util.find_spec(m) for m in need.get(s, ()))
    ]


# ---------------------------------------------------------------------------------------
# Timing and checking
# ---------------------------------------------------------------------------------------
def side(name: str, refs: Mapping, hang_after: float | None = None) -> harness.Side:
    """One side of the study: its cluster or engine opened once, each query checked against
    pandas' answer; a Dask side's run past ``hang_after`` seconds is a hang."""

    def build(run, case):
        suite, size, folder, q = case
        key = (suite.name, size, q.name)
        # pandas' answer is read for the check, after the timed runs, and let go after it
        return functools.partial(run, q, suite, folder), lambda got: queries.same_answer(
            _answer_of(got), refs[key]
        )

    return harness.Side(name, build, open=lambda _: open_side(name, hang_after), notes=_notes)


def _answer_of(got):
    return got.answer if isinstance(got, Engined) else got


def _notes(got) -> dict:
    """How the answer was made: by Polars' CPU engine where its GPU engine could not (``on_cpu``),
    or by the engines a gpuscale session took (``engines``: engine and rule id per compute)."""
    if isinstance(got, OnCpu):
        return {"on_cpu": True}
    if isinstance(got, Engined):
        return {"engines": [list(e) for e in got.engines]}
    return {}


def case_key(case) -> str:
    suite, size, _, q = case
    return f"{suite.name}|{size}|{q.name}"


class Answers(Mapping):
    """pandas' answers kept beside their data, by ``(suite, size, query)``: each a
    :class:`queries.KeptAnswer`, read by the check that needs it, none held (at 1e8 rows a join's
    answer is a few GB). With ``make``, an answer not yet kept is made by ``make(key)`` when a
    check first asks for it."""

    def __init__(
        self,
        files: dict[tuple[str, str, str], pathlib.Path],
        makers: dict[tuple[str, str], str] | None = None,
        make=None,
    ):
        self.files, self.makers, self.make = files, makers or {}, make

    def __getitem__(self, key) -> queries.KeptAnswer:
        if self.make is not None and made_by(self.files[key]) != self.makers.get(key[:2], "pandas"):
            self.make(key)
        return queries.KeptAnswer(self.files[key])

    def __iter__(self):
        return iter(self.files)

    def __len__(self):
        return len(self.files)


def references(
    sets,
    jobs: int = 0,
    needed: Container[tuple[str, str, str]] | None = None,
    when_needed: bool = False,
    maker: str = "auto",
) -> Answers:
    """The reference answer to every query (or to those ``needed``, by ``(suite, size, query)``:
    the queries a resumed run still times), computed once per data set and kept beside its data,
    by the engine :func:`reference_maker` picks from ``maker``: pandas (``jobs`` processes
    compute a data set's missing ones, 0: :func:`reference_jobs`; each process holds the set's
    tables) or DuckDB on the queries' SQL, in this process. A kept answer another engine made is
    made again. ``when_needed``: none now; each is made when a check first needs it
    (:func:`_answer_apart`), so a query no side answers costs none."""
    files = {
        (suite.name, size, q.name): folder / f"answer-{q.name}.parquet"
        for suite, size, folder in sets
        for q in suite.queries
    }
    available = psutil.virtual_memory().available
    peaks = {(s.name, size): s.reference_peak * in_memory_bytes(s, folder) for s, size, folder in sets}
    makers = {}
    for suite, size, folder in sets:
        makers[suite.name, size], why = reference_maker(maker, available, peaks[suite.name, size])
        if why:
            print(f"{folder.name}: {why}", file=sys.stderr)
    if when_needed:
        folders = {(suite.name, size): folder for suite, size, folder in sets}
        return Answers(files, makers, make=functools.partial(_answer_apart, folders, makers))
    for suite, size, folder in sets:
        by = makers[suite.name, size]
        missing = [
            q.name
            for q in suite.queries
            if (needed is None or (suite.name, size, q.name) in needed)
            and made_by(files[suite.name, size, q.name]) != by
        ]
        if not missing:
            continue
        t0 = time.perf_counter()
        if by == "duckdb":
            for q in missing:
                _answer_duckdb(suite.name, str(folder), q)
            n = 1
        else:
            n = _answers_pandas(suite, folder, missing, jobs, available, peaks[suite.name, size])
        took = time.perf_counter() - t0
        print(
            f"{WHOSE[by]} answers to {len(missing)} queries of {folder.name} in {took:.1f} s "
            f"({n} process{'es' * (n > 1)})",
            file=sys.stderr,
        )
    return Answers(files, makers)


REFERENCES = ("auto", "pandas", "duckdb")
"""``--reference``: who makes the answers every side is checked against."""
WHOSE = {"pandas": "pandas'", "duckdb": "DuckDB's"}


def reference_maker(asked: str, available: int, peak: float) -> tuple[str, str | None]:
    """The engine that makes a data set's reference answers, and why where it is not the one
    asked for: ``asked``, or for ``auto`` pandas where 4/5 of the ``available`` memory holds one
    process at its ``peak``, else DuckDB, which runs the queries' SQL in its own memory limit
    and spills the rest to disk (the larger scale factors)."""
    if asked != "auto":
        return asked, None
    if peak <= 0.8 * available:
        return "pandas", None
    if importlib.util.find_spec("duckdb") is None:
        harness.usage_error(
            f"pandas' answers would hold {peak / 2**30:.0f} GiB at their peak, more than 4/5 of the "
            f"{available / 2**30:.0f} GiB available: install duckdb (its answers are then the "
            "reference) or give a smaller size"
        )
    return "duckdb", (
        f"pandas' answers would hold {peak / 2**30:.0f} GiB at their peak, more than 4/5 of the "
        f"{available / 2**30:.0f} GiB available: DuckDB's answers to the queries' SQL are the reference"
    )


MAKER = b"gpuscale.reference"
"""The key of a kept answer's Parquet metadata naming the engine that made it."""


def made_by(path: pathlib.Path) -> str | None:
    """The engine that made the answer kept at ``path`` (None: none is kept)."""
    if not path.exists():
        return None
    return (pq.read_schema(path).metadata or {}).get(MAKER, b"pandas").decode()


def _answers_pandas(
    suite, folder: pathlib.Path, missing: list[str], jobs: int, available: int, peak: float
) -> int:
    """pandas' answers to the ``missing`` queries of one data set; returns the processes used."""
    n = min(reference_jobs(jobs, os.cpu_count() or 1, available, peak), len(missing))
    fit = memory_holds(available, peak) or n
    if n > fit:
        print(
            f"--reference-jobs {n}: 4/5 of the available memory holds {fit} at {folder.name}'s "
            f"measured peak ({peak / 2**30:.1f} GiB each)",
            file=sys.stderr,
        )
    if n > 1:
        import concurrent.futures.process

        try:
            with _answer_processes(n) as pool:
                list(pool.map(functools.partial(_answer, suite.name, str(folder)), missing))
        except concurrent.futures.process.BrokenProcessPool:
            raise SystemExit(
                f"pandas' answers on {folder.name}: a process of {n} ended abruptly (out of "
                f"memory?); the answers made are kept: give fewer --reference-jobs (0: as memory allows)"
            ) from None
    else:
        for q in missing:
            _answer(suite.name, str(folder), q)
        _TABLES.clear()  # the tables are not held while the sides run
    return n


def _answer_processes(n: int):
    import concurrent.futures
    import multiprocessing

    return concurrent.futures.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))


def _answer_apart(
    folders: dict[tuple[str, str], pathlib.Path],
    makers: dict[tuple[str, str], str],
    key: tuple[str, str, str],
) -> None:
    """The reference answer to one query, made when a check first needs it: pandas' in a process
    of its own, so that the data set's tables are let go before the next side runs; DuckDB's here."""
    suite_name, size, query = key
    folder, by = folders[suite_name, size], makers[suite_name, size]
    t0 = time.perf_counter()
    if by == "duckdb":
        _answer_duckdb(suite_name, str(folder), query)
    else:
        with _answer_processes(1) as pool:
            pool.submit(_answer, suite_name, str(folder), query).result()
    took = time.perf_counter() - t0
    print(f"{WHOSE[by]} answer to {query} of {folder.name} made when needed in {took:.1f} s", file=sys.stderr)


def reference_jobs(asked: int, cores: int, available: int, peak: float) -> int:
    """Processes for pandas' answers to one data set: ``asked``, else one per 4 cores, at most 4,
    and no more than 4/5 of the available memory holds at ``peak`` bytes each (the suite's
    ``reference_peak`` times its tables' size)."""
    if asked:
        return asked
    jobs = max(1, min(4, cores // 4))
    return min(jobs, memory_holds(available, peak) or jobs)


def memory_holds(available: int, peak: float) -> int | None:
    """Processes of ``peak`` bytes each that 4/5 of ``available`` memory holds (at least one;
    None: no peak measured)."""
    return max(1, int(0.8 * available // peak)) if peak else None


def in_memory_bytes(suite: queries.Suite, folder: pathlib.Path) -> int:
    """A data set's tables' size uncompressed, from their Parquet footers (nothing read)."""
    import pyarrow.dataset as pads

    total = 0
    for p in paths(suite, folder).values():
        for frag in pads.dataset(p, format="parquet").get_fragments():
            meta = frag.metadata
            total += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return total


_TABLES: dict[str, dict] = {}
"""The tables of the data set a process last answered on, by folder."""


def _answer(suite_name: str, folder: str, query: str) -> None:
    suite = queries.suites()[suite_name]
    if folder not in _TABLES:
        _TABLES.clear()
        _TABLES[folder] = {t: pd.read_parquet(p) for t, p in paths(suite, pathlib.Path(folder)).items()}
    (q,) = [q for q in suite.queries if q.name == query]
    _keep(queries.to_pandas(q.reference(_TABLES[folder])), pathlib.Path(folder), q.name, "pandas")


def _answer_duckdb(suite_name: str, folder: str, query: str) -> None:
    suite = queries.suites()[suite_name]
    (q,) = [q for q in suite.queries if q.name == query]
    con = duckdb_over(suite, pathlib.Path(folder), spill=pathlib.Path(folder) / ".duckdb-spill")
    _keep(queries.to_pandas(con.sql(q.sql).to_arrow_table()), pathlib.Path(folder), q.name, "duckdb")


def _keep(answer: pd.DataFrame, folder: pathlib.Path, query: str, by: str) -> None:
    """``answer`` kept as ``folder/answer-QUERY.parquet``, its maker ``by`` in its metadata."""
    kept = folder / f"answer-{query}.parquet"
    for stale in kept.parent.glob(f"{kept.stem}.*.npy"):  # fingerprints of an earlier answer
        stale.unlink()
    table = pa.Table.from_pandas(answer)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), MAKER: by.encode()})
    pq.write_table(table, kept.with_suffix(".part"))
    os.replace(kept.with_suffix(".part"), kept)  # a run cut short leaves no half-written answer


def run_all(args) -> dict:
    sides = pick_sides(args.sides)  # a wrong side ends the run before any data is made
    sets = data_sets(args)
    earlier = _earlier(args.resume, sides)
    resumed = earlier["cells"]
    todo = {
        (suite.name, size, q.name)
        for suite, size, _ in sets
        for q in suite.queries
        if any(f"{suite.name}|{size}|{q.name}|{s}" not in resumed for s in sides)
    }
    refs = references(
        sets,
        args.reference_jobs,
        None if args.prepare_only else todo,
        when_needed=args.answers == "when-needed" and not args.prepare_only,
        maker=args.reference,
    )
    if args.prepare_only:
        return None
    d = {
        "sides": sides + [s for s in earlier["sides"] if s not in sides],
        "repeat": args.repeat,
        "rounds": args.rounds or None,
        "max_time": args.max_time,
        "machine": _machine(),
        "sets": _joined(
            [
                {
                    "suite": s.name,
                    "size": z,
                    "queries": [(q.name, q.title) for q in s.queries],
                    "reference": refs.makers[s.name, z],
                }
                for s, z, _ in sets
            ],
            earlier["sets"],
        ),
        "cells": resumed,
    }

    def measured(key: str, r: dict) -> None:
        suite, size, q, side_name = key.split("|")
        print(
            f"{side_name:13s} {suite} {size} {q}: "
            f"{r.get('median_s', float('nan')):.4f} s {'ok' if r.get('valid') else r}",
            file=sys.stderr,
        )
        d["cells"][key] = r
        if args.json:  # every cell measured so far survives an interruption
            harness.write(args.json, "user_queries", d)

    study = harness.Study(
        [side(name, refs, args.hang_after or None) for name in sides],
        [(suite, size, folder, q) for suite, size, folder in sets for q in suite.queries],
        key=case_key,
        repeat=args.repeat,
        warmup=args.warmup,
        max_time=args.max_time,
        rounds=args.rounds or None,
    )
    try:
        d["cells"] = study.run(cells=d["cells"], on_cell=measured)
    except KeyboardInterrupt:  # the cells measured so far are in d and in --json already
        d["interrupted"] = True
    return d


def _earlier(path: str | None, sides: list[str]) -> dict:
    """The sides, data sets and cells of an earlier run (``--resume``), every cell but those of
    ``sides`` that :func:`harness.retry` times again: the sides and sets this run does not time
    stay in its file as they were. Empty without one."""
    if not path or not pathlib.Path(path).exists():
        return {"sides": [], "sets": [], "cells": {}}
    d = harness.load(path, "user_queries")
    cells = {k: c for k, c in d["cells"].items() if not (k.rsplit("|", 1)[1] in sides and harness.retry(c))}
    return {"sides": list(d["sides"]), "sets": list(d["sets"]), "cells": cells}


def _joined(sets: list[dict], earlier: list[dict]) -> list[dict]:
    """This run's data sets, then the earlier run's others."""
    named = {(s["suite"], s["size"]) for s in sets}
    return sets + [s for s in earlier if (s["suite"], s["size"]) not in named]


def _machine() -> dict:
    from gpuscale import machine

    return {"versions": machine.versions(), "hardware": machine.hardware()}


# ---------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------
RATIOS = (
    ("gpu vs cpu", "dask-cpu", "gpuscale-gpu", "x faster than plain Dask on the CPU"),
    ("/cudf", "gpuscale-gpu", "dask-cudf", "gpuscale's time over dask-cudf by hand's"),
    ("/polars", "gpuscale-gpu", "polars-gpu", "gpuscale's time over Polars GPU's"),
    ("/engine", "gpuscale-gpu", "cudf-polars-dask", "gpuscale's time over cudf-polars DaskEngine's"),
    ("/duckdb", "gpuscale-gpu", "duckdb", "gpuscale's time over DuckDB's"),
    ("cpu/dask", "gpuscale-cpu", "dask-cpu", "gpuscale CPU session's time over plain Dask's"),
    ("cpu/polars", "gpuscale-cpu", "polars-cpu", "gpuscale CPU session's time over Polars CPU's"),
)
WHAT = (
    ("median_s", "median of the warm runs (each cell's times_s in --json)"),
    ("first_s", "each query's first run on its side (cold: its first compute there)"),
)
"""The tables printed for each data set: the warm runs, then the first runs."""


geomean = harness.geomean


def tables(d: dict) -> tuple[str, bool]:
    """The printed tables (one per suite and size) and whether every answer measured was right;
    a cell not measured (a side this run left out, or an interrupted run) reads ``.``."""
    lines, ok, missing = [], True, 0
    sides = d["sides"]
    variants = [x for x in sides if harness.side_base(x) != x]
    labels = {x: x[:12] for x in sides} | {x: f"v{i}" for i, x in enumerate(variants, 1)}
    first = {}  # a variant is compared with its base side, else the first of its base in --sides
    for x in sides:
        first.setdefault(harness.side_base(x), x)
    first |= {x: x for x in sides if harness.side_base(x) == x}
    variant_ratios = [
        (f"{labels[v]} vs {labels[first[b]]}", first[b], v, f"x faster than {first[b]}")
        for v in variants
        if first[b := harness.side_base(v)] != v
    ]
    # a named ratio compares the first sides of its two bases where they run with the same
    # options (gpuscale-gpu:gpus=1 against dask-cudf:gpus=1, not against dask-cudf:gpus=2)
    named = [
        (label, first[a], first[b], text)
        for label, a, b, text in RATIOS
        if a in first and b in first and side_spec(first[a])[1] == side_spec(first[b])[1]
    ]
    ratios = named + variant_ratios
    for s in d["sets"]:
        for what, title in WHAT:
            if what != "median_s" and not any(
                (c or {}).get(what) for c in d["cells"].values() if c is not None
            ):
                continue
            part, part_ok, part_missing = _table(d, s, sides, labels, ratios, what, title)
            lines += part
            if what == "median_s":
                ok &= part_ok
                missing += part_missing
    if variants:
        lines.append("\ncolumns: " + "; ".join(f"{labels[x]} = {x}" for x in variants))
    lines.append("\nratios: " + "; ".join(f"{r[0]}: {r[3]}" for r in (*RATIOS, *variant_ratios)))
    if missing:
        lines.append(
            f"{missing} cells not measured (.): not in this run's sides, or the run was interrupted "
            "(--resume JSON with their sides times them)"
        )
    return "\n".join(lines), ok


def _table(d, s, sides, labels, ratios, what: str, title: str):
    """One data set's table of ``what`` (a cell's key: ``median_s`` or ``first_s``): its lines,
    whether every answer was right and how many cells were not measured."""
    ok, missing = True, 0
    head = ["query"] + [labels[x] for x in sides] + [r[0] for r in ratios]
    rows, cols = [], {r[0]: [] for r in ratios}
    totals = {x: 0.0 for x in sides}
    for qname, _ in s["queries"]:
        cell = {side: d["cells"].get(f"{s['suite']}|{s['size']}|{qname}|{side}") for side in sides}
        ok &= all(c.get("valid") for c in cell.values() if c is not None)
        missing += sum(c is None for c in cell.values())
        for x, c in cell.items():
            t = _time(c, what)
            totals[x] = totals[x] + t if t is not None and totals[x] is not None else None
        row = [qname] + [_fmt(c, what) for c in cell.values()]
        for label, a, b, _ in ratios:
            x, y = _time(cell[a], what), _time(cell[b], what)
            v = x / y if x and y else None
            cols[label].append(v)
            unsure = (
                v and what == "median_s" and harness.ratio(cell[b], cell[a])["verdict"] == "not significant"
            )
            row.append(f"{v:.2f}" + ("~" if unsure else "") if v else "-")
        rows.append(row)
    means = [geomean(cols[r[0]]) for r in ratios]  # nan: no query has the ratio
    rows.append(["total"] + [f"{totals[x]:.2f}" if totals[x] else "-" for x in sides] + [""] * len(ratios))
    rows.append(["geomean"] + [""] * len(sides) + [f"{m:.2f}" if m == m else "-" for m in means])
    widths = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    by = s.get("reference", "pandas")
    lines = [
        f"\n{s['suite']} {s['size']}: {title}, seconds (* wrong answer, E error, c Polars' CPU "
        "engine: not in ratios; ~ a ratio whose 95 % interval holds 1: not significant; . not measured)"
        + ("" if by == "pandas" else f"; answers checked against {WHOSE[by]}, {WHOSE[by]} own against itself")
    ]
    for r in [head] + rows:
        lines.append("  ".join(str(v).rjust(w) for v, w in zip(r, widths)))
    return lines, ok, missing


def _time(c: dict | None, what: str = "median_s") -> float | None:
    """A cell's time where it counts in a ratio: a right answer, on the side's own engine."""
    return c.get(what) if c and c.get("valid") and not c.get("on_cpu") else None


def _fmt(c: dict | None, what: str = "median_s") -> str:
    if c is None:
        return "."
    if "error" in c:
        return "E"
    if c.get(what) is None:
        return "."
    return f"{c[what]:.3f}" + ("" if c["valid"] else "*") + ("c" if c.get("on_cpu") else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="h2o-groupby,h2o-join,tpch")
    ap.add_argument("--h2o-rows", default="1e7", help="rows of the H2O data sets, comma-separated")
    ap.add_argument("--tpch-scale", default="10", help="TPC-H scale factors, comma-separated")
    ap.add_argument(
        "--tpch-layouts",
        default="multi",
        help="multi (several files per table, as tpchgen-cli --parts writes them) and/or single "
        "(one file per table), comma-separated",
    )
    ap.add_argument(
        "--sides",
        default=None,
        help=f"comma-separated, from {', '.join(SIDES)}; a variant adds options, e.g. "
        "gpuscale-gpu:gpus=2:shuffle=p2p (gpus, protocol, shuffle, gather, executor, engine)",
    )
    harness.add_common(ap, repeat=3, warmup=1, rounds=0, max_time=10.0, hang_after=300.0, resume=True)
    ap.add_argument(
        "--data", default=None, help="where the data sets are made and kept (default: a temporary folder)"
    )
    ap.add_argument(
        "--reference-jobs",
        type=int,
        default=0,
        metavar="N",
        help="processes computing a data set's pandas answers (default: one per 4 cores, at most 4, "
        "as many as 4/5 of the available memory holds at the suite's measured peak each)",
    )
    ap.add_argument(
        "--reference",
        choices=REFERENCES,
        default="auto",
        help="who makes the answers every side is checked against (auto: pandas where 4/5 of the "
        "available memory holds its peak on a data set, else DuckDB on the queries' SQL)",
    )
    ap.add_argument(
        "--answers",
        choices=("first", "when-needed"),
        default="first",
        help="make pandas' answers to the queries left to time before timing any (first: in "
        "--reference-jobs processes at once), or each when a check first needs one, in a process "
        "of its own (a query no side answers costs none; the making is then in that check's check_s)",
    )
    ap.add_argument(
        "--print-only",
        action="store_true",
        help="print the tables of --resume JSON, make and time nothing",
    )
    ap.add_argument(
        "--prepare-only",
        action="store_true",
        help="make the data sets and the reference answers in --data, time nothing",
    )
    args = ap.parse_args(argv)
    if args.print_only:
        if not args.resume or not pathlib.Path(args.resume).exists():
            harness.usage_error("--print-only needs --resume JSON, a file of an earlier run")
        text, ok = tables(harness.load(args.resume, "user_queries"))
        print(text)
        return 0 if ok else 3
    with contextlib.ExitStack() as stack:
        if args.data is None:
            args.data = stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscale-queries-"))
        try:
            with interrupts.sigterm_raises():  # Dask's logs of the work cut off stay quiet
                d = run_all(args)
        except KeyboardInterrupt:
            print(
                "user_queries: interrupted while making the data or pandas' answers; nothing timed",
                file=sys.stderr,
            )
            return 130
    if d is None:
        return 0
    interrupted = d.pop("interrupted", False)
    text, ok = tables(d)
    print(text)
    if args.json:
        harness.write(args.json, "user_queries", d)
    if interrupted:
        where = f"; {args.json} keeps them (--resume {args.json} times the rest)" if args.json else ""
        print(f"user_queries: interrupted; the tables show the cells measured so far{where}", file=sys.stderr)
        return 130
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
