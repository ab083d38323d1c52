"""The H2O db-benchmark questions (groupby q1-q10, join q1-q5) on data generated to its
published generators' specification (``_data/groupby-datagen.R`` G1_N_1e2_0_0 and
``_data/join-datagen.R`` J1_N_NA_0_0 of h2oai/db-benchmark): the same distributions, keys and
table shapes, made with NumPy and written as Parquet. The Dask code is what a user writes for
each question with operations both pandas and cuDF have: aggregations by dictionary (cuDF's
groupby takes no named aggregations), q8 as a shuffle by key then the top two of each group in
each partition, q9's r² from grouped sums rather than a per-group Python ``apply``."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import Query, Suite

K = 100
"""Groups of the large-group id columns (the published 1e2 data sets)."""


def _ids(prefix_width: int, codes: np.ndarray, n: int) -> pa.Array:
    """Strings like ``id001`` (``sprintf("id%03d")``) for codes 1..n, built in Arrow."""
    words = pa.array([f"id{i:0{prefix_width}d}" for i in range(1, n + 1)])
    return words.take(pa.array(codes - 1))


def make_groupby(folder: pathlib.Path, rows: int, seed: int = 108) -> None:
    rng = np.random.default_rng(seed)
    small = max(rows // K, 1)
    table = pa.table(
        {
            "id1": _ids(3, rng.integers(1, K + 1, rows), K),
            "id2": _ids(3, rng.integers(1, K + 1, rows), K),
            "id3": _ids(10, rng.integers(1, small + 1, rows), small),
            "id4": rng.integers(1, K + 1, rows),
            "id5": rng.integers(1, K + 1, rows),
            "id6": rng.integers(1, small + 1, rows),
            "v1": rng.integers(1, 6, rows),
            "v2": rng.integers(1, 6, rows),
            "v3": np.round(rng.random(rows) * 100, 4),
        }
    )
    pq.write_table(table, folder / "x.parquet")


def _split_xlr(rng, n: int):
    key = rng.permutation(np.arange(1, int(n * 1.1) + 1))
    return key[: int(n * 0.9)], key[int(n * 0.9) : n], key[n : int(n * 1.1)]


def _sample_all(rng, keys: np.ndarray, size: int) -> np.ndarray:
    """Every key at least once, the rest drawn with replacement, shuffled (``sample_all``)."""
    extra = rng.choice(keys, size=max(size - len(keys), 0), replace=True)
    return rng.permutation(np.concatenate([keys, extra]))


def _with_strings(cols: dict) -> pa.Table:
    out = dict(cols)
    for i, s in (("id1", "id4"), ("id2", "id5"), ("id3", "id6")):
        if i in cols:
            out[s] = pa.compute.binary_join_element_wise("id", pa.array(cols[i]).cast(pa.string()), "")
    order = [c for c in ("id1", "id2", "id3", "id4", "id5", "id6") if c in out] + [
        c for c in ("v1", "v2") if c in out
    ]
    return pa.table({c: out[c] for c in order})


def make_join(folder: pathlib.Path, rows: int, seed: int = 108) -> None:
    rng = np.random.default_rng(seed)
    n1, n2 = max(rows // 10**6, 10), max(rows // 10**3, 100)
    key1, key2, key3 = _split_xlr(rng, n1), _split_xlr(rng, n2), _split_xlr(rng, rows)
    lhs = lambda k: np.concatenate([k[0], k[1]])  # noqa: E731
    rhs = lambda k: np.concatenate([k[0], k[2]])  # noqa: E731
    v = lambda n: np.round(rng.random(n) * 100, 6)  # noqa: E731
    pq.write_table(
        _with_strings(
            {
                "id1": _sample_all(rng, lhs(key1), rows),
                "id2": _sample_all(rng, lhs(key2), rows),
                "id3": _sample_all(rng, lhs(key3), rows),
                "v1": v(rows),
            }
        ),
        folder / "x.parquet",
    )
    pq.write_table(
        _with_strings({"id1": _sample_all(rng, rhs(key1), n1), "v2": v(n1)}), folder / "small.parquet"
    )
    pq.write_table(
        _with_strings(
            {"id1": _sample_all(rng, rhs(key1), n2), "id2": _sample_all(rng, rhs(key2), n2), "v2": v(n2)}
        ),
        folder / "medium.parquet",
    )
    pq.write_table(
        _with_strings(
            {
                "id1": _sample_all(rng, rhs(key1), rows),
                "id2": _sample_all(rng, rhs(key2), rows),
                "id3": _sample_all(rng, rhs(key3), rows),
                "v2": v(rows),
            }
        ),
        folder / "big.parquet",
    )


# ---------------------------------------------------------------------------------------
# groupby q1-q10
# ---------------------------------------------------------------------------------------
def _agg(by, spec: dict, names: list[str] | None = None):
    """``x.groupby(by).agg(spec)``, its columns renamed to ``names`` where given (a list of
    functions for one column makes two levels of column names)."""

    def query(t):
        r = t["x"].groupby(by).agg(spec)
        if names:
            r.columns = names
        return r.reset_index()

    return query


def _q7(t):
    r = t["x"].groupby("id3").agg({"v1": "max", "v2": "min"}).reset_index()
    return r.assign(range_v1_v2=r.v1 - r.v2)[["id3", "range_v1_v2"]]


def _top2(df):
    return df.sort_values("v3", ascending=False).groupby("id6").head(2)


def _q8(t):
    """Rows of one id6 in one partition (a shuffle), then the two largest of each there."""
    return t["x"][["id6", "v3"]].shuffle("id6").map_partitions(_top2)


def _q8_pandas(t):
    return _top2(t["x"][["id6", "v3"]])


def _q9(t):
    x = t["x"][["id2", "id4", "v1", "v2"]]
    x = x.assign(v1v1=x.v1 * x.v1, v2v2=x.v2 * x.v2, v1v2=x.v1 * x.v2)
    s = x.groupby(["id2", "id4"]).agg(
        {"v1": ["count", "sum"], "v2": "sum", "v1v1": "sum", "v2v2": "sum", "v1v2": "sum"}
    )
    s.columns = ["n", "s1", "s2", "s11", "s22", "s12"]
    s = s.reset_index()
    cov = s.s12 - s.s1 * s.s2 / s.n
    r2 = cov * cov / ((s.s11 - s.s1 * s.s1 / s.n) * (s.s22 - s.s2 * s.s2 / s.n))
    return s.assign(r2=r2)[["id2", "id4", "r2"]]


def _q9_pandas(t):
    x = t["x"]
    r = x.groupby(["id2", "id4"])[["v1", "v2"]].apply(lambda g: g["v1"].corr(g["v2"]) ** 2)
    return r.rename("r2").reset_index()


def _q10(t):
    r = t["x"].groupby(["id1", "id2", "id3", "id4", "id5", "id6"]).agg({"v3": "sum", "v1": "count"})
    return r.rename(columns={"v1": "count"}).reset_index()


GROUPBY_QUERIES = (
    Query("q1", "sum v1 by id1", _agg("id1", {"v1": "sum"}), "SELECT id1, sum(v1) AS v1 FROM x GROUP BY id1"),
    Query(
        "q2",
        "sum v1 by id1:id2",
        _agg(["id1", "id2"], {"v1": "sum"}),
        "SELECT id1, id2, sum(v1) AS v1 FROM x GROUP BY id1, id2",
    ),
    Query(
        "q3",
        "sum v1 mean v3 by id3",
        _agg("id3", {"v1": "sum", "v3": "mean"}),
        "SELECT id3, sum(v1) AS v1, avg(v3) AS v3 FROM x GROUP BY id3",
    ),
    Query(
        "q4",
        "mean v1:v3 by id4",
        _agg("id4", {"v1": "mean", "v2": "mean", "v3": "mean"}),
        "SELECT id4, avg(v1) AS v1, avg(v2) AS v2, avg(v3) AS v3 FROM x GROUP BY id4",
    ),
    Query(
        "q5",
        "sum v1:v3 by id6",
        _agg("id6", {"v1": "sum", "v2": "sum", "v3": "sum"}),
        "SELECT id6, sum(v1) AS v1, sum(v2) AS v2, sum(v3) AS v3 FROM x GROUP BY id6",
    ),
    Query(
        "q6",
        "median v3 sd v3 by id4 id5",
        _agg(["id4", "id5"], {"v3": ["median", "std"]}, ["median_v3", "sd_v3"]),
        "SELECT id4, id5, median(v3) AS median_v3, stddev_samp(v3) AS sd_v3 FROM x GROUP BY id4, id5",
    ),
    Query(
        "q7",
        "max v1 - min v2 by id3",
        _q7,
        "SELECT id3, max(v1) - min(v2) AS range_v1_v2 FROM x GROUP BY id3",
    ),
    Query(
        "q8",
        "largest two v3 by id6",
        _q8,
        "SELECT id6, v3 FROM (SELECT id6, v3, row_number() OVER (PARTITION BY id6 ORDER BY v3 DESC) AS r "
        "FROM x) WHERE r <= 2",
        pandas=_q8_pandas,
    ),
    Query(
        "q9",
        "regression v1 v2 by id2 id4",
        _q9,
        "SELECT id2, id4, pow(s12 - s1 * s2 / n, 2) / ((s11 - s1 * s1 / n) * (s22 - s2 * s2 / n)) AS r2 FROM "
        "(SELECT id2, id4, count(v1) AS n, sum(v1) AS s1, sum(v2) AS s2, sum(v1 * v1) AS s11, sum(v2 * v2) "
        "AS s22, "
        "sum(v1 * v2) AS s12 FROM x GROUP BY id2, id4) AS s",
        pandas=_q9_pandas,
    ),
    Query(
        "q10",
        "sum v3 count by id1:id6",
        _q10,
        "SELECT id1, id2, id3, id4, id5, id6, sum(v3) AS v3, count(*) AS count FROM x "
        "GROUP BY id1, id2, id3, id4, id5, id6",
    ),
)

# ---------------------------------------------------------------------------------------
# join q1-q5
# ---------------------------------------------------------------------------------------
X_COLUMNS = ("id1", "id2", "id3", "id4", "id5", "id6", "v1")
RIGHT_COLUMNS = {
    "small": ("id1", "id4", "v2"),
    "medium": ("id1", "id2", "id4", "id5", "v2"),
    "big": ("id1", "id2", "id3", "id4", "id5", "id6", "v2"),
}


def _join(right: str, on: str, how: str = "inner") -> tuple:
    """The Dask code and the SQL of ``x.merge(right, on=on, how=how)``, the SQL naming its
    columns as pandas does (``_x`` / ``_y`` on the columns both sides have)."""
    both = set(X_COLUMNS) & set(RIGHT_COLUMNS[right]) - {on}
    cols = [f"x.{c}" + (f" AS {c}_x" if c in both else "") for c in X_COLUMNS]
    cols += [f"{right}.{c}" + (f" AS {c}_y" if c in both else "") for c in RIGHT_COLUMNS[right] if c != on]
    kind = "LEFT JOIN" if how == "left" else "JOIN"
    sql = f"SELECT {', '.join(cols)} FROM x {kind} {right} ON x.{on} = {right}.{on}"
    return (lambda t: t["x"].merge(t[right], on=on, how=how)), sql


JOIN_QUERIES = tuple(
    Query(name, title, *_join(right, on, how))
    for name, title, right, on, how in (
        ("j1", "small inner on int", "small", "id1", "inner"),
        ("j2", "medium inner on int", "medium", "id2", "inner"),
        ("j3", "medium outer on int", "medium", "id2", "left"),
        ("j4", "medium inner on factor", "medium", "id5", "inner"),
        ("j5", "big inner on int", "big", "id3", "inner"),
    )
)

# the keys are dictionary-encoded in the files and held as text in memory
GROUPBY = Suite("h2o-groupby", ("x",), GROUPBY_QUERIES, make_groupby, reference_peak=10.0)
JOIN = Suite("h2o-join", ("x", "small", "medium", "big"), JOIN_QUERIES, make_join, reference_peak=5.5)
