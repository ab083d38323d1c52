"""The 22 TPC-H questions over TPC-H-shaped data from ``tpchgen-cli`` (decimals cast to float64,
dates to timestamps, as a Dask user's Parquet would hold them), each written three ways: Dask
DataFrame code as a user writes it (which runs on pandas too, for the reference answer), SQL for
DuckDB, and a Polars LazyFrame. They are written for this benchmark from TPC-H's questions, with
its validation parameters, not taken from TPC-H's queries (no claim of conformance).

:func:`make` writes the tables as users have them: by default several files per table, a
directory each (``folder/lineitem/lineitem.1.parquet``, ...), as ``tpchgen-cli --parts`` writes
them; ``queries.table_path`` is what a reader is given for a table (``queries.table_glob`` for
readers that take a glob)."""

from __future__ import annotations

import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys
from datetime import datetime

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import Query, Suite

try:  # only the Polars formulations need Polars
    import polars as pl
except ImportError:  # pragma: no cover
    pl = None

TABLES = ("lineitem", "orders", "customer", "supplier", "nation", "region", "part", "partsupp")


# ---------------------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------------------
def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return pa.float64()
    if pa.types.is_date(t):
        return pa.timestamp("ms")
    if t == pa.string_view() or pa.types.is_large_string(t):
        return pa.string()
    return t


def parts_for(scale: float) -> int:
    """Files per table in the ``multi`` layout: two per unit of scale factor (lineitem's files
    then hold about 3 million rows each), at least 2 and at most 64. ``nation`` and ``region``
    always get one."""
    return max(2, min(64, int(scale * 2)))


def make(folder: str | os.PathLike, scale: float, layout: str = "multi") -> None:
    """``tpchgen-cli parquet -s SCALE`` into ``folder``, each file rewritten with plain types.

    ``layout="multi"``: ``--parts`` :func:`parts_for` (``scale``), which writes
    ``folder/TABLE/TABLE.K.parquet``; each file is rewritten in place, keeping its row groups.
    ``layout="single"``: one file per table, ``folder/TABLE.parquet``."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if layout == "multi":
        _tpchgen(folder, scale, "--parts", str(parts_for(scale)))
        files = [path for name in TABLES for path in sorted((folder / name).glob("*.parquet"))]
        # Arrow reads, casts and writes outside the GIL: one thread per core rewrites the files
        with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(_rewrite, files, files))
    elif layout == "single":
        raw = folder / "raw"
        _tpchgen(raw, scale)
        for name in TABLES:
            _rewrite(raw / f"{name}.parquet", folder / f"{name}.parquet")
        shutil.rmtree(raw)
    else:
        raise ValueError(f"layout {layout!r}: 'multi' or 'single'")


def _tpchgen(out: pathlib.Path, scale: float, *extra: str) -> None:
    exe = shutil.which("tpchgen-cli") or str(pathlib.Path(sys.executable).parent / "tpchgen-cli")
    subprocess.run(
        [exe, "parquet", "-s", str(scale), *extra, f"--output-dir={out}"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _rewrite(src: pathlib.Path, dest: pathlib.Path) -> None:
    """``src`` with plain types (:func:`_plain`) as ``dest``, row group by row group, written
    under a temporary name beside ``dest`` first (readers of the folder skip names that start
    with a dot)."""
    part = dest.with_name(f".{dest.name}.part")
    with pq.ParquetFile(src) as f:
        schema = pa.schema([field.with_type(_plain(field.type)) for field in f.schema_arrow])
        with pq.ParquetWriter(part, schema) as out:
            for i in range(f.num_row_groups):
                group = f.read_row_group(i).cast(schema)
                out.write_table(group, row_group_size=max(1, group.num_rows))
    os.replace(part, dest)


def _revenue(df):
    return df.l_extendedprice * (1 - df.l_discount)


def _pl_revenue():
    return pl.col("l_extendedprice") * (1 - pl.col("l_discount"))


REVENUE = "l_extendedprice * (1 - l_discount)"


# ---------------------------------------------------------------------------------------
# The questions
# ---------------------------------------------------------------------------------------
def q1(t):
    li = t["lineitem"]
    li = li[li.l_shipdate <= pd.Timestamp("1998-09-02")]
    li = li.assign(disc_price=_revenue(li))
    li = li.assign(charge=li.disc_price * (1 + li.l_tax))
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
    return r.reset_index().sort_values(by=["l_returnflag", "l_linestatus"])


def q1_polars(t):
    disc_price = _pl_revenue()
    return (
        t["lineitem"]
        .filter(pl.col("l_shipdate") <= pl.datetime(1998, 9, 2))
        .group_by("l_returnflag", "l_linestatus")
        .agg(
            sum_qty=pl.col("l_quantity").sum(),
            sum_base_price=pl.col("l_extendedprice").sum(),
            sum_disc_price=disc_price.sum(),
            sum_charge=(disc_price * (1 + pl.col("l_tax"))).sum(),
            avg_qty=pl.col("l_quantity").mean(),
            avg_price=pl.col("l_extendedprice").mean(),
            avg_disc=pl.col("l_discount").mean(),
            count_order=pl.len(),
        )
        .sort("l_returnflag", "l_linestatus")
    )


Q1_SQL = f"""
SELECT l_returnflag, l_linestatus,
       sum(l_quantity) AS sum_qty,
       sum(l_extendedprice) AS sum_base_price,
       sum({REVENUE}) AS sum_disc_price,
       sum({REVENUE} * (1 + l_tax)) AS sum_charge,
       avg(l_quantity) AS avg_qty,
       avg(l_extendedprice) AS avg_price,
       avg(l_discount) AS avg_disc,
       count(*) AS count_order
