"""``session.host-collections``: collections Dask builds from host objects inside a session
(gpuscale/backends/host_collections.py), under the test-only device family (tests/auditfam.py:
TagArray / TagFrame chunks, the stand-in for CuPy / cuDF on CI) and the CPU family (a no-op).

Real LocalClusters, no mocks: the setting and its layers, each mode (convert: converted on the
workers, recorded, in the audit's ``conversions``; warn: once per call site, naming the user's
file:line and the fix; strict: a UserError raised at that line; off), the CPU family's no-op,
the wrappers undone on exit, and two sessions in two threads of one process.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import subprocess
import sys
import threading
import traceback
import warnings

import auditfam
import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from dask.sizeof import sizeof
from distributed import wait

import gpuscale
from gpuscale import backends, config
from gpuscale.backends import host_collections as hc
from gpuscale.errors import UserError

ONE = {"workers": 1, "threads_per_worker": 1}
PDF = pd.DataFrame({"k": np.arange(400) % 7, "v": np.arange(400.0)})
HERE = os.path.abspath(__file__)


@pytest.fixture
def device():
    auditfam.register_device()
    yield auditfam.device_family()
    auditfam.unregister_device()


def here() -> int:
    """The caller's line."""
    return inspect.currentframe().f_back.f_lineno


def host_collection_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, hc.HostCollectionWarning)]


# ---------------------------------------------------------------------------------------
# The setting
# ---------------------------------------------------------------------------------------
def test_setting_default_env_keyword_profile_and_bad_values(tmp_path, monkeypatch):
    r = config.resolve()
    assert r.settings.session.host_collections == "convert"
    assert r.sources["session.host-collections"] == "default"
    monkeypatch.setenv("DASK_GPUSCALE__SESSION__HOST_COLLECTIONS", "warn")
    r = config.resolve()
    assert (r.settings.session.host_collections, r.sources["session.host-collections"]) == ("warn", "env")
    r = config.resolve(overrides=config.keywords_to_nested({"host_collections": "Strict"}))
    assert (r.settings.session.host_collections, r.sources["session.host-collections"]) == ("strict", "flag")
    with dask.config.set({"gpuscale.session.host-collections": "off"}):
        r = config.resolve()
        assert (r.settings.session.host_collections, r.sources["session.host-collections"]) == (
            "off",
            "dask.config",
        )
    monkeypatch.delenv("DASK_GPUSCALE__SESSION__HOST_COLLECTIONS")
    prof = tmp_path / "p.yaml"
    prof.write_text("version: 1\ngpuscale:\n  session:\n    host-collections: warn\n")
    r = config.resolve(profile=str(prof))
    assert (r.settings.session.host_collections, r.sources["session.host-collections"]) == ("warn", "profile")
    monkeypatch.setenv("DASK_GPUSCALE__SESSION__HOST_COLLECTIONS", "sometimes")
    with pytest.raises(
        UserError,
        match=r"gpuscale.session.host-collections \(from env "
        r"DASK_GPUSCALE__SESSION__HOST_COLLECTIONS\).*'convert', 'warn'",
    ):
        config.resolve()
    monkeypatch.delenv("DASK_GPUSCALE__SESSION__HOST_COLLECTIONS")
    with pytest.raises(UserError, match="unknown key 'gpuscale.session.host-collection'.*host-collections"):
        config.resolve(overrides={"session": {"host-collection": "warn"}})


def test_the_family_decides_what_is_host_native(device):
    cpu = backends.select("cpu").family
    gpu = backends.select("gpu", check=False).family
    assert cpu.host_native() and cpu.host_native("array") and cpu.host_native("dataframe")
    assert not gpu.host_native("array") and not gpu.host_native("dataframe")
    assert not device.host_native("array") and not device.host_native("dataframe")
    assert not auditfam.family().host_native("array") and auditfam.family().host_native("dataframe")
    with hc.scope(cpu, "strict") as s:  # nothing to do: nothing installed, every mode a no-op
        assert s is None and not hc.installed() and hc.current() is None
    with pytest.raises(UserError, match="unknown session.host-collections mode 'loud'"):
        with hc.scope(device, "loud"):
            pass


