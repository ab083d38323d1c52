"""Bad input ends with exit code 2, exactly one line ``gpuscale: error: ...`` on stderr, no
traceback, and no result file; through the real CLI (and a few through the API)."""

from __future__ import annotations

import pytest
from conftest import files_under, gpu_probe

import gpuscale
from gpuscale import UserError

GPU_USABLE = gpu_probe()[0]
SMALL_SVD = ("run", "svd", "--rows", "1000", "--cols", "10", "--repeat", "1", "--warmup", "0")


def ucx_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("distributed_ucxx") is not None


def assert_refused(p, tmp_path, *needles):
    """Exit 2, one 'gpuscale: error:' line naming every needle, no traceback, nothing written."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("gpuscale: error: "), p.stderr
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert p.stdout == ""
    for n in needles:
        assert n in lines[0], (n, lines[0])
    written = [
        f
        for f in files_under(tmp_path)
        if f.suffix == ".json" or "gpuscale-results" in f.parts or f.parent.name == "res"
    ]
    assert written == [], written
    return lines[0]


@pytest.fixture
def refused(cli, tmp_path):
    """Run the CLI with --results-dir tmp_path/res (unless given) and check the refusal."""

    def run(*args, needles=(), env=None, timeout=120):
        if "--results-dir" not in args and args[:1] == ("run",) and len(args) > 1:
            args = (*args, "--results-dir", tmp_path / "res")
        p = cli(*args, env=env, timeout=timeout)
        return assert_refused(p, tmp_path, *needles)

    return run


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------
def test_unknown_workload(refused):
    refused("run", "nosuch", needles=("unknown workload 'nosuch'", "svd", "groupby"))


def test_unknown_backend(refused):
    refused(*SMALL_SVD, "--backend", "tpu", needles=("gpuscale.backend", "tpu", "cpu", "cupy"))


def test_unknown_protocol(refused):
    refused(*SMALL_SVD, "--protocol", "udp", needles=("gpuscale.protocol", "udp", "tcp, ucx"))


def test_unknown_profile(refused):
    refused(*SMALL_SVD, "--profile", "nosuch", needles=("unknown profile 'nosuch'", "gpu-ucx"))


def test_unknown_flag(refused):
    refused(*SMALL_SVD, "--bogus", needles=("--bogus", "--help"))


def test_workload_before_options(refused):
    refused("run", "--rows", "5", needles=("--rows", "gpuscale run --help"))


# ---------------------------------------------------------------------------------------
# Missing optional stacks (this machine has no GPU stack / UCX)
# ---------------------------------------------------------------------------------------
@pytest.mark.skipif(GPU_USABLE, reason="needs a machine without a usable GPU")
def test_backend_cupy_without_gpu(refused):
    refused(*SMALL_SVD, "--backend", "cupy", needles=("backend 'cupy'", "pip install"))


@pytest.mark.skipif(GPU_USABLE, reason="needs a machine without a usable GPU")
def test_backend_cudf_without_gpu(refused):
    refused(
        "run",
        "groupby",
        "--rows",
        "1000",
        "--keys",
        "10",
        "--backend",
        "cudf",
        needles=("backend 'cudf'", "pip install"),
    )


@pytest.mark.skipif(ucx_importable(), reason="distributed-ucxx is installed here")
def test_protocol_ucx_without_ucxx(refused):
    refused(
        *SMALL_SVD,
        "--backend",
        "cpu",
        "--protocol",
        "ucx",
        needles=("protocol 'ucx'", "distributed_ucxx", "pip install"),
    )


# ---------------------------------------------------------------------------------------
# Profiles and environment
# ---------------------------------------------------------------------------------------
def test_malformed_yaml_profile(refused, tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("version: 1\ngpuscale:\n  backend: cpu\n   protocol: [tcp\n")
    refused(*SMALL_SVD, "--profile", p, needles=("not valid YAML", "line"))


@pytest.mark.parametrize(
    "text, needles",
    [
        ("distributed:\n  scheduler: [unclosed\n", ("line 2, column 14", "flow sequence")),
        ("[1, 2]\n", ("a dict as the top level",)),
    ],
)
def test_a_malformed_dask_config_file_is_named_in_one_line(refused, tmp_path, text, needles):
    """``import dask`` itself fails on it: the command still ends in one line, exit 2."""
    folder = tmp_path / "dask-config"
    folder.mkdir()
    (folder / "mine.yaml").write_text(text)
    refused(*SMALL_SVD, env={"DASK_CONFIG": str(folder)}, needles=("mine.yaml", "Dask", *needles))


def test_a_run_whose_one_pass_would_take_too_long_is_refused_up_front(refused):
    """224 GiB of groupby data on one worker thread: more than its memory, and one pass at the
    CPU family's pace would take about an hour."""
    line = refused(
        "run", "groupby", "--backend", "cpu", "--workers", "1", "--threads-per-worker", "1",
        "--rows", "10000000000",
        needles=("--rows 10000000000", "224.05 GiB", "one pass would take about", "--no-memory-check"),
    )  # fmt: skip
    assert "(1 thread(s))" in line