FROM lineitem
WHERE l_shipdate <= DATE '1998-09-02'
GROUP BY l_returnflag, l_linestatus
ORDER BY l_returnflag, l_linestatus
"""


def _q2_offers(t):
    region, nation, supplier = t["region"], t["nation"], t["supplier"]
    europe = nation.merge(region[region.r_name == "EUROPE"], left_on="n_regionkey", right_on="r_regionkey")
    supplier = supplier.merge(
        europe[["n_nationkey", "n_name"]], left_on="s_nationkey", right_on="n_nationkey"
    )
    offers = t["partsupp"].merge(supplier, left_on="ps_suppkey", right_on="s_suppkey")
    cheapest = offers.groupby("ps_partkey").ps_supplycost.min().reset_index()
    cheapest = cheapest.rename(columns={"ps_supplycost": "min_cost"})
    part = t["part"]
    part = part[(part.p_size == 15) & part.p_type.str.endswith("BRASS")]
    j = part.merge(offers, left_on="p_partkey", right_on="ps_partkey").merge(cheapest, on="ps_partkey")
    j = j[j.ps_supplycost == j.min_cost]
    columns = ["s_acctbal", "s_name", "n_name", "p_partkey", "p_mfgr", "s_address", "s_phone", "s_comment"]
    return j[columns].sort_values(
        by=["s_acctbal", "n_name", "s_name", "p_partkey"], ascending=[False, True, True, True]
    )


def q2(t):
    return _q2_offers(t).head(100, npartitions=-1, compute=False)


def q2_pandas(t):
    return _q2_offers(t).head(100)


def q2_polars(t):
    europe = t["nation"].join(
        t["region"].filter(pl.col("r_name") == "EUROPE"), left_on="n_regionkey", right_on="r_regionkey"
    )
    offers = (
        t["partsupp"]
        .join(t["supplier"], left_on="ps_suppkey", right_on="s_suppkey")
        .join(europe, left_on="s_nationkey", right_on="n_nationkey")
    )
    cheapest = offers.group_by("ps_partkey").agg(min_cost=pl.col("ps_supplycost").min())
    part = t["part"].filter((pl.col("p_size") == 15) & pl.col("p_type").str.ends_with("BRASS"))
    return (
        part.join(offers, left_on="p_partkey", right_on="ps_partkey")
        .join(cheapest, left_on="p_partkey", right_on="ps_partkey")
        .filter(pl.col("ps_supplycost") == pl.col("min_cost"))
        .select("s_acctbal", "s_name", "n_name", "p_partkey", "p_mfgr", "s_address", "s_phone", "s_comment")
        .sort(["s_acctbal", "n_name", "s_name", "p_partkey"], descending=[True, False, False, False])
        .head(100)
    )


Q2_SQL = """
SELECT s_acctbal, s_name, n_name, p_partkey, p_mfgr, s_address, s_phone, s_comment
FROM part, supplier, partsupp, nation, region
WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey
  AND p_size = 15 AND p_type LIKE '%BRASS'
  AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND r_name = 'EUROPE'
  AND ps_supplycost = (
      SELECT min(ps_supplycost)
      FROM partsupp, supplier, nation, region
      WHERE p_partkey = ps_partkey AND s_suppkey = ps_suppkey
        AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey AND r_name = 'EUROPE')
ORDER BY s_acctbal DESC, n_name, s_name, p_partkey
LIMIT 100
"""


def q3(t):
    c, o, li = t["customer"], t["orders"], t["lineitem"]
    c = c[c.c_mktsegment == "BUILDING"][["c_custkey"]]
    o = o[o.o_orderdate < pd.Timestamp("1995-03-15")][
        ["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"]
    ]
    li = li[li.l_shipdate > pd.Timestamp("1995-03-15")]
    li = li.assign(revenue=_revenue(li))[["l_orderkey", "revenue"]]
    j = c.merge(o, left_on="c_custkey", right_on="o_custkey").merge(
        li, left_on="o_orderkey", right_on="l_orderkey"
    )
    r = j.groupby(["l_orderkey", "o_orderdate", "o_shippriority"]).revenue.sum().reset_index()
    return r.nlargest(10, "revenue")


def q3_polars(t):
    c = t["customer"].filter(pl.col("c_mktsegment") == "BUILDING")
    o = t["orders"].filter(pl.col("o_orderdate") < pl.datetime(1995, 3, 15))
    li = t["lineitem"].filter(pl.col("l_shipdate") > pl.datetime(1995, 3, 15))
    return (
        c.join(o, left_on="c_custkey", right_on="o_custkey")
        .join(li, left_on="o_orderkey", right_on="l_orderkey")
        .group_by("o_orderkey", "o_orderdate", "o_shippriority")
        .agg(revenue=_pl_revenue().sum())
        .sort(["revenue", "o_orderdate"], descending=[True, False])
        .head(10)
        .select(pl.col("o_orderkey").alias("l_orderkey"), "revenue", "o_orderdate", "o_shippriority")
    )


Q3_SQL = f"""
SELECT l_orderkey, sum({REVENUE}) AS revenue, o_orderdate, o_shippriority
FROM customer
JOIN orders ON c_custkey = o_custkey
JOIN lineitem ON l_orderkey = o_orderkey
WHERE c_mktsegment = 'BUILDING'
  AND o_orderdate < DATE '1995-03-15'
  AND l_shipdate > DATE '1995-03-15'
GROUP BY l_orderkey, o_orderdate, o_shippriority
ORDER BY revenue DESC, o_orderdate
LIMIT 10
"""


def q4(t):
    orders, lineitem = t["orders"], t["lineitem"]
    orders = orders[
        (orders.o_orderdate >= datetime(1993, 7, 1)) & (orders.o_orderdate < datetime(1993, 10, 1))
    ]
    late = lineitem[lineitem.l_commitdate < lineitem.l_receiptdate]
    late = late[["l_orderkey"]].drop_duplicates()
    orders = orders.merge(late, left_on="o_orderkey", right_on="l_orderkey")
    r = orders.groupby("o_orderpriority").size().reset_index()
    r.columns = ["o_orderpriority", "order_count"]
    return r.sort_values("o_orderpriority")


def q4_polars(t):
    late = t["lineitem"].filter(pl.col("l_commitdate") < pl.col("l_receiptdate"))
    return (
        t["orders"]
        .filter(
            (pl.col("o_orderdate") >= pl.datetime(1993, 7, 1))
            & (pl.col("o_orderdate") < pl.datetime(1993, 10, 1))
        )
        .join(late, left_on="o_orderkey", right_on="l_orderkey", how="semi")
        .group_by("o_orderpriority")
        .agg(order_count=pl.len())
        .sort("o_orderpriority")
    )


Q4_SQL = """
SELECT o_orderpriority, count(*) AS order_count
FROM orders
WHERE o_orderdate >= DATE '1993-07-01' AND o_orderdate < DATE '1993-10-01'
  AND EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate)
GROUP BY o_orderpriority
ORDER BY o_orderpriority
"""


def q5(t):
    r = t["region"]
    n = t["nation"].merge(r[r.r_name == "ASIA"], left_on="n_regionkey", right_on="r_regionkey")
    c = t["customer"].merge(n, left_on="c_nationkey", right_on="n_nationkey")
    o = t["orders"]
    o = o[(o.o_orderdate >= pd.Timestamp("1994-01-01")) & (o.o_orderdate < pd.Timestamp("1995-01-01"))]
    j = (
        c.merge(o, left_on="c_custkey", right_on="o_custkey")
        .merge(t["lineitem"], left_on="o_orderkey", right_on="l_orderkey")
        .merge(t["supplier"], left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
    )
    r = j.assign(revenue=_revenue(j)).groupby("n_name").revenue.sum().reset_index()
    return r.sort_values("revenue", ascending=False)


def q5_polars(t):
    asia = t["nation"].join(
        t["region"].filter(pl.col("r_name") == "ASIA"), left_on="n_regionkey", right_on="r_regionkey"
    )
    orders = t["orders"].filter(
        (pl.col("o_orderdate") >= pl.datetime(1994, 1, 1)) & (pl.col("o_orderdate") < pl.datetime(1995, 1, 1))
    )
    return (
        t["customer"]
        .join(asia, left_on="c_nationkey", right_on="n_nationkey")
        .join(orders, left_on="c_custkey", right_on="o_custkey")
        .join(t["lineitem"], left_on="o_orderkey", right_on="l_orderkey")
        .join(t["supplier"], left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
        .group_by("n_name")
        .agg(revenue=_pl_revenue().sum())
        .sort("revenue", descending=True)
    )


Q5_SQL = f"""
SELECT n_name, sum({REVENUE}) AS revenue
FROM customer, orders, lineitem, supplier, nation, region
WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
  AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey AND n_regionkey = r_regionkey
  AND r_name = 'ASIA'
  AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
