"""Write gpuscale's notebooks (notebooks/NN-*.ipynb) from the cells below, without outputs.

The cells live here, as Python text, so they review as code; the .ipynb files are what
people open. Edit a notebook here, then run this script and commit both:

    python notebooks/make_notebooks.py            # (re)write the notebooks
    python notebooks/make_notebooks.py --check    # exit 1 if a notebook differs from its cells

tests/test_ship.py runs the check, executes every notebook on the CPU and checks that the
committed ones hold no outputs. ``notebooks/run_all.py`` executes them (``--backend gpu`` on
a GPU machine). Every notebook starts with ``BACKEND`` (``GPUSCALE_NOTEBOOK_BACKEND`` when
set), uses small sizes and writes only under a temporary folder that its last cell removes.
04 runs a benchmark sweep (``gpuscale bench``) with its charts inline.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import nbformat

HERE = pathlib.Path(__file__).resolve().parent

BACKEND_CELL = """\
import os

# The one switch: "cpu" (NumPy + pandas) or "gpu" (CuPy + cuDF, one worker per GPU).
BACKEND = os.environ.get("GPUSCALE_NOTEBOOK_BACKEND", "cpu")"""


def _imports(
    number: str, stdlib: tuple[str, ...] = (), third: tuple[str, ...] = (), own: tuple[str, ...] = ()
) -> str:
    """The imports cell (standard library, third party, gpuscale) and the notebook's folder."""
    groups = [
        sorted(("import pathlib", "import shutil", "import tempfile") + stdlib),
        list(third),
        ["import gpuscale", *own],
    ]
    lines = "\n\n".join("\n".join(g) for g in groups if g)
    return f"""\
{lines}

WORK = pathlib.Path(tempfile.mkdtemp(prefix="gpuscale-{number}-"))  # every file this notebook writes
print("gpuscale", gpuscale.__version__, "| BACKEND =", BACKEND, "| files under", WORK)"""


CLEANUP = """\
shutil.rmtree(WORK)  # removes this notebook's files: skip this cell to keep them"""

QUICKSTART = [
    (
        "md",
        """\
# gpuscale quickstart: the same work on the CPU, then on the GPU, by one flag

`gpuscale.session(backend=...)` starts a Dask cluster for a backend *family*: `"cpu"` (NumPy and
pandas on a `distributed.LocalCluster`) or `"gpu"` (CuPy and cuDF on `dask_cuda.LocalCUDACluster`,
one worker per GPU). The same code then runs on either, with the knobs that make each fast
(chunk sizes, the SVD route, threads per worker) chosen and recorded.

This notebook runs a tall-skinny SVD on the CPU, then the very same cell on the backend that
`BACKEND` names. Set `BACKEND = "gpu"` below (or start Jupyter with
`GPUSCALE_NOTEBOOK_BACKEND=gpu`) on a machine with an NVIDIA GPU; with `"cpu"` the second run is
skipped. The sizes are small: seconds on 2 cores.""",
    ),
    (
        "code",
        BACKEND_CELL
        + """
ROWS, COLS = 20_000, 20  # the matrix: small, so the notebook runs in seconds""",
    ),
    ("code", _imports("01", third=("import numpy as np", "from IPython.display import display"))),
    (
        "md",
        """\
## One function for both backends

Inside the `with` block the session is open: its repr shows the family, the cluster and the
dashboard link. `s.run("svd", ...)` generates the data on the workers, times warm-up and
repeats, validates the result and writes a JSON record. `gpuscale.linalg.svd` is the same
tuned route on a matrix of your own, here moved onto the backend by `s.to_backend`.""",
    ),
    (
        "code",
        """\
MATRIX = np.random.default_rng(0).standard_normal((ROWS, COLS))  # your data, on the host
REFERENCE = np.linalg.svd(MATRIX, compute_uv=False)             # NumPy's answer, to check against


def svd_on(backend):
    with gpuscale.session(backend=backend) as s:
        display(s)  # backend, cluster, workers, threads, dashboard link
        r = s.run("svd", rows=ROWS, cols=COLS, repeat=3, results_dir=str(WORK / "results"))
        x = s.to_backend(MATRIX)  # NumPy chunks on the CPU, CuPy chunks on the GPU
        res = gpuscale.linalg.svd(x)
        s_values = gpuscale.backends.to_host(res.s.compute())
    error = float(np.abs(np.asarray(s_values) - REFERENCE).max() / REFERENCE[0])
    print(f"{r.family}: valid {r.valid}, median {r.median_s * 1e3:.1f} ms over {len(r.times_s)} repeats, "
          f"chunk_rows {r.choices['chunk_rows']['value']}")
    print(f"{r.family}: your matrix by route {res.route.value}, max |s - NumPy| / s_max = {error:.1e}")
    return r""",
    ),
    (
        "code",
        """\
runs = {"cpu": svd_on("cpu")}""",
    ),
    (
        "md",
        """\
## The same cell on the GPU

The only difference is the backend name.""",
    ),
    (
        "code",
        """\
if BACKEND != "cpu":
    runs[BACKEND] = svd_on(BACKEND)
else:
    print('BACKEND is "cpu": set BACKEND = "gpu" above (or GPUSCALE_NOTEBOOK_BACKEND=gpu) '
          "to run the same cell on a GPU")""",
    ),
    (
        "md",
        """\
## The result

A result renders as a table in a notebook; its fields are the record's: `r.valid`,
`r.median_s`, `r.times_s`, `r.choices` (every tuned value with its source and rule),
`r.audit` (the chunk types the tasks produced), `r.path` (the JSON record).""",
    ),
    (
        "code",
        """\
r = runs[BACKEND]
r""",
    ),
    (
        "code",
        """\
for name, r in runs.items():
    print(f"{name}: {r.backend_reason}; record {pathlib.Path(r.path).name}")
print("chunk_rows rule:", runs[BACKEND].choices["chunk_rows"]["rule"])""",
    ),
    ("code", CLEANUP),
]

