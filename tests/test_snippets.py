"""Notebook snippets (tests/snippets.py) with plain Dask and inside sessions: same answers, and
every chunk the session's tasks made is its family's.

* plain Dask on the CPU (no session; the local threaded scheduler) gives the reference answers;
* a CPU session: same answers, a clean backend audit, and no conversion (NumPy and pandas are
  the CPU family's own libraries: ``session.host-collections`` is a no-op there);
* a session of the test-only device family (tests/auditfam.py: TagArray / TagFrame chunks, the
  "device" family of CI): same answers, a clean audit, and the collections built from host
  objects named in the audit's ``conversions``;
* ``pytest -m gpu``: the same snippets in a GPU session (every chunk CuPy / cuDF, answers equal
  to plain Dask on the CPU).

Each family's run prints a table (snippet, rows, chunk types, conversions, equal?).
"""

from __future__ import annotations

import os
import time

import auditfam
import dask
import pytest
import snippets
from snippets import SNIPPETS, same

import gpuscale

SESSION = {"workers": 2, "threads_per_worker": 1}


def _folder(base, name: str, run: str) -> str:
    d = os.path.join(str(base), run, name)
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Every snippet's answer with plain Dask on the CPU: no session, no client."""
    base = tmp_path_factory.mktemp("plain")
    out = {}
    with dask.config.set(scheduler="threads"):
        for s in SNIPPETS:
            out[s.name] = s.run(_folder(base, s.name, "plain"))
    return out


def run_in_session(s, plain, base, label: str) -> list[dict]:
    """Run every snippet in session ``s`` under its audit; one row per snippet."""
    rows = []
    for sn in SNIPPETS:
        t0 = time.perf_counter()
        try:
            with s.audit(phase=sn.name) as a:
                got = sn.run(_folder(base, sn.name, label))
        except Exception as e:  # noqa: BLE001 - a snippet that fails is a row of the table
            first = (str(e).strip().splitlines() or [""])[0][:200]
            rows.append(
                {
                    "snippet": sn.name,
                    "rows": sn.rows,
                    "chunks": [],
                    "clean": False,
                    "host_values": [],
                    "foreign": [],
                    "conversions": [],
                    "fallbacks": [],
                    "equal": False,
                    "why": f"failed: {type(e).__name__}: {first}",
                    "seconds": time.perf_counter() - t0,
                }
            )
            continue
        ok, why = same(got, plain[sn.name])
        summary = a.summary
        # chunks of the chunk libraries (a Zarr array's handle, also an output with a shape, is not one)
        # (host copies a writer made on purpose, listed as allowed, are not chunks of the work)
        chunks = sorted(
            {
                r["type"]
                for r in summary["prefixes"]
                if r["chunk"] and r["kind"] != "other" and not r.get("allowed")
            }
        )
        values = [f"{f['prefix']}: {f['type']}" for f in summary["foreign"] if f["prefix"] in sn.host_values]
        chunks = [
            t
            for t in chunks
            if not any(v.endswith(": " + t) for v in values)
            or any(
                r["type"] == t and r["chunk"] and r["prefix"] not in sn.host_values
                for r in summary["prefixes"]
            )
        ]
        rows.append(
            {
                "snippet": sn.name,
                "rows": sn.rows,
                "chunks": chunks,
                "clean": not [f for f in summary["foreign"] if f["prefix"] not in sn.host_values],
                "host_values": values,
                "foreign": [
                    f"{f['prefix']}: {f['type']}"
                    for f in summary["foreign"]
                    if f["prefix"] not in sn.host_values
                ],
                "conversions": summary["conversions"],
                "fallbacks": summary["fallbacks"],
                "equal": ok,
                "why": why,
                "seconds": time.perf_counter() - t0,
            }
        )
    return rows


def table(rows: list[dict], family: str, tolerated=lambda type_name: False) -> str:
    head = f"{'snippet':26} {'rows':>9}  {'chunk type':42} {'conv':>4}  equal?"
    lines = [f"notebook snippets in a {family} session (vs plain Dask on the CPU)", head, "-" * len(head)]
    for r in rows:
        chunk = ", ".join(r["chunks"]) or "-"
        flag = "yes" if r["equal"] else f"NO ({r['why']})"
        foreign = [f for f in r["foreign"] if not tolerated(f.rpartition(": ")[2])]
        if foreign:
            flag += f"; FOREIGN {foreign}"
        if len(foreign) < len(r["foreign"]):
            flag += f" (tolerated: {', '.join(f for f in r['foreign'] if f not in foreign)})"
        if r["host_values"]:
            flag += f" (host values of arguments: {', '.join(r['host_values'])})"
        if r.get("fallbacks"):
            flag += (
                " (host fallback: "
                + ", ".join(
                    f"{f['operation']} {f['bytes_to_host']:,} B to host / {f['bytes_to_device']:,} B back"
                    for f in r["fallbacks"]
                )
                + ")"
            )
        lines.append(f"{r['snippet']:26} {r['rows']:>9,}  {chunk:42} {len(r['conversions']):>4}  {flag}")
    return "\n".join(lines)