GROUP BY n_name
ORDER BY revenue DESC
"""


def q6(t):
    li = t["lineitem"]
    li = li[
        (li.l_shipdate >= pd.Timestamp("1994-01-01"))
        & (li.l_shipdate < pd.Timestamp("1995-01-01"))
        & (li.l_discount >= 0.05)
        & (li.l_discount <= 0.07)
        & (li.l_quantity < 24)
    ]
    return (li.l_extendedprice * li.l_discount).sum()


def q6_polars(t):
    return (
        t["lineitem"]
        .filter(
            (pl.col("l_shipdate") >= pl.datetime(1994, 1, 1))
            & (pl.col("l_shipdate") < pl.datetime(1995, 1, 1))
            & (pl.col("l_discount") >= 0.05)
            & (pl.col("l_discount") <= 0.07)
            & (pl.col("l_quantity") < 24)
        )
        .select(value=(pl.col("l_extendedprice") * pl.col("l_discount")).sum())
    )


Q6_SQL = """
SELECT sum(l_extendedprice * l_discount) AS value
FROM lineitem
WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
  AND l_discount BETWEEN 0.05 AND 0.07
  AND l_quantity < 24
"""


def q7(t):
    nation = t["nation"]
    nation = nation[nation.n_name.isin(["FRANCE", "GERMANY"])][["n_nationkey", "n_name"]]
    supplier = t["supplier"].merge(nation, left_on="s_nationkey", right_on="n_nationkey")
    supplier = supplier[["s_suppkey", "n_name"]].rename(columns={"n_name": "supp_nation"})
    customer = t["customer"].merge(nation, left_on="c_nationkey", right_on="n_nationkey")
    customer = customer[["c_custkey", "n_name"]].rename(columns={"n_name": "cust_nation"})
    li = t["lineitem"]
    li = li[(li.l_shipdate >= pd.Timestamp("1995-01-01")) & (li.l_shipdate <= pd.Timestamp("1996-12-31"))]
    j = (
        li.merge(supplier, left_on="l_suppkey", right_on="s_suppkey")
        .merge(t["orders"][["o_orderkey", "o_custkey"]], left_on="l_orderkey", right_on="o_orderkey")
        .merge(customer, left_on="o_custkey", right_on="c_custkey")
    )
    j = j[j.supp_nation != j.cust_nation]
    j["l_year"] = j.l_shipdate.dt.year
    j["volume"] = _revenue(j)
    r = j.groupby(["supp_nation", "cust_nation", "l_year"]).volume.sum().reset_index()
    r = r.rename(columns={"volume": "revenue"})
    return r.sort_values(by=["supp_nation", "cust_nation", "l_year"])


def q7_polars(t):
    nation = t["nation"].filter(pl.col("n_name").is_in(["FRANCE", "GERMANY"]))
    supplier = t["supplier"].join(nation, left_on="s_nationkey", right_on="n_nationkey")
    supplier = supplier.select("s_suppkey", supp_nation="n_name")
    customer = t["customer"].join(nation, left_on="c_nationkey", right_on="n_nationkey")
    customer = customer.select("c_custkey", cust_nation="n_name")
    return (
        t["lineitem"]
        .filter(
            pl.col("l_shipdate") >= pl.datetime(1995, 1, 1), pl.col("l_shipdate") <= pl.datetime(1996, 12, 31)
        )
        .join(supplier, left_on="l_suppkey", right_on="s_suppkey")
        .join(t["orders"], left_on="l_orderkey", right_on="o_orderkey")
        .join(customer, left_on="o_custkey", right_on="c_custkey")
        .filter(pl.col("supp_nation") != pl.col("cust_nation"))
        .with_columns(l_year=pl.col("l_shipdate").dt.year())
        .group_by("supp_nation", "cust_nation", "l_year")
        .agg(revenue=_pl_revenue().sum())
        .sort("supp_nation", "cust_nation", "l_year")
    )


Q7_SQL = f"""
SELECT supp_nation, cust_nation, l_year, sum(volume) AS revenue
FROM (
    SELECT n1.n_name AS supp_nation, n2.n_name AS cust_nation,
           extract(year FROM l_shipdate) AS l_year, {REVENUE} AS volume
    FROM supplier, lineitem, orders, customer, nation n1, nation n2
    WHERE s_suppkey = l_suppkey AND o_orderkey = l_orderkey AND c_custkey = o_custkey
      AND s_nationkey = n1.n_nationkey AND c_nationkey = n2.n_nationkey
      AND ((n1.n_name = 'FRANCE' AND n2.n_name = 'GERMANY')
           OR (n1.n_name = 'GERMANY' AND n2.n_name = 'FRANCE'))
      AND l_shipdate BETWEEN DATE '1995-01-01' AND DATE '1996-12-31'
) AS shipping
GROUP BY supp_nation, cust_nation, l_year
ORDER BY supp_nation, cust_nation, l_year
"""


def q8(t):
    part = t["part"]
    part = part[part.p_type == "ECONOMY ANODIZED STEEL"][["p_partkey"]]
    orders = t["orders"]
    orders = orders[
        (orders.o_orderdate >= pd.Timestamp("1995-01-01"))
        & (orders.o_orderdate <= pd.Timestamp("1996-12-31"))
    ]
    region, nation = t["region"], t["nation"]
    america = nation.merge(region[region.r_name == "AMERICA"], left_on="n_regionkey", right_on="r_regionkey")
    customer = t["customer"].merge(america[["n_nationkey"]], left_on="c_nationkey", right_on="n_nationkey")
    supplier = t["supplier"].merge(
        nation[["n_nationkey", "n_name"]], left_on="s_nationkey", right_on="n_nationkey"
    )
    j = (
        t["lineitem"]
        .merge(part, left_on="l_partkey", right_on="p_partkey")
        .merge(orders, left_on="l_orderkey", right_on="o_orderkey")
        .merge(customer[["c_custkey"]], left_on="o_custkey", right_on="c_custkey")
        .merge(supplier[["s_suppkey", "n_name"]], left_on="l_suppkey", right_on="s_suppkey")
    )
    j = j.assign(o_year=j.o_orderdate.dt.year, volume=_revenue(j))
    j["brazil"] = j.volume.where(j.n_name == "BRAZIL", 0.0)
    r = j.groupby("o_year")[["brazil", "volume"]].sum()
    r["mkt_share"] = r.brazil / r.volume
    return r[["mkt_share"]].reset_index().sort_values("o_year")


def q8_polars(t):
    america = t["nation"].join(
        t["region"].filter(pl.col("r_name") == "AMERICA"), left_on="n_regionkey", right_on="r_regionkey"
    )
    customer = t["customer"].join(america, left_on="c_nationkey", right_on="n_nationkey").select("c_custkey")
    supplier = t["supplier"].join(t["nation"], left_on="s_nationkey", right_on="n_nationkey")
    volume = _pl_revenue()
    return (
        t["lineitem"]
        .join(
            t["part"].filter(pl.col("p_type") == "ECONOMY ANODIZED STEEL"),
            left_on="l_partkey",
            right_on="p_partkey",
        )
        .join(
            t["orders"].filter(
                pl.col("o_orderdate").is_between(pl.datetime(1995, 1, 1), pl.datetime(1996, 12, 31))
            ),
            left_on="l_orderkey",
            right_on="o_orderkey",
        )
        .join(customer, left_on="o_custkey", right_on="c_custkey")
        .join(supplier.select("s_suppkey", "n_name"), left_on="l_suppkey", right_on="s_suppkey")
        .group_by(o_year=pl.col("o_orderdate").dt.year())
        .agg(mkt_share=pl.when(pl.col("n_name") == "BRAZIL").then(volume).otherwise(0.0).sum() / volume.sum())
        .sort("o_year")
    )


Q8_SQL = f"""
SELECT o_year, sum(CASE WHEN nation = 'BRAZIL' THEN volume ELSE 0 END) / sum(volume) AS mkt_share
FROM (
    SELECT extract(year FROM o_orderdate) AS o_year, {REVENUE} AS volume, n2.n_name AS nation
    FROM part, supplier, lineitem, orders, customer, nation n1, nation n2, region
    WHERE p_partkey = l_partkey AND s_suppkey = l_suppkey AND l_orderkey = o_orderkey
      AND o_custkey = c_custkey AND c_nationkey = n1.n_nationkey
      AND n1.n_regionkey = r_regionkey AND r_name = 'AMERICA'
      AND s_nationkey = n2.n_nationkey
      AND o_orderdate BETWEEN DATE '1995-01-01' AND DATE '1996-12-31'
      AND p_type = 'ECONOMY ANODIZED STEEL'
) AS all_nations
GROUP BY o_year
ORDER BY o_year
"""


def q9(t):
    part = t["part"]
    green = part[part.p_name.str.contains("green", regex=False)][["p_partkey"]]
    j = (
        t["lineitem"]
        .merge(green, left_on="l_partkey", right_on="p_partkey")
        .merge(t["partsupp"], left_on=["l_partkey", "l_suppkey"], right_on=["ps_partkey", "ps_suppkey"])
        .merge(t["supplier"], left_on="l_suppkey", right_on="s_suppkey")
        .merge(t["nation"], left_on="s_nationkey", right_on="n_nationkey")
        .merge(t["orders"], left_on="l_orderkey", right_on="o_orderkey")
    )
    j["amount"] = _revenue(j) - j.ps_supplycost * j.l_quantity
    j["o_year"] = j.o_orderdate.dt.year
    r = j.groupby(["n_name", "o_year"]).amount.sum().reset_index()
    r.columns = ["nation", "o_year", "sum_profit"]
    return r.sort_values(by=["nation", "o_year"], ascending=[True, False])


def q9_polars(t):
    return (
        t["lineitem"]
        .join(
            t["part"].filter(pl.col("p_name").str.contains("green", literal=True)),
            left_on="l_partkey",
            right_on="p_partkey",
        )
        .join(t["partsupp"], left_on=["l_partkey", "l_suppkey"], right_on=["ps_partkey", "ps_suppkey"])
        .join(t["supplier"], left_on="l_suppkey", right_on="s_suppkey")
        .join(t["nation"], left_on="s_nationkey", right_on="n_nationkey")
        .join(t["orders"], left_on="l_orderkey", right_on="o_orderkey")
        .group_by(nation=pl.col("n_name"), o_year=pl.col("o_orderdate").dt.year())
        .agg(sum_profit=(_pl_revenue() - pl.col("ps_supplycost") * pl.col("l_quantity")).sum())
        .sort(["nation", "o_year"], descending=[False, True])
    )


Q9_SQL = f"""
SELECT nation, o_year, sum(amount) AS sum_profit
FROM (
    SELECT n_name AS nation, extract(year FROM o_orderdate) AS o_year,
           {REVENUE} - ps_supplycost * l_quantity AS amount
    FROM part, supplier, lineitem, partsupp, orders, nation
    WHERE s_suppkey = l_suppkey AND ps_suppkey = l_suppkey AND ps_partkey = l_partkey
      AND p_partkey = l_partkey AND o_orderkey = l_orderkey AND s_nationkey = n_nationkey
      AND p_name LIKE '%green%'
) AS profit
GROUP BY nation, o_year
ORDER BY nation, o_year DESC
"""


def q10(t):
    o, li = t["orders"], t["lineitem"]
    o = o[(o.o_orderdate >= pd.Timestamp("1993-10-01")) & (o.o_orderdate < pd.Timestamp("1994-01-01"))]
    li = li[li.l_returnflag == "R"]
    j = (
        t["customer"]
        .merge(o, left_on="c_custkey", right_on="o_custkey")
        .merge(li, left_on="o_orderkey", right_on="l_orderkey")
        .merge(t["nation"], left_on="c_nationkey", right_on="n_nationkey")
    )
    keys = ["c_custkey", "c_name", "c_acctbal", "c_phone", "n_name", "c_address", "c_comment"]
    r = j.assign(revenue=_revenue(j)).groupby(keys).revenue.sum()
    return r.reset_index().nlargest(20, "revenue")


def q10_polars(t):
    orders = t["orders"].filter(
        (pl.col("o_orderdate") >= pl.datetime(1993, 10, 1))
        & (pl.col("o_orderdate") < pl.datetime(1994, 1, 1))
    )
    return (
        t["customer"]
        .join(orders, left_on="c_custkey", right_on="o_custkey")
        .join(
            t["lineitem"].filter(pl.col("l_returnflag") == "R"), left_on="o_orderkey", right_on="l_orderkey"
        )
        .join(t["nation"], left_on="c_nationkey", right_on="n_nationkey")
        .group_by("c_custkey", "c_name", "c_acctbal", "c_phone", "n_name", "c_address", "c_comment")
        .agg(revenue=_pl_revenue().sum())
        .sort("revenue", descending=True)
        .head(20)
    )


Q10_SQL = f"""
SELECT c_custkey, c_name, sum({REVENUE}) AS revenue, c_acctbal, n_name, c_address, c_phone, c_comment
FROM customer, orders, lineitem, nation
WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey
  AND o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01'
  AND l_returnflag = 'R' AND c_nationkey = n_nationkey