YOUR_DATA = [
    (
        "md",
        """\
# Your own data: Parquet and .npy in, the tuned routes, `to_backend`, the audit

What a data scientist does with files of their own: read them into a session of either
backend, run gpuscale's tuned SVD and groupby routes on them, check which chunk types the
tasks produced (the backend audit), and let the runner time, validate and record the same
work straight from the files. Set `BACKEND = "gpu"` for CuPy and cuDF; sizes are small.""",
    ),
    (
        "code",
        BACKEND_CELL
        + """
ROWS, COLS, KEYS = 50_000, 16, 500  # matrix rows and columns; table rows and distinct stores""",
    ),
    (
        "code",
        _imports(
            "02",
            stdlib=("import contextlib",),
            third=(
                "import dask.array as da",
                "import dask.dataframe as dd",
                "import numpy as np",
                "import pandas as pd",
                "import rich",
            ),
        ),
    ),
    (
        "md",
        """\
## 1. Your files

A matrix saved as `.npy` and a sales table saved as Parquet, as you would have them on disk.""",
    ),
    (
        "code",
        """\
rng = np.random.default_rng(0)
np.save(WORK / "x.npy", rng.standard_normal((ROWS, COLS)))
pd.DataFrame({"store": rng.integers(0, KEYS, ROWS), "price": rng.random(ROWS) * 100,
              "qty": rng.integers(1, 10, ROWS)}).to_parquet(WORK / "sales.parquet")
sorted(p.name for p in WORK.iterdir())""",
    ),
    (
        "md",
        """\
## 2. A session, and your data on its backend

The session stays open across the cells below (an `ExitStack` holds it; the last cell closes
it). Inside it Dask's readers make the family's chunks: `dd.read_parquet` gives pandas
partitions on the CPU and cuDF partitions on the GPU. Data already in memory goes through
`s.to_backend`, which builds every block on the backend (not `da.from_array`, whose chunks
stay NumPy: see the audit below); `s.to_backend(x, "cpu")` brings data back.""",
    ),
    (
        "code",
        """\
stack = contextlib.ExitStack()
s = stack.enter_context(gpuscale.session(backend=BACKEND))
s""",
    ),
    (
        "code",
        '''\
def chunk_type(collection):
    """The library of one computed block or partition: what the workers hold."""
    first = collection.blocks[0, 0] if hasattr(collection, "blocks") else collection.partitions[0]
    return type(first.compute()).__module__.split(".")[0]


df = dd.read_parquet(str(WORK / "sales.parquet"))
x = s.to_backend(np.load(WORK / "x.npy")).persist()  # CuPy chunks on the GPU, built there
print(f"family {s.family.name}: frame partitions {chunk_type(df)}, array chunks {chunk_type(x)}, "
      f"back on the host {chunk_type(s.to_backend(x, 'cpu'))}")''',
    ),
    (
        "md",
        """\
## 3. The tuned routes, audited

`gpuscale.linalg.svd` picks its route (Gram, CholeskyQR2 or TSQR) from a condition estimate
and says why; `gpuscale.dataframe.groupby_agg` picks the groupby plan (tree reduction,
per worker or shuffle) from the estimated result size. `s.audit()` records the type of every
task's output while the block runs.""",
    ),
    (
        "code",
        """\
with s.audit() as a:
    res = gpuscale.linalg.svd(x)
    s_values = np.asarray(gpuscale.backends.to_host(res.s.compute()))
    g = gpuscale.dataframe.groupby_agg(df, "store", {"price": ["mean", "max"], "qty": "sum"})
    table = gpuscale.backends.to_host(g.result.compute()).sort_index()
print("SVD route:", res.route.value, "-", res.route.rule)
print("groupby plan:", g.decision.value, "-", g.decision.rule)
rich.print(gpuscale.report.audit_table(a.summary, "the routes on your data"))""",
    ),
    (
        "code",
        """\
ref_s = np.linalg.svd(np.load(WORK / "x.npy"), compute_uv=False)
ref_g = pd.read_parquet(WORK / "sales.parquet").groupby("store").agg(
    {"price": ["mean", "max"], "qty": ["sum"]})
svd_error = float(np.abs(s_values - ref_s).max() / ref_s[0])
groupby_ok = len(table) == len(ref_g) and all(
    np.allclose(table[col].to_numpy(), ref_g[col].to_numpy()) for col in ref_g.columns)
print(f"singular values match NumPy: {svd_error <= 1e-10} (max error {svd_error:.1e} x s_max)")
print(f"groupby matches pandas: {groupby_ok} ({len(table)} groups)")""",
    ),
    (
        "md",
        """\
What the audit catches: `da.from_array(numpy_array)` keeps NumPy chunks whatever the backend.
On the CPU that is the family's own type; on the GPU the audit marks those tasks as chunks
of another family and names the fix (`s.to_backend`). `s.audit(strict=True)` raises instead.""",
    ),
    (
        "code",
        """\
with s.audit() as host_chunks:
    y = da.from_array(np.load(WORK / "x.npy"), chunks=(ROWS // 4, COLS))
    float(y.sum().compute())
print(f"da.from_array on the {s.family.name} backend: audit clean = {host_chunks.summary['clean']}")
for f in host_chunks.summary["foreign"]:
    print(f"  {f['prefix']}: {f['tasks']} task(s) of {f['type']}; fix: {f['fix']}")""",
    ),
    (
        "md",
        """\
## 4. The runner on your files

`s.run` with `data=` a path reads the file on the backend, then times, validates (`fast` by
default on your data) and records the work; `output=` writes the result once it validated.""",
    ),
    (
        "code",
        """\
r_svd = s.run("svd", data=str(WORK / "x.npy"), output=str(WORK / "s.npy"),
              results_dir=str(WORK / "results"))
r_groupby = s.run("groupby", data=str(WORK / "sales.parquet"), by="store",
                  agg={"price": ["mean", "max"], "qty": "sum"}, output=str(WORK / "by_store.parquet"),
                  results_dir=str(WORK / "results"))
for r in (r_svd, r_groupby):
    print(f"{r.workload}: valid {r.valid}, median {r.median_s * 1e3:.1f} ms, {r.data['format']} read as "
          f"{r.data['chunk_type']}, audit {'clean' if r.audit['clean'] else 'NOT clean'}")
r_groupby""",
    ),
    (
        "code",
        """\
pd.read_parquet(WORK / "by_store.parquet").head()""",
    ),
    ("code", "stack.close()  # closes the session\n" + CLEANUP),
]