# ---------------------------------------------------------------------------------------
# The CPU family: NumPy and pandas are its own
# ---------------------------------------------------------------------------------------
def test_cpu_session_is_a_no_op():
    original = dd.from_pandas
    with gpuscale.session(backend="cpu", host_collections="strict", engine="dask", **ONE) as s:
        assert not hc.installed() and dd.from_pandas is original
        with s.audit() as a:
            ddf = dd.from_pandas(PDF, npartitions=2)
            x = da.from_array(np.ones((10, 4)), chunks=5)
            assert type(ddf._meta) is pd.DataFrame and type(x._meta) is np.ndarray
            pd.testing.assert_frame_equal(ddf.compute(), PDF)
    assert a.summary["clean"] and a.summary["conversions"] == []


# ---------------------------------------------------------------------------------------
# convert (the default)
# ---------------------------------------------------------------------------------------
def test_convert_on_the_workers_recorded_and_audited(device):
    original = dd.from_pandas
    with gpuscale.session(backend="auditdevice", **ONE) as s:
        assert hc.installed() and dd.from_pandas is not original
        early = dd.from_pandas(PDF, npartitions=4)
        early_line = here() - 1  # the statement above
        with s.audit() as a:
            ddf = dd.from_pandas(PDF, npartitions=4)
            line = here() - 1  # the statement above
            x = da.from_array(np.arange(200.0).reshape(20, 10), chunks=(5, 10))
            xline = here() - 1  # the statement above
            never = dd.from_pandas(PDF, npartitions=2)  # made, never computed
            assert type(ddf._meta) is auditfam.TagFrame and type(x._meta) is auditfam.TagArray
            assert ddf.divisions == original(PDF, npartitions=4).divisions
            ddf = ddf.persist()
            wait(ddf)
            assert all(type(p.compute()) is auditfam.TagFrame for p in ddf.to_delayed())
            pd.testing.assert_frame_equal(pd.DataFrame(ddf.compute()), PDF)
            assert float(x.sum().compute()) == float(np.arange(200.0).sum())
            assert type(x.blocks[1].compute()) is auditfam.TagArray
            wait(early.persist())
            # a collection given to a wrapped function comes back as it is (nothing converted twice)
            assert da.asarray(x) is x
            assert type(never._meta) is auditfam.TagFrame
    summary = a.summary
    assert summary["clean"], summary["foreign"]
    convs = {c["where"]: c for c in summary["conversions"]}
    c = convs[f"{HERE}:{line}"]
    assert (
        c["function"],
        c["collection"],
        c["from_type"],
        c["to_module"],
        c["partitions"],
        c["made_in_audit"],
    ) == ("dask.dataframe.from_pandas", "dataframe", "pandas.DataFrame", "auditfam", 4, True)
    # each of the 4 partitions converted once (persisted), with its host bytes
    assert c["converted_blocks"] == 4
    parts = sum(sizeof(PDF.iloc[i * 100 : (i + 1) * 100]) for i in range(4))
    assert abs(c["bytes"] - parts) <= 0.1 * parts  # Dask's sizeof of the partitions, on the workers
    cx = convs[f"{HERE}:{xline}"]
    assert (cx["function"], cx["from_type"], cx["partitions"]) == (
        "dask.array.from_array",
        "numpy.ndarray",
        4,
    )
    assert cx["converted_blocks"] >= 4 and cx["bytes"] >= 200 * 8
    # made before the audit, converted during it: named, not made in it
    ce = convs[f"{HERE}:{early_line}"]
    assert not ce["made_in_audit"] and ce["converted_blocks"] == 4
    # made in the audit, never computed: named with nothing converted
    assert [c for c in summary["conversions"] if c["converted_blocks"] == 0 and c["partitions"] == 2]
    # no task output a host chunk: the conversion runs inside the tasks that make the blocks
    assert not [r for r in summary["prefixes"] if r["kind"] in ("pandas", "numpy")]
    # after the block Dask's functions are back
    assert (
        not hc.installed()
        and dd.from_pandas is original
        and type(dd.from_pandas(PDF, 2)._meta) is pd.DataFrame
    )