GROUP BY c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment
ORDER BY revenue DESC
LIMIT 20
"""


def q11(t):
    nation = t["nation"]
    germany = nation[nation.n_name == "GERMANY"]
    ps = t["partsupp"].merge(t["supplier"], left_on="ps_suppkey", right_on="s_suppkey")
    ps = ps.merge(germany, left_on="s_nationkey", right_on="n_nationkey")
    ps["value"] = ps.ps_supplycost * ps.ps_availqty
    threshold = ps.value.sum() * 0.0001
    r = ps.groupby("ps_partkey").value.sum().reset_index()
    return r[r.value > threshold].sort_values("value", ascending=False)


def q11_polars(t):
    return (
        t["partsupp"]
        .join(t["supplier"], left_on="ps_suppkey", right_on="s_suppkey")
        .join(
            t["nation"].filter(pl.col("n_name") == "GERMANY"), left_on="s_nationkey", right_on="n_nationkey"
        )
        .group_by("ps_partkey")
        .agg(value=(pl.col("ps_supplycost") * pl.col("ps_availqty")).sum())
        .filter(pl.col("value") > pl.col("value").sum() * 0.0001)  # the parts' values add up to the total
        .sort("value", descending=True)
    )


Q11_SQL = """
SELECT ps_partkey, sum(ps_supplycost * ps_availqty) AS value
FROM partsupp, supplier, nation
WHERE ps_suppkey = s_suppkey AND s_nationkey = n_nationkey AND n_name = 'GERMANY'
GROUP BY ps_partkey
HAVING sum(ps_supplycost * ps_availqty) > (
    SELECT sum(ps_supplycost * ps_availqty) * 0.0001
    FROM partsupp, supplier, nation
    WHERE ps_suppkey = s_suppkey AND s_nationkey = n_nationkey AND n_name = 'GERMANY')
