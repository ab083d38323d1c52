"""Snippets from public Dask notebooks (not written here), at small sizes, for
``session.host-collections`` (gpuscale/backends/host_collections.py).

Each snippet is the notebook's code for one answer, run three ways by tests/test_snippets.py:
plain Dask on the CPU (no session, the local threaded scheduler), inside a CPU session and
inside a session of the test-only device family (tests/auditfam.py; ``pytest -m gpu``: a GPU
session). The answers must agree (compared numerically, :func:`same`) and every chunk the
session's tasks made must be its family's (the backend audit).

The comment above each snippet cites the notebook (repository, path, the commit of its last
change, the cells) and says what was changed: sizes, a seed where the notebook draws random
numbers (so every run sees the same data), data the notebook downloads or builds with a prep
script made here on the host, and removed library calls (``np.NaN``, pandas' nested
``parse_dates``). Snippets take a folder of their own (``d``) for the files they write and read,
and return the computed answer (or a dict of answers).
"""

from __future__ import annotations

import datetime
import io
import os
from dataclasses import dataclass
from glob import glob
from typing import Any, Callable

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd

EXAMPLES = "dask/dask-examples"
TUTORIAL = "dask/dask-tutorial"


@dataclass(frozen=True)
class Snippet:
    name: str
    repo: str
    path: str
    commit: str
    cells: str
    rows: int
    """Rows (elements for arrays) of the data the snippet builds."""
    run: Callable[[str], Any]
    host_values: tuple[str, ...] = ()
    """Task prefixes whose outputs are host values Dask makes of the snippet's arguments (not
    chunks of a collection): the audit lists them under a device family, the tests accept them."""


SNIPPETS: list[Snippet] = []


def snippet(name: str, repo: str, path: str, commit: str, cells: str, rows: int, host_values=()):
    def add(fn):
        SNIPPETS.append(Snippet(name, repo, path, commit, cells, rows, fn, tuple(host_values)))
        return fn

    return add


def _timeseries():
    """The notebooks' ``dask.datasets.timeseries()`` at a small size, seeded: 3 days at one row a
    minute (4,320 rows, 3 partitions) instead of 30 days at one a second, with its columns in the
    order the notebooks were written against (id, name, x, y; Dask now puts name first)."""
    return dask.datasets.timeseries(
        end="2000-01-04", freq="60s", seed=42, dtypes={"id": int, "name": "string", "x": float, "y": float}
    )


TS_ROWS = 3 * 24 * 60


# --------------------------------------------------------------------------------------------
# dask/dask-examples dataframe.ipynb (commit 5a9bd2b15084822bae2a403f06ed64dd41dc70a3)
# --------------------------------------------------------------------------------------------
# dask/dask-examples, dataframe.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 4, 13, 15:
# timeseries (smaller, seeded), filter, groupby std.
@snippet(
    "filter_groupby_std",
    EXAMPLES,
    "dataframe.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "4, 13, 15",
    TS_ROWS,
)
def filter_groupby_std(d):
    df = _timeseries()
    df2 = df[df.y > 0]
    df3 = df2.groupby("name").x.std()
    computed_df = df3.compute()
    return computed_df


# dask/dask-examples, dataframe.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cell 18:
# groupby aggregate with a dict.
@snippet(
    "groupby_aggregate",
    EXAMPLES,
    "dataframe.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "18",
    TS_ROWS,
)
def groupby_aggregate(d):
    df = _timeseries()
    df4 = df.groupby("name").aggregate({"x": "sum", "y": "max"})
    return df4.compute()


# dask/dask-examples, dataframe.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 18, 20:
# merge the aggregate back onto the rows (computed whole instead of .head()).
@snippet(
    "merge_aggregate",
    EXAMPLES,
    "dataframe.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "18, 20",
    TS_ROWS,
)
def merge_aggregate(d):
    df = _timeseries()
    df4 = df.groupby("name").aggregate({"x": "sum", "y": "max"})
    df4 = df4.repartition(npartitions=1)
    joined = df.merge(df4, left_on="name", right_index=True, suffixes=("_original", "_aggregated"))
    return joined.compute()


