"""Users' own data and own Dask code: the routes on user collections, sessions that
switch and convert the user's collections, runs on user data (records, validation, --output),
and the command line on real files. Real LocalClusters, real files in tmp_path; GPU halves
are marked ``gpu`` (``pytest -m gpu`` on a GPU machine)."""

from __future__ import annotations

import json
import os

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import files_under, gpu_probe
from test_bad_input import assert_refused

import gpuscale
from gpuscale import UserError, workloads
from gpuscale.data import inputs, outputs
from gpuscale.routes import dataframe, linalg
from gpuscale.workloads import Output

GPU_USABLE = gpu_probe()[0]
QUICK = {"repeat": 1, "warmup": 0}


def known_spectrum(m: int, n: int, cond: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((m, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (q * np.logspace(0, -np.log10(cond), n)) @ v.T


@pytest.fixture(scope="module")
def matrix() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((3001, 24))


@pytest.fixture(scope="module")
def sales() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 30_000
    df = pd.DataFrame(
        {
            "store": rng.integers(0, 300, n),
            "day": rng.integers(0, 7, n),
            "price": rng.random(n) * 100,
            "qty": rng.integers(0, 20, n),
            "name": rng.choice(["a", "b", "c"], n),
        }
    )
    df.loc[::97, "price"] = np.nan  # missing values: count < size, mean skips them
    return df


@pytest.fixture
def files(tmp_path, sales, matrix):
    """sales.parquet, sales.csv, x.npy in tmp_path/in."""
    d = tmp_path / "in"
    d.mkdir()
    sales.to_parquet(d / "sales.parquet", index=False)
    sales.to_csv(d / "sales.csv", index=False)
    np.save(d / "x.npy", matrix)
    return {"dir": d, "parquet": d / "sales.parquet", "csv": d / "sales.csv", "npy": d / "x.npy"}


def pandas_ref(df: pd.DataFrame, by, agg) -> pd.DataFrame:
    return df.groupby(by).agg(agg).sort_index()


def assert_frames_match(got: pd.DataFrame, ref: pd.DataFrame):
    got = got.sort_index()
    assert list(got.index) == list(ref.index)
    assert list(got.columns) == list(ref.columns)
    for c in ref.columns:
        np.testing.assert_allclose(
            got[c].to_numpy(dtype=float),
            ref[c].to_numpy(dtype=float),
            rtol=1e-10,
            equal_nan=True,
            err_msg=str(c),
        )


# ---------------------------------------------------------------------------------------
# The routes on the user's collections (plain functions, any Client context)
# ---------------------------------------------------------------------------------------
def test_svd_on_ragged_row_chunks_and_split_columns(matrix):
    x = da.from_array(matrix, chunks=((1000, 1, 700, 1300), (10, 10, 4)))
    res = linalg.svd(x)
    assert res.route.value == "gram" and "condition estimate" in res.route.rule
    assert res.route.numbers["condition_estimate"] > 1
    assert any("rechunked 3 column blocks into one" in n for n in res.notes), res.notes
    assert type(res.s._meta) is np.ndarray
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(res.s.compute() - ref).max() / ref[0] <= 1e-12


def test_svd_auto_falls_back_on_ill_conditioned_user_data():
    xm = known_spectrum(4000, 20, 1e9)
    res = linalg.svd(da.from_array(xm, chunks=((1500, 999, 1501), (20,))), compute_uv=True)
    assert res.route.value in ("cholqr2", "tsqr") and res.route.rule.startswith("condition estimate")
    s, u, vt = dask.compute(res.s, res.u, res.vt)
    assert u.shape == xm.shape and res.u.chunks[0] == (1500, 999, 1501)
    ref = np.linalg.svd(xm, compute_uv=False)
    assert np.abs(s - ref).max() / ref[0] <= 1e-10
    assert np.linalg.norm((u * s) @ vt - xm) / np.linalg.norm(xm) <= 1e-10


def test_svd_with_unknown_row_chunks(matrix):
    x = da.from_array(matrix, chunks=(500, 24))
    xu = x[x[:, 0] > -1e9]  # a boolean mask: row chunk sizes unknown
    assert np.isnan(xu.chunks[0][0])
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(linalg.svd(xu).s.compute() - ref).max() / ref[0] <= 1e-12


def test_svd_refuses_complex_instead_of_dropping_the_imaginary_part(matrix):
    with pytest.raises(UserError, match="complex"):
        linalg.svd(da.from_array(matrix + 1j, chunks=(1000, 24)))


def test_svd_under_a_distributed_client(cpu_session, matrix):
    x = da.from_array(matrix, chunks=(900, 24))
    res = linalg.svd(x)
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(res.s.compute() - ref).max() / ref[0] <= 1e-12


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_groupby_agg_on_a_frame_read_from_a_file(cpu_session, files, sales, fmt):
    df = (
        dd.read_parquet(files["parquet"])
        if fmt == "parquet"
        else dd.read_csv(files["csv"], blocksize=200_000)
    )
    agg = {"price": ["mean", "max", "count"], "qty": ["sum", "size"]}
    res = dataframe.groupby_agg(df, ["store", "day"], agg)
    assert res.decision.numbers["groups_source"] == "estimated with nunique_approx (HyperLogLog)"
    assert res.decision.value in ("tree", "per-worker", "shuffle") and res.decision.rule
    assert_frames_match(res.result.compute(), pandas_ref(sales, ["store", "day"], agg))


def test_groupby_agg_without_a_client(sales):
    df = dd.from_pandas(sales, npartitions=3)
    res = dataframe.groupby_agg(df, "store", {"price": "mean"})
    assert_frames_match(res.result.compute(), pandas_ref(sales, "store", {"price": ["mean"]}))


def test_modules_import_no_gpu_library():
    import subprocess
    import sys

    code = (
        "import sys, gpuscale.routes.linalg, gpuscale.routes.dataframe, gpuscale.data.inputs, "
        "gpuscale.data.outputs, "
        "gpuscale.workloads.svd, gpuscale.workloads.groupby; "
        "print([m for m in ('cupy', 'cudf', 'dask_cudf', 'zarr') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------
# --agg / --by
# ---------------------------------------------------------------------------------------
def test_parse_agg():
    assert inputs.parse_agg("price:mean,max;qty:sum") == {"price": ["mean", "max"], "qty": ["sum"]}
    assert inputs.parse_agg(" a : count ; ") == {"a": ["count"]}
    assert inputs.parse_agg("ns:time:min") == {"ns:time": ["min"]}  # a colon in a column name
    assert inputs.parse_by("store, day") == ["store", "day"]


def test_parse_agg_escapes_the_separators_in_column_names():
    """A backslash makes the next character part of the name: ``\\;`` in --agg, ``\\,`` in --by,
    ``\\\\`` a backslash (before, 'a;b:sum' split into 'a' and 'b:sum': no way to name it)."""
    assert inputs.parse_agg(r"a\;b:sum;c:mean") == {"a;b": ["sum"], "c": ["mean"]}
    assert inputs.parse_agg(r"x\\:max") == {"x\\": ["max"]}
    assert inputs.parse_agg(r"a\;b\;c:min,max") == {"a;b;c": ["min", "max"]}
    assert inputs.parse_by(r"a\,b,c") == ["a,b", "c"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "empty"),
        ("price", "not COLUMN:AGG"),
        ("price:", "empty aggregation"),
        (":mean", "not COLUMN:AGG"),
        ("price:median", "unknown aggregation"),
        ("p:mean;p:max", "appears twice"),
    ],
)
def test_parse_agg_errors(text, needle):
    with pytest.raises(ValueError, match=needle):
        inputs.parse_agg(text)


# ---------------------------------------------------------------------------------------
# Sessions switch the user's own code
# ---------------------------------------------------------------------------------------
def test_session_sets_the_backend_for_the_block_only(tmp_path, sales):
    sales.to_parquet(tmp_path / "s.parquet")
    with dask.config.set({"array.backend": "cupy", "dataframe.backend": "cudf"}):  # set outside
        with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s:
            assert dask.config.get("array.backend") == "numpy"
            assert dask.config.get("dataframe.backend") == "pandas"
            assert type(da.ones((10, 10), chunks=5)._meta) is np.ndarray
            df = dd.read_parquet(tmp_path / "s.parquet")
            assert type(df._meta) is pd.DataFrame
            assert s.to_backend(df) is df  # already on the session's family
        assert dask.config.get("array.backend") == "cupy"
        assert dask.config.get("dataframe.backend") == "cudf"


def test_to_backend_on_the_cpu_family(cpu_session, matrix, sales):
    x = da.from_array(matrix, chunks=(1000, 24))
    assert cpu_session.to_backend(x) is x
    assert cpu_session.to_backend(x, "numpy") is x
    df = dd.from_pandas(sales, npartitions=2)
    assert cpu_session.to_backend(df, "pandas") is df
    y = cpu_session.to_backend(matrix)  # in-memory data becomes a Dask collection on the family
    assert isinstance(y, da.Array) and type(y._meta) is np.ndarray
    np.testing.assert_array_equal(y.compute(), matrix)
    with pytest.raises(UserError, match="cannot use a list as data"):
        cpu_session.to_backend([1, 2, 3])


@pytest.mark.skipif(GPU_USABLE, reason="needs a machine without a usable GPU")
def test_to_backend_gpu_without_gpu_is_one_line(cpu_session, matrix):
    with pytest.raises(UserError, match="install") as e:
        cpu_session.to_backend(da.from_array(matrix, chunks=(1000, 24)), "gpu")
    assert "\n" not in str(e.value)


def test_session_trace_captures_user_code(cpu_session, tmp_path, sales):
    from gpuscale import trace

    df = dd.from_pandas(sales, npartitions=4)
    with cpu_session.trace(str(tmp_path / "t")) as t:
        got = dataframe.groupby_agg(df, "store", {"qty": ["sum"]}).result.compute()
    assert_frames_match(got, pandas_ref(sales, "store", {"qty": ["sum"]}))
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == sorted(trace.FILES)
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["tasks"] > 0 and [p["name"] for p in summary["phases"]] == ["user"]
    assert t.summary.tasks == summary["tasks"]


# ---------------------------------------------------------------------------------------
# s.run on the user's data: runner, validation, record
# ---------------------------------------------------------------------------------------
def test_run_svd_on_a_user_array(cpu_session, matrix, results_dir):
    x = da.from_array(matrix, chunks=((1000, 1, 700, 1300), (12, 12)))
    r = cpu_session.run("svd", data=x, compute_uv=True, results_dir=str(results_dir), **QUICK)
    assert r.valid is True, r.validation
    assert r.validation["level"] == "fast" and "triplet residuals" in r.validation["method"]
    assert r.params == {"compute_uv": True, "route": "auto", "seed": 0}  # no generation params
    assert r.data["source"] == "user collection" and r.data["shape"] == [3001, 24]
    assert r.data["dtype"] == "float64" and r.data["chunk_type"] == "numpy.ndarray"
    assert r.data["chunks"] == {"row_blocks": 4, "rows_per_block": "1..1300"}
    assert any("joined 2 column blocks" in n for n in r.data["notes"])
    assert r.choices["chunk_rows"]["value"] == "input"
    assert r.info["route"]["name"] == "gram" and r.info["route"]["reason"]
    rec = json.loads(open(r.path).read())
    assert rec["data"] == r.data and rec["params"] == r.params


def test_run_svd_on_a_npy_path_full_validation_and_output(cpu_session, files, matrix, tmp_path):
    out = tmp_path / "s.npy"
    r = cpu_session.run("svd", data=str(files["npy"]), validate="full", output=str(out), **QUICK)
    assert r.valid is True and r.validation["level"] == "full"
    assert "numpy.linalg.svd" in r.validation["method"]
    assert r.data["source"] == str(files["npy"]) and r.data["format"] == "npy"
    assert r.data["file_bytes"] == files["npy"].stat().st_size
    assert r.info["output"]["written"] is True and r.info["output"]["path"] == str(out)
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(np.load(out) - ref).max() / ref[0] <= 1e-12


def test_run_groupby_on_a_user_frame(cpu_session, sales, results_dir):
    df = dd.from_pandas(sales, npartitions=5)
    agg = {"price": ["mean", "std", "first", "count"], "qty": "sum", "name": ["max"]}
    r = cpu_session.run("groupby", data=df, by="store", agg=agg, results_dir=str(results_dir), **QUICK)
    assert r.valid is True, r.validation
    assert r.params == {
        "split_out": "auto",
        "seed": 0,
        "by": ["store"],
        "agg": {"price": ["mean", "std", "first", "count"], "qty": ["sum"], "name": ["max"]},
    }
    assert r.data["source"] == "user collection" and r.data["rows"] == len(sales)
    assert r.data["partitions"] == 5 and r.data["columns"]["price"] == "float64"
    assert 250 <= r.choices["groups"]["value"] <= 350  # HyperLogLog estimate of 300
    assert r.choices["groupby_strategy"]["value"] in ("tree", "per-worker", "shuffle")
    names = [c["name"] for c in r.validation["checks"]]
    assert "group counts sum to the rows" in names and "price count <= group count" in names
    assert "price std" in names and "name max exact" in names


def test_run_groupby_on_a_parquet_path_full(cpu_session, files, sales, tmp_path):
    out = tmp_path / "g.csv"
    r = cpu_session.run(
        "groupby",
        data=files["parquet"],
        by=["store", "day"],
        agg="price:mean,max;qty:sum",
        validate="full",
        output=str(out),
        **QUICK,
    )
    assert r.valid is True and r.validation["level"] == "full"
    assert r.data["format"] == "parquet" and r.data["rows"] == len(sales)
    got = pd.read_csv(out).set_index(["store", "day"])
    ref = pandas_ref(sales, ["store", "day"], {"price": ["mean", "max"], "qty": ["sum"]})
    ref.columns = [f"{c}_{a}" for c, a in ref.columns]
    assert_frames_match(got, ref)


def test_validate_off_is_recorded_as_not_validated(cpu_session, sales):
    r = cpu_session.run(
        "groupby",
        data=dd.from_pandas(sales, npartitions=2),
        by="store",
        agg={"qty": "sum"},
        validate="off",
        **QUICK,
    )
    assert r.valid is None and r.validation == {
        "valid": None,
        "method": "not validated (--validate off)",
        "checks": [],
        "level": "off",
    }


def test_user_data_errors_through_the_api(cpu_session, sales, matrix):
    df = dd.from_pandas(sales, npartitions=2)
    with pytest.raises(UserError, match="needs --by"):
        cpu_session.run("groupby", data=df, agg={"qty": "sum"}, **QUICK)
    with pytest.raises(UserError, match=r"\['nope'\] are not in the DataFrame"):
        cpu_session.run("groupby", data=df, by="nope", agg={"qty": "sum"}, **QUICK)
    with pytest.raises(UserError, match="works on a DataFrame"):
        cpu_session.run("groupby", data=da.from_array(matrix), by="a", agg={"b": "sum"}, **QUICK)
    with pytest.raises(UserError, match="--rows describes generated data"):
        cpu_session.run("svd", data=da.from_array(matrix), rows=10, **QUICK)
    with pytest.raises(UserError, match="runs on generated data only"):
        cpu_session.run("matmul", data=da.from_array(matrix), **QUICK)
    with pytest.raises(UserError, match="in-memory numpy.ndarray"):
        cpu_session.run("svd", data=matrix, **QUICK)
    with pytest.raises(UserError, match="has one validation"):
        cpu_session.run("matmul", validate="full", **QUICK)


# ---------------------------------------------------------------------------------------
# A wrong answer fails user-data validation
# ---------------------------------------------------------------------------------------
def _validate(session, name, data, p, output_fn, level=None):
    """Load and compute as the runner does, then validate a result changed by ``output_fn``."""
    from gpuscale.runs import runner

    cls = workloads.get(name)
    wl = cls()
    p = cls.parse(p)
    src = inputs.inspect(data)
    ctx = workloads.Context(session.family, session.spec, session.client, data=src, validate=level)
    wl.plan(p, ctx)
    loaded = runner.persist(session.client, wl.load(p, ctx))
    out = wl.compute(loaded, p, ctx)
    good = Output(runner.persist(session.client, out.collections), out.info)
    assert wl.validate(good, loaded, p, ctx).valid is True
    bad = Output(runner.persist(session.client, output_fn(dict(good.collections))), out.info)
    return wl.validate(bad, loaded, p, ctx)


def bump(d: pd.DataFrame, col, key, by):
    """Change ``col`` of a result partition: times ``by`` for every group, or + ``by`` for ``key``."""
    d = d.copy()
    if key is None:
        d[col] = d[col] * by
    elif key in d.index:
        d.loc[key, col] = d.loc[key, col] + by
    return d


def _failed(v) -> set[str]:
    return {c.name for c in v.checks if not c.ok}


def test_perturbed_singular_values_fail(cpu_session, matrix):
    x = da.from_array(matrix, chunks=(1000, 24))
    v = _validate(cpu_session, "svd", x, {}, lambda c: {**c, "s": c["s"] * (1 + 1e-6)})
    assert v.valid is False and "sum s^2 = ||X||_F^2" in _failed(v)


def test_perturbed_u_fails_the_triplet_residuals(cpu_session, matrix):
    x = da.from_array(matrix, chunks=(1000, 24))
    v = _validate(cpu_session, "svd", x, {"compute_uv": True}, lambda c: {**c, "u": c["u"] * (1 + 1e-4)})
    assert _failed(v) == {"triplet residuals ||Xv_i - s_i u_i||"}


def test_one_wrong_singular_value_fails_full_but_passes_the_identity_at_its_size(cpu_session, matrix):
    """A small error in the smallest value hides under the Frobenius tolerance; full catches it."""
    x = da.from_array(matrix, chunks=(1000, 24))
    bump = np.zeros(24)
    bump[-1] = 1e-8

    def change(c):
        return {**c, "s": c["s"] + da.from_array(bump, chunks=24)}

    assert _validate(cpu_session, "svd", x, {}, change, "fast").valid is True
    v = _validate(cpu_session, "svd", x, {}, change, "full")
    assert _failed(v) == {"every s_i vs numpy.linalg.svd"}


def test_missing_group_fails(cpu_session, sales):
    df = dd.from_pandas(sales, npartitions=3)
    v = _validate(
        cpu_session,
        "groupby",
        df,
        {"by": "store", "agg": {"price": "mean"}},
        lambda c: {"result": c["result"].map_partitions(lambda d: d[d.index != 7])},
    )
    assert "same groups as the independent count" in _failed(v)


def test_perturbed_means_fail_the_sample(cpu_session, sales):
    df = dd.from_pandas(sales, npartitions=3)
    v = _validate(
        cpu_session,
        "groupby",
        df,
        {"by": "store", "agg": {"price": ["mean"], "qty": ["sum"]}},
        lambda c: {"result": c["result"].map_partitions(bump, ("price", "mean"), None, 1.0001)},
    )
    assert _failed(v) == {"price mean"}


def test_one_wrong_group_fails_full(cpu_session, sales):
    df = dd.from_pandas(sales, npartitions=3)
    agg = {"by": "store", "agg": {"qty": ["sum"]}}

    def change(c):
        return {"result": c["result"].map_partitions(bump, ("qty", "sum"), 123, 1)}

    v = _validate(cpu_session, "groupby", df, agg, change, "full")
    assert _failed(v) == {"qty sum exact"}


# ---------------------------------------------------------------------------------------
# Outputs: atomic, never over a file unasked
# ---------------------------------------------------------------------------------------
def test_output_write_is_atomic_and_refuses_existing(tmp_path):
    target = outputs.check(tmp_path / "s.npy", False, (".npy",))
    outputs.write({"s": np.arange(3.0)}, target)
    assert np.load(target).tolist() == [0, 1, 2]
    with pytest.raises(UserError, match="already exists"):
        outputs.check(tmp_path / "s.npy", False, (".npy",))
    with pytest.raises(UserError, match="appeared while the work ran"):
        outputs.write({"s": np.arange(5.0)}, target)
    assert np.load(target).tolist() == [0, 1, 2]
    outputs.write({"s": np.arange(5.0)}, outputs.check(target, True, (".npy",)), overwrite=True)
    assert np.load(target).tolist() == [0, 1, 2, 3, 4]
    assert [p.name for p in tmp_path.iterdir()] == ["s.npy"]  # no temporary left
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_output_failing_writer_leaves_nothing(tmp_path):
    with pytest.raises(Exception):  # noqa: B017 - whatever the writer raises on a non-frame
        outputs.write({"s": object()}, tmp_path / "x.parquet")  # not a frame
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------
# The command line on files
# ---------------------------------------------------------------------------------------
def run_json(cli, *args):
    p = cli("run", *args, "--repeat", "1", "--warmup", "0", "--json", timeout=240)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_cli_groupby_parquet_to_parquet(cli, files, sales, tmp_path):
    out = tmp_path / "out.parquet"
    d = run_json(
        cli,
        "groupby",
        "--input",
        files["parquet"],
        "--by",
        "store",
        "--agg",
        "price:mean,max;qty:sum",
        "--output",
        out,
    )
    assert (
        d["valid"] is True
        and d["validation"]["level"] == "fast"
        and d["data"]["chunk_type"] == "pandas.DataFrame"
    )
    assert d["params"]["by"] == ["store"] and d["params"]["agg"] == {"price": ["mean", "max"], "qty": ["sum"]}
    assert "rows" not in d["params"] and d["data"]["source"] == str(files["parquet"])
    assert d["info"]["output"] == {
        "path": str(out),
        "format": "Parquet",
        "bytes": out.stat().st_size,
        "holds": "store, price_mean, price_max, qty_sum",
        "written": True,
    }
    got = pd.read_parquet(out).set_index("store")
    ref = pandas_ref(sales, "store", {"price": ["mean", "max"], "qty": ["sum"]})
    ref.columns = [f"{c}_{a}" for c, a in ref.columns]
    assert_frames_match(got, ref)


def test_cli_groupby_names_columns_holding_the_separators(cli, tmp_path):
    """`--agg 'p\\;q:sum'` aggregates the column named ``p;q`` (and `--by 's\\,t'` groups by ``s,t``),
    as the Python API's ``agg={"p;q": ["sum"]}`` does; the flag's help says how."""
    df = pd.DataFrame({"s,t": [1, 2, 1, 2, 3], "p;q": [1.0, 2.0, 3.0, 4.0, 5.0]})
    df.to_parquet(tmp_path / "semi.parquet")
    d = run_json(
        cli,
        "groupby",
        "--input",
        tmp_path / "semi.parquet",
        "--by",
        r"s\,t",
        "--agg",
        r"p\;q:sum",
        "--output",
        tmp_path / "out.parquet",
        "--backend",
        "cpu",
        "--workers",
        "1",
    )
    assert d["valid"] is True and d["params"]["agg"] == {"p;q": ["sum"]} and d["params"]["by"] == ["s,t"]
    got = pd.read_parquet(tmp_path / "out.parquet").set_index("s,t")
    assert got.iloc[:, 0].to_dict() == {1: 4.0, 2: 6.0, 3: 5.0}
    h = cli("run", "groupby", "--help")
    assert r"\;" in " ".join(h.stdout.split()), h.stdout


def test_cli_groupby_csv_to_csv(cli, files, sales, tmp_path):
    out = tmp_path / "out.csv"
    d = run_json(
        cli,
        "groupby",
        "--input",
        files["csv"],
        "--by",
        "store,day",
        "--agg",
        "qty:sum,count",
        "--output",
        out,
        "--validate",
        "full",
        "--backend",
        "pandas",
    )
    assert d["valid"] is True and d["data"]["format"] == "csv" and d["family"] == "cpu"
    assert d["choices"]["csv_blocksize"]["source"] == "family"
    ref = pandas_ref(sales, ["store", "day"], {"qty": ["sum", "count"]})
    ref.columns = [f"{c}_{a}" for c, a in ref.columns]
    assert_frames_match(pd.read_csv(out).set_index(["store", "day"]), ref)


def test_cli_svd_npy_to_npy(cli, files, matrix, tmp_path):
    out = tmp_path / "s.npy"
    d = run_json(cli, "svd", "--input", files["npy"], "--output", out)
    assert d["valid"] is True and d["data"]["shape"] == [3001, 24] and d["data"]["format"] == "npy"
    assert d["params"] == {"compute_uv": False, "route": "auto", "seed": 0}
    assert d["choices"]["chunk_rows"]["source"] == "rule"
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(np.load(out) - ref).max() / ref[0] <= 1e-12


def test_cli_svd_zarr_to_npz_with_u_and_v(cli, files, matrix, tmp_path):
    pytest.importorskip("zarr")
    store = tmp_path / "in" / "x.zarr"
    da.from_array(matrix, chunks=(700, 10)).to_zarr(str(store))
    out = tmp_path / "usv.npz"
    d = run_json(cli, "svd", "--input", store, "--compute-uv", "--output", out, "--validate", "full")
    assert d["valid"] is True and d["data"]["format"] == "zarr" and d["data"]["stored_chunks"] == [700, 10]
    assert d["choices"]["chunk_rows"]["value"] % 700 == 0 or d["choices"]["chunk_rows"]["value"] == 3001
    with np.load(out) as z:
        s, u, vt = z["s"], z["u"], z["vt"]
    assert u.shape == matrix.shape and vt.shape == (24, 24)
    assert np.linalg.norm((u * s) @ vt - matrix) / np.linalg.norm(matrix) <= 1e-12


def test_cli_overwrite(cli, files, matrix, tmp_path):
    out = tmp_path / "s.npy"
    np.save(out, np.zeros(2))
    p = cli("run", "svd", "--input", files["npy"], "--output", out, "--results-dir", tmp_path / "res")
    assert p.returncode == 2 and "already exists" in p.stderr and "--overwrite" in p.stderr
    assert np.load(out).tolist() == [0, 0] and not (tmp_path / "res").exists()
    d = run_json(cli, "svd", "--input", files["npy"], "--output", out, "--overwrite", "--validate", "off")
    assert d["valid"] is None and d["validation"]["level"] == "off"  # exit 0: not validated is no failure
    assert d["info"]["output"]["written"] is True
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(np.load(out) - ref).max() / ref[0] <= 1e-12


def test_cli_invalid_result_writes_no_output(cli, tmp_path):
    """The Gram route forced on an ill-conditioned matrix is inaccurate: full validation fails,
    the command exits 3 (a check failed) and --output is not written (the record says why)."""
    np.save(tmp_path / "ill.npy", known_spectrum(4000, 20, 1e12))
    out = tmp_path / "s.npy"
    p = cli(
        "run",
        "svd",
        "--input",
        tmp_path / "ill.npy",
        "--route",
        "gram",
        "--validate",
        "full",
        "--output",
        out,
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--json",
        timeout=240,
    )
    assert p.returncode == 3, p.stderr
    assert "--output was not written" in p.stderr
    d = json.loads(p.stdout)
    assert d["valid"] is False and d["info"]["output"]["written"] is False
    assert not out.exists() and not [f for f in tmp_path.iterdir() if "gpuscale-tmp" in f.name]


BAD = [
    (
        ("groupby", "--input", "{dir}/nosuch.parquet", "--by", "store", "--agg", "qty:sum"),
        ("nosuch.parquet does not exist",),
    ),
    (
        ("groupby", "--input", "{parquet}", "--by", "nope", "--agg", "qty:sum"),
        ("['nope'] are not in", "choose from: store, day, price, qty, name"),
    ),
    (("groupby", "--input", "{csv}", "--by", "store", "--agg", "nope:sum"), ("['nope'] are not in",)),
    (("groupby", "--input", "{parquet}", "--by", "store", "--agg", "qty"), ("not COLUMN:AGG",)),
    (
        ("groupby", "--input", "{parquet}", "--by", "store", "--agg", "qty:median"),
        ("unknown aggregation(s) ['median']",),
    ),
    (("groupby", "--input", "{parquet}", "--by", "store", "--agg", "name:mean"), ("not numeric",)),
    (("groupby", "--input", "{parquet}", "--by", "store"), ("needs --agg",)),
    (("groupby", "--by", "store", "--agg", "qty:sum"), ("no input was given",)),
    (
        ("groupby", "--input", "{parquet}", "--by", "store", "--agg", "qty:sum", "--keys", "5"),
        ("--keys describes generated data",),
    ),
    (("groupby", "--input", "{npy}", "--by", "store", "--agg", "qty:sum"), ("does not read", ".parquet")),
    (
        ("groupby", "--input", "{dir}/notes.txt", "--by", "a", "--agg", "b:sum"),
        ("unsupported input file type '.txt'",),
    ),
    (
        ("groupby", "--input", "{dir}/broken.parquet", "--by", "a", "--agg", "b:sum"),
        ("cannot read", "as Parquet"),
    ),
    (
        ("groupby", "--input", "{parquet}", "--by", "store", "--agg", "qty:sum", "--output", "{dir}/o.txt"),
        ("writes .parquet or .csv files",),
    ),
    (
        (
            "groupby",
            "--input",
            "{parquet}",
            "--by",
            "store",
            "--agg",
            "qty:sum",
            "--output",
            "{dir}/no/o.csv",
        ),
        ("does not exist", "create it first"),
    ),
    (
        (
            "groupby",
            "--input",
            "{parquet}",
            "--by",
            "store",
            "--agg",
            "qty:sum",
            "--output",
            "{dir}/taken.csv",
        ),
        ("already exists", "--overwrite"),
    ),
    (
        ("groupby", "--input", "{parquet}", "--by", "store", "--agg", "qty:sum", "--output", "{dir}"),
        ("writes .parquet or .csv",),
    ),
    (
        ("groupby", "--input", "{parquet}", "--by", "store", "--agg", "qty:sum", "--validate", "maybe"),
        ("--validate must be one of off, fast, full",),
    ),
    (("svd", "--input", "{dir}/v.npy"), ("needs a 2-D array", "1-D with shape (10,)")),
    (("svd", "--input", "{dir}/wide.npy"), ("3 rows < 10 columns", "transpose")),
    (("svd", "--input", "{dir}/c.npy"), ("complex128",)),
    (("svd", "--input", "{dir}/junk.npy"), ("is not a .npy file",)),
    (("svd", "--input", "{dir}/z.npz"), ("unsupported input file type '.npz'",)),
    (("svd", "--input", "{parquet}"), ("is Parquet, which this workload does not read", ".npy, .zarr")),
    (("svd", "--input", "{npy}", "--rows", "10"), ("--rows describes generated data",)),
    (("svd", "--input", "{npy}", "--output", "{dir}/s.parquet"), ("svd writes .npy or .npz files",)),
    (
        ("svd", "--rows", "10000000000", "--validate", "full"),
        ("--validate full needs about", "--validate fast"),
    ),
    (
        (
            "groupby",
            "--input",
            "{csv}",
            "--by",
            "store",
            "--agg",
            "qty:sum",
            "--output",
            "{csv}",
            "--overwrite",
        ),
        ("is the input file",),
    ),
    (("matmul", "--input", "{npy}"), ("no such option --input",)),
    (
        ("groupby", "--input", "{dir}/pipe.csv", "--by", "a", "--agg", "b:sum"),
        ("pipe.csv is not a regular file or folder", "write the data to a file first"),
    ),
    (("svd", "--input", "{dir}/pipe.npy"), ("pipe.npy is not a regular file or folder",)),
]


@pytest.mark.parametrize("args, needles", BAD, ids=[" ".join(a[:1] + a[3:]) for a, _ in BAD])
def test_cli_bad_input(cli, files, tmp_path, args, needles):
    d = files["dir"]
    np.save(d / "v.npy", np.arange(10.0))
    np.save(d / "wide.npy", np.ones((3, 10)))
    np.save(d / "c.npy", np.ones((10, 2)) + 1j)
    (d / "junk.npy").write_bytes(b"not numpy")
    np.savez(d / "z.npz", a=np.ones(3))
    (d / "notes.txt").write_text("hi")
    (d / "broken.parquet").write_bytes(b"PAR1 but not really")
    (d / "taken.csv").write_text("keep me")
    for pipe in ("pipe.csv", "pipe.npy"):  # reading a FIFO with no writer would block for ever
        if not (d / pipe).exists():
            os.mkfifo(d / pipe)
    before = {f: f.stat().st_mtime_ns for f in files_under(d)}
    args = [a.format(dir=d, parquet=files["parquet"], csv=files["csv"], npy=files["npy"]) for a in args]
    p = cli("run", *args, "--results-dir", tmp_path / "res")
    assert_refused(p, tmp_path, *needles)
    assert {f: f.stat().st_mtime_ns for f in files_under(d)} == before  # nothing written or changed
    assert (d / "taken.csv").read_text() == "keep me"


def test_cli_zarr_not_installed(cli, files, tmp_path):
    """Zarr input without the zarr package: one line with the install command."""
    shadow = tmp_path / "shadow" / "zarr"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'zarr'\", name='zarr')\n"
    )
    (tmp_path / "in" / "y.zarr").mkdir()
    (tmp_path / "in" / "y.zarr" / ".zarray").write_text("{}")
    p = cli(
        "run",
        "svd",
        "--input",
        tmp_path / "in" / "y.zarr",
        "--results-dir",
        tmp_path / "res",
        env={"PYTHONPATH": str(tmp_path / "shadow")},
    )
    assert_refused(p, tmp_path, "needs the Python module 'zarr'", "pip install zarr")


# ---------------------------------------------------------------------------------------
# A folder whose files disagree: one line naming the column, the files, their types
# ---------------------------------------------------------------------------------------
FLOATS = {"store": [1, 2, 1], "price": [1.0, 2.0, 3.0]}
TEXT_PRICE = {"store": [1, 2, 2], "price": ["1.5", "x", "3"]}
TEXT_STORE = {"store": ["1", "2", "2"], "price": [1.0, 2.0, 3.0]}
MIXED = [  # (case, files: name -> columns, needles)
    (
        "parquet-double-vs-string",
        {"a.parquet": FLOATS, "b.parquet": TEXT_PRICE},
        ("column 'price' is double in a.parquet but ", "string in b.parquet", "give files with one schema"),
    ),
    (
        "parquet-key-int-vs-string",
        {"a.parquet": FLOATS, "b.parquet": TEXT_STORE},
        ("column 'store' is int64 in a.parquet but ", "string in b.parquet", "or one file"),
    ),
    (
        "parquet-column-missing",
        {"a.parquet": FLOATS, "b.parquet": {"store": [1, 2, 2]}},
        ("column 'price' is in a.parquet but not in b.parquet", "give files with the same columns"),
    ),
    (
        "parquet-column-missing-in-first",
        {"a.parquet": {"store": [1, 2, 2]}, "b.parquet": FLOATS},
        ("column 'price' is in b.parquet but not in a.parquet",),
    ),
    (
        "csv-other-header",
        {"a.csv": FLOATS, "b.csv": {"price": [1.0, 2.0, 3.0], "store": [1, 2, 2]}},
        ("b.csv has the header 'price,store' but a.csv has 'store,price'", "the same header"),
    ),
    (
        "csv-float-then-text",
        {"a.csv": FLOATS, "b.csv": TEXT_PRICE},
        ("column 'price' was read as float64 but holds text (str) further on", "one type throughout"),
    ),
]


@pytest.mark.parametrize("files_of, needles", [c[1:] for c in MIXED], ids=[c[0] for c in MIXED])
def test_cli_folder_of_files_that_disagree(cli, tmp_path, files_of, needles):
    """Parquet: the footers are compared before any cluster starts; CSV: the headers before,
    a column's type (Dask's guess from the first file) where the data loads."""
    d = tmp_path / "in"
    d.mkdir()
    for name, cols in files_of.items():
        write = pd.DataFrame(cols).to_parquet if name.endswith(".parquet") else pd.DataFrame(cols).to_csv
        write(d / name, index=False)
    p = cli(
        "run",
        "groupby",
        "--input",
        d,
        "--by",
        "store",
        "--agg",
        "price:mean",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--results-dir",
        tmp_path / "res",
        timeout=240,
    )
    line = assert_refused(p, tmp_path, f"{d}: ", *needles)
    assert "unexpected" not in line and "--debug" not in line


def test_a_csv_column_that_turns_to_text_late_is_one_line_without_pandas_warnings(cli, tmp_path):
    """400 000 integer rows then text: pandas' DtypeWarning in the worker that reads that part
    goes to the run's log file; stderr holds only gpuscale's line."""
    f = tmp_path / "mixed.csv"
    f.write_text("store,qty\n" + "".join(f"{i % 7},{i}\n" for i in range(400_000)) + "1,x\n")
    p = cli(
        "run",
        "groupby",
        "--backend",
        "cpu",
        "--input",
        f,
        "--by",
        "store",
        "--agg",
        "qty:sum",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--results-dir",
        tmp_path / "res",
        timeout=240,
    )
    line = assert_refused(p, tmp_path, "column 'qty' was read as int64 but holds text (str) further on")
    assert "DtypeWarning" not in p.stderr and "unexpected" not in line


def test_parquet_files_may_mix_integer_and_float_columns(tmp_path):
    """int64 in one file and double in another read and aggregate as numbers: not refused."""
    pd.DataFrame({"store": [1, 2], "price": [1, 2]}).to_parquet(tmp_path / "a.parquet", index=False)
    pd.DataFrame({"store": [1, 2], "price": [1.5, 2.5]}).to_parquet(tmp_path / "b.parquet", index=False)
    src = inputs.inspect(tmp_path)
    assert src.format == "parquet" and src.shape == (4, 2)


# ---------------------------------------------------------------------------------------
# GPU halves (pytest -m gpu)
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_session():
    from conftest import clean_gpuscale_env

    with clean_gpuscale_env():
        # host_collections off: these tests hand s.run collections of host chunks (as made
        # outside a session) and check that the run moves them; the session's own conversion of
        # Dask's host collections is tested in tests/test_host_collections.py / test_snippets.py
        with gpuscale.session(backend="gpu", gpus="0", host_collections="off") as s:
            yield s


@pytest.mark.gpu
def test_gpu_session_makes_cupy_chunks(gpu_session, tmp_path):
    import cupy

    assert type(da.ones((10, 10), chunks=5)._meta) is cupy.ndarray
    assert type(da.random.default_rng(0).random((10, 4), chunks=5).blocks[1].compute()) is cupy.ndarray


@pytest.mark.gpu
def test_gpu_session_reads_into_cudf(gpu_session, tmp_path, sales):
    import cudf

    sales.to_parquet(tmp_path / "s.parquet")
    sales.to_csv(tmp_path / "s.csv", index=False)
    assert isinstance(dd.read_parquet(tmp_path / "s.parquet")._meta, cudf.DataFrame)
    assert isinstance(dd.read_csv(tmp_path / "s.csv").partitions[0].compute(), cudf.DataFrame)


@pytest.mark.gpu
def test_gpu_to_backend_arrays_both_ways(gpu_session, matrix):
    import cupy

    x = da.from_array(matrix, chunks=(1000, 24))
    xg = gpu_session.to_backend(x)
    assert type(xg._meta) is cupy.ndarray and type(xg.blocks[0].compute()) is cupy.ndarray
    assert gpu_session.to_backend(xg) is xg
    back = gpu_session.to_backend(xg, "cpu")
    assert type(back._meta) is np.ndarray
    np.testing.assert_array_equal(back.compute(), matrix)


@pytest.mark.gpu
def test_gpu_to_backend_frames_both_ways(gpu_session, sales):
    import cudf

    df = dd.from_pandas(sales, npartitions=2)
    dg = gpu_session.to_backend(df)
    assert isinstance(dg._meta, cudf.DataFrame) and isinstance(dg.partitions[0].compute(), cudf.DataFrame)
    pd.testing.assert_frame_equal(gpu_session.to_backend(dg, "pandas").compute(), sales)


@pytest.mark.gpu
def test_gpu_svd_route_on_a_cupy_user_array(gpu_session, matrix):
    import cupy

    x = da.from_array(matrix, chunks=((1000, 1, 700, 1300), (10, 14))).map_blocks(cupy.asarray)
    res = linalg.svd(x, compute_uv=True)
    assert any("column blocks" in n for n in res.notes)
    assert type(res.s._meta) is cupy.ndarray and type(res.u._meta) is cupy.ndarray
    s, u, vt = (cupy.asnumpy(a) for a in dask.compute(res.s, res.u, res.vt))
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(s - ref).max() / ref[0] <= 1e-12
    assert np.linalg.norm((u * s) @ vt - matrix) / np.linalg.norm(matrix) <= 1e-12


@pytest.mark.gpu
def test_gpu_groupby_route_on_a_cudf_user_frame(gpu_session, sales):
    df = gpu_session.to_backend(dd.from_pandas(sales, npartitions=3))
    res = dataframe.groupby_agg(df, "store", {"price": ["mean", "max"], "qty": ["sum"]})
    assert_frames_match(
        res.result.compute().to_pandas(),
        pandas_ref(sales, "store", {"price": ["mean", "max"], "qty": ["sum"]}),
    )


@pytest.mark.gpu
def test_gpu_run_svd_on_user_data(gpu_session, files, matrix, tmp_path):
    import cupy

    r = gpu_session.run(
        "svd", data=da.from_array(matrix, chunks=(1000, 24)), compute_uv=True, validate="full", **QUICK
    )
    assert r.valid is True and r.family == "gpu"
    assert any("moved numpy.ndarray chunks to cupy" in n for n in r.data["notes"])
    r = gpu_session.run("svd", data=str(files["npy"]), output=str(tmp_path / "s.npy"), **QUICK)
    assert r.valid is True and r.data["format"] == "npy"
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(np.load(tmp_path / "s.npy") - ref).max() / ref[0] <= 1e-12
    # the file's blocks are read straight into CuPy on the worker
    x = inputs.open_source(inputs.inspect(files["npy"]), gpu_session.family, chunk_rows=1000)
    assert type(x._meta) is cupy.ndarray and type(x.blocks[3].compute()) is cupy.ndarray


@pytest.mark.gpu
def test_gpu_run_groupby_on_user_data(gpu_session, files, sales, tmp_path):
    out = tmp_path / "g.parquet"
    r = gpu_session.run(
        "groupby",
        data=str(files["parquet"]),
        by="store",
        agg="price:mean;qty:sum,count",
        output=str(out),
        **QUICK,
    )
    assert r.valid is True and r.family == "gpu"
    ref = pandas_ref(sales, "store", {"price": ["mean"], "qty": ["sum", "count"]})
    ref.columns = [f"{c}_{a}" for c, a in ref.columns]
    assert_frames_match(pd.read_parquet(out).set_index("store"), ref)
    r = gpu_session.run(
        "groupby",
        data=dd.from_pandas(sales, npartitions=3),
        by=["store", "day"],
        agg={"price": ["std", "first"], "name": ["max"]},
        validate="full",
        **QUICK,
    )
    assert r.valid is True and any("moved pandas.DataFrame partitions to cudf" in n for n in r.data["notes"])


@pytest.mark.gpu
def test_gpu_cli_svd_on_a_npy_file(cli, files, matrix, tmp_path):
    # the module's gpu_session holds 80% of GPU 0 in its RMM pool: this cluster takes a small one
    d = run_json(
        cli,
        "svd",
        "--backend",
        "gpu",
        "--input",
        files["npy"],
        "--output",
        tmp_path / "s.npy",
        "--validate",
        "full",
        "--gpus",
        "0",
        "--rmm-pool-size",
        "2GB",
    )
    assert d["valid"] is True and d["family"] == "gpu" and d["data"]["chunk_type"] == "cupy.ndarray"
    ref = np.linalg.svd(matrix, compute_uv=False)
    assert np.abs(np.load(tmp_path / "s.npy") - ref).max() / ref[0] <= 1e-12


@pytest.mark.gpu
def test_gpu_cli_groupby_on_a_parquet_file(cli, files, sales, tmp_path):
    d = run_json(
        cli,
        "groupby",
        "--backend",
        "gpu",
        "--input",
        files["parquet"],
        "--by",
        "store",
        "--agg",
        "price:mean,max",
        "--output",
        tmp_path / "g.parquet",
        "--validate",
        "full",
        "--gpus",
        "0",
        "--rmm-pool-size",
        "2GB",
    )
    assert d["valid"] is True and d["family"] == "gpu" and d["data"]["chunk_type"] == "cudf.DataFrame"
    assert d["audit"]["clean"] and d["audit"]["kinds"]["cudf"] > 0 and d["audit"]["kinds"]["pandas"] == 0
    ref = pandas_ref(sales, "store", {"price": ["mean", "max"]})
    ref.columns = [f"{c}_{a}" for c, a in ref.columns]
    assert_frames_match(pd.read_parquet(tmp_path / "g.parquet").set_index("store"), ref)