ORDER BY value DESC
"""


def q12(t):
    li = t["lineitem"]
    li = li[
        li.l_shipmode.isin(["MAIL", "SHIP"])
        & (li.l_commitdate < li.l_receiptdate)
        & (li.l_shipdate < li.l_commitdate)
        & (li.l_receiptdate >= pd.Timestamp("1994-01-01"))
        & (li.l_receiptdate < pd.Timestamp("1995-01-01"))
    ]
    j = t["orders"].merge(li, left_on="o_orderkey", right_on="l_orderkey")
    high = j.o_orderpriority.isin(["1-URGENT", "2-HIGH"])
    j = j.assign(high_line_count=high.astype("int64"), low_line_count=(~high).astype("int64"))
    r = j.groupby("l_shipmode")[["high_line_count", "low_line_count"]].sum().reset_index()
    return r.sort_values("l_shipmode")


def q12_polars(t):
    high = pl.col("o_orderpriority").is_in(["1-URGENT", "2-HIGH"])
    return (
        t["lineitem"]
        .filter(
            pl.col("l_shipmode").is_in(["MAIL", "SHIP"]),
            pl.col("l_commitdate") < pl.col("l_receiptdate"),
            pl.col("l_shipdate") < pl.col("l_commitdate"),
            pl.col("l_receiptdate") >= pl.datetime(1994, 1, 1),
            pl.col("l_receiptdate") < pl.datetime(1995, 1, 1),
        )
        .join(t["orders"], left_on="l_orderkey", right_on="o_orderkey")
        .group_by("l_shipmode")
        .agg(high_line_count=high.sum(), low_line_count=(~high).sum())
        .sort("l_shipmode")
    )


Q12_SQL = """
SELECT l_shipmode,
       sum(CASE WHEN o_orderpriority = '1-URGENT' OR o_orderpriority = '2-HIGH' THEN 1 ELSE 0 END)
           AS high_line_count,
       sum(CASE WHEN o_orderpriority <> '1-URGENT' AND o_orderpriority <> '2-HIGH' THEN 1 ELSE 0 END)
           AS low_line_count
FROM orders, lineitem
WHERE o_orderkey = l_orderkey
  AND l_shipmode IN ('MAIL', 'SHIP')
  AND l_commitdate < l_receiptdate AND l_shipdate < l_commitdate
  AND l_receiptdate >= DATE '1994-01-01' AND l_receiptdate < DATE '1995-01-01'
GROUP BY l_shipmode
ORDER BY l_shipmode
"""


def q13(t):
    orders = t["orders"]
    orders = orders[~orders.o_comment.str.contains("special.*requests")]
    j = t["customer"].merge(orders, left_on="c_custkey", right_on="o_custkey", how="left")
    counts = j.groupby("c_custkey").o_orderkey.count().reset_index()
    counts = counts.rename(columns={"o_orderkey": "c_count"})
    r = counts.groupby("c_count").size().reset_index()
    r.columns = ["c_count", "custdist"]
    return r.sort_values(by=["custdist", "c_count"], ascending=False)


def q13_polars(t):
    orders = t["orders"].filter(~pl.col("o_comment").str.contains("special.*requests"))
    return (
        t["customer"]
        .join(orders, left_on="c_custkey", right_on="o_custkey", how="left")
        .group_by("c_custkey")
        .agg(c_count=pl.col("o_orderkey").count())
        .group_by("c_count")
        .agg(custdist=pl.len())
        .sort(["custdist", "c_count"], descending=True)
    )


Q13_SQL = """
SELECT c_count, count(*) AS custdist
FROM (
    SELECT c_custkey, count(o_orderkey) AS c_count
    FROM customer LEFT OUTER JOIN orders
        ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%requests%'
    GROUP BY c_custkey
) AS c_orders
GROUP BY c_count
ORDER BY custdist DESC, c_count DESC
"""


def q14(t):
    li = t["lineitem"]
    li = li[(li.l_shipdate >= pd.Timestamp("1995-09-01")) & (li.l_shipdate < pd.Timestamp("1995-10-01"))]
    j = li.merge(t["part"], left_on="l_partkey", right_on="p_partkey")
    revenue = _revenue(j)
    promo = revenue.where(j.p_type.str.startswith("PROMO"), 0.0)
    return 100 * promo.sum() / revenue.sum()


def q14_polars(t):
    revenue = _pl_revenue()
    promo = pl.when(pl.col("p_type").str.starts_with("PROMO")).then(revenue).otherwise(0.0)
    return (
        t["lineitem"]
        .filter(
            pl.col("l_shipdate") >= pl.datetime(1995, 9, 1), pl.col("l_shipdate") < pl.datetime(1995, 10, 1)
        )
        .join(t["part"], left_on="l_partkey", right_on="p_partkey")
        .select(value=100 * promo.sum() / revenue.sum())
    )


Q14_SQL = f"""
SELECT 100.00 * sum(CASE WHEN p_type LIKE 'PROMO%' THEN {REVENUE} ELSE 0 END) / sum({REVENUE}) AS value
FROM lineitem, part
WHERE l_partkey = p_partkey
  AND l_shipdate >= DATE '1995-09-01' AND l_shipdate < DATE '1995-10-01'