# dask/dask-examples, dataframe.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 22, 30:
# persist, then one day by label (2000-01-02 instead of 2000-01-05, inside the smaller range).
@snippet(
    "persist_loc_day",
    EXAMPLES,
    "dataframe.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "22, 30",
    TS_ROWS,
)
def persist_loc_day(d):
    df = _timeseries()
    df = df.persist()
    return df.loc["2000-01-02"].compute()


# --------------------------------------------------------------------------------------------
# dask/dask-examples dataframes/02-groupby.ipynb
# --------------------------------------------------------------------------------------------
# dask/dask-examples, dataframes/02-groupby.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 4, 6, 12:
# several aggregations per column (the whole result instead of .head()).
@snippet(
    "groupby_multi_agg",
    EXAMPLES,
    "dataframes/02-groupby.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "4, 6, 12",
    TS_ROWS,
)
def groupby_multi_agg(d):
    df = _timeseries()
    df = df.persist()
    return df.groupby("name").agg({"x": ["mean", "std"], "y": ["mean", "count"]}).compute()


# dask/dask-examples, dataframes/02-groupby.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 4, 10:
# the mean per id (about a thousand groups).
@snippet(
    "groupby_id_mean",
    EXAMPLES,
    "dataframes/02-groupby.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "4, 10",
    TS_ROWS,
)
def groupby_id_mean(d):
    df = _timeseries()
    return df.groupby("id").x.mean().compute()


# --------------------------------------------------------------------------------------------
# dask/dask-examples dataframes/03-from-pandas-to-dask.ipynb
# --------------------------------------------------------------------------------------------
# dask/dask-examples, dataframes/03-from-pandas-to-dask.ipynb @ 03cfcca533fae6647f7df0b1f6b350938168d0a0,
# cells 6, 10, 16, 20: compute the frame, back into Dask with from_pandas, reset_index, .loc[0].
@snippet(
    "from_pandas_reset_index",
    EXAMPLES,
    "dataframes/03-from-pandas-to-dask.ipynb",
    "03cfcca533fae6647f7df0b1f6b350938168d0a0",
    "6, 10, 16, 20",
    TS_ROWS,
)
def from_pandas_reset_index(d):
    ddf = _timeseries()
    pdf = ddf.compute()
    ddf2 = dask.dataframe.from_pandas(pdf, npartitions=10)
    ddf2 = ddf2.reset_index()
    # each partition has an index=0
    return ddf2.loc[0].compute()


# dask/dask-examples, dataframes/03-from-pandas-to-dask.ipynb @ 03cfcca533fae6647f7df0b1f6b350938168d0a0,
# cells 6, 27, 35: rename a column, mask a column (the whole frame instead of .head(2)).
@snippet(
    "rename_mask",
    EXAMPLES,
    "dataframes/03-from-pandas-to-dask.ipynb",
    "03cfcca533fae6647f7df0b1f6b350938168d0a0",
    "6, 27, 35",
    TS_ROWS,
)
def rename_mask(d):
    ddf = _timeseries()
    ddf = ddf.rename(columns={"id": "ID"})
    cond_ddf = (ddf["x"] > 0.5) & (ddf["x"] < 0.8)
    ddf["y"] = ddf["y"].mask(cond=cond_ddf, other=ddf["y"] * 100)
    return ddf.compute()


# --------------------------------------------------------------------------------------------
# dask/dask-examples machine-learning/text-vectorization.ipynb
# --------------------------------------------------------------------------------------------
TEXTS = 2_000


