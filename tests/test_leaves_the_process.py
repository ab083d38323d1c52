"""``import gpuscale`` changes nothing in the importing process (its exception hook, warning
filters, logging, Dask's classes and functions); a session changes what it needs while it is
open and gives it all back when it closes. In a fresh interpreter each, as a user's notebook."""

from __future__ import annotations

import json
import subprocess
import sys

SNAPSHOT = r"""
import json, logging, sys, warnings

import dask.array, dask.base, dask.dataframe, distributed
import dask.dataframe.dask_expr._collection, dask.dataframe.dask_expr._merge

MODULES = ("dask.base", "dask.dataframe", "dask.array.core", "dask.dataframe.dask_expr._collection",
           "dask.dataframe.dask_expr._merge", "dask.dataframe.dask_expr._expr", "distributed.client")


def snapshot():
    loggers = [(n, x) for n, x in logging.root.manager.loggerDict.items() if isinstance(x, logging.Logger)]
    out = {"excepthook": repr(sys.excepthook), "filters": repr(warnings.filters),
           "loggers": sorted((n, x.level, len(x.handlers), len(x.filters)) for n, x in loggers),
           "meta_path": [repr(m) for m in sys.meta_path]}
    for name in MODULES:
        m = sys.modules[name]
        for k, v in sorted(vars(m).items()):
            if isinstance(v, type):
                out.update({f"{name}.{k}.{a}": repr(f) for a, f in vars(v).items()
                            if callable(f) or isinstance(f, property)})
            elif callable(v):
                out[f"{name}.{k}"] = repr(v)
    return out


def changed(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not k.startswith("loggers"))
"""


def _run(body: str) -> dict:
    p = subprocess.run([sys.executable, "-c", SNAPSHOT + body], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_import_gpuscale_changes_nothing_in_the_process():
    out = _run(
        """
before = snapshot()
import gpuscale
import gpuscale.api, gpuscale.dataframe, gpuscale.linalg
print(json.dumps(changed(before, snapshot())))
"""
    )
    assert out == [], out


def test_a_session_gives_back_what_it_changed_when_it_closes():
    out = _run(
        """
if __name__ == "__main__":
    import gpuscale
    before = snapshot()
    with gpuscale.session(backend="cpu", workers=1, threads_per_worker=1) as s:
        inside = changed(before, snapshot())
        import dask.dataframe as dd, pandas as pd
        dd.from_pandas(pd.DataFrame({"a": [1, 2]}), npartitions=1).a.sum().compute()
    print(json.dumps({"inside": inside, "after": changed(before, snapshot())}))
"""
    )
    assert out["inside"], "the session changed nothing: this test would not see a change left behind"
    assert out["after"] == [], out["after"]