"""


def q15(t):
    li = t["lineitem"]
    li = li[(li.l_shipdate >= datetime(1996, 1, 1)) & (li.l_shipdate < datetime(1996, 4, 1))]
    li["revenue"] = li.l_extendedprice * (1 - li.l_discount)
    rev = li.groupby("l_suppkey").revenue.sum().reset_index()
    rev.columns = ["supplier_no", "total_revenue"]
    top = rev[rev.total_revenue == rev.total_revenue.max()]
    s = t["supplier"].merge(top, left_on="s_suppkey", right_on="supplier_no")
    return s[["s_suppkey", "s_name", "s_address", "s_phone", "total_revenue"]].sort_values("s_suppkey")


def q15_polars(t):
    revenue = (
        t["lineitem"]
        .filter(
            pl.col("l_shipdate") >= pl.datetime(1996, 1, 1), pl.col("l_shipdate") < pl.datetime(1996, 4, 1)
        )
        .group_by("l_suppkey")
        .agg(total_revenue=_pl_revenue().sum())
    )
    top = revenue.filter(pl.col("total_revenue") == pl.col("total_revenue").max())
    return (
        t["supplier"]
        .join(top, left_on="s_suppkey", right_on="l_suppkey")
        .select("s_suppkey", "s_name", "s_address", "s_phone", "total_revenue")
        .sort("s_suppkey")
    )


Q15_SQL = f"""
WITH revenue AS MATERIALIZED (
    SELECT l_suppkey AS supplier_no, sum({REVENUE}) AS total_revenue
    FROM lineitem
    WHERE l_shipdate >= DATE '1996-01-01' AND l_shipdate < DATE '1996-04-01'
    GROUP BY l_suppkey
)
SELECT s_suppkey, s_name, s_address, s_phone, total_revenue
FROM supplier, revenue
WHERE s_suppkey = supplier_no AND total_revenue = (SELECT max(total_revenue) FROM revenue)
ORDER BY s_suppkey
"""


def q16(t):
    part, supplier = t["part"], t["supplier"]
    part = part[
        (part.p_brand != "Brand#45")
        & ~part.p_type.str.startswith("MEDIUM POLISHED")
        & part.p_size.isin([49, 14, 23, 45, 19, 3, 36, 9])
    ]
    complaints = supplier[supplier.s_comment.str.contains("Customer.*Complaints")][["s_suppkey"]]
    ps = t["partsupp"].merge(complaints, left_on="ps_suppkey", right_on="s_suppkey", how="left")
    ps = ps[ps.s_suppkey.isna()]  # suppliers without complaints
    j = ps.merge(part, left_on="ps_partkey", right_on="p_partkey")
    r = j.groupby(["p_brand", "p_type", "p_size"]).ps_suppkey.nunique().rename("supplier_cnt").reset_index()
    return r.sort_values(
        by=["supplier_cnt", "p_brand", "p_type", "p_size"], ascending=[False, True, True, True]
    )


def q16_polars(t):
    complaints = t["supplier"].filter(pl.col("s_comment").str.contains("Customer.*Complaints"))
    part = t["part"].filter(
        pl.col("p_brand") != "Brand#45",
        ~pl.col("p_type").str.starts_with("MEDIUM POLISHED"),
        pl.col("p_size").is_in([49, 14, 23, 45, 19, 3, 36, 9]),
    )
    return (
        t["partsupp"]
        .join(complaints, left_on="ps_suppkey", right_on="s_suppkey", how="anti")
        .join(part, left_on="ps_partkey", right_on="p_partkey")
        .group_by("p_brand", "p_type", "p_size")
        .agg(supplier_cnt=pl.col("ps_suppkey").n_unique())
        .sort(["supplier_cnt", "p_brand", "p_type", "p_size"], descending=[True, False, False, False])
    )


Q16_SQL = """
SELECT p_brand, p_type, p_size, count(DISTINCT ps_suppkey) AS supplier_cnt
FROM partsupp, part
WHERE p_partkey = ps_partkey
  AND p_brand <> 'Brand#45'
  AND p_type NOT LIKE 'MEDIUM POLISHED%'
  AND p_size IN (49, 14, 23, 45, 19, 3, 36, 9)
  AND ps_suppkey NOT IN (SELECT s_suppkey FROM supplier WHERE s_comment LIKE '%Customer%Complaints%')
GROUP BY p_brand, p_type, p_size
ORDER BY supplier_cnt DESC, p_brand, p_type, p_size
"""


def q17(t):
    part = t["part"]
    part = part[(part.p_brand == "Brand#23") & (part.p_container == "MED BOX")]
    li = t["lineitem"].merge(part[["p_partkey"]], left_on="l_partkey", right_on="p_partkey")
    average = li.groupby("l_partkey").l_quantity.mean().reset_index()
    average = average.rename(columns={"l_quantity": "avg_quantity"})
    li = li.merge(average, on="l_partkey")
    small = li[li.l_quantity < 0.2 * li.avg_quantity]
    return small.l_extendedprice.sum() / 7.0


def q17_polars(t):
    part = t["part"].filter(pl.col("p_brand") == "Brand#23", pl.col("p_container") == "MED BOX")
    return (
        t["lineitem"]
        .join(part, left_on="l_partkey", right_on="p_partkey")
        .filter(pl.col("l_quantity") < 0.2 * pl.col("l_quantity").mean().over("l_partkey"))
        .select(value=pl.col("l_extendedprice").sum() / 7.0)
    )


Q17_SQL = """
SELECT coalesce(sum(l_extendedprice), 0) / 7.0 AS value  -- no lines: 0, as pandas sums nothing
FROM lineitem, part
WHERE p_partkey = l_partkey AND p_brand = 'Brand#23' AND p_container = 'MED BOX'
  AND l_quantity < (SELECT 0.2 * avg(l_quantity) FROM lineitem WHERE l_partkey = p_partkey)
"""


def q18(t):
    li, orders = t["lineitem"], t["orders"]
    qty = li.groupby("l_orderkey").l_quantity.sum().reset_index()
    large = qty[qty.l_quantity > 300][["l_orderkey"]]
    orders = orders.merge(large, left_on="o_orderkey", right_on="l_orderkey").drop(columns=["l_orderkey"])
    j = orders.merge(t["customer"][["c_custkey", "c_name"]], left_on="o_custkey", right_on="c_custkey").merge(
        li[["l_orderkey", "l_quantity"]], left_on="o_orderkey", right_on="l_orderkey"
    )
    r = j.groupby(["c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice"]).l_quantity.sum()
    r = r.reset_index().rename(columns={"l_quantity": "sum_quantity"})
    return r.nlargest(100, "o_totalprice")


def q18_polars(t):
    large = (
        t["lineitem"]
        .group_by("l_orderkey")
        .agg(pl.col("l_quantity").sum())
        .filter(pl.col("l_quantity") > 300)
    )
    return (
        t["orders"]
        .join(large, left_on="o_orderkey", right_on="l_orderkey", how="semi")
        .join(t["customer"], left_on="o_custkey", right_on="c_custkey")
        .join(t["lineitem"], left_on="o_orderkey", right_on="l_orderkey")
        .group_by("c_name", "o_custkey", "o_orderkey", "o_orderdate", "o_totalprice")
        .agg(sum_quantity=pl.col("l_quantity").sum())
        .rename({"o_custkey": "c_custkey"})
        .sort(["o_totalprice", "o_orderdate"], descending=[True, False])
        .head(100)
    )


Q18_SQL = """
SELECT c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) AS sum_quantity
FROM customer, orders, lineitem
WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING sum(l_quantity) > 300)
  AND c_custkey = o_custkey AND o_orderkey = l_orderkey