# dask/dask-examples, machine-learning/text-vectorization.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3,
# cells 5, 7, 15, 16: a pandas frame of texts and targets into Dask, the binary target. The notebook's
# fetch_20newsgroups (a download) is replaced by made-up texts and targets built on the host. Dask sends
# isin's values to the tasks as one delayed NumPy array (a `delayed` task, whatever the backend): an
# argument, not a chunk of a collection, so session.host-collections leaves it; the backend audit lists
# it, and the tests accept it (host_values).
@snippet(
    "text_from_pandas",
    EXAMPLES,
    "machine-learning/text-vectorization.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "5, 7, 15, 16",
    TEXTS,
    host_values=("delayed",),
)
def text_from_pandas(d):
    rng = np.random.default_rng(3)
    target_names = ["alt.atheism", "comp.graphics", "comp.os.ms-windows.misc", "rec.autos", "sci.space"]
    words = np.array(["dask", "gpu", "array", "frame", "space", "car", "graphics", "window", "god", "orbit"])
    data = [" ".join(rng.choice(words, size=8)) for _ in range(TEXTS)]
    target = rng.integers(0, len(target_names), size=TEXTS)

    df = dd.from_pandas(pd.DataFrame({"text": data, "target": target}), npartitions=25)
    first = df.head().loc[0, "text"][:500]
    positive = np.arange(len(target_names))[["comp" in x for x in target_names]]
    y = df["target"].isin(positive).astype(int)
    return {"first": first, "y": y.compute(), "positives": y.sum().compute()}


# --------------------------------------------------------------------------------------------
# dask/dask-examples dataframes/01-data-access.ipynb
# --------------------------------------------------------------------------------------------
def name(i):
    """Provide date for filename given index"""
    return str(datetime.date(2000, 1, 1) + i * datetime.timedelta(days=1))


# dask/dask-examples, dataframes/01-data-access.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3,
# cells 5, 6, 13, 19, 21: timeseries written as CSV, one file a day, read back with parse_dates.
@snippet(
    "read_csv_groupby",
    EXAMPLES,
    "dataframes/01-data-access.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "5, 6, 13, 19, 21",
    TS_ROWS,
)
def read_csv_groupby(d):
    df = _timeseries()
    df.to_csv(os.path.join(d, "*.csv"), name_function=name)
    df = dd.read_csv(os.path.join(d, "2000-*-*.csv"), parse_dates=["timestamp"])
    return df.groupby("name").x.mean().compute()


# dask/dask-examples, dataframes/01-data-access.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3,
# cells 5, 24, 30: the same data as Parquet (pyarrow), read back with two columns only.
@snippet(
    "read_parquet_columns",
    EXAMPLES,
    "dataframes/01-data-access.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "5, 24, 30",
    TS_ROWS,
)
def read_parquet_columns(d):
    df = _timeseries()
    df.to_parquet(os.path.join(d, "2000-01.parquet"), engine="pyarrow")
    df = dd.read_parquet(os.path.join(d, "2000-01.parquet"), columns=["name", "x"], engine="pyarrow")
    return df.groupby("name").x.mean().compute()


# --------------------------------------------------------------------------------------------
# dask/dask-examples dataframes/04-reading-messy-data-into-dataframes.ipynb
# --------------------------------------------------------------------------------------------
# dask/dask-examples, dataframes/04-reading-messy-data-into-dataframes.ipynb @
# 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 4, 5, 13, 14, 24, 30, 36, 38, 40, 44: CSVs, one of them
# emptied and one without its y column (2000-01-02 and -03 instead of -05 and -07, inside the smaller
# range), read through a delayed pandas reader, from_delayed, describe. np.NaN (gone from NumPy 2) is
# np.nan; the answer keeps describe's exact rows (count, mean, std, min, max), not its approximate
# percentiles.
@snippet(
    "from_delayed_messy",
    EXAMPLES,
    "dataframes/04-reading-messy-data-into-dataframes.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "4, 5, 13, 14, 24, 30, 36, 38, 40, 44",
    TS_ROWS,
)
def from_delayed_messy(d):
    from dask import delayed

    df = _timeseries()
    df.to_csv(os.path.join(d, "*.csv"), name_function=name, index=False)
    # corrupt the data in 2000-01-02.csv
    with open(os.path.join(d, "2000-01-02.csv"), "w") as f:
        f.write("")
    # remove y column from 2000-01-03.csv
    df = pd.read_csv(os.path.join(d, "2000-01-03.csv"))
    del df["y"]
    df.to_csv(os.path.join(d, "2000-01-03.csv"), index=False)

    def read_data(filename):
        # for this to work we need to explicitly set the datatypes of our pandas dataframe
        dtypes = {"id": int, "name": str, "x": float, "y": float}
        try:
            # try reading in the data with pandas
            df = pd.read_csv(filename, dtype=dtypes)
        except Exception:
            # if this fails create an empty pandas dataframe with the same dtypes as the good data
            df = pd.read_csv(io.StringIO(""), names=dtypes.keys(), dtype=dtypes)
        # for the case with the missing column, add a column of data with NaN's
        if "y" not in df.columns:
            df["y"] = np.nan
        return df

    read_data = delayed(read_data)
    files = sorted(glob(os.path.join(d, "2000-*-*.csv")))
    df = [read_data(file) for file in files]
    df = dd.from_delayed(df, meta={"id": int, "name": str, "x": float, "y": float})
    return df.describe().compute().loc[["count", "mean", "std", "min", "max"]]