def test_profile_with_unknown_key(refused, tmp_path):
    p = tmp_path / "unknown.yaml"
    p.write_text("version: 1\ngpuscale:\n  backend: cpu\n  bogus-key: 3\n")
    refused(*SMALL_SVD, "--profile", p, needles=("gpuscale.bogus-key", "backend, protocol", "cluster", "run"))


@pytest.mark.parametrize("where", ["profile", "env"])
def test_true_for_a_number_of_workers_is_refused_not_read_as_one(refused, tmp_path, where):
    p = tmp_path / "p.yaml"
    p.write_text("version: 1\ngpuscale:\n  cluster:\n    workers: true\n")
    args, env = ((*SMALL_SVD, "--profile", p), None) if where == "profile" else (SMALL_SVD, {})
    if where == "env":
        env = {"DASK_GPUSCALE__CLUSTER__WORKERS": "true"}
    refused(*args, env=env, needles=("gpuscale.cluster.workers", "true / false is no value here"))


def test_profile_with_unknown_nested_key(refused, tmp_path):
    p = tmp_path / "nested.yaml"
    p.write_text("version: 1\ngpuscale:\n  cluster:\n    wrkers: 3\n")
    refused(*SMALL_SVD, "--profile", p, needles=("gpuscale.cluster.wrkers", "workers, threads-per-worker"))


def test_bad_env_var_value(refused):
    refused(
        *SMALL_SVD,
        env={"DASK_GPUSCALE__CLUSTER__WORKERS": "-1"},
        needles=("DASK_GPUSCALE__CLUSTER__WORKERS", "-1"),
    )


def test_bad_env_var_value_in_cluster_show(refused):
    refused(
        "cluster", "show", env={"DASK_GPUSCALE__PROTOCOL": "udp"}, needles=("DASK_GPUSCALE__PROTOCOL", "udp")
    )


# ---------------------------------------------------------------------------------------
# Sizes and values
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, needles",
    [
        (("--rows", "-5"), ("--rows", "-5")),
        (("--rows", "0"), ("--rows",)),
        (("--cols", "0"), ("--cols",)),
        (("--rows", "abc"), ("--rows", "abc")),
        (("--cols", "50", "--rows", "10"), ("--cols 50 > --rows 10",)),
        (("--chunk-rows", "100000", "--rows", "1000"), ("--chunk-rows 100000", "1000")),
        (("--route", "qr"), ("--route",)),
        (("--dtype", "int8"), ("--dtype",)),
        (("--repeat", "0"), ("--repeat", ">= 1")),
        (("--repeat", "x"), ("--repeat", "whole number")),
        (("--warmup", "-1"), ("--warmup", ">= 0")),
        (("--gpus", "abc"), ("gpuscale.cluster.gpus", "abc")),
        (("--workers", "0"), ("gpuscale.cluster.workers",)),
        (("--memory-limit", "lots"), ("invalid memory limit", "lots")),
    ],
)
def test_bad_svd_values(refused, args, needles):
    refused("run", "svd", *args, needles=needles)


def test_groupby_more_keys_than_rows(refused):
    refused("run", "groupby", "--keys", "2000", "--rows", "1000", needles=("--keys 2000 > --rows 1000",))