GROUP BY c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice
ORDER BY o_totalprice DESC, o_orderdate
LIMIT 100
"""

_Q19_ORDERS = (
    # brand, containers, least quantity (up to 10 more), largest size
    ("Brand#12", ["SM CASE", "SM BOX", "SM PACK", "SM PKG"], 1, 5),
    ("Brand#23", ["MED BAG", "MED BOX", "MED PKG", "MED PACK"], 10, 10),
    ("Brand#34", ["LG CASE", "LG BOX", "LG PACK", "LG PKG"], 20, 15),
)


def _q19_lines(t):
    """The lines each brand's terms pick, a frame per brand."""
    li = t["lineitem"]
    li = li[li.l_shipmode.isin(["AIR", "AIR REG"]) & (li.l_shipinstruct == "DELIVER IN PERSON")]
    j = li.merge(t["part"], left_on="l_partkey", right_on="p_partkey")
    return [
        j[
            (j.p_brand == brand)
            & j.p_container.isin(containers)
            & j.l_quantity.between(quantity, quantity + 10)
            & j.p_size.between(1, size)
        ]
        for brand, containers, quantity, size in _Q19_ORDERS
    ]


def q19(t):
    j = dd.concat(_q19_lines(t))
    return _revenue(j).sum()


def q19_pandas(t):
    j = pd.concat(_q19_lines(t))
    return _revenue(j).sum()


def q19_polars(t):
    terms = [
        (pl.col("p_brand") == brand)
        & pl.col("p_container").is_in(containers)
        & (pl.col("l_quantity") >= quantity)
        & (pl.col("l_quantity") <= quantity + 10)
        & (pl.col("p_size") >= 1)
        & (pl.col("p_size") <= size)
        for brand, containers, quantity, size in _Q19_ORDERS
    ]
    return (
        t["lineitem"]
        .filter(
            pl.col("l_shipmode").is_in(["AIR", "AIR REG"]), pl.col("l_shipinstruct") == "DELIVER IN PERSON"
        )
        .join(t["part"], left_on="l_partkey", right_on="p_partkey")
        .filter(terms[0] | terms[1] | terms[2])
        .select(value=_pl_revenue().sum())
    )


Q19_SQL = f"""
SELECT sum({REVENUE}) AS value
FROM lineitem, part
WHERE p_partkey = l_partkey
  AND l_shipmode IN ('AIR', 'AIR REG') AND l_shipinstruct = 'DELIVER IN PERSON'
  AND ((p_brand = 'Brand#12' AND p_container IN ('SM CASE', 'SM BOX', 'SM PACK', 'SM PKG')
        AND l_quantity BETWEEN 1 AND 11 AND p_size BETWEEN 1 AND 5)
    OR (p_brand = 'Brand#23' AND p_container IN ('MED BAG', 'MED BOX', 'MED PKG', 'MED PACK')
        AND l_quantity BETWEEN 10 AND 20 AND p_size BETWEEN 1 AND 10)
    OR (p_brand = 'Brand#34' AND p_container IN ('LG CASE', 'LG BOX', 'LG PACK', 'LG PKG')
        AND l_quantity BETWEEN 20 AND 30 AND p_size BETWEEN 1 AND 15))
"""


def q20(t):
    part, li, nation = t["part"], t["lineitem"], t["nation"]
    forest = part[part.p_name.str.startswith("forest")][["p_partkey"]]
    li = li[(li.l_shipdate >= pd.Timestamp("1994-01-01")) & (li.l_shipdate < pd.Timestamp("1995-01-01"))]
    shipped = li.groupby(["l_partkey", "l_suppkey"]).l_quantity.sum().reset_index()
    ps = t["partsupp"].merge(forest, left_on="ps_partkey", right_on="p_partkey")
    ps = ps.merge(shipped, left_on=["ps_partkey", "ps_suppkey"], right_on=["l_partkey", "l_suppkey"])
    ps = ps[ps.ps_availqty > 0.5 * ps.l_quantity]
    keys = ps[["ps_suppkey"]].drop_duplicates()
    canada = nation[nation.n_name == "CANADA"]
    s = t["supplier"].merge(canada, left_on="s_nationkey", right_on="n_nationkey")
    s = s.merge(keys, left_on="s_suppkey", right_on="ps_suppkey")
    return s[["s_name", "s_address"]].sort_values("s_name")


def q20_polars(t):
    shipped = (
        t["lineitem"]
        .filter(
            pl.col("l_shipdate") >= pl.datetime(1994, 1, 1), pl.col("l_shipdate") < pl.datetime(1995, 1, 1)
        )
        .group_by("l_partkey", "l_suppkey")
        .agg(shipped=pl.col("l_quantity").sum())
    )
    plenty = (
        t["partsupp"]
        .join(
            t["part"].filter(pl.col("p_name").str.starts_with("forest")),
            left_on="ps_partkey",
            right_on="p_partkey",
        )
        .join(shipped, left_on=["ps_partkey", "ps_suppkey"], right_on=["l_partkey", "l_suppkey"])
        .filter(pl.col("ps_availqty") > 0.5 * pl.col("shipped"))
        .select("ps_suppkey")
        .unique()
    )
    return (
        t["supplier"]
        .join(t["nation"].filter(pl.col("n_name") == "CANADA"), left_on="s_nationkey", right_on="n_nationkey")
        .join(plenty, left_on="s_suppkey", right_on="ps_suppkey")
        .select("s_name", "s_address")
        .sort("s_name")
    )


Q20_SQL = """
SELECT s_name, s_address
FROM supplier, nation
WHERE s_suppkey IN (
        SELECT ps_suppkey FROM partsupp
        WHERE ps_partkey IN (SELECT p_partkey FROM part WHERE p_name LIKE 'forest%')
          AND ps_availqty > (
              SELECT 0.5 * sum(l_quantity) FROM lineitem
              WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey
                AND l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'))
  AND s_nationkey = n_nationkey AND n_name = 'CANADA'
ORDER BY s_name
"""


def _q21_waiting(t):
    """Per Saudi supplier, its late lines in finished orders with other suppliers, none of
    them late."""
    nation, supplier, orders = t["nation"], t["supplier"], t["orders"]
    saudi = nation[nation.n_name == "SAUDI ARABIA"]
    supplier = supplier.merge(saudi, left_on="s_nationkey", right_on="n_nationkey")[["s_suppkey", "s_name"]]
    finished = orders[orders.o_orderstatus == "F"][["o_orderkey"]]
    li = t["lineitem"][["l_orderkey", "l_suppkey", "l_commitdate", "l_receiptdate"]]
    late = li[li.l_receiptdate > li.l_commitdate]
    suppliers = li.groupby("l_orderkey").l_suppkey.nunique().reset_index()
    suppliers = suppliers.rename(columns={"l_suppkey": "suppliers"})
    late_suppliers = late.groupby("l_orderkey").l_suppkey.nunique().reset_index()
    late_suppliers = late_suppliers.rename(columns={"l_suppkey": "late_suppliers"})
    j = (
        late.merge(supplier, left_on="l_suppkey", right_on="s_suppkey")
        .merge(finished, left_on="l_orderkey", right_on="o_orderkey")
        .merge(suppliers, on="l_orderkey")
        .merge(late_suppliers, on="l_orderkey")
    )
    j = j[(j.suppliers > 1) & (j.late_suppliers == 1)]
    r = j.groupby("s_name").size().rename("numwait").reset_index()
    return r.sort_values(by=["numwait", "s_name"], ascending=[False, True])


