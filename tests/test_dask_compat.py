"""Dask's internals stay behind one adapter, :mod:`gpuscale._dask_compat`: no other module of
gpuscale imports a private name of dask or distributed, and what the adapter builds on them
still works (and falls back to public APIs) where Dask moves them."""

from __future__ import annotations

import ast
import pathlib
import pickle

import dask
import dask.dataframe as dd
import pandas as pd
import pytest

from gpuscale import _dask_compat

PKG = pathlib.Path(__file__).resolve().parents[1] / "gpuscale"
ADAPTER = PKG / "_dask_compat.py"
TRANSLATOR = PKG / "engines" / "from_dask.py"
"""The other reader of Dask's internals: it translates dask-expr's expression classes."""
ROOTS = ("dask", "distributed")


PUBLIC_DISTRIBUTED = ("distributed", "distributed.diagnostics.plugin", "distributed.comm")
"""distributed's documented API: what the package exports, the plugin classes and the address
functions of ``distributed.comm``; its other modules are internals."""


def _private(dotted: str) -> bool:
    """A name of dask / distributed that is not public: a part that begins with ``_`` (not a
    dunder such as ``__version__``), a module inside ``dask.dataframe.dask_expr``, or a name of
    distributed outside :data:`PUBLIC_DISTRIBUTED` (the module or one name in it)."""
    parts = dotted.split(".")
    if parts[0] not in ROOTS:
        return False
    if any(p.startswith("_") and not p.endswith("__") for p in parts):
        return True
    if parts[0] == "distributed":
        return not any(dotted.rpartition(".")[0] == m or dotted == m for m in PUBLIC_DISTRIBUTED)
    return dotted.startswith("dask.dataframe.dask_expr.")


def private_uses(path: pathlib.Path) -> list[str]:
    """``line: name`` for every private dask / distributed name ``path`` imports or reaches as
    an attribute of the package (``dask._task_spec.Task``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            parts, cur = [], node
            while isinstance(cur, ast.Attribute):
                parts.insert(0, cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in ROOTS:
                names = [".".join([cur.id, *parts])]
        out += [f"{node.lineno}: {n}" for n in names if _private(n)]
    return sorted(set(out))


def test_only_the_adapter_imports_private_dask_names():
    found = {
        str(p.relative_to(PKG.parent)): uses
        for p in sorted(PKG.rglob("*.py"))
        if p not in (ADAPTER, TRANSLATOR) and (uses := private_uses(p))
    }
    assert not found, f"private dask / distributed names outside the two adapters: {found}"
    assert private_uses(ADAPTER), "the adapter names no internal: the scan no longer sees them"


def test_the_scan_finds_private_imports_of_every_form(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text(
        "import dask\n"
        "from dask._task_spec import Task\n"
        "from dask.dataframe.dask_expr.io.io import FromGraph\n"
        "from distributed.utils import _maybe_complex\n"
        "import distributed._concurrent_futures_thread\n"
        "def f():\n"
        "    return dask._task_spec.Alias\n"
        "from dask import __version__\n"
        "from dask.task_spec import Alias\n"
        "from dask.dataframe import from_graph\n"
        "from distributed.worker_memory import parse_memory_limit\n"
        "from distributed import Client, SpecCluster\n"
        "from distributed.diagnostics.plugin import WorkerPlugin\n"
        "from distributed.diagnostics import nvml\n"
        "from distributed.comm import parse_address\n"
    )
    assert private_uses(mod) == sorted(
        [
            "2: dask._task_spec",
            "2: dask._task_spec.Task",
            "3: dask.dataframe.dask_expr.io.io",
            "3: dask.dataframe.dask_expr.io.io.FromGraph",
            "4: distributed.utils._maybe_complex",
            "5: distributed._concurrent_futures_thread",
            "7: dask._task_spec",
            "7: dask._task_spec.Alias",
            "11: distributed.worker_memory.parse_memory_limit",
            "14: distributed.diagnostics.nvml",
        ]
    )


def _frame():
    part = pd.DataFrame({"k": [1, 2, 1], "v": [1.0, 2.0, 3.0]})
    dsk = {("gpuscale-test", 0): (pd.DataFrame.copy, part)}
    return _dask_compat.one_task_frame(dsk, part.iloc[:0], ("gpuscale-test", 0), "gpuscale-test", "t"), part


def _tagged(frame):
    frame.attrs["finished"] = True
    return frame


def test_a_one_task_frame_is_its_task_and_travels_by_name():
    """The frame's one task sits under the frame's own key (no alias), its expression pickles
    by the adapter's class name (the scheduler unpickles what ``persist`` sends), and a
    finishing function runs inside that task."""
    df, part = _frame()
    (key,) = df.__dask_keys__()
    graph = dict(df.__dask_graph__())
    assert list(graph) == [key] and dask.istask(graph[key])
    expr = pickle.loads(pickle.dumps(df.expr))
    assert type(expr).__qualname__ == "TaskFrame" and type(expr) is type(df.expr)
    done = _dask_compat.finished_by(df, _tagged)
    got = done.compute(scheduler="sync")
    assert got.attrs.get("finished") is True
    pd.testing.assert_frame_equal(got, part)
    assert _dask_compat.frame_persisted(df) is False


def test_only_one_task_frames_answer_the_frame_protocol():
    """Other frames, arrays and Delayed objects (which answer every attribute) are not asked."""
    plain = dd.from_pandas(pd.DataFrame({"v": [1.0, 2.0]}), npartitions=1)
    delayed = dask.delayed(len)([1, 2])
    for other in (plain, plain.v.sum(), delayed, dask.array.ones(3)):
        assert _dask_compat.finished_by(other, _tagged) is None
        assert _dask_compat.submitted(other, None) is None
    assert _dask_compat.frame_persisted(plain) is False
    assert _dask_compat.frame_persisted(delayed) is None
    assert _dask_compat.frame_persisted(dask.array.ones(3)) is None


@pytest.fixture
def moved_from_graph(monkeypatch):
    """The adapter as it runs on a Dask whose ``FromGraph`` it cannot import (Dask's own public
    ``from_graph`` still works)."""
    monkeypatch.setattr(_dask_compat, "_from_graph", lambda: None)
    assert _dask_compat._task_frame_type.__wrapped__() is None  # (uncached: the real lookup)
    monkeypatch.setattr(_dask_compat, "_task_frame_type", lambda: None)


def test_a_moved_from_graph_falls_back_to_dasks_public_from_graph(moved_from_graph):
    df, part = _frame()
    pd.testing.assert_frame_equal(df.compute(scheduler="sync"), part)
    assert _dask_compat.finished_by(df, _tagged) is None
    assert _dask_compat.submitted(df, None) is None
    assert _dask_compat.frame_persisted(df) is False


def test_graph_nodes_without_dasks_converter_keep_nodes_and_refuse_old_tasks():
    """The fallback of :func:`graph_nodes` gives what Dask's converter gives for a graph of
    ``dask.task_spec`` nodes and values, and names Dask's version for an old-style task."""
    from dask.task_spec import DataNode

    x = dask.array.ones(4, chunks=2) + 1
    graph = dict(x.__dask_graph__())
    assert _dask_compat._graph_nodes_public(graph) == _dask_compat.graph_nodes(graph)
    got = _dask_compat._graph_nodes_public({"a": 1})
    assert isinstance(got["a"], DataNode) and got["a"]() == 1
    with pytest.raises(TypeError, match=f"dask {dask.__version__} moved convert_legacy_graph"):
        _dask_compat._graph_nodes_public({"a": 1, "b": (sum, ["a", 2])})