# --------------------------------------------------------------------------------------------
# dask/dask-tutorial 01_dataframe.ipynb (NYC flights)
# --------------------------------------------------------------------------------------------
FLIGHTS_PER_YEAR = 1_000


def _flights(d) -> str:
    """The tutorial's prep.py downloads NYC flights CSVs (one a year); these are made-up rows in
    the columns the snippet reads, one CSV a year, written with pandas on the host."""
    folder = os.path.join(d, "nycflights")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    for year in (1990, 1991, 1992):
        n = FLIGHTS_PER_YEAR
        cancelled = rng.random(n) < 0.05
        delay = np.round(rng.normal(8, 20, n))
        delay[cancelled] = np.nan
        pd.DataFrame(
            {
                "Year": year,
                "Month": rng.integers(1, 13, n),
                "DayofMonth": rng.integers(1, 29, n),
                "DayOfWeek": rng.integers(1, 8, n),
                "UniqueCarrier": rng.choice(["AA", "UA", "DL"], n),
                "TailNum": rng.choice(["N101", "N202", "N303", "UNKNOW"], n),
                "CRSElapsedTime": rng.integers(40, 400, n),
                "DepDelay": delay,
                "Origin": rng.choice(["EWR", "JFK", "LGA"], n),
                "Dest": rng.choice(["ORD", "SFO", "BOS"], n),
                "Distance": rng.integers(100, 3000, n),
                "Cancelled": cancelled,
            }
        ).to_csv(os.path.join(folder, f"{year}.csv"), index=False)
    return folder


# dask/dask-tutorial, 01_dataframe.ipynb @ b60e1d71dcfb4df1abfdb082672777949a6845b0, cells 23, 38, 41, 44,
# 47, 50, 72: read_csv with dtypes, then the exercises' answers. The flights CSVs are made here
# (_flights); parse_dates={"Date": [0, 1, 2]} (nested lists: removed in pandas 3) is dropped.
@snippet(
    "flights_exercises",
    TUTORIAL,
    "01_dataframe.ipynb",
    "b60e1d71dcfb4df1abfdb082672777949a6845b0",
    "23, 38, 41, 44, 47, 50, 72",
    3 * FLIGHTS_PER_YEAR,
)
def flights_exercises(d):
    folder = _flights(d)
    ddf = dd.read_csv(
        os.path.join(folder, "*.csv"),
        dtype={"TailNum": str, "CRSElapsedTime": float, "Cancelled": bool},
    )

    def my_custom_converter(df, multiplier=1):
        return df * multiplier

    meta = pd.Series(name="Distance", dtype="float64")
    distance_km = ddf.Distance.map_partitions(my_custom_converter, multiplier=0.6, meta=meta)
    return {
        "not_cancelled": len(ddf[~ddf.Cancelled]),
        "count_by_origin": ddf[~ddf.Cancelled].groupby("Origin").Origin.count().compute(),
        "mean_delay_by_origin": ddf.groupby("Origin").DepDelay.mean().compute(),
        "worst_day": ddf.groupby("DayOfWeek").DepDelay.mean().idxmax().compute(),
        "distance_plus_one": (ddf["Distance"] + 1).compute(),
        "distance_km": distance_km.compute(),
    }


