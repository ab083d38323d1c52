"""Execute gpuscale's notebooks top to bottom on one backend and print one line per notebook:
ok or failed, and seconds.

    python notebooks/run_all.py                                  # every notebook, on the CPU
    GPUSCALE_NOTEBOOK_BACKEND=gpu python notebooks/run_all.py    # on a GPU machine
    python notebooks/run_all.py --backend gpu 01 03              # some of them

Each notebook runs in a fresh kernel of this Python (ipykernel, through a kernelspec written
into a temporary folder: no installed kernel is needed or used) with
GPUSCALE_NOTEBOOK_BACKEND set, in a temporary working directory. A notebook fails on any cell
error or timeout, or when its outputs lack what it must print (``EXPECT``: a validated result
on the chosen family, the routes' answers matching NumPy / pandas). The committed notebooks
are never written to; ``--keep DIR`` saves the executed copies there. Exit 0 when all passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
KERNEL = "gpuscale-notebooks"
EXPECT = {
    "01-quickstart": ["cpu: valid True", "{backend}: valid True"],
    "02-your-own-data": [
        "family {backend}:",
        "singular values match NumPy: True",
        "groupby matches pandas: True",
        "svd: valid True",
        "groupby: valid True",
    ],
    "03-where-the-time-went": [
        "valid True | trace:",
        "phase load:",
        "phase fit:",
        "valid True | wall B / A:",
    ],
    "04-benchmark-sweep": [" 0 failed", "time_vs_size", "compared "],
}
"""Notebook -> text its outputs must hold (``{backend}``: the family it ran on)."""


@dataclasses.dataclass
class Outcome:
    name: str
    ok: bool
    seconds: float
    why: str = ""
    text: str = ""
    """Everything the notebook printed or displayed as text (streams and text/plain)."""


def notebooks(names: list[str] | None = None) -> list[pathlib.Path]:
    """The notebooks in order; ``names`` picks by prefix (``01``) or name."""
    paths = sorted(HERE.glob("[0-9][0-9]-*.ipynb"))
    if not names:
        return paths
    picked = [p for p in paths if any(p.stem == n or p.stem.startswith(f"{n}-") for n in names)]
    unknown = [n for n in names if not any(p.stem == n or p.stem.startswith(f"{n}-") for p in paths)]
    if unknown:
        raise SystemExit(f"no notebook named {', '.join(unknown)}; have {', '.join(p.stem for p in paths)}")
    return picked


def kernel_specs(folder: pathlib.Path):
    """A kernelspec manager that knows one kernel: ipykernel on this interpreter."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "gpuscale notebooks (this Python)",
                "language": "python",
            }
        )
    )
    return KernelSpecManager(kernel_dirs=[str(folder / "kernels")])


def output_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif "data" in out:
                parts.append(out["data"].get("text/plain", ""))
            elif out.get("output_type") == "error":
                parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "\n".join(parts)


def execute(
    path: pathlib.Path, backend: str, *, timeout: int = 300, keep: pathlib.Path | None = None
) -> Outcome:
    """Run one notebook in a fresh kernel with GPUSCALE_NOTEBOOK_BACKEND=backend."""
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    why = ""
    with tempfile.TemporaryDirectory(prefix="gpuscale-notebook-") as tmp:
        # ipc: the kernel's sockets are files in this temporary folder, not TCP ports
        km = KernelManager(
            kernel_name=KERNEL,
            kernel_spec_manager=kernel_specs(pathlib.Path(tmp)),
            transport="tcp" if os.name == "nt" else "ipc",
            connection_file=str(pathlib.Path(tmp) / "kernel.json"),
        )
        client = NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": tmp}})
        env = {**os.environ, "GPUSCALE_NOTEBOOK_BACKEND": backend, "PYTHONUNBUFFERED": "1"}
        try:
            client.execute(env=env, cleanup_kc=True)  # shut the kernel down: it is ours
        except CellExecutionError as e:
            why = _error_line(nb) or str(e).strip().splitlines()[-1]
        except (CellTimeoutError, DeadKernelError) as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    seconds = time.perf_counter() - t0
    text = output_text(nb)
    if not why:
        wanted = dict.fromkeys(w.format(backend=backend) for w in EXPECT.get(path.stem, []))
        missing = [w for w in wanted if w not in text]
        if missing:
            why = "its outputs lack " + ", ".join(repr(m) for m in missing)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, keep / path.name)
    return Outcome(path.stem, not why, seconds, why, text)


def _error_line(nb) -> str:
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"cell {i + 1} of {len(nb.cells)}: {out.get('ename')}: {out.get('evalue')}"
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="notebooks to run, by number (01) or name (default: all)")
    ap.add_argument(
        "--backend",
        default=os.environ.get("GPUSCALE_NOTEBOOK_BACKEND", "cpu"),
        help="cpu or gpu (default: GPUSCALE_NOTEBOOK_BACKEND, else cpu)",
    )
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    ap.add_argument("--keep", type=pathlib.Path, default=None, help="write the executed notebooks here")
    a = ap.parse_args(argv)
    ok = True
    for path in notebooks(a.names):
        o = execute(path, a.backend, timeout=a.timeout, keep=a.keep)
        ok &= o.ok
        print(
            f"{o.name:<26} {a.backend:<4} {'ok' if o.ok else 'failed':<6} {o.seconds:6.1f} s"
            + (f"  {o.why}" if o.why else ""),
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