def test_groupby_bad_split_out(refused):
    refused("run", "groupby", "--rows", "1000", "--keys", "10", "--split-out", "0", needles=("--split-out",))


def test_size_that_cannot_fit(refused):
    line = refused(
        "run",
        "svd",
        "--backend",
        "cpu",
        "--memory-limit",
        "270MB",
        "--workers",
        "1",
        "--rows",
        "300000",
        "--cols",
        "3000",
        "--compute-uv",
        needles=("GiB", "--no-memory-check", "MiB"),
    )
    assert "needs about" in line


# ---------------------------------------------------------------------------------------
# Where it runs and where it writes
# ---------------------------------------------------------------------------------------
def test_unreachable_scheduler_is_bounded(refused):
    # a hang would hit the subprocess timeout; the default connect-timeout is 10 s
    refused(
        *SMALL_SVD,
        "--backend",
        "cpu",
        "--scheduler",
        "tcp://127.0.0.1:1",
        timeout=60,
        needles=("tcp://127.0.0.1:1", "no scheduler answered"),
    )


def test_results_dir_that_cannot_be_created(refused, tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    refused(
        *SMALL_SVD,
        "--backend",
        "cpu",
        "--results-dir",
        tmp_path / "afile" / "sub",
        needles=("afile/sub cannot be made", "afile is not a folder", "pass --results-dir a folder"),
    )


# ---------------------------------------------------------------------------------------
# The Python API raises the same one-line UserError, before starting anything
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rows=0), "--rows"),
        (dict(backend="tpu"), "unknown backend"),
        (dict(protocol="udp"), "unknown protocol"),
        (dict(profile="nosuch"), "unknown profile"),
        (dict(cluster_settings={"wrkers": 2}), "unknown setting 'wrkers'"),
        (dict(cluster_settings={"gpus": "abc"}), "GPU indices"),
        (
            dict(
                repeat=1,
                warmup=0,
                rows=1000,
                cols=10,
                backend="cpu",
                scheduler=None,
                cluster_settings={"workers": -1},
            ),
            "gpuscale.cluster.workers",
        ),
    ],
)
def test_api_refusals(tmp_path, kwargs, match):
    with pytest.raises(UserError, match=match) as e:
        gpuscale.run("svd", results_dir=str(tmp_path / "res"), **kwargs)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "res").exists()


@pytest.mark.skipif(GPU_USABLE, reason="needs a machine without a usable GPU")
def test_api_gpu_session_without_gpu():
    with pytest.raises(UserError, match="pip install"):
        gpuscale.session(backend="gpu")


def test_api_memory_check(cpu_session, tmp_path):
    with pytest.raises(UserError, match="--no-memory-check"):
        # 4 TB, with U as large again: more than the workers' memory and the disk they would
        # spill to, and U (kept) cannot stream
        cpu_session.run(
            "svd", rows=5_000_000_000, cols=100, compute_uv=True, results_dir=str(tmp_path / "res")
        )
    assert files_under(tmp_path / "res") == []


@pytest.mark.parametrize(
    "args, needles",
    [
        (
            ("svd", "--rows", "99999999999999999999999"),
            ("svd --rows 99999999999999999999999 is beyond any machine",),
        ),
        (("svd", "--rows", "9223372036854775807"), ("--rows 9223372036854775807", "use a smaller --rows")),
        (("groupby", "--rows", "99999999999999999999999"), ("groupby --rows",)),
        (
            ("svd", "--rows", "2000000000000", "--cols", "50"),
            ("more than 1000 x the cluster's", "use smaller sizes"),
        ),
        (("groupby", "--rows", "9000000000000000"), ("more than 1000 x the cluster's",)),
    ],
    ids=["svd 1e23", "svd int64 max", "groupby 1e23", "svd 727 TiB streamed", "groupby 192 PiB streamed"],
)
def test_huge_generated_sizes_are_refused_before_a_cluster_starts(refused, args, needles):
    import time

    started = time.monotonic()
    refused("run", *args, "--backend", "cpu", needles=needles)
    assert time.monotonic() - started < 30  # no cluster was started (a start and close take longer here)


