"""The workload library on a real 2-worker CPU cluster: every workload valid at small sizes
(both validation paths: the full host reference and the large-size identities / samples),
float32, the Lomb-Scargle implementations, validation that catches wrong answers (a
perturbed output, an off-by-one halo, a kernel that reads the wrong neighbour), the listing,
and one-line errors for bad input."""

from __future__ import annotations

import json
import pathlib

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import files_under, produce

import gpuscale
from gpuscale import UserError, workloads
from gpuscale.workloads import Output, _arrays, _frames
from gpuscale.workloads import lombscargle as lombscargle_mod
from gpuscale.workloads.map_overlap import validate_smoothing

QUICK = dict(repeat=1, warmup=0)
NEW = (
    "transpose_sum",
    "matmul",
    "fft",
    "reduction",
    "slice",
    "map_overlap",
    "stencil",
    "lombscargle",
    "merge",
    "shuffle",
)
SMALL = {
    "transpose_sum": dict(n=300, chunk=100),
    "matmul": dict(n=200, chunk=64),
    "fft": dict(rows=120, cols=256, axis=0, chunk=50),
    "reduction": dict(rows=300, cols=200, op="std", axis=1, chunk=64),
    "slice": dict(rows=300, cols=200, step=7, col_step=3, chunk=64),
    "map_overlap": dict(n=300, size=7, chunk=64),
    "stencil": dict(n=300, chunk=64),
    "lombscargle": dict(samples=300, freqs=2_000, chunk=500),
    "merge": dict(rows=20_000, right_rows=15_000, match_fraction=0.4, partitions=3),
    "shuffle": dict(rows=20_000, partitions=4),
}


def failed_checks(v) -> list[str]:
    return [c.name for c in v.checks if not c.ok]


@pytest.fixture
def large_path(monkeypatch):
    """Force the large-size validation (identities, samples, tiles) at these small sizes."""
    monkeypatch.setattr(_arrays, "FULL_CHECK_ELEMENTS", 0)
    monkeypatch.setattr(_frames, "FULL_CHECK_ROWS", 0)
    monkeypatch.setattr(lombscargle_mod, "FULL_CHECK_WORK", 100_000)


# ---------------------------------------------------------------------------------------
# Valid runs
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NEW)
def test_valid_with_full_reference(cpu_session, results_dir, name):
    r = cpu_session.run(name, **SMALL[name], **QUICK, results_dir=str(results_dir))
    assert r.valid, r.validation
    assert r.validation["method"].startswith(("full reference", "scipy.signal.lombscargle"))
    d = json.loads(pathlib.Path(r.path).read_text())
    assert d["workload"] == name and d["valid"] is True and d["family"] == "cpu"


@pytest.mark.parametrize("name", NEW)
def test_valid_with_large_size_validation(cpu_session, large_path, name):
    params = dict(SMALL[name])
    if name == "shuffle":
        params["method"] = "set_index"
    r = cpu_session.run(name, **params, **QUICK, write=False)
    assert r.valid, r.validation
    assert not r.validation["method"].startswith("full reference"), r.validation["method"]


@pytest.mark.parametrize(
    "name", ["transpose_sum", "matmul", "fft", "reduction", "map_overlap", "stencil", "lombscargle"]
)
def test_valid_in_float32(cpu_session, name):
    r = cpu_session.run(name, **SMALL[name], dtype="float32", **QUICK, write=False)
    assert r.valid, r.validation


