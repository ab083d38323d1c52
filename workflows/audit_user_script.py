"""A user script that builds its data with ``da.from_array(numpy_array)`` inside a session, then
the same script fixed with ``s.to_backend``; both audited with ``Session.audit``.

Under a GPU backend the first is flagged (its ``array`` tasks hold NumPy chunks, and the work
after them runs on NumPy too) and the second audits clean; under the CPU backend both are
clean (NumPy is the CPU family's own). Prints both audit tables; exits 0 when that is what
happened, 1 otherwise.

    python workflows/audit_user_script.py --backend gpu          # the issue's GPU proof
    python workflows/audit_user_script.py --backend cpu --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys

import dask.array as da
import numpy as np
from distributed import wait

import gpuscale
from gpuscale.records import report


def work(x):
    """What the user computes: column means of x - its column means, and a Gram matrix."""
    centred = x - x.mean(axis=0)
    return (centred.T @ centred), centred.std(axis=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--cols", type=int, default=50)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", dest="json_path", default=None, help="also write both audits as JSON here")
    a = ap.parse_args(argv)
    data = np.random.default_rng(0).random((a.rows, a.cols))
    chunks = (max(1, a.rows // 8), a.cols)
    from rich.console import Console

    console = Console(width=200)
    # host_collections off: the session leaves from_array's NumPy chunks as Dask builds them (its
    # default, convert, would convert them on the workers: workflows/host_collections_cost.py)
    with gpuscale.session(backend=a.backend, workers=a.workers, host_collections="off") as s:
        with s.audit(phase="from_array") as bad:  # the mistake
            x = da.from_array(data, chunks=chunks)
            wait(s.client.persist(list(work(x))))
        with s.audit(phase="to_backend") as good:  # the fix
            x = s.to_backend(data, chunks=chunks)
            wait(s.client.persist(list(work(x))))
        family = s.family
    console.print(report.audit_table(bad.summary, "da.from_array(numpy_array)"))
    console.print(report.audit_table(good.summary, "s.to_backend(numpy_array)"))
    host_native = family.array_module == "numpy"
    expected_flag = not host_native
    ok = good.summary["clean"] and (bad.summary["clean"] != expected_flag)
    verdict = (
        f"{family.name} family: from_array {'flagged' if not bad.summary['clean'] else 'clean'} "
        f"(expected {'flagged' if expected_flag else 'clean'}), to_backend "
        f"{'clean' if good.summary['clean'] else 'FLAGGED'}: {'ok' if ok else 'NOT AS EXPECTED'}"
    )
    console.print(verdict)
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump(
                {
                    "family": family.name,
                    "from_array": bad.summary,
                    "to_backend": good.summary,
                    "expected_flag": expected_flag,
                    "ok": ok,
                },
                f,
                indent=2,
                default=str,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