def check(
    rows: list[dict],
    family_modules: set[str],
    tolerated=lambda type_name: False,
    known: dict[str, str] | None = None,
) -> list[str]:
    """What is wrong: answers that differ, chunks of another family (``tolerated(type)``: types
    a stand-in family cannot avoid). ``known``: snippets that fail on this family for a reason
    outside gpuscale (the library's own limits), by name: they must fail with that reason."""
    bad = []
    for r in rows:
        if r["snippet"] in (known or {}):
            if r["equal"] or known[r["snippet"]] not in r["why"]:
                bad.append(f"{r['snippet']}: expected to fail with {known[r['snippet']]!r}, got {r['why']!r}")
            continue
        if not r["equal"]:
            bad.append(f"{r['snippet']}: answer differs from plain Dask ({r['why']})")
        foreign = [f for f in r["foreign"] if not tolerated(f.rpartition(": ")[2])]
        if foreign:
            bad.append(f"{r['snippet']}: chunks of another family: {foreign}")
        others = [t for t in r["chunks"] if t.partition(".")[0] not in family_modules and not tolerated(t)]
        if others:
            bad.append(f"{r['snippet']}: chunk types {others} are not the family's")
    return bad


@pytest.fixture
def device():
    auditfam.register_device()
    yield auditfam.device_family()
    auditfam.unregister_device()


def test_snippets_are_many_and_cited():
    assert len(SNIPPETS) >= 10
    for s in SNIPPETS:
        assert (
            s.repo in (snippets.EXAMPLES, snippets.TUTORIAL)
            and len(s.commit) == 40
            and s.path.endswith(".ipynb")
        )


def test_snippets_in_a_cpu_session(plain, tmp_path, capsys):
    with gpuscale.session(backend="cpu", **SESSION) as s:
        rows = run_in_session(s, plain, tmp_path, "cpu")
    with capsys.disabled():
        print("\n" + table(rows, "cpu"))
    assert not check(rows, {"numpy", "pandas"}), check(rows, {"numpy", "pandas"})
    assert all(r["conversions"] == [] for r in rows)  # the CPU family converts nothing


def test_snippets_in_a_device_session(plain, device, tmp_path, capsys):
    # A TagFrame's index is a pandas Index (pandas cannot tag its Index types): tasks that output
    # a frame's index (len(ddf) reads it) give pandas Index chunks. cuDF frames' indexes are cuDF.
    def index(t):
        return t.startswith("pandas.") and t.endswith("Index")

    with gpuscale.session(backend="auditdevice", **SESSION) as s:
        rows = run_in_session(s, plain, tmp_path, "device")
    with capsys.disabled():
        print("\n" + table(rows, "auditdevice", index))
    problems = check(rows, {"auditfam"}, tolerated=index)
    assert not problems, problems
    by = {r["snippet"]: r for r in rows}
    # what each snippet built from host objects was converted on the workers, and named
    for name, function in (
        ("text_from_pandas", "dask.dataframe.from_pandas"),
        ("filter_groupby_std", "dask.datasets.timeseries"),
        ("from_delayed_messy", "dask.dataframe.from_delayed"),
        ("read_csv_groupby", "dask.dataframe.read_csv"),
        ("from_zarr_mean", "dask.array.from_zarr"),
        ("transpose_slice_mean", "dask.array.from_array"),
        ("from_delayed_concatenate", "dask.array.from_delayed"),
    ):
        convs = by[name]["conversions"]
        assert convs and all(
            c["function"] in (function, "dask.datasets.timeseries", "dask.dataframe.to_csv") for c in convs
        ), (name, convs)
        assert all(
            c["where"].startswith(snippets.__file__) and c["converted_blocks"] > 0 and c["bytes"] > 0
            for c in convs
            if c["function"] == function
        ), (name, convs)
    # the CSVs both write are written through pandas (TagFrame's writer rounds float64, like cuDF's)
    for name in ("read_csv_groupby", "from_delayed_messy"):
        (w,) = [c for c in by[name]["conversions"] if c["function"] == "dask.dataframe.to_csv"]
        assert w["to_module"] == "pandas" and w["converted_blocks"] > 0 and "9 significant digits" in w["why"]
    # da.ones comes from Dask's array backend (array.backend: the family's): nothing to convert
    assert by["ones_sum"]["conversions"] == []


GPU_KNOWN = {
    # describe() over from_delayed parts, one of them empty (the emptied CSV): Dask's std / var
    # over cuDF partitions is NaN when a partition is empty (pandas partitions: the std). Seen
    # on the H200 without gpuscale, with dd.from_delayed of three cuDF frames, one empty:
    # pandas std 1.2033, cuDF nan (the empty partition's own sum, count and var are pandas').
    # A wrong answer, not an error: nothing for the host fallback to catch.
    "from_delayed_messy": "column 1:id differs",
}
"""Snippets that fail in a GPU session for a reason of the chunk library (dask-cudf / cuDF), with
the message they fail with: the table shows them, and a change of behaviour fails the test."""