def test_stencil_records_kernel_halo_and_chunks(cpu_session):
    r = cpu_session.run("stencil", n=200, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.choices["kernel"]["value"] == "numba.njit"
    assert r.choices["halo"]["value"] == 1
    assert r.choices["chunk"]["source"] == "rule" and r.choices["chunk"]["value"] == 100  # 200 / 2


@pytest.mark.parametrize(
    "impl, kernel", [("auto", "numba.njit"), ("numba", "numba.njit"), ("vectorized", "NumPy-API array calls")]
)
def test_lombscargle_cpu_impls(cpu_session, impl, kernel):
    r = cpu_session.run("lombscargle", samples=200, freqs=1_000, impl=impl, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.choices["kernel"]["value"] == kernel
    assert r.choices["impl"]["source"] == ("rule" if impl == "auto" else "flag")
    assert r.choices["fast_math"]["value"] is False  # float64


@pytest.mark.parametrize("impl", ["cupy", "numba-cuda"])
def test_lombscargle_gpu_impl_on_cpu_chunks_is_refused(cpu_session, impl):
    with pytest.raises(UserError, match=f"--impl {impl} does not run on numpy chunks"):
        cpu_session.run("lombscargle", samples=10, freqs=10, impl=impl, **QUICK, write=False)


def test_merge_and_shuffle_record_the_shuffle_method(cpu_session):
    for name in ("merge", "shuffle"):
        r = cpu_session.run(name, **SMALL[name], **QUICK, write=False)
        assert r.choices["shuffle_method"] == {
            "value": None,
            "source": "family",
            "rule": "None: Dask's default",
        }


# ---------------------------------------------------------------------------------------
# Validation catches wrong answers
# ---------------------------------------------------------------------------------------
def _bump(x, index, delta):
    """``x`` with ``delta`` added at one index, built from Dask operations only."""
    host = np.asarray(x.compute()).copy()
    host[index] += delta
    return da.from_array(host, chunks=x.chunks)


@pytest.mark.parametrize(
    "name, key, index, delta",
    [
        ("transpose_sum", "result", (), 1e-6),
        ("matmul", "result", (17, 101), 1e-6),
        ("fft", "result", (3, 7), 1e-6),
        ("reduction", "result", (5,), 1e-9),
        ("slice", "result", (2, 3), 1e-12),
        ("map_overlap", "result", (10, 20), 1e-7),  # inside the corner tile the large path checks
        ("stencil", "result", (0, 0), 1e-9),
        ("lombscargle", "power", (), None),
    ],
)
@pytest.mark.parametrize("path", ["full", "large"])
def test_validation_catches_one_wrong_value(cpu_session, monkeypatch, name, key, index, delta, path):
    if path == "large":
        monkeypatch.setattr(_arrays, "FULL_CHECK_ELEMENTS", 0)
        monkeypatch.setattr(lombscargle_mod, "FULL_CHECK_WORK", 100_000)
        if name == "slice":
            pytest.skip("sampled elements may miss one: test_slice_sampled_validation_catches_a_wrong_stride")
    wl, p, ctx, data, out = produce(cpu_session, name, **SMALL[name])
    assert wl.validate(out, data, p, ctx).valid
    x = out.collections[key]
    if name == "lombscargle":  # the peak, up by 1e-6 of itself
        peak = int(np.argmax(np.asarray(x.compute())))
        index, delta = (peak,), float(np.asarray(x.compute())[peak]) * 1e-6
    if index == ():
        bad = x + delta * abs(float(x.compute()))
    else:
        bad = _bump(x, index, delta)
    v = wl.validate(Output({**out.collections, key: bad}, out.info), data, p, ctx)
    assert v.valid is False, v.to_dict()


def test_slice_sampled_validation_catches_a_wrong_stride(cpu_session, monkeypatch):
    monkeypatch.setattr(_arrays, "FULL_CHECK_ELEMENTS", 0)
    wl, p, ctx, data, out = produce(cpu_session, "slice", **SMALL["slice"])
    assert wl.validate(out, data, p, ctx).valid
    shifted = data[1 :: p.step, :: p.col_step]  # off by one row, same shape
    assert shifted.shape == out.collections["result"].shape
    v = wl.validate(Output({"result": shifted}, out.info), data, p, ctx)
    assert failed_checks(v) == ["2000 sampled elements vs the source"]


@pytest.mark.parametrize("large", [False, True])
def test_stencil_with_an_off_by_one_halo_fails_validation(cpu_session, monkeypatch, large):
    """The real kernel through the real runner, with map_overlap's halo one pixel short."""
    if large:
        monkeypatch.setattr(_arrays, "FULL_CHECK_ELEMENTS", 0)
    from gpuscale.workloads.stencil import Stencil

    @gpuscale.workload("stencil_no_halo")
    class NoHalo(Stencil):
        HALO = 0

    try:
        r = cpu_session.run("stencil_no_halo", **SMALL["stencil"], **QUICK, write=False)
    finally:
        workloads.unregister("stencil_no_halo")
    assert r.choices["halo"]["value"] == 0
    assert r.valid is False
    failed = [c["name"] for c in r.validation["checks"] if not c["ok"]]
    assert failed and all(n.startswith(("every pixel", "tile")) for n in failed)
    if large:  # the corner tiles sit on chunk edges too; every boundary tile fails
        assert len(failed) >= 5


def _mean3x3_wrong_neighbour(a):
    """The CPU kernel's loop with one off-by-one read: a[i, j + 2] instead of a[i, j + 1]."""
    out = a.copy()
    h, w = a.shape
    for i in range(1, h - 1):
        for j in range(1, w - 2):
            out[i, j] = (
                a[i - 1, j - 1 : j + 2].sum()
                + a[i + 1, j - 1 : j + 2].sum()
                + a[i, j - 1]
                + a[i, j]
                + a[i, j + 2]
            ) / 9
    return out


def test_a_kernel_that_reads_the_wrong_neighbour_fails_validation():
    from gpuscale.kernels.stencil import mean3x3_numba, smooth_block

    img = np.random.default_rng(1).random((40, 30))
    x = da.from_array(img, chunks=(15, 12))
    with dask.config.set(scheduler="sync"):
        good = x.map_overlap(smooth_block, depth=1, boundary="reflect", dtype=img.dtype)
        assert validate_smoothing(good, x, 3, 1e-12, 0).valid
        assert type(good.blocks[0, 0].compute()) is np.ndarray and mean3x3_numba.kernel == "numba.njit"
        bad = x.map_overlap(_mean3x3_wrong_neighbour, depth=1, boundary="reflect", dtype=img.dtype)
        v = validate_smoothing(bad, x, 3, 1e-12, 0)
    assert failed_checks(v) == ["every pixel vs host mean filter"]


def test_lombscargle_on_the_wrong_frequencies_fails_validation(cpu_session, monkeypatch):
    monkeypatch.setattr(lombscargle_mod, "FULL_CHECK_WORK", 100_000)
    wl, p, ctx, data, out = produce(cpu_session, "lombscargle", **SMALL["lombscargle"])
    assert wl.validate(out, data, p, ctx).valid
    shifted = wl.compute({**data, "f": data["f"] * (1 + 1e-4)}, p, ctx)
    v = wl.validate(shifted, data, p, ctx)
    assert "vs scipy.signal.lombscargle (334 sampled frequencies + the peak)" in failed_checks(v)


@pytest.mark.parametrize("path", ["full", "large"])
def test_merge_validation_catches_a_lost_row_and_a_mispaired_row(cpu_session, monkeypatch, path):
    if path == "large":
        monkeypatch.setattr(_frames, "FULL_CHECK_ROWS", 0)
    wl, p, ctx, data, out = produce(cpu_session, "merge", **SMALL["merge"])
    assert wl.validate(out, data, p, ctx).valid
    got = out.collections["result"].compute()
    lost = wl.validate(
        Output({"result": dask.dataframe.from_pandas(got.iloc[1:], npartitions=2)}), data, p, ctx
    )
    assert "rows = right keys below --rows" in failed_checks(lost)
    mispaired = got.copy()
    mispaired.iloc[5, mispaired.columns.get_loc("x")] += 7
    v = wl.validate(Output({"result": dask.dataframe.from_pandas(mispaired, npartitions=2)}), data, p, ctx)
    assert "x = 7 key + 3 in every row (pairs the right left row)" in failed_checks(v)


@pytest.mark.parametrize("path", ["full", "large"])
def test_shuffle_validation_catches_disorder_and_a_lost_row(cpu_session, monkeypatch, path):
    if path == "large":
        monkeypatch.setattr(_frames, "FULL_CHECK_ROWS", 0)
    wl, p, ctx, data, out = produce(cpu_session, "shuffle", **SMALL["shuffle"])
    assert wl.validate(out, data, p, ctx).valid
    got = out.collections["result"].compute()
    swapped = got.iloc[[1, 0, *range(2, len(got))]]
    v = wl.validate(
        Output({"result": dask.dataframe.from_pandas(swapped, npartitions=4, sort=False)}), data, p, ctx
    )
    assert "every partition sorted" in failed_checks(v)
    v = wl.validate(
        Output({"result": dask.dataframe.from_pandas(got.iloc[:-1], npartitions=4, sort=False)}), data, p, ctx
    )
    assert {"rows", "ids: 0..rows-1, sum rows(rows-1)/2"} <= set(failed_checks(v))


# ---------------------------------------------------------------------------------------
# Listing
# ---------------------------------------------------------------------------------------
def test_workloads_json_lists_the_library(cli):
    p = cli("workloads", "--json")
    assert p.returncode == 0, p.stderr
    items = {w["name"]: w for w in json.loads(p.stdout)}
    assert set(NEW) | {"svd", "groupby"} <= set(items)
    assert {items[n]["collection"] for n in ("merge", "shuffle")} == {"dataframe"}
    for name in NEW:
        assert items[name]["description"] and items[name]["params"]
        for prm in items[name]["params"].values():
            assert prm["help"], (name, prm)
    assert {"samples", "freqs", "fmin", "fmax", "impl", "chunk", "dtype", "seed"} == set(
        items["lombscargle"]["params"]
    )
    assert items["lombscargle"]["params"]["impl"]["default"] == "auto"
    assert items["fft"]["params"]["axis"]["default"] == 1
    assert items["map_overlap"]["params"]["size"]["default"] == 5
    assert items["merge"]["params"]["match-fraction"]["default"] == 0.3
    assert items["slice"]["params"]["col-step"]["default"] == 1


# ---------------------------------------------------------------------------------------
# Bad input: one line, exit 2, nothing started or written
# ---------------------------------------------------------------------------------------
BAD = [
    (
        ["map_overlap", "--size", "9", "--chunk", "3"],
        "map_overlap: the halo (4 pixels) is wider than a chunk (--chunk 3); use --chunk >= 4 or a smaller "
        "--size",
    ),
    (["map_overlap", "--size", "4"], "map_overlap --size: the window width must be odd"),
    (
        ["map_overlap", "--n", "5", "--size", "13"],
        "map_overlap: the halo (6 pixels) is wider than the image (5)",
    ),
    (
        ["fft", "--axis", "2"],
        "fft --axis: axis 2 is out of range for a 2-D array; use 0 or 1 (or -2, -1) (got 2)",
    ),
    (["fft", "--rows", "10", "--chunk", "11", "--axis", "1"], "fft --chunk 11 is more than the 10 lanes"),
    (["reduction", "--axis", "-3"], "reduction --axis: axis -3 is out of range for a 2-D array"),
    (["reduction", "--op", "max"], "reduction --op: Input should be 'sum', 'mean' or 'std' (got 'max')"),
    (["lombscargle", "--fmin", "-1"], "lombscargle --fmin: angular frequencies must be positive and finite"),
    (["lombscargle", "--fmax", "0"], "lombscargle --fmax: angular frequencies must be positive and finite"),
    (["lombscargle", "--fmin", "5", "--fmax", "2"], "lombscargle --fmax 2 must be above --fmin 5"),
    (
        ["lombscargle", "--impl", "opencl"],
        "lombscargle --impl: Input should be 'auto', 'vectorized', 'numba', 'numba-cuda' or 'cupy' (got "
        "'opencl')",
    ),
    (["lombscargle", "--samples", "1"], "lombscargle --samples: Input should be greater than or equal to 2"),
    (["slice", "--rows", "10", "--step", "11"], "slice --step 11 is larger than --rows 10; use --step <= 10"),
    (["slice", "--step", "0"], "slice --step: Input should be greater than 0"),
    (["merge", "--match-fraction", "1.5"], "merge --match-fraction: Input should be less than or equal to 1"),
    (["shuffle", "--method", "sort"], "shuffle --method: Input should be 'sort_values' or 'set_index'"),
    (["stencil", "--dtype", "float16"], "stencil --dtype: Input should be 'float64' or 'float32'"),
    (["matmul", "--n", "many"], "matmul --n: Input should be a valid integer"),
    (["transpose_sum", "--size", "4"], "no such option --size"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    from gpuscale.cli import main

    with pytest.raises(SystemExit) as e:
        main(["run", *argv, "--backend", "cpu", "--results-dir", str(tmp_path / "res")])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gpuscale: error: {message}"), err
    assert files_under(tmp_path / "res") == []


def test_bad_input_through_the_real_command_line(cli, tmp_path):
    p = cli("run", "fft", "--axis", "5", "--backend", "cpu")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "gpuscale: error: fft --axis: axis 5 is out of range for a 2-D array; use 0 or 1 (or -2, -1) "
        "(got 5); see `gpuscale workloads` for fft's parameters"
    ]
    assert files_under(tmp_path) == []


# ---------------------------------------------------------------------------------------
# GPU (skipped without CuPy + dask-cuda + a GPU; `pytest -m gpu` runs only these)
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_session():
    with gpuscale.session(backend="gpu", gpus="0") as s:
        yield s


GPU = {
    "transpose_sum": dict(n=8_000),
    "matmul": dict(n=3_000),
    "fft": dict(rows=4_000, cols=8_192, axis=1),
    "reduction": dict(rows=20_000, cols=5_000, op="std", axis=0),
    "slice": dict(rows=40_000, cols=5_000, step=3),
    "map_overlap": dict(n=8_000, size=5, chunk=2_000),
    "stencil": dict(n=8_000, chunk=2_000),
    "lombscargle": dict(samples=20_000, freqs=200_000),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(GPU))
def test_valid_on_gpu(gpu_session, name, dtype):
    r = gpu_session.run(name, **GPU[name], dtype=dtype, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.family == "gpu"


@pytest.mark.gpu
def test_stencil_on_gpu_runs_the_cuda_kernel_and_catches_a_short_halo(gpu_session):
    from gpuscale.workloads.stencil import Stencil

    r = gpu_session.run("stencil", n=4_000, chunk=1_000, **QUICK, write=False)
    assert r.valid and r.choices["kernel"]["value"] == "numba.cuda.jit"

    @gpuscale.workload("stencil_no_halo_gpu")
    class NoHalo(Stencil):
        HALO = 0

    try:
        r = gpu_session.run("stencil_no_halo_gpu", n=4_000, chunk=1_000, **QUICK, write=False)
    finally:
        workloads.unregister("stencil_no_halo_gpu")
    assert r.valid is False


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    "impl, kernel",
    [
        ("auto", "cupy.RawKernel"),
        ("cupy", "cupy.RawKernel"),
        ("numba-cuda", "numba.cuda.jit"),
        ("vectorized", "NumPy-API array calls"),
    ],
)
def test_lombscargle_gpu_impls(gpu_session, impl, kernel, dtype):
    r = gpu_session.run(
        "lombscargle", samples=20_000, freqs=100_000, impl=impl, dtype=dtype, **QUICK, write=False
    )
    assert r.valid, r.validation
    assert r.choices["kernel"]["value"] == kernel
    assert r.choices["fast_math"]["value"] is (dtype == "float32" and impl != "vectorized")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name, params",
    [
        ("merge", dict(rows=2_000_000, match_fraction=0.3)),
        ("shuffle", dict(rows=2_000_000, method="sort_values")),
        ("shuffle", dict(rows=2_000_000, method="set_index")),
    ],
)
def test_dataframes_on_gpu(gpu_session, name, params):
    pytest.importorskip("cudf")
    pytest.importorskip("dask_cudf")
    r = gpu_session.run(name, **params, **QUICK, write=False)
    assert r.valid, r.validation
    assert r.choices["shuffle_method"]["value"] == "tasks"
