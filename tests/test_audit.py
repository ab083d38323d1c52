"""The backend audit, --strict-backend, `audit report`, `explain`, on real CPU clusters.

The mixed-family case uses the test-only ``audittest`` family (tests/auditfam.py): the CPU
family whose array chunks are ``auditfam.TagArray``, so plain NumPy chunks (what
``da.from_array(numpy_array)`` makes) belong to another family under it, as they do under the
GPU family. ``audit_mixed`` builds its data that way (``--from-host``, the default) or through
``from_memory`` / ``Session.to_backend`` (``--no-from-host``), then adds TagArray data to it.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import auditfam
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from auditfam import CHUNK_BYTES, NCHUNKS
from conftest import _clean_environ, files_under
from distributed import wait

import gpuscale
from gpuscale import UserError, audit
from gpuscale.records import report, results

TESTS = pathlib.Path(__file__).resolve().parent
QUICK = dict(repeat=2, warmup=0)
TWO_WORKERS = {"workers": 2, "threads_per_worker": 1}
FIX = "from_array produced numpy.ndarray: pass the data through s.to_backend"


@pytest.fixture
def audittest():
    auditfam.register()
    yield auditfam.family()
    auditfam.unregister()


def mixed_cli(*args, env=None, cwd=None, timeout=180):
    """The real CLI with the test family registered (tests/audit_cli.py), in a subprocess."""
    return subprocess.run(
        [sys.executable, str(TESTS / "audit_cli.py"), *map(str, args)],
        cwd=str(cwd) if cwd else None,
        env=_clean_environ(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("gpuscale: error: "), p.stderr
    return lines[0]


def only_json(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


# ---------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------
def test_classify_chunks_scalars_and_containers():
    owners = {"numpy": "cpu", "pandas": "cpu", "cupy": "gpu", "cudf": "gpu", "auditfam": "audittest"}
    assert audit.classify(np.ndarray, owners) == ("numpy.ndarray", "cpu", "numpy", True)
    assert audit.classify(pd.DataFrame, owners) == ("pandas.DataFrame", "cpu", "pandas", True)
    assert audit.classify(pd.Series, owners)[1:] == ("cpu", "pandas", True)
    assert audit.classify(auditfam.TagArray, owners) == ("auditfam.TagArray", "audittest", "other", True)
    # scalars and containers are not chunks: never of a family, never foreign
    assert audit.classify(np.float64, owners) == ("numpy.float64", None, "other", False)
    assert audit.classify(tuple, owners) == ("builtins.tuple", None, "other", False)
    assert audit.classify(None, owners)[1:] == (None, "other", False)


# ---------------------------------------------------------------------------------------
# Runs: the mixed case flagged, strict fails it, a clean run is clean
# ---------------------------------------------------------------------------------------
def test_mixed_run_flags_from_array_with_prefix_counts_bytes(audittest, results_dir):
    r = gpuscale.run(
        "audit_mixed",
        backend="audittest",
        cluster_settings=TWO_WORKERS,
        **QUICK,
        results_dir=str(results_dir),
    )
    assert r.valid
    a = r.audit
    assert a["expected"]["family"] == "audittest" and a["workers"] == 2
    assert a["phases"] == ["generate", "compute"] and a["runs"] == {"generate": 1, "compute": 2}
    assert not a["clean"]
    (f,) = a["foreign"]
    assert (f["phase"], f["prefix"], f["type"], f["family"], f["kind"]) == (
        "generate",
        "array",
        "numpy.ndarray",
        "cpu",
        "numpy",
    )
    assert f["tasks"] == NCHUNKS and f["bytes"] == NCHUNKS * CHUNK_BYTES
    assert f["fix"].startswith(FIX)
    assert (a["foreign_tasks"], a["foreign_bytes"]) == (NCHUNKS, NCHUNKS * CHUNK_BYTES)
    # the audit saw the native tasks too: to_backend in generate, add in both repeats
    rows = {(x["phase"], x["prefix"]): x for x in a["prefixes"]}
    assert rows[("generate", "to_backend")]["type"] == "auditfam.TagArray"
    assert (
        rows[("generate", "to_backend")]["tasks"] == NCHUNKS
        and not rows[("generate", "to_backend")]["foreign"]
    )
    assert rows[("compute", "add")]["tasks"] == 2 * NCHUNKS and not rows[("compute", "add")]["foreign"]
    # every add read one NumPy chunk: a family change (cpu -> audittest) with its bytes
    (c,) = a["transfers"]
    assert (c["from_prefix"], c["from_type"], c["to_prefix"], c["to_type"], c["direction"]) == (
        "array",
        "numpy.ndarray",
        "add",
        "auditfam.TagArray",
        "cpu -> audittest",
    )
    assert (c["count"], c["bytes"]) == (2 * NCHUNKS, 2 * NCHUNKS * CHUNK_BYTES)
    assert (a["transfer_count"], a["transfer_bytes"]) == (2 * NCHUNKS, 2 * NCHUNKS * CHUNK_BYTES)
    # the same audit is in the record on disk, and the run summary shows it
    on_disk = json.loads(pathlib.Path(r.path).read_text())
    assert on_disk["audit"] == a and on_disk["schema_version"] == 1
    assert results.load(r.path).audit == a
    text = " ".join(str(c) for row in _rows(report.result_table(r)) for c in row)
    assert "produced chunks of another family than audittest" in text and "from_array produced" in text


def _rows(table):
    cols = [list(c.cells) for c in table.columns]
    return list(zip(*cols))


def test_to_backend_data_audits_clean(audittest):
    r = gpuscale.run(
        "audit_mixed",
        backend="audittest",
        from_host=False,
        cluster_settings=TWO_WORKERS,
        **QUICK,
        write=False,
        strict_backend=True,
    )
    a = r.audit
    assert r.valid and a["clean"] and a["foreign"] == [] and a["transfers"] == []
    assert a["foreign_tasks"] == 0 and a["transfer_count"] == 0
    assert {x["prefix"] for x in a["prefixes"]} == {"to_backend", "add"}
    assert all(x["type"] == "auditfam.TagArray" and x["tasks"] > 0 for x in a["prefixes"])


def test_strict_backend_api_raises_after_writing_the_record(audittest, results_dir):
    with pytest.raises(UserError) as e:
        gpuscale.run(
            "audit_mixed",
            backend="audittest",
            cluster_settings=TWO_WORKERS,
            **QUICK,
            results_dir=str(results_dir),
            strict_backend=True,
        )
    msg = str(e.value)
    assert "\n" not in msg
    assert f"array ({NCHUNKS} task(s)" in msg and "numpy.ndarray" in msg and FIX in msg
    (rec,) = files_under(results_dir)
    assert str(rec) in msg  # the error says where the record (with the audit) went
    d = json.loads(rec.read_text())
    assert d["audit"]["strict"] is True and d["audit"]["clean"] is False
    assert d["settings_sources"]["run.strict-backend"] == "flag"


def test_strict_backend_cli_exit_2(tmp_path):
    res = tmp_path / "res"
    args = (
        "run",
        "audit_mixed",
        "--backend",
        "audittest",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--results-dir",
        res,
    )
    p = mixed_cli(*args, "--strict-backend", cwd=tmp_path)
    line = one_error_line(p)
    assert line.startswith("gpuscale: error: backend audit: under the audittest family 1 task prefix(es)")
    assert f"array ({NCHUNKS} task(s)" in line and FIX in line and "--strict-backend" in line
    assert p.stdout == ""
    # the same through the setting's env var (run.strict-backend)
    p = mixed_cli(*args, "--json", env={"DASK_GPUSCALE__RUN__STRICT_BACKEND": "true"}, cwd=tmp_path)
    one_error_line(p)
    # without it: reported, exit 0, one JSON object
    p = mixed_cli(*args, "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    assert d["audit"]["clean"] is False and d["audit"]["foreign"][0]["prefix"] == "array"
    # built the right way: clean even with --strict-backend
    p = mixed_cli(*args, "--no-from-host", "--strict-backend", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert only_json(p.stdout)["audit"]["clean"] is True
    assert len(files_under(res)) == 4  # every run wrote its record, the strict failures too


@pytest.mark.parametrize(
    "workload, params, kind",
    [
        ("groupby", {"rows": 100_000, "keys": 1_000}, "pandas"),
        ("svd", {"rows": 20_000, "cols": 20, "condition": 100.0}, "numpy"),
    ],
)
def test_clean_cpu_run_reports_zero_foreign_chunks(cpu_session, workload, params, kind):
    r = cpu_session.run(workload, **QUICK, write=False, strict_backend=True, **params)
    a = r.audit
    assert a["clean"] and a["foreign"] == [] and a["foreign_tasks"] == 0 and a["foreign_bytes"] == 0
    assert a["transfers"] == [] and a["expected"]["family"] == "cpu"
    assert a["tasks"] > 0 and a["kinds"][kind] > 0
    assert a["kinds"]["cupy"] == a["kinds"]["cudf"] == 0
    phases = {x["phase"] for x in a["prefixes"]}
    assert phases == {"generate", "compute"}
    for x in a["prefixes"]:
        assert x["tasks"] > 0 and not x["foreign"]
        if x["chunk"]:
            assert x["family"] == "cpu" and x["kind"] in ("numpy", "pandas") and x["bytes"] > 0


def test_svd_generate_builds_its_core_on_the_backend():
    """svd --condition used to make its core matrix with da.from_array (a host chunk under the
    GPU family); it now goes through from_memory: no prefix 'array' under any family."""
    with gpuscale.session(backend="cpu", **TWO_WORKERS) as s:
        r = s.run("svd", rows=20_000, cols=20, condition=100.0, repeat=1, warmup=0, write=False)
    prefixes = {x["prefix"] for x in r.audit["prefixes"] if x["phase"] == "generate"}
    assert "to_backend" in prefixes and "array" not in prefixes


# ---------------------------------------------------------------------------------------
# User code: Session.audit, Session.to_backend, Session.trace
# ---------------------------------------------------------------------------------------
def test_session_audit_flags_user_from_array_and_to_backend_fixes_it(audittest):
    a = np.arange(8000, dtype=np.float64).reshape(800, 10)
    # host_collections off: the session leaves da.from_array's NumPy chunks as Dask builds them
    with gpuscale.session(backend="audittest", host_collections="off", **TWO_WORKERS) as s:
        with s.audit() as bad:
            x = da.from_array(a, chunks=(200, 10)).persist()
            wait(x)
        summary = bad.summary
        assert not summary["clean"] and summary["phases"] == ["user"]
        (f,) = summary["foreign"]
        assert (f["prefix"], f["tasks"], f["bytes"], f["type"]) == (
            "array",
            4,
            4 * 200 * 10 * 8,
            "numpy.ndarray",
        )
        with s.audit() as good:
            y = s.to_backend(a, chunks=(200, 10)).persist()
            wait(y)
        assert good.summary["clean"] and {r["prefix"] for r in good.summary["prefixes"]} == {"to_backend"}
        assert good.summary["prefixes"][0]["type"] == "auditfam.TagArray"
        np.testing.assert_array_equal(np.asarray(y.compute()), a)
        # strict: the same mistake raises on leaving the block
        with pytest.raises(UserError, match="array .4 task"):
            with s.audit(strict=True):
                wait(da.from_array(a + 1, chunks=(200, 10)).persist())
        # a family change in user code: NumPy chunks read by tasks that make TagArray
        with s.audit() as mixed:
            wait((x + y).persist())
        (c,) = mixed.summary["transfers"]
        assert (c["from_type"], c["to_type"], c["count"]) == ("numpy.ndarray", "auditfam.TagArray", 4)


def test_session_to_backend_frames(audittest):
    df = pd.DataFrame({"k": np.arange(1000) % 7, "v": np.arange(1000.0)})
    with gpuscale.session(backend="cpu", **TWO_WORKERS) as s:
        with s.audit() as a:
            ddf = s.to_backend(df, npartitions=4).persist()
            wait(ddf)
        assert ddf.npartitions == 4
        pd.testing.assert_frame_equal(ddf.compute(), df)
    assert a.summary["clean"]
    (row,) = a.summary["prefixes"]
    assert (row["prefix"], row["type"], row["tasks"]) == ("to_backend", "pandas.DataFrame", 4)


def test_trace_summary_carries_the_audit(audittest, tmp_path, cli):
    pytest.importorskip("gpuscale.trace")
    a = np.ones((400, 10))
    with gpuscale.session(backend="audittest", host_collections="off", **TWO_WORKERS) as s:
        with s.trace(str(tmp_path / "tr")) as t:
            wait(da.from_array(a, chunks=(100, 10)).persist())
        r = s.run("audit_mixed", **QUICK, write=False, trace=str(tmp_path / "tr-run"))
    summary = json.loads((tmp_path / "tr" / "summary.json").read_text())
    assert summary["audit"]["foreign"][0]["prefix"] == "array"
    assert t.summary.audit == summary["audit"]
    run_summary = json.loads((tmp_path / "tr-run" / "summary.json").read_text())
    assert run_summary["audit"] == r.audit
    p = cli("audit", "report", tmp_path / "tr", "--json")
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    assert d["foreign"][0]["prefix"] == "array" and "trace folder" in d["source"]


# ---------------------------------------------------------------------------------------
# gpuscale audit report
# ---------------------------------------------------------------------------------------
def test_audit_report_table_and_json(audittest, results_dir, cli):
    r = gpuscale.run(
        "audit_mixed",
        backend="audittest",
        cluster_settings=TWO_WORKERS,
        **QUICK,
        results_dir=str(results_dir),
    )
    p = cli("audit", "report", r.path, env={"COLUMNS": "250"})
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for needle in (
        "gpuscale backend audit",
        "audittest family",
        "FOREIGN",
        "array",
        "numpy.ndarray",
        "156.25 kiB",
        "from_array produced numpy.ndarray",
        "to_backend",
        "auditfam.TagArray",
        "family changes",
        "cpu -> audittest",
        "generate (x1), compute (x2)",
    ):
        assert needle in out, (needle, out)
    p = cli("audit", "report", r.path, "--json")
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    src = d.pop("source")
    assert "result record" in src and "audit_mixed" in src
    assert d == r.audit


def test_audit_report_bad_input(cli, tmp_path):
    cases = []
    cases.append((tmp_path / "nope.json", "does not exist"))
    (tmp_path / "folder").mkdir()
    cases.append((tmp_path / "folder", "without a summary.json"))
    (tmp_path / "text.json").write_text("not json {")
    cases.append((tmp_path / "text.json", "is not a JSON file"))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something.else"}))
    cases.append((tmp_path / "other.json", "neither a gpuscale result record nor a trace summary"))
    (tmp_path / "old.json").write_text(json.dumps({"schema": "gpuscale.result", "schema_version": 1}))
    cases.append((tmp_path / "old.json", "holds no backend audit"))
    for path, needle in cases:
        line = one_error_line(cli("audit", "report", path))
        assert needle in line, line
    line = one_error_line(cli("audit", "report"))  # no path, no records to pick the latest run from
    assert "no records" in line, line


# ---------------------------------------------------------------------------------------
# gpuscale explain
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ("groupby", "--rows", "200000", "--keys", "50000"),
        ("groupby", "--rows", "200000", "--keys", "1000", "--split-out", "2"),
        ("svd", "--rows", "50000", "--cols", "20", "--condition", "1e6"),
    ],
)
def test_explain_prints_what_the_run_records(cli, tmp_path, args):
    flags = (
        "--backend",
        "cpu",
        "--workers",
        "2",
        "--threads-per-worker",
        "1",
        "--repeat",
        "1",
        "--warmup",
        "0",
    )
    p = cli("explain", *args, *flags, "--json")
    assert p.returncode == 0, p.stderr
    plan = only_json(p.stdout)
    assert not (tmp_path / "gpuscale-results").exists()  # explain wrote nothing
    p = cli("run", *args, *flags, "--json", timeout=240)
    assert p.returncode == 0, p.stderr
    rec = only_json(p.stdout)
    assert plan["choices"] == rec["choices"]
    assert plan["params"] == rec["params"] and plan["family"] == rec["family"]
    for scope, items in plan["explained"].items():
        assert set(items) == set(rec["explained"][scope]), scope
        for name, entry in items.items():
            got = rec["explained"][scope][name]
            if "planned" in got:  # settled at run time (svd's route): the plan is what explain said
                assert (got["planned"], got["planned_rule"]) == (entry["value"], entry["rule"]), name
                assert got["source"] in ("rule", "flag") and got["rule"]
            else:
                assert got == entry, (scope, name)
    for key in ("estimate_bytes", "parts", "per_worker_bytes", "worker_limit_bytes", "fits"):
        assert plan["memory"][key] == rec["memory"][key], key
    # every knob says where it came from, and rules carry their numbers
    assert all(e["source"] for items in plan["explained"].values() for e in items.values())
    cl = plan["explained"]["cluster"]
    assert cl["workers"] == {"value": 2, "source": "flag", "rule": None}
    assert cl["backend"]["source"] == "flag"
    assert (cl["protocol"]["source"], cl["protocol"]["rule_id"]) == ("rule", "protocol.tcp")
    assert cl["rmm_pool_size"]["value"] is None and "no RMM pool" in cl["rmm_pool_size"]["rule"]
    assert plan["explained"]["family"]["chunk_bytes"]["source"] == "family"
    if args[0] == "groupby" and "--split-out" not in args:
        so = plan["explained"]["workload"]["split_out"]
        assert so["value"] == 1 and so["source"] == "rule"
        assert "50,000 groups x 32 B = 1.6 MB" in so["rule"] and "budget of 268.4 MB" in so["rule"]
    if args[0] == "svd":
        route = rec["explained"]["workload"]["route"]
        assert route["value"] == "cholqr2" and "condition estimate" in route["rule"]
        assert plan["explained"]["workload"]["route"]["value"] == "auto"


def test_explain_table_and_memory_headroom(cli):
    p = cli(
        "explain",
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
        "--json",
    )
    assert p.returncode == 0, p.stderr
    d = only_json(p.stdout)
    m = d["memory"]
    assert m["fits"] is False and m["workers"] == 1 and m["worker_limit_bytes"] == 270_000_000
    assert m["per_worker_bytes"] == m["estimate_bytes"] == 300_000 * 3000 * 8  # the matrix, once
    assert m["verdict"] == "does not fit"  # 270 MB leaves no room for a worker's baseline and tasks
    assert any("--no-memory-check" in n and "needs about" in n for n in d["notes"])
    p = cli(
        "explain",
        "groupby",
        "--backend",
        "cpu",
        "--rows",
        "100000",
        "--keys",
        "100",
        "--results-dir",
        "x",
        "--rules",
        env={"COLUMNS": "250"},
    )
    assert p.returncode == 0, p.stderr
    for needle in (
        "gpuscale explain groupby on cpu",
        "nothing started",
        "workload.split_out",
        "cluster.threads_per_worker",
        "family.shuffle_method",
        "memory (estimate",
        "inputs",
        "not used by explain: --results-dir",
        "cluster.runner",
        "starts its own cluster",
    ):
        assert needle in p.stdout, needle


@pytest.mark.parametrize(
    "args, needle",
    [
        (("explain", "nosuch"), "unknown workload 'nosuch'"),
        (("explain", "svd", "--rows", "0"), "--rows"),
        (("explain", "svd", "--backend", "tpu"), "unknown backend"),
        (("explain", "--rows", "5", "svd"), "no such option --rows"),
        (("explain", "svd", "--no-such-flag"), "no such option"),
    ],
)
def test_explain_bad_input(cli, args, needle):
    assert needle in one_error_line(cli(*args))