def q21(t):
    return _q21_waiting(t).head(100, npartitions=-1, compute=False)


def q21_pandas(t):
    return _q21_waiting(t).head(100)


def q21_polars(t):
    lines = t["lineitem"].select("l_orderkey", "l_suppkey", "l_commitdate", "l_receiptdate")
    late = lines.filter(pl.col("l_receiptdate") > pl.col("l_commitdate"))
    suppliers = lines.group_by("l_orderkey").agg(suppliers=pl.col("l_suppkey").n_unique())
    late_suppliers = late.group_by("l_orderkey").agg(late_suppliers=pl.col("l_suppkey").n_unique())
    saudi = t["supplier"].join(
        t["nation"].filter(pl.col("n_name") == "SAUDI ARABIA"), left_on="s_nationkey", right_on="n_nationkey"
    )
    return (
        late.join(saudi, left_on="l_suppkey", right_on="s_suppkey")
        .join(t["orders"].filter(pl.col("o_orderstatus") == "F"), left_on="l_orderkey", right_on="o_orderkey")
        .join(suppliers, on="l_orderkey")
        .join(late_suppliers, on="l_orderkey")
        .filter(pl.col("suppliers") > 1, pl.col("late_suppliers") == 1)
        .group_by("s_name")
        .agg(numwait=pl.len())
        .sort(["numwait", "s_name"], descending=[True, False])
        .head(100)
    )


Q21_SQL = """
SELECT s_name, count(*) AS numwait
FROM supplier, lineitem l1, orders, nation
WHERE s_suppkey = l1.l_suppkey AND o_orderkey = l1.l_orderkey AND o_orderstatus = 'F'
  AND l1.l_receiptdate > l1.l_commitdate
  AND EXISTS (SELECT * FROM lineitem l2
              WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_suppkey <> l1.l_suppkey)
  AND NOT EXISTS (SELECT * FROM lineitem l3
                  WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey
                    AND l3.l_receiptdate > l3.l_commitdate)
  AND s_nationkey = n_nationkey AND n_name = 'SAUDI ARABIA'
GROUP BY s_name
ORDER BY numwait DESC, s_name
LIMIT 100
"""

_Q22_CODES = ["13", "31", "23", "29", "30", "18", "17"]


def q22(t):
    c = t["customer"]
    c = c.assign(cntrycode=c.c_phone.str.slice(0, 2))
    c = c[c.cntrycode.isin(_Q22_CODES)]
    average = c[c.c_acctbal > 0.0].c_acctbal.mean()
    c = c[c.c_acctbal > average]
    buyers = t["orders"][["o_custkey"]].drop_duplicates()
    c = c.merge(buyers, left_on="c_custkey", right_on="o_custkey", how="left")
    c = c[c.o_custkey.isna()]  # customers without orders
    r = c.groupby("cntrycode").agg({"c_custkey": "count", "c_acctbal": "sum"}).reset_index()
    r.columns = ["cntrycode", "numcust", "totacctbal"]
    return r.sort_values("cntrycode")


def q22_polars(t):
    balance = pl.col("c_acctbal")
    return (
        t["customer"]
        .with_columns(cntrycode=pl.col("c_phone").str.slice(0, 2))
        .filter(pl.col("cntrycode").is_in(_Q22_CODES))
        .filter(balance > balance.filter(balance > 0.0).mean())
        .join(t["orders"], left_on="c_custkey", right_on="o_custkey", how="anti")
        .group_by("cntrycode")
        .agg(numcust=pl.len(), totacctbal=balance.sum())
        .sort("cntrycode")
    )


Q22_SQL = f"""
SELECT cntrycode, count(*) AS numcust, sum(c_acctbal) AS totacctbal
FROM (
    SELECT substring(c_phone, 1, 2) AS cntrycode, c_acctbal
    FROM customer
    WHERE substring(c_phone, 1, 2) IN ({", ".join(f"'{code}'" for code in _Q22_CODES)})
      AND c_acctbal > (
          SELECT avg(c_acctbal) FROM customer
          WHERE c_acctbal > 0.00
            AND substring(c_phone, 1, 2) IN ({", ".join(f"'{code}'" for code in _Q22_CODES)}))
      AND NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey)
) AS custsale
GROUP BY cntrycode
ORDER BY cntrycode
"""


QUERIES = (
    Query("q1", "pricing summary report", q1, Q1_SQL, polars=q1_polars),
    Query("q2", "minimum cost supplier", q2, Q2_SQL, pandas=q2_pandas, polars=q2_polars),
    Query("q3", "shipping priority", q3, Q3_SQL, polars=q3_polars),
    Query("q4", "order priority checking", q4, Q4_SQL, polars=q4_polars),
    Query("q5", "local supplier volume", q5, Q5_SQL, polars=q5_polars),
    Query("q6", "forecasting revenue change", q6, Q6_SQL, polars=q6_polars),
    Query("q7", "volume shipping", q7, Q7_SQL, polars=q7_polars),
    Query("q8", "national market share", q8, Q8_SQL, polars=q8_polars),
    Query("q9", "product type profit", q9, Q9_SQL, polars=q9_polars),
    Query("q10", "returned item reporting", q10, Q10_SQL, polars=q10_polars),
    Query("q11", "important stock identification", q11, Q11_SQL, polars=q11_polars),
    Query("q12", "shipping modes and order priority", q12, Q12_SQL, polars=q12_polars),
    Query("q13", "customer distribution", q13, Q13_SQL, polars=q13_polars),
    Query("q14", "promotion effect", q14, Q14_SQL, polars=q14_polars),
    Query("q15", "top supplier", q15, Q15_SQL, polars=q15_polars),
    Query("q16", "parts/supplier relationship", q16, Q16_SQL, polars=q16_polars),
    Query("q17", "small-quantity-order revenue", q17, Q17_SQL, polars=q17_polars),
    Query("q18", "large volume customer", q18, Q18_SQL, polars=q18_polars),
    Query("q19", "discounted revenue", q19, Q19_SQL, pandas=q19_pandas, polars=q19_polars),
    Query("q20", "potential part promotion", q20, Q20_SQL, polars=q20_polars),
    Query("q21", "suppliers who kept orders waiting", q21, Q21_SQL, pandas=q21_pandas, polars=q21_polars),
    Query("q22", "global sales opportunity", q22, Q22_SQL, polars=q22_polars),
)

SUITE = Suite("tpch", TABLES, QUERIES, make)