def test_a_garbage_dask_memory_setting_is_named(refused):
    env = {"DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "garbage"}
    for command in ("run", "explain"):
        refused(
            command,
            "svd",
            "--backend",
            "cpu",
            env=env,
            needles=(
                "distributed.worker.memory.target is 'garbage'",
                "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET",
            ),
        )


@pytest.mark.parametrize(
    "flags, needles",
    [
        (("--dashboard-address", "foo:bar"), ("--dashboard-address 'foo:bar' is not [HOST]:PORT",)),
        (("--dashboard-address", "nosuchhost.invalid:8787"), ("'nosuchhost.invalid' does not resolve",)),
        (
            ("--host", "203.0.113.7"),
            (
                "--host 203.0.113.7: this machine cannot listen on 203.0.113.7",
                "give an address of this machine",
            ),
        ),
    ],
    ids=["dashboard port", "dashboard host", "host"],
)
def test_addresses_are_checked_before_the_cluster_starts(refused, flags, needles):
    for command in ("run", "explain"):
        refused(command, "svd", "--backend", "cpu", *flags, needles=needles)


def test_a_cpu_cluster_that_fails_to_start_does_not_suggest_the_cpu_backend():
    from gpuscale.cluster import start_error
    from gpuscale.runs.session import configure

    spec = configure(backend="cpu", check=False)[2]
    e = str(start_error(spec, RuntimeError("Scheduler failed to start.")))
    assert "--backend cpu" not in e and "gpuscale cluster show" in e
    gpu_like = spec.model_copy(update={"family": "gpu"})
    assert "or use --backend cpu" in str(start_error(gpu_like, RuntimeError("x")))


def test_a_route_given_a_frame_in_memory_says_to_wrap_it():
    import pandas as pd

    from gpuscale import dataframe

    frame = pd.DataFrame({"key": [1, 2], "x": [1.0, 2.0]})
    for call in (
        lambda: dataframe.groupby_agg(frame, "key", {"x": ["max", "mean"]}),
        lambda: dataframe.merge(frame, frame, on="key"),
        lambda: dataframe.sort(frame, "x"),
    ):
        with pytest.raises(
            UserError, match=r"takes a Dask DataFrame, got pandas DataFrame; wrap it with dask"
        ):
            call()


def test_a_run_given_input_points_to_data():
    import pandas as pd

    with pytest.raises(
        UserError, match=r"no parameter --input; give your data as data= \(--input on the command"
    ):
        gpuscale.run("groupby", backend="cpu", input=pd.DataFrame({"k": [1]}))


def test_a_missing_column_of_a_wide_file_lists_some_names_and_a_count(refused, tmp_path):
    names = [f"c{i}" for i in range(20_001)]
    (tmp_path / "wide.csv").write_text(",".join(names) + "\n" + ",".join("1" * len(names)) + "\n")
    line = refused(
        "run",
        "groupby",
        "--input",
        tmp_path / "wide.csv",
        "--by",
        "nope",
        "--agg",
        "c1:sum",
        needles=("'nope'", "c0, c1,", "... and 19,981 more"),
    )
    assert len(line) < 400, len(line)


def test_a_one_line_error_is_bounded_whatever_it_quotes():
    huge = "x" * 100_000
    e = UserError(f"no such thing {huge}", f"use {huge}")
    assert len(str(e)) < 2 * 1000 + 100 and "(100,014 characters)" in str(e)


@pytest.mark.parametrize("value", ["inf", "nan", "1e16"])
def test_a_condition_number_past_float64_is_refused(refused, value):
    refused("run", "svd", "--rows", "1000", "--cols", "10", "--condition", value, needles=("--condition",))


def test_a_dask_gpuscale_variable_that_is_no_mapping_is_named(refused):
    refused(
        "run",
        *SMALL_SVD[1:],
        env={"DASK_GPUSCALE": "garbage"},
        needles=("DASK_GPUSCALE is 'garbage'", "DASK_GPUSCALE__SESSION__ENGINE"),
    )


def test_a_full_stdout_ends_in_one_line_and_keeps_the_record(tmp_path):
    import subprocess
    import sys

    from conftest import _clean_environ

    for extra in ((), ("--json",)):
        with open("/dev/full", "w") as full:
            p = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuscale",
                    *SMALL_SVD,
                    "--results-dir",
                    str(tmp_path / "res"),
                    *extra,
                ],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                timeout=300,
                cwd=tmp_path,
                env=_clean_environ(None),
            )
        lines = p.stderr.splitlines()
        assert p.returncode == 5 and len(lines) == 1, p.stderr
        assert lines[0].startswith("gpuscale: error: could not write to stdout (No space left on device)")
    assert len(list((tmp_path / "res").glob("*.json"))) == 2


