"""Analytic queries over TPC-H-shaped data from ``tpchgen-cli`` (decimals cast to float64, dates
to timestamps, as a Dask user's Parquet would hold them): pricing summaries, multi-table joins,
a semi-join and an anti-join, filters on dates and strings, ``nunique``, top-N. They are
written for this benchmark after TPC-H's questions, not TPC-H's queries (no claim of
conformance)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import Query, Suite

TABLES = ("lineitem", "orders", "customer", "supplier", "nation", "region", "part", "partsupp")


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return pa.float64()
    if pa.types.is_date(t):
        return pa.timestamp("ms")
    if t == pa.string_view() or pa.types.is_large_string(t):
        return pa.string()
    return t


def make(folder: pathlib.Path, scale: float) -> None:
    """``tpchgen-cli parquet -s SCALE`` into ``folder``, then each table rewritten with plain
    types (one file per table)."""
    exe = shutil.which("tpchgen-cli") or str(pathlib.Path(sys.executable).parent / "tpchgen-cli")
    raw = folder / "raw"
    subprocess.run(
        [exe, "parquet", "-s", str(scale), f"--output-dir={raw}"], check=True, stdout=subprocess.DEVNULL
    )
    for name in TABLES:
        table = pq.read_table(raw / f"{name}.parquet")
        schema = pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema])
        pq.write_table(table.cast(schema), folder / f"{name}.parquet")
    shutil.rmtree(raw)


def _ts(s: str) -> pd.Timestamp:
    return pd.Timestamp(s)


def _revenue(df):
    return df.l_extendedprice * (1 - df.l_discount)


def q1(t):
    li = t["lineitem"]
    li = li[li.l_shipdate <= _ts("1998-09-02")]
    li = li.assign(disc_price=_revenue(li), charge=_revenue(li) * (1 + li.l_tax))
    r = li.groupby(["l_returnflag", "l_linestatus"]).agg(
        {
            "l_quantity": ["sum", "mean"],
            "l_extendedprice": ["sum", "mean"],
            "disc_price": "sum",
            "charge": "sum",
            "l_discount": "mean",
            "l_orderkey": "count",
        }
    )
    r.columns = [
        "sum_qty",
        "avg_qty",
        "sum_base_price",
        "avg_price",
        "sum_disc_price",
        "sum_charge",
        "avg_disc",
        "count_order",
    ]
    return r.reset_index()


def q3(t):
    c, o, li = t["customer"], t["orders"], t["lineitem"]
    c = c[c.c_mktsegment == "BUILDING"][["c_custkey"]]
    o = o[o.o_orderdate < _ts("1995-03-15")][["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"]]
    li = li[li.l_shipdate > _ts("1995-03-15")]
    li = li.assign(revenue=_revenue(li))[["l_orderkey", "revenue"]]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey").merge(
        li, left_on="o_orderkey", right_on="l_orderkey"
    )
    r = j.groupby(["l_orderkey", "o_orderdate", "o_shippriority"]).revenue.sum().reset_index()
    return r.nlargest(10, "revenue")


def q5(t):
    r = t["region"]
    n = t["nation"].merge(r[r.r_name == "ASIA"], left_on="n_regionkey", right_on="r_regionkey")
    c = t["customer"].merge(n, left_on="c_nationkey", right_on="n_nationkey")
    o = t["orders"]
    o = o[(o.o_orderdate >= _ts("1994-01-01")) & (o.o_orderdate < _ts("1995-01-01"))]
    j = (
        c.merge(o, left_on="c_custkey", right_on="o_custkey")
        .merge(t["lineitem"], left_on="o_orderkey", right_on="l_orderkey")
        .merge(t["supplier"], left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
    )
    return j.assign(revenue=_revenue(j)).groupby("n_name").revenue.sum().reset_index()


def q6(t):
    li = t["lineitem"]
    li = li[
        (li.l_shipdate >= _ts("1994-01-01"))
        & (li.l_shipdate < _ts("1995-01-01"))
        & (li.l_discount >= 0.05)
        & (li.l_discount <= 0.07)
        & (li.l_quantity < 24)
    ]
    return (li.l_extendedprice * li.l_discount).sum()


def q10(t):
    o, li = t["orders"], t["lineitem"]
    o = o[(o.o_orderdate >= _ts("1993-10-01")) & (o.o_orderdate < _ts("1994-01-01"))]
    li = li[li.l_returnflag == "R"]
    j = (
        t["customer"]
        .merge(o, left_on="c_custkey", right_on="o_custkey")
        .merge(li, left_on="o_orderkey", right_on="l_orderkey")
        .merge(t["nation"], left_on="c_nationkey", right_on="n_nationkey")
    )
    r = j.assign(revenue=_revenue(j)).groupby(["c_custkey", "c_name", "c_acctbal", "n_name"]).revenue.sum()
    return r.reset_index().nlargest(20, "revenue")


def q12(t):
    li = t["lineitem"]
    li = li[
        li.l_shipmode.isin(["MAIL", "SHIP"])
        & (li.l_commitdate < li.l_receiptdate)
        & (li.l_shipdate < li.l_commitdate)
        & (li.l_receiptdate >= _ts("1994-01-01"))
        & (li.l_receiptdate < _ts("1995-01-01"))
    ]
    j = t["orders"].merge(li, left_on="o_orderkey", right_on="l_orderkey")
    high = j.o_orderpriority.isin(["1-URGENT", "2-HIGH"])
    j = j.assign(high_line_count=high.astype("int64"), low_line_count=(~high).astype("int64"))
    return j.groupby("l_shipmode")[["high_line_count", "low_line_count"]].sum().reset_index()


def q14(t):
    li = t["lineitem"]
    li = li[(li.l_shipdate >= _ts("1995-09-01")) & (li.l_shipdate < _ts("1995-10-01"))]
    j = li.merge(t["part"], left_on="l_partkey", right_on="p_partkey")
    revenue = _revenue(j)
    promo = revenue.where(j.p_type.str.startswith("PROMO"), 0.0)
    return 100 * promo.sum() / revenue.sum()


def q16(t):
    p, s = t["part"], t["supplier"]
    p = p[
        (p.p_brand != "Brand#45")
        & ~p.p_type.str.startswith("MEDIUM POLISHED")
        & p.p_size.isin([49, 14, 23, 45, 19, 3, 36, 9])
    ]
    complaints = s[s.s_comment.str.contains("Customer.*Complaints")][["s_suppkey"]].assign(complaint=1)
    ps = t["partsupp"].merge(complaints, left_on="ps_suppkey", right_on="s_suppkey", how="left")
    ps = ps[ps.complaint.isna()]  # the anti-join: suppliers without complaints
    j = ps.merge(p, left_on="ps_partkey", right_on="p_partkey")
    return (
        j.groupby(["p_brand", "p_type", "p_size"]).ps_suppkey.nunique().rename("supplier_cnt").reset_index()
    )


def q18(t):
    li, o = t["lineitem"], t["orders"]
    qty = li.groupby("l_orderkey").l_quantity.sum().reset_index()
    large = qty[qty.l_quantity > 300][["l_orderkey"]].rename(columns={"l_orderkey": "large_key"})
    o = o.merge(large, left_on="o_orderkey", right_on="large_key")  # the semi-join
    j = o.merge(t["customer"][["c_custkey", "c_name"]], left_on="o_custkey", right_on="c_custkey").merge(
        li[["l_orderkey", "l_quantity"]], left_on="o_orderkey", right_on="l_orderkey"
    )
    r = j.groupby(["c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice"]).l_quantity.sum()
    return r.reset_index().nlargest(100, "o_totalprice")


REVENUE = "l_extendedprice * (1 - l_discount)"
QUERIES = (
    Query(
        "t1",
        "pricing summary",
        q1,
        "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice) AS "
        "sum_base_price, "
        f"sum({REVENUE}) AS sum_disc_price, sum({REVENUE} * (1 + l_tax)) AS sum_charge, "
        "avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, avg(l_discount) AS avg_disc, "
        "count(l_orderkey) AS count_order FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' "
        "GROUP BY l_returnflag, l_linestatus",
    ),
    Query(
        "t3",
        "shipping priority (3 tables, top 10)",
        q3,
        f"SELECT l_orderkey, o_orderdate, o_shippriority, sum({REVENUE}) AS revenue "
        "FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "WHERE c_mktsegment = 'BUILDING' AND o_orderdate < DATE '1995-03-15' "
        "AND l_shipdate > DATE '1995-03-15' GROUP BY l_orderkey, o_orderdate, o_shippriority "
        "ORDER BY revenue DESC LIMIT 10",
    ),
    Query(
        "t5",
        "local supplier volume (6 tables)",
        q5,
        f"SELECT n_name, sum({REVENUE}) AS revenue FROM customer JOIN orders ON c_custkey = o_custkey "
        "JOIN lineitem ON l_orderkey = o_orderkey JOIN supplier ON l_suppkey = s_suppkey "
        "AND c_nationkey = s_nationkey JOIN nation ON s_nationkey = n_nationkey "
        "JOIN region ON n_regionkey = r_regionkey WHERE r_name = 'ASIA' "
        "AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01' GROUP BY n_name",
    ),
    Query(
        "t6",
        "forecast revenue (filters)",
        q6,
        "SELECT sum(l_extendedprice * l_discount) AS value FROM lineitem "
        "WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
        "AND l_discount >= 0.05 AND l_discount <= 0.07 AND l_quantity < 24",
    ),
    Query(
        "t10",
        "returned items (4 tables, top 20)",
        q10,
        f"SELECT c_custkey, c_name, c_acctbal, n_name, sum({REVENUE}) AS revenue "
        "FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey "
        "JOIN nation ON c_nationkey = n_nationkey WHERE o_orderdate >= DATE '1993-10-01' "
        "AND o_orderdate < DATE '1994-01-01' AND l_returnflag = 'R' "
        "GROUP BY c_custkey, c_name, c_acctbal, n_name ORDER BY revenue DESC LIMIT 20",
    ),
    Query(
        "t12",
        "shipping modes (join, isin)",
        q12,
        "SELECT l_shipmode, sum(CASE WHEN o_orderpriority IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END) "
        "AS high_line_count, sum(CASE WHEN o_orderpriority NOT IN ('1-URGENT', '2-HIGH') THEN 1 ELSE 0 END) "
        "AS low_line_count FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
        "WHERE l_shipmode IN ('MAIL', 'SHIP') AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate "
        "AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1995-01-01' "
        "GROUP BY l_shipmode",
    ),
    Query(
        "t14",
        "promotion effect (string prefix)",
        q14,
        f"SELECT 100.0 * sum(CASE WHEN p_type LIKE 'PROMO%' THEN {REVENUE} ELSE 0 END) / sum({REVENUE}) "
        "AS value FROM lineitem JOIN part ON l_partkey = p_partkey "
        "WHERE l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'",
    ),
    Query(
        "t16",
        "parts/supplier (anti-join, nunique)",
        q16,
        "SELECT p_brand, p_type, p_size, count(*) AS supplier_cnt FROM (SELECT DISTINCT p_brand, p_type, "
        "p_size, "
        "ps_suppkey FROM partsupp JOIN part ON p_partkey = ps_partkey LEFT JOIN (SELECT s_suppkey FROM "
        "supplier "
        "WHERE s_comment LIKE '%Customer%Complaints%') AS c ON ps_suppkey = c.s_suppkey "
        "WHERE c.s_suppkey IS NULL AND p_brand <> 'Brand#45' AND p_type NOT LIKE 'MEDIUM POLISHED%' "
        "AND p_size IN (49, 14, 23, 45, 19, 3, 36, 9)) AS d GROUP BY p_brand, p_type, p_size",
    ),
    Query(
        "t18",
        "large volume customers (semi-join, top 100)",
        q18,
        "SELECT c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) AS l_quantity "
        "FROM customer JOIN orders ON c_custkey = o_custkey JOIN (SELECT l_orderkey AS large_key FROM "
        "lineitem "
        "GROUP BY l_orderkey HAVING sum(l_quantity) > 300) AS big ON o_orderkey = big.large_key "
        "JOIN lineitem ON o_orderkey = l_orderkey GROUP BY c_name, c_custkey, o_orderkey, o_orderdate, "
        "o_totalprice ORDER BY o_totalprice DESC LIMIT 100",
    ),
)

SUITE = Suite("tpch", TABLES, QUERIES, make)