GPU_FALLBACKS = {
    # Dask's `.loc["2000-01-02"]` turns a partial date string into a time range only for a
    # pandas DatetimeIndex: on cuDF partitions it compares the string with the Timestamp
    # divisions ("TypeError: '<' not supported between instances of 'str' and 'Timestamp'",
    # seen on an H200 with dask 2026.7.1 / cudf 26.10).
    "persist_loc_day": "LocIndexer.__getitem__",
    # dask-cudf's to_parquet does not take engine='pyarrow' partitions of cuDF ("Implicit
    # conversion to a host PyArrow object via __arrow_array__ is not allowed", same run); its
    # read_parquet refuses engine='pyarrow' (NotImplementedError, dask-cudf's source): the read
    # falls back too, as dask.dataframe.read_parquet
    "read_parquet_columns": "DataFrame.to_parquet",
    # the flights exercise's groupby mean over a from_map frame: Dask cannot build its meta on
    # cuDF partitions ("RuntimeError: Failed to generate metadata", same run); the operation
    # that raises was not pinned down on the GPU (None: any, at the snippet's lines)
    "flights_exercises": None,
}
"""Snippets that raised in a GPU session without the host fallback (the messages above): with it
they must give plain Dask's answer, with the fallback (that operation) named in the audit."""
# read_csv_groupby and from_delayed_messy write the (converted, cuDF) timeseries with to_csv and
# read it back: cuDF's CSV writer writes float64 with 9 significant digits ('0.636961687', seen
# on the H200; rapidsai/cudf#6418). The GPU family declares it (lossy_writers), and the session
# writes those partitions through pandas, so the files hold the data.


def fallback_problems(rows: list[dict], expected: dict[str, str | None]) -> list[str]:
    """What is wrong with the fallbacks: a snippet of ``expected`` without its fallback named in
    the audit (operation, the snippet's file:line, bytes moved both ways where a frame came back)."""
    bad = []
    by = {r["snippet"]: r for r in rows}
    for name, operation in expected.items():
        fbs = by[name]["fallbacks"]
        ops = [f["operation"] for f in fbs]
        if not fbs or (operation is not None and operation not in ops):
            bad.append(f"{name}: no host fallback of {operation or 'any operation'} reported (got {ops})")
        elif not all(
            f["where"].startswith(snippets.__file__) and f["bytes_to_host"] + f["bytes_to_device"] > 0
            for f in fbs
        ):
            bad.append(f"{name}: a fallback without its call site or bytes: {fbs}")
    return bad


@pytest.mark.gpu
def test_snippets_in_a_gpu_session(plain, tmp_path, capsys):
    with gpuscale.session(backend="gpu", gpus="0") as s:
        rows = run_in_session(s, plain, tmp_path, "gpu")
    with capsys.disabled():
        print("\n" + table(rows, "gpu"))
    problems = check(rows, {"cupy", "cudf"}, known=GPU_KNOWN) + fallback_problems(rows, GPU_FALLBACKS)
    assert not problems, problems


def test_fallback_problems_catch_an_unreported_fallback():
    row = {"snippet": "persist_loc_day", "fallbacks": []}
    assert fallback_problems([row], {"persist_loc_day": "LocIndexer.__getitem__"})
    row["fallbacks"] = [
        {
            "operation": "LocIndexer.__getitem__",
            "where": f"{snippets.__file__}:117",
            "bytes_to_host": 10,
            "bytes_to_device": 10,
        }
    ]
    assert not fallback_problems([row], {"persist_loc_day": "LocIndexer.__getitem__"})


def masked_rename_size(df):
    """The user's code of the report: on cuDF its meta step fails with "The truth value of a
    Series is ambiguous"."""
    return df[df.x > 0.5].rename(columns={"id": "ID"}).groupby("name").size()


@pytest.mark.gpu
def test_mask_rename_groupby_size_on_a_gpu_gives_the_cpu_answer():
    import pandas as pd

    with dask.config.set(scheduler="threads"):
        want = masked_rename_size(snippets._timeseries()).compute()
    with gpuscale.session(backend="gpu", gpus="0") as s:
        with s.audit(phase="masked") as a:
            got = masked_rename_size(snippets._timeseries()).compute()
    assert type(got).__module__.startswith("cudf")
    pd.testing.assert_series_equal(
        got.to_pandas().sort_index(),
        want.sort_index(),
        check_names=False,
        check_dtype=False,
        check_index_type=False,
    )
    fbs = a.summary["fallbacks"]
    assert fbs and all(f["where"].startswith(__file__) and f["bytes_to_host"] > 0 for f in fbs), fbs


@pytest.mark.gpu
def test_strict_refuses_the_loc_the_gpu_cannot_run_in_one_line(tmp_path):
    from gpuscale.errors import UserError

    with dask.config.set(scheduler="threads"):  # built before: strict refuses timeseries too
        host = snippets.dd.from_pandas(snippets._timeseries().compute(), npartitions=3)
    with gpuscale.session(backend="gpu", gpus="0", host_collections="strict") as s:
        df = s.to_backend(host)  # cuDF partitions, the Timestamp divisions kept
        with pytest.raises(UserError) as e:
            df.loc["2000-01-02"]
    assert "\n" not in str(e.value) and f"{__file__}:" in str(e.value) and "strict" in str(e.value)