# --------------------------------------------------------------------------------------------
# dask/dask-tutorial 02_array.ipynb
# --------------------------------------------------------------------------------------------
ZARR_SIZE = 200_000


# dask/dask-tutorial, 02_array.ipynb @ b60e1d71dcfb4df1abfdb082672777949a6845b0, cells 46, 49, 51, 52, 55,
# 56: Zarr arrays read with from_zarr, their means. The tutorial's prep.py writes them with
# da.random.random; here 200,000 values (not 200,000,000) seeded on the host, written with zarr, in
# chunks of 25,000 and 1,000, and the rechunked read takes chunks of 50,000.
@snippet(
    "from_zarr_mean",
    TUTORIAL,
    "02_array.ipynb",
    "b60e1d71dcfb4df1abfdb082672777949a6845b0",
    "46, 49, 51, 52, 55, 56",
    ZARR_SIZE,
)
def from_zarr_mean(d):
    import zarr

    values = np.random.default_rng(11).random(ZARR_SIZE)
    for fname, chunk in (("random.zarr", 25_000), ("random_sc.zarr", 1_000)):
        z = zarr.create_array(os.path.join(d, fname), shape=values.shape, chunks=(chunk,), dtype=values.dtype)
        z[:] = values
    a = da.from_zarr(os.path.join(d, "random.zarr"))
    b = da.from_zarr(os.path.join(d, "random_sc.zarr"))
    c = da.from_zarr(os.path.join(d, "random_sc.zarr"), chunks=(50_000,))
    return {"a": a.mean().compute(), "b": b.mean().compute(), "c": c.mean().compute()}


# dask/dask-tutorial, 02_array.ipynb @ b60e1d71dcfb4df1abfdb082672777949a6845b0, cells 13, 15, 18: ones
# made by Dask's array backend (array.backend: the family's), summed.
@snippet("ones_sum", TUTORIAL, "02_array.ipynb", "b60e1d71dcfb4df1abfdb082672777949a6845b0", "13, 15, 18", 10)
def ones_sum(d):
    a_da = da.ones(10, chunks=5)
    a_da_sum = a_da.sum()
    return a_da_sum.compute()


# --------------------------------------------------------------------------------------------
# dask/dask-examples array.ipynb and machine-learning notebooks
# --------------------------------------------------------------------------------------------
ARRAY_N = 1_000