def test_convert_readers_generators_and_delayed_parts(device, tmp_path):
    PDF.to_csv(tmp_path / "a.csv", index=False)
    with gpuscale.session(backend="auditdevice", **ONE) as s:
        with s.audit() as a:
            csv = dd.read_csv(str(tmp_path / "a.csv"))
            ts = dask.datasets.timeseries(end="2000-01-02", freq="600s", seed=0)
            # with meta: without it Dask infers it by running the function once as a task of its own,
            # whose pandas output the audit lists (before the collection exists)
            fm = dd.from_map(
                lambda i: pd.DataFrame({"i": [i, i]}),
                [1, 2, 3],
                meta=pd.DataFrame({"i": pd.Series(dtype="int64")}),
            )
            fd = dd.from_delayed(
                [dask.delayed(pd.DataFrame)({"j": [j]}) for j in range(3)], meta={"j": "int64"}
            )
            # dispatched on dataframe.backend: pandas here (the GPU family's is cuDF: nothing to convert)
            fdict = dd.from_dict({"a": np.arange(10)}, npartitions=2)
            for coll in (csv, ts, fm, fd, fdict):
                assert type(coll._meta) is auditfam.TagFrame
                assert {type(p.compute()) for p in coll.to_delayed()} == {auditfam.TagFrame}
            assert int(csv.v.sum().compute()) == int(PDF.v.sum())
            assert int(fm.i.sum().compute()) == 12 and int(fd.j.sum().compute()) == 3
    assert a.summary["clean"], a.summary["foreign"]
    assert [c["function"] for c in a.summary["conversions"]] == [
        "dask.dataframe.read_csv",
        "dask.datasets.timeseries",
        "dask.dataframe.from_map",
        "dask.dataframe.from_delayed",
        "dask.dataframe.from_dict",
    ]


# ---------------------------------------------------------------------------------------
# warn
# ---------------------------------------------------------------------------------------
def test_warn_names_the_call_site_once_and_leaves_the_collection(device):
    with gpuscale.session(backend="auditdevice", host_collections="warn", **ONE) as s:
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for _ in range(3):
                ddf = dd.from_pandas(PDF, npartitions=2)
                line = here() - 1  # the statement above
            x = da.from_array(np.ones((4, 4)), chunks=2)
            xline = here() - 1  # the statement above
        with s.audit() as a:
            wait(ddf.persist())
    got = host_collection_warnings(record)
    assert [(w.filename, w.lineno) for w in got] == [(HERE, line), (HERE, xline)]
    text = str(got[0].message)
    assert text.startswith(
        f"{HERE}:{line}: dask.dataframe.from_pandas built a Dask DataFrame of 2 pandas.DataFrame"
    )
    assert "auditdevice family" in text and "s.to_backend(obj) instead of from_pandas(obj)" in text
    assert "host_collections='convert'" in text and "\n" not in text
    assert type(ddf._meta) is pd.DataFrame and type(x._meta) is np.ndarray  # left as Dask built them
    assert not a.summary["clean"] and a.summary["conversions"] == []  # the audit sees the host chunks


# ---------------------------------------------------------------------------------------
# strict
# ---------------------------------------------------------------------------------------
def test_strict_raises_at_the_line(device, tmp_path):
    PDF.to_csv(tmp_path / "a.csv", index=False)
    with gpuscale.session(backend="auditdevice", host_collections="strict", **ONE):
        with pytest.raises(UserError) as err:
            line = here() + 1
            dd.from_pandas(PDF, npartitions=2)
        with pytest.raises(UserError, match=r"dask.dataframe.read_csv built .*s.to_backend\(collection\)"):
            dd.read_csv(str(tmp_path / "a.csv"))
        with pytest.raises(UserError, match="dask.array.from_zarr|dask.array.from_array"):
            da.from_array(np.ones(3))
        assert type(da.ones(4, chunks=2)._meta) is auditfam.TagArray  # the family's own: allowed
    msg = str(err.value)
    assert msg.startswith(f"{HERE}:{line}: dask.dataframe.from_pandas built")
    assert "session.host-collections is strict" in msg and "s.to_backend(obj)" in msg and "\n" not in msg
    frames = traceback.extract_tb(err.value.__traceback__)
    assert (frames[0].filename, frames[0].lineno) == (HERE, line)  # raised from the user's line