WHERE_THE_TIME_WENT = [
    (
        "md",
        """\
# Where the time went: traces, summaries, comparisons, the dashboard

A trace folder holds Dask's performance report, the task stream as a Perfetto / Chrome trace
(`trace.json`), the transfers between workers, memory peaks and a `summary.json` that splits
the wall time into compute, transfer and idle. This notebook traces a workload run and a
block of your own code, reads the summaries back and compares two runs. Set
`BACKEND = "gpu"` for CuPy and cuDF; sizes are small.""",
    ),
    (
        "code",
        BACKEND_CELL
        + """
N = 2_000  # transpose_sum works on an N x N matrix""",
    ),
    (
        "code",
        _imports(
            "03",
            stdlib=("import contextlib",),
            third=(
                "import dask.array as da",
                "import rich",
                "from distributed import wait",
                "from IPython.display import HTML, display",
            ),
            own=("from gpuscale.trace import render",),
        ),
    ),
    (
        "code",
        """\
stack = contextlib.ExitStack()
s = stack.enter_context(gpuscale.session(backend=BACKEND))
display(HTML(f'live dashboard: <a href="{s.dashboard_link}" target="_blank">{s.dashboard_link}</a>'))
s""",
    ),
    (
        "md",
        """\
## 1. A traced run

`s.run(..., trace=DIR)` captures the run into a new folder (`gpuscale run ... --trace DIR` on
the command line); the record's `trace` field points to it.""",
    ),
    (
        "code",
        """\
r = s.run("transpose_sum", n=N, chunk=N // 4, repeat=2, trace=str(WORK / "trace-quarter-chunks"),
          results_dir=str(WORK / "results"))
print("valid", r.valid, "| trace:", r.trace)
sorted(p.name for p in pathlib.Path(r.trace).iterdir())""",
    ),
    (
        "md",
        """\
`gpuscale.trace.load(DIR)` reads the summary back (`gpuscale trace summarize DIR` prints the
same table).""",
    ),
    (
        "code",
        """\
summary = gpuscale.trace.load(r.trace)
print(f"wall {summary.wall_s:.3f} s: compute {summary.compute_s:.3f} s, transfer {summary.transfer_s:.3f} s, "
      f"idle + overhead {summary.idle_s:.3f} s; {summary.tasks} tasks")
rich.print(render.summary_table(summary, r.trace))""",
    ),
    (
        "md",
        """\
## 2. Your own code, in phases

`s.trace(DIR)` traces whatever runs on the cluster inside the block; `t.phase(name)` marks
phases, which show as their own track in `trace.json`.""",
    ),
    (
        "code",
        """\
with s.trace(str(WORK / "trace-mine")) as t:
    with t.phase("load"):
        x = da.random.random((N, N), chunks=N // 4).persist()  # the family's chunks
        wait(x)
    with t.phase("fit"):
        total = float((x @ x.T).sum().compute())
mine = t.summary
for p in mine.phases:
    print(f"phase {p['name']}: {p['duration_s'] * 1e3:.1f} ms")
print(f"{mine.tasks} tasks, wall {mine.wall_s:.3f} s, audit clean {mine.audit['clean']}")""",
    ),
    (
        "md",
        """\
## 3. Two runs compared

The same workload with chunks twice as large: `gpuscale.trace.compare(A, B)` puts every
number side by side with the ratio B / A (`gpuscale trace compare A B`; e.g. `tcp` against
`ucx` on GPUs).""",
    ),
    (
        "code",
        """\
r_half = s.run("transpose_sum", n=N, chunk=N // 2, repeat=2, trace=str(WORK / "trace-half-chunks"),
               results_dir=str(WORK / "results"))
comparison = gpuscale.trace.compare(r.trace, r_half.trace)
rows = {row["metric"]: row for row in comparison["rows"]}
print("valid", r_half.valid, "| wall B / A:", f"{rows['wall_s']['ratio']:.2f}")
rich.print(render.compare_table(comparison))""",
    ),
    (
        "md",
        """\
## 4. Where to look next

The live dashboard shows the cluster while it runs (the link above). Each trace folder's
`index.html` links its files: open it in a browser, and `trace.json` in ui.perfetto.dev.""",
    ),
    (
        "code",
        """\
print("dashboard:", s.dashboard_link)
for folder in (r.trace, str(WORK / "trace-mine"), r_half.trace):
    print("open:", pathlib.Path(folder) / "index.html")""",
    ),
    ("code", "stack.close()  # closes the session\n" + CLEANUP),
]