# dask/dask-examples, array.ipynb @ 14dc0094081b0e4a5cd78adc715773368da07dbb, cells 4, 6, 8: x + x.T, a
# strided slice, a mean. The notebook draws x with da.random.random((10000, 10000), chunks=(1000,
# 1000)); here it is 1,000 x 1,000 drawn on the host with a seed and wrapped with da.from_array (so a
# CPU and a GPU run see the same numbers), the slice scaled with it (y[::2, 500:]).
@snippet(
    "transpose_slice_mean",
    EXAMPLES,
    "array.ipynb",
    "14dc0094081b0e4a5cd78adc715773368da07dbb",
    "4, 6, 8",
    ARRAY_N * ARRAY_N,
)
def transpose_slice_mean(d):
    x = da.from_array(np.random.default_rng(5).random((ARRAY_N, ARRAY_N)), chunks=(100, 100))
    y = x + x.T
    z = y[::2, ARRAY_N // 2 :].mean(axis=1)
    return z.compute()


SVD_ROWS, SVD_COLS = 20_000, 20


# dask/dask-examples, machine-learning/svd.ipynb @ 5a9bd2b15084822bae2a403f06ed64dd41dc70a3, cells 4, 5, 6:
# tall-skinny SVD of a persisted array. X is 20,000 x 20 in chunks of 2,000 rows (the notebook:
# da.random.random((200000, 100), chunks=(10000, 100))), drawn on the host with a seed and wrapped with
# da.from_array; the answer is the singular values and |v| (signs are arbitrary).
@snippet(
    "tall_skinny_svd",
    EXAMPLES,
    "machine-learning/svd.ipynb",
    "5a9bd2b15084822bae2a403f06ed64dd41dc70a3",
    "4, 5, 6",
    SVD_ROWS,
)
def tall_skinny_svd(d):
    X = da.from_array(
        np.random.default_rng(9).random((SVD_ROWS, SVD_COLS)), chunks=(2_000, SVD_COLS)
    ).persist()
    u, s, v = da.linalg.svd(X)
    s, v = dask.compute(s, v)
    return {"s": s, "abs_v": abs(v)}


# dask/dask-examples, machine-learning/blockwise-ensemble.ipynb @ c2aa3dee17baaec9cdcc289609c8759fb80ffd9f,
# cells 29, 30, 35: ten shifted clones of a dataset built by delayed calls, each a block through
# da.from_delayed, concatenated, every tenth row computed. sklearn's make_regression is replaced by
# seeded NumPy data of the same shape, and the clones' np.random.random by a generator seeded per
# clone (so every run sees the same numbers).
@snippet(
    "from_delayed_concatenate",
    EXAMPLES,
    "machine-learning/blockwise-ensemble.ipynb",
    "c2aa3dee17baaec9cdcc289609c8759fb80ffd9f",
    "29, 30, 35",
    1_000,
)
def from_delayed_concatenate(d):
    def clone_and_shift(X, y, i):
        rng = np.random.default_rng(i)
        X = X.copy()
        X += i + rng.random(X.shape)
        y = y + 25 * (i + rng.random(y.shape))
        return X, y

    # Make a base dataset that we'll clone and shift
    base = np.random.default_rng(0)
    X = base.standard_normal((100, 4))
    y = X @ np.array([3.0, -1.0, 0.5, 2.0]) + 2

    # Clone and shift 10 times, gradually increasing X and y for each partition
    Xs, ys = zip(*[dask.delayed(clone_and_shift, nout=2)(X, y, i) for i in range(10)])
    Xs = [da.from_delayed(x, shape=X.shape, dtype=X.dtype) for x in Xs]
    ys = [da.from_delayed(y_, shape=y.shape, dtype=y.dtype) for y_ in ys]
    X2 = da.concatenate(Xs)
    y2 = da.concatenate(ys)
    X_sampled, y_sampled = dask.compute(X2[::10], y2[::10])
    return {"X": X_sampled, "y": y_sampled}


# dask/dask-examples, machine-learning/parallel-prediction.ipynb @ 702f19d1ea028c79c5f8f27da6be72f20b42e425,
# cells 5, 7: a small training set replicated N times with da.from_array + da.concatenate. sklearn's
# make_classification is replaced by seeded NumPy data of the same shape, N is 20 (not 100), and the
# answer is the column sums and the label count (the notebook fits a model on it).
@snippet(
    "from_array_replicate",
    EXAMPLES,
    "machine-learning/parallel-prediction.ipynb",
    "702f19d1ea028c79c5f8f27da6be72f20b42e425",
    "5, 7",
    20 * 1_000,
)
def from_array_replicate(d):
    rng = np.random.default_rng(1)
    X_train = rng.standard_normal((1000, 2))
    y_train = (X_train.sum(axis=1) > 0).astype(np.int64)
    N = 20
    X_large = da.concatenate([da.from_array(X_train, chunks=X_train.shape) for _ in range(N)])
    y_large = da.concatenate([da.from_array(y_train, chunks=y_train.shape) for _ in range(N)])
    return {"X_sum": X_large.sum(axis=0).compute(), "positives": y_large.sum().compute()}


# --------------------------------------------------------------------------------------------
# Comparing answers
# --------------------------------------------------------------------------------------------
def host(x):
    """A host (NumPy / pandas) copy of an answer: cuDF and CuPy through gpuscale's to_host, the
    test family's TagFrame / TagArray as plain pandas / NumPy."""
    from gpuscale.backends.convert import to_host

    x = to_host(x)
    if isinstance(x, pd.DataFrame):
        return pd.DataFrame(x)
    if isinstance(x, pd.Series):
        return pd.Series(x)
    if isinstance(x, np.ndarray):
        return np.asarray(x)
    return x


def _frame_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order, index as columns, missing values as NaN / "<NA>"."""
    df = df.reset_index(allow_duplicates=True)  # a Series named like its index: both stay
    df.columns = [f"{i}:{c}" for i, c in enumerate(df.columns)]
    out = {}
    for c in df.columns:
        col = df[c]
        if pd.api.types.is_bool_dtype(col.dtype) or pd.api.types.is_numeric_dtype(col.dtype):
            out[c] = col.astype("float64")
        else:
            out[c] = col.map(
                lambda v: "<NA>" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)
            )
    df = pd.DataFrame(out)
    return df.sort_values(list(df.columns), kind="stable").reset_index(drop=True)


def _numbered(index) -> bool:
    """0..n-1, as pandas numbers the rows of a whole frame."""
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1


def _per_partition(index) -> bool:
    """An integer index that starts again at 0 (each of Dask's partitions numbered 0..n-1)."""
    return (
        not isinstance(index, pd.MultiIndex)
        and pd.api.types.is_integer_dtype(index.dtype)
        and len(index) > 0
        and index[0] == 0
        and not index.is_monotonic_increasing
    )


def same(a, b, rtol: float = 1e-9) -> tuple[bool, str]:
    """Whether two answers agree (values compared numerically, rows in any order), and why not."""
    a, b = host(a), host(b)
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False, f"keys {sorted(a)} != {sorted(b)}"
        for k in a:
            ok, why = same(a[k], b[k], rtol)
            if not ok:
                return False, f"{k}: {why}"
        return True, ""
    if isinstance(a, (pd.DataFrame, pd.Series)) and isinstance(b, (pd.DataFrame, pd.Series)):
        if (_numbered(a.index) and _per_partition(b.index)) or (
            _numbered(b.index) and _per_partition(a.index)
        ):
            # the index Dask derives from its partitions is no part of the answer (docs/guide/engines.md)
            a, b = a.reset_index(drop=True), b.reset_index(drop=True)
        fa = _frame_rows(a.to_frame() if isinstance(a, pd.Series) else a)
        fb = _frame_rows(b.to_frame() if isinstance(b, pd.Series) else b)
        if list(fa.columns) != list(fb.columns) or fa.shape != fb.shape:
            return False, f"columns/shape {list(fa.columns)} {fa.shape} != {list(fb.columns)} {fb.shape}"
        for c in fa.columns:
            x, y = fa[c], fb[c]
            if x.dtype == "float64" and y.dtype == "float64":
                if not np.allclose(x.to_numpy(), y.to_numpy(), rtol=rtol, atol=0, equal_nan=True):
                    return False, f"column {c} differs"
            elif not (x.astype(str) == y.astype(str)).all():
                return False, f"column {c} differs"
        return True, ""
    if isinstance(a, str) or isinstance(b, str):
        return (a == b), f"{a!r} != {b!r}"
    try:
        xa, xb = np.asarray(a), np.asarray(b)
    except Exception:  # noqa: BLE001
        return a == b, f"{a!r} != {b!r}"
    if xa.shape != xb.shape:
        return False, f"shape {xa.shape} != {xb.shape}"
    if xa.dtype.kind in "biuf" and xb.dtype.kind in "biuf":
        ok = np.allclose(xa.astype("float64"), xb.astype("float64"), rtol=rtol, atol=0, equal_nan=True)
    else:
        ok = bool((xa == xb).all())
    return ok, "" if ok else "values differ"


def by_name(name: str) -> Snippet:
    for s in SNIPPETS:
        if s.name == name:
            return s
    raise KeyError(name)


NAMES = [s.name for s in SNIPPETS]
assert len(NAMES) == len(set(NAMES)) and len(NAMES) >= 10