def test_off_leaves_dask_alone(device):
    original = dd.from_pandas
    with gpuscale.session(backend="auditdevice", host_collections="off", **ONE):
        assert not hc.installed() and dd.from_pandas is original
        assert type(dd.from_pandas(PDF, npartitions=2)._meta) is pd.DataFrame


# ---------------------------------------------------------------------------------------
# Writers that lose data (the family's lossy_writers: TagFrame writes CSV like cuDF does)
# ---------------------------------------------------------------------------------------
FLOATS = pd.DataFrame({"k": np.arange(40) % 3, "x": np.linspace(0, 1, 40) / 3.0})


def _written(folder) -> pd.DataFrame:
    return pd.concat([pd.read_csv(folder / f) for f in sorted(os.listdir(folder))], ignore_index=True)


def test_lossy_writer_each_mode(device, tmp_path):
    """to_csv of a frame of the family whose float64 columns its CSV writer rounds: convert
    writes through pandas on the workers (the files are plain Dask's), recorded and audited;
    warn names the line and leaves the rounded files; strict raises at the line; off and a frame
    without float64 columns are left to the family's writer."""
    for d in ("convert", "warn", "off", "ints"):
        (tmp_path / d).mkdir()
    with gpuscale.session(backend="auditdevice", **ONE) as s:  # convert, the default
        ddf = s.to_backend(FLOATS, npartitions=2)
        assert type(ddf._meta) is auditfam.TagFrame
        with s.audit(phase="write") as a:
            ddf.to_csv(str(tmp_path / "convert" / "*.csv"), index=False)
            line = here() - 1  # the statement above
        (conv,) = a.summary["conversions"]
        assert (conv["function"], conv["where"], conv["to_module"]) == (
            "dask.dataframe.to_csv",
            f"{HERE}:{line}",
            "pandas",
        )
        assert conv["converted_blocks"] == 2 and conv["bytes"] > 0 and "9 significant digits" in conv["why"]
        assert conv["why"].endswith("columns x")  # k is int64: kept whole by any writer
        # the host copies (their task names are Dask's fusion's) are allowed, with the reason
        assert a.summary["clean"]
        assert [(r["type"], r["tasks"]) for r in a.summary["allowed"]] == [("pandas.DataFrame", 2)]
        assert f"dask.dataframe.to_csv at {HERE}:{line}" in a.summary["allowed"][0]["allowed"]
        with hc.scope(device, "warn"), warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            dd.to_csv(ddf, str(tmp_path / "warn" / "*.csv"), index=False)
            wline = here() - 1  # the statement above
        (w,) = host_collection_warnings(record)
        assert (w.filename, w.lineno) == (HERE, wline)
        assert "dask.dataframe.to_csv of 2 auditfam.TagFrame partition(s) loses data" in str(w.message)
        assert "df.to_backend('pandas').to_csv(...)" in str(w.message) and "\n" not in str(w.message)
        with hc.scope(device, "strict"):
            with pytest.raises(UserError, match="session.host-collections is strict") as err:
                sline = here() + 1
                ddf.to_csv(str(tmp_path / "strict-*.csv"))
        assert str(err.value).startswith(f"{HERE}:{sline}: dask.dataframe.to_csv")
        assert not list(tmp_path.glob("strict-*"))
        with hc.scope(device, "off"):
            ddf.to_csv(str(tmp_path / "off" / "*.csv"), index=False)
        with s.audit(phase="ints") as b:
            ddf[["k"]].to_csv(str(tmp_path / "ints" / "*.csv"), index=False)
        assert b.summary["conversions"] == [] and b.summary["allowed"] == []
    assert _written(tmp_path / "convert").equals(FLOATS)  # every digit: what pandas wrote
    for d in ("warn", "off"):  # the family's writer: 9 significant digits
        got = _written(tmp_path / d)
        assert not got.equals(FLOATS) and np.allclose(got.x, FLOATS.x, rtol=1e-8)