SWEEP = [
    (
        "md",
        """\
# A benchmark sweep: how much faster, where, and did it change

`gpuscale bench SPEC.yaml --out DIR` runs a sweep described in YAML (workloads x sizes x
backends x protocols x worker counts) with one cluster per backend, every case validated and
recorded; DIR gets the records, a table (CSV and Parquet), PNG charts and `report.html`. A re-run
into the same folder skips the cases that finished. This notebook writes a small spec, runs it
(the CPU, plus `BACKEND` when it is another family), shows the table and the charts inline, then
runs it again into a second folder and compares the two (`gpuscale results compare A B`).""",
    ),
    ("code", BACKEND_CELL),
    (
        "code",
        _imports(
            "04",
            third=("import pandas as pd", "import rich", "from IPython.display import Image, display"),
            own=("from gpuscale.records import compare, report", "from gpuscale.runs import bench"),
        ),
    ),
    (
        "md",
        """\
## The spec

Two workloads at two sizes each; `backends` lists the CPU and, on a GPU machine, the GPU, so
the speedup chart has both sides.""",
    ),
    (
        "code",
        '''\
backends = ["cpu"] if BACKEND == "cpu" else ["cpu", BACKEND]
spec = WORK / "sweep.yaml"
spec.write_text(f"""\\
name: notebook
backends: {backends}
protocols: [tcp]
workers: [null]
repeat: 3
warmup: 1
workloads:
  transpose_sum:
    sizes: [{{n: 500}}, {{n: 1000}}]
  svd:
    sizes: [{{rows: 20000, cols: 10}}, {{rows: 40000, cols: 10}}]
""")
print(spec.read_text())''',
    ),
    (
        "md",
        """\
## Run it

Each case is validated; a case that fails is recorded with its reason and the sweep goes on.""",
    ),
    (
        "code",
        """\
done = bench.run(spec, WORK / "sweep-a")
print(f"bench: {done['ran']} case(s) ran, {done['skipped']} skipped, {done['failed']} failed")
table = pd.read_csv(WORK / "sweep-a" / "table.csv")
print(f"{len(table)} case(s), each validated: valid {bool(table['valid'].all())}")
table[["workload", "size", "backend", "workers", "median_s", "stdev_s", "valid"]]""",
    ),
    (
        "md",
        """\
## The charts

Time against size per backend (log-log), the spread of the repeats, and, when the sweep has a
host and a device family, the speedup of the device per workload and size.""",
    ),
    (
        "code",
        """\
for name, path in sorted(done["outputs"]["charts"].items()):
    print(name)
    display(Image(filename=str(path)))""",
    ),
    (
        "md",
        """\
## Did it change? Two runs compared

The same spec into a second folder, then every case's ratio B / A with a confidence interval
from the repeats and a verdict (`--fail-if-slower 5%` on the command line makes CI fail on a
slowdown).""",
    ),
    (
        "code",
        """\
again = bench.run(spec, WORK / "sweep-b")
result = compare.compare(WORK / "sweep-a", WORK / "sweep-b")
counts = ", ".join(f"{v} {n}" for v, n in result["counts"].items())
print(f"compared {len(result['cases'])} case(s): {counts}")
rich.print(report.compare_table(result))""",
    ),
    ("code", CLEANUP),
]


NOTEBOOKS = {
    "01-quickstart": QUICKSTART,
    "02-your-own-data": YOUR_DATA,
    "03-where-the-time-went": WHERE_THE_TIME_WENT,
    "04-benchmark-sweep": SWEEP,
}
"""Notebook name -> its cells, ("md" | "code", source)."""


def build(name: str) -> nbformat.NotebookNode:
    """The notebook, without outputs; cell ids are stable (name and position), so writing it
    twice gives the same file."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    for i, (kind, source) in enumerate(NOTEBOOKS[name]):
        make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        nb.cells.append(make(source, id=f"{name[:2]}-{i:02d}"))
    nbformat.validate(nb)
    return nb


def text(name: str) -> str:
    return nbformat.writes(build(name)) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a notebook differs")
    a = ap.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = HERE / f"{name}.ipynb"
        want = text(name)
        if a.check:
            if not path.exists() or path.read_text() != want:
                stale.append(path.name)
        elif not path.exists() or path.read_text() != want:
            path.write_text(want)
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python notebooks/make_notebooks.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