def test_a_zarr_array_of_text_is_refused_as_not_numbers(refused, tmp_path_factory):
    zarr = pytest.importorskip("zarr")
    import numpy as np

    store = tmp_path_factory.mktemp("in") / "text.zarr"  # apart from where nothing may be written
    z = zarr.open_array(str(store), mode="w", shape=(100, 2), dtype=str)
    z[:] = np.array([[str(i), "a"] for i in range(100)])
    refused("run", "svd", "--input", store, needles=("text.zarr holds", "not numbers"))


def test_a_working_folder_deleted_before_the_run_is_named(tmp_path):
    import subprocess
    import sys

    from conftest import _clean_environ

    p = subprocess.run(
        [
            "sh",
            "-c",
            'mkdir gone && cd gone && rmdir ../gone && exec "$0" -m gpuscale "$@"',
            sys.executable,
            *SMALL_SVD,
        ],
        cwd=tmp_path,
        env=_clean_environ(None),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines() == [
        "gpuscale: error: the working folder no longer exists (deleted or moved); cd to a folder that exists "
        "and run it again"
    ]


def test_workers_with_no_memory_limit_are_still_checked_against_the_machine(refused):
    refused(
        "run", "transpose_sum", "--n", "400000", "--memory-limit", "0",
        needles=("more than this machine's", "no memory limit never spill", "--memory-limit"),
    )  # fmt: skip


def test_no_memory_limit_admits_what_the_machine_holds(cli, tmp_path):
    p = cli("run", "transpose_sum", "--n", "2000", "--memory-limit", "0", "--repeat", "1", "--warmup", "0",
            "--results-dir", tmp_path / "res")  # fmt: skip
    assert p.returncode == 0, p.stderr


def test_a_trace_folder_named_with_bytes_the_locale_cannot_decode_is_refused(tmp_path):
    import os
    import subprocess
    import sys

    from conftest import _clean_environ

    folder = os.fsencode(tmp_path) + b"/t\xff"
    p = subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"gpuscale", *map(os.fsencode, SMALL_SVD), b"--trace", folder],
        cwd=tmp_path,
        env={**_clean_environ(None), "LC_ALL": "C"},
        capture_output=True,
        timeout=300,
    )
    lines = p.stderr.decode(errors="replace").splitlines()
    assert p.returncode == 2 and len(lines) == 1, lines
    assert "is not a UTF-8 name" in lines[0] and "Traceback" not in lines[0]
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    "address, said",
    [
        ("tcp://", "missing port number"),
        ("::::", "ipv6 needs brackets"),
        ("tcp://localhost:notaport", "'notaport'"),
        ("tcp://[::1", "invalid address"),
        ("tcp://localhost:99999", "port 99999 is not from 1 to 65535"),
    ],
)
def test_an_odd_scheduler_address_is_named_before_any_connection(refused, address, said):
    refused(
        *SMALL_SVD, "--scheduler", address, needles=("not a scheduler address", said, "[tcp://]HOST:PORT")
    )


def test_a_zarr_array_of_a_billion_unwritten_chunks_is_refused_by_its_size(refused, tmp_path_factory):
    zarr = pytest.importorskip("zarr")
    store = tmp_path_factory.mktemp("in") / "huge.zarr"
    zarr.open_array(str(store), mode="w", shape=(10**15, 10), chunks=(10**6, 10), dtype="f8")
    refused("run", "svd", "--input", store, needles=("svd at these sizes", "PiB"), timeout=180)