# ---------------------------------------------------------------------------------------
# Scoped to the block; two sessions in two threads
# ---------------------------------------------------------------------------------------
def test_nested_scopes_and_gpuscale_own_code(device):
    with gpuscale.session(backend="auditdevice", host_collections="warn", **ONE) as s:
        with hc.scope(device, "strict"):  # an inner block: its mode
            with pytest.raises(UserError):
                dd.from_pandas(PDF, npartitions=2)
        with warnings.catch_warnings(record=True) as record:  # the outer one again
            warnings.simplefilter("always")
            dd.from_pandas(PDF, npartitions=2)
        assert len(host_collection_warnings(record)) == 1
        with hc.scope(device, "off"):  # off for a block: Dask's own behaviour
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                assert type(dd.from_pandas(PDF, npartitions=2)._meta) is pd.DataFrame
            assert not host_collection_warnings(record) and hc.current() is None
        assert hc.current() is not None and hc.current().mode == "warn"
        # gpuscale's own code (to_backend -> from_memory -> dd.from_map) is left as it builds
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            y = s.to_backend(PDF, npartitions=2)
        assert not host_collection_warnings(record) and type(y._meta) is auditfam.TagFrame


@pytest.fixture
def dask_config_restored():
    """dask.config as it was, put back after the test: two Clients that open and close
    interleaved in two threads leave ``scheduler: dask.distributed`` behind (each restores what
    it saw when it opened: distributed's default-client bookkeeping, not gpuscale's), and every
    later test in this process would then look for a Client that is gone."""
    saved = copy.deepcopy(dask.config.config)
    yield
    dask.config.config.clear()
    dask.config.config.update(saved)


def test_two_sessions_in_two_threads(device, dask_config_restored):
    """A convert session and a warn session open at once in two threads, and a thread with no
    session: each sees its own mode (a contextvar), none sees the other's."""
    barrier = threading.Barrier(3, timeout=120)
    out: dict[str, object] = {}

    def in_session(mode):
        try:
            with gpuscale.session(backend="auditdevice", host_collections=mode, **ONE):
                barrier.wait()  # both open
                if mode == "warn":  # (catch_warnings is process-wide: one thread records)
                    with warnings.catch_warnings(record=True) as record:
                        warnings.simplefilter("always")
                        ddf = dd.from_pandas(PDF, npartitions=2)
                    warned = len(host_collection_warnings(record))
                else:
                    ddf = dd.from_pandas(PDF, npartitions=2)
                    warned = 0
                out[mode] = (type(ddf._meta), warned, float(ddf.v.sum().compute()))
                barrier.wait()  # both done before either closes
        except Exception as e:  # noqa: BLE001
            out[mode] = e
            barrier.abort()

    def plain():
        try:
            barrier.wait()
            out["plain"] = type(dd.from_pandas(PDF, npartitions=2)._meta)
            barrier.wait()
        except Exception as e:  # noqa: BLE001
            out["plain"] = e

    threads = [threading.Thread(target=in_session, args=(m,)) for m in ("convert", "warn")]
    threads.append(threading.Thread(target=plain))
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    total = float(PDF.v.sum())
    assert out["convert"] == (auditfam.TagFrame, 0, total)
    assert out["warn"] == (pd.DataFrame, 1, total)
    assert out["plain"] is pd.DataFrame
    assert not hc.installed()


# ---------------------------------------------------------------------------------------
# workflows/host_collections_cost.py runs (on the CPU: both ways are no-ops there)
# ---------------------------------------------------------------------------------------
def test_cost_workflow_runs_on_cpu(tmp_path):
    script = os.path.join(os.path.dirname(HERE), "..", "workflows", "host_collections_cost.py")
    if not os.path.exists(script):
        pytest.skip("host_collections_cost.py is a study, not in the sdist")
    out = tmp_path / "cost.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_GPUSCALE__")}
    p = subprocess.run(
        [
            sys.executable,
            script,
            "--backend",
            "cpu",
            "--gb",
            "0.004",
            "--repeat",
            "1",
            "--workers",
            "1",
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    d = json.loads(out.read_text())
    assert d["ok"] and d["family"] == "cpu" and d["ratio_session_over_by_hand"] > 0
    assert set(d["median_s"]) == {"session", "by_hand"} and "ratio session / by hand" in p.stdout
