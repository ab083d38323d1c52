"""Tall-skinny SVD routes on any 2-D Dask array (NumPy or CuPy chunks).

Three routes, chosen automatically and honest about accuracy:

``gram``
    One pass: G = sum over row blocks of X_b^T X_b (float64 GEMMs), then ``eigvalsh(G)``.
    Fastest by far, but it squares the condition number: the error of the smallest singular
    value grows like eps * cond(X) * s_max.
``cholqr2``
    CholeskyQR2: R1 = chol(G), a second pass forms G2 = (X R1^-1)^T (X R1^-1), R = chol(G2) R1,
    and the singular values come from R. Accurate to O(eps * s_max) while cond(X) stays well
    under eps^-1/2 (about 6.7e7 in float64).
``tsqr``
    Dask's communication-avoiding TSQR (``dask.array.linalg.tsqr``), accurate for any
    condition number; the fallback.

``route="auto"`` reads the condition number off the Gram spectrum and takes ``gram`` when
its predicted error is within ``tol`` x s_max, else ``cholqr2`` while it can carry the
condition, else ``tsqr``; the result's ``route`` (a :class:`~gpuscale.decision.Decision`) says
which and why. Block functions
call NumPy's API, which CuPy arrays implement, so nothing here imports a GPU library. The
graphs are built by hand (docs/decisions.md, rule ``routes.graph-by-hand``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from .. import audit
from ..backends import finished, to_host
from ..decision import Decision
from ..errors import UserError
from . import locality

ROUTES = ("auto", "gram", "cholqr2", "tsqr")

# default accuracy target for singular values, relative to s_max, by input dtype
TOLERANCE = {np.dtype("float64"): 1e-10, np.dtype("float32"): 1e-4}
# the Gram route's predicted error, relative to s_max: GRAM_ERROR_FACTOR * eps * cond(X)
# (rule ``svd.gram-error-factor``)
GRAM_ERROR_FACTOR = 4.0
# CholeskyQR2 holds while cond(X) <= CHOLQR2_LIMIT * eps^-1/2 (1.3e7 in float64)
CHOLQR2_LIMIT = 0.2
EPS = float(np.finfo(np.float64).eps)
"""Every route accumulates in float64, so float64's epsilon bounds its rounding."""


def _route(name: str, why: str, numbers: dict[str, Any], asked: bool = False) -> Decision:
    """The route that ran (the decision's value) and why; ``numbers``: the limits, and the
    condition estimate where one was read."""
    return Decision(name, "flag" if asked else "rule", why, None, numbers)


@dataclasses.dataclass
class SVDResult:
    """Singular values (descending) and, when asked for, U and V^T, as Dask arrays."""

    s: da.Array
    u: da.Array | None
    vt: da.Array | None
    route: Decision
    """Which route ran (``value``) and why (``rule``); ``numbers`` has the limits and, for
    ``auto``, the ``condition_estimate``."""
    notes: list[str] = dataclasses.field(default_factory=list)

    def collections(self) -> dict[str, da.Array]:
        return {k: v for k, v in (("s", self.s), ("u", self.u), ("vt", self.vt)) if v is not None}


def _acc(b):
    """Accumulate in float64 whatever the input precision."""
    return b if b.dtype == np.float64 else b.astype(np.float64)


def _gram_block(b):
    b = _acc(b)
    return b.T @ b


def _gram_of_product_block(b, m):
    c = _acc(b) @ m
    return c.T @ c


def _matmul_block(b, m):
    return (_acc(b) @ m).astype(b.dtype, copy=False)


def _eigvalsh_desc(g):
    return np.linalg.eigvalsh(g)[::-1]


def _eigh_desc(g):
    w, v = np.linalg.eigh(g)
    return w[::-1], v[:, ::-1]


def _sqrt_clip(w):
    return np.sqrt(np.maximum(w, 0))


def _chol_upper(g):
    return np.linalg.cholesky(g).T


def _condition_from_eigenvalues(w) -> np.ndarray:
    """sqrt(lambda_max / lambda_min) of a descending spectrum, as a host float64 array."""
    return np.array([math.sqrt(condition_from_singular_values(w))])


def _singular_values_of_gram(g, dtype):
    """The singular values (descending, as ``dtype``) of X from its Gram matrix X^T X, once
    computed on the device (:func:`gpuscale.backends.finished`)."""
    return finished(_sqrt_clip(_eigvalsh_desc(g)).astype(dtype, copy=False))


def condition_from_singular_values(s) -> float:
    """s_max / s_min of a descending spectrum on the host; inf where s_min is 0 or anything is
    not finite."""
    top, low = float(s[0]), float(s[-1])
    if not math.isfinite(top) or top <= 0 or not math.isfinite(low) or low <= 0:
        return math.inf
    return top / low


def _all_finite(a) -> np.ndarray:
    return np.array([bool(np.isfinite(a).all())])


audit.allow(
    "condition_from_eigenvalues",
    "the condition estimate (one float64 on the host) that the client reads to choose the SVD route",
)
audit.allow("all_finite", "one bool on the host that the client reads to check CholeskyQR2 for breakdown")


def _prepare(x, notes: list[str]):
    if not isinstance(x, da.Array):
        raise UserError(
            f"svd takes a Dask array, got {type(x).__name__}",
            "wrap it with dask.array.from_array(x, chunks=(rows_per_block, -1))",
        )
    if x.ndim != 2:
        raise UserError(
            f"svd needs a 2-D array, got {x.ndim}-D with shape {x.shape}", "reshape it to (rows, columns)"
        )
    m, n = x.shape
    if n > m:
        raise UserError(
            f"svd is for tall-skinny arrays: {m} rows < {n} columns",
            "pass the transpose (x.T), whose singular values are the same",
        )
    if x.dtype.kind not in "biuf":
        what = "complex" if x.dtype.kind == "c" else str(x.dtype)
        raise UserError(
            f"svd takes real numbers, got {what} ({x.dtype}) elements",
            "pass x.real, abs(x) or x.astype('float64') as you intend"
            if x.dtype.kind == "c"
            else "convert it with x.astype('float64')",
        )
    if x.dtype.kind != "f":
        notes.append(f"converted {x.dtype} input to float64")
        x = x.astype(np.float64)
    if x.numblocks[1] > 1:
        notes.append(
            f"rechunked {x.numblocks[1]} column blocks into one (row blocks kept): "
            "every route needs whole rows in a block"
        )
        x = x.rechunk({1: -1})
    return x


def _sum_list(parts):
    total = parts[0].copy()
    for p in parts[1:]:
        total += p
    return total


def _sum_of(fn, blocks, *args):
    """sum of fn(block, *args) over one worker's blocks, in one task."""
    total = fn(blocks[0], *args)
    for b in blocks[1:]:
        total += fn(b, *args)
    return total


def _block_sum(
    x, fn, *args, split_every=None, then=None, then_args=(), then_shape=None, then_dtype=np.float64
):
    """sum over row blocks of fn(block, *args), each an n x n matrix, as a tree reduction;
    for persisted blocks on several workers (and no ``split_every``) the first level sums
    each worker's own blocks (:mod:`gpuscale.routes.locality`). ``then``: the array is
    ``then(sum, *then_args)`` (of ``then_shape`` and ``then_dtype``), computed in the sum's
    last task."""
    n = x.shape[1]
    row_keys = [row[0] for row in x.__dask_keys__()]
    placed = None if split_every else locality.placement(x, row_keys)
    groups, threads = placed or (None, None)
    token = tokenize(  # with what is in memory and where: another graph never reuses these keys
        x,
        fn,
        *args,
        split_every,
        groups,
        threads,
        then,
        then_args,
        [locality.memory_state(c) for c in (x, *args)],
    )
    name = f"{fn.__name__.strip('_')}-sum-{token}"
    arg_keys = [a.__dask_keys__()[0][0] if a.ndim == 2 else a.__dask_keys__()[0] for a in args]
    if groups and all(t == 1 for t in threads):
        # one thread per worker: one task per worker's blocks
        dsk = {
            (f"{name}-worker", j): (_sum_of, fn, [row_keys[i] for i in idx], *arg_keys)
            for j, idx in enumerate(groups)
        }
    else:
        dsk = {(f"{name}-part", k): (fn, row_key, *arg_keys) for k, row_key in enumerate(row_keys)}
    level = list(dsk)
    if groups and 1 < len(groups) < len(level):
        # sum each worker's blocks where they are: one partial per worker crosses the network
        tier = {(f"{name}-worker", j): (_sum_list, [level[i] for i in idx]) for j, idx in enumerate(groups)}
        dsk.update(tier)
        level = list(tier)
    fan = max(2, split_every or len(level))
    depth = 0
    while len(level) > 1:
        tier = {
            (f"{name}-tree{depth}", i // fan): (_sum_list, level[i : i + fan])
            for i in range(0, len(level), fan)
        }
        dsk.update(tier)
        level, depth = list(tier), depth + 1
    total = dsk.pop(level[0]) if len(level) == 1 else (_sum_list, level)
    if then is None:
        dsk[(name, 0, 0)] = total
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x, *args])
        return da.Array(graph, name, chunks=((n,), (n,)), meta=x._meta.astype(np.float64).reshape((0, 0)))
    out = f"{then.__name__.strip('_')}-{token}"
    dsk[(out,) + (0,) * len(then_shape)] = (then, total, *then_args)
    graph = HighLevelGraph.from_collections(out, dsk, dependencies=[x, *args])
    meta = x._meta.astype(then_dtype).reshape((0,) * len(then_shape))
    return da.Array(graph, out, chunks=tuple((d,) for d in then_shape), meta=meta)


def gram(x, split_every=None):
    """X^T X of a tall-skinny Dask array in one pass (float64), as a one-chunk Dask array."""
    return _block_sum(x, _gram_block, split_every=split_every)


def _single(a, fn, shape, dtype=np.float64):
    """fn applied to a one-chunk array, giving a one-chunk array of ``shape`` (one task)."""
    if a.npartitions != 1:
        a = a.rechunk(a.shape)
    return _one_task(fn, [a], shape, dtype)


def _one_task(fn, inputs, shape, dtype=np.float64, meta=None):
    """A one-chunk Dask array holding fn(*blocks) of one-chunk inputs."""
    name = f"{fn.__name__.strip('_')}-{tokenize(fn, *inputs, [locality.memory_state(i) for i in inputs])}"
    key = (name,) + (0,) * len(shape)
    dsk = {key: (fn, *[_only_key(i) for i in inputs])}
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=inputs)
    if meta is None:
        meta = inputs[0]._meta.astype(dtype).reshape((0,) * len(shape))
    return da.Array(graph, name, chunks=tuple((d,) for d in shape), meta=meta)


def _only_key(a):
    keys = a.__dask_keys__()
    while isinstance(keys, list):
        keys = keys[0]
    return keys


def _fetch(a):
    """The value of a one-chunk persisted array: gathered from its future on a distributed
    cluster (no new graph), computed otherwise."""
    try:
        from distributed import futures_of

        futures = futures_of(a)
    except ImportError:
        futures = []
    if futures:
        return futures[0].result()
    return a.compute()


def _gram_route(x, g, compute_uv, dtype):
    n = x.shape[1]
    if compute_uv:
        packed = _single(g, _gram_uv_packed, (2 * n + 1, n))
        s, vt, m = packed[0], packed[1 : n + 1], packed[n + 1 :]
        return s.astype(dtype), _project(x, m, dtype), vt.astype(dtype)
    w = _single(g, _eigvalsh_desc, (n,))
    return _single(w, _sqrt_clip, (n,)).astype(dtype), None, None


def _gram_uv_packed(g):
    """[s; V^T; V diag(1/s)] from the Gram matrix, in one block (s descending)."""
    w, v = _eigh_desc(g)
    s = _sqrt_clip(w)
    floor = (s[0] if s.shape[0] else 0) * np.finfo(np.float64).eps * max(1, s.shape[0])
    m = v / np.maximum(s, floor)[None, :]
    return np.concatenate([s[None, :], v.T, m], axis=0)


def _project(x, m, dtype):
    """X @ m block by block (m is n x n): U from V and s, or from R^-1 Ur."""
    return da.blockwise(
        _matmul_block, "ij", x, "ij", m, "kl", dtype=dtype, meta=x._meta.astype(dtype), concatenate=True
    )


def _cholqr2_parts(x, g, split_every):
    n = x.shape[1]
    r1 = _single(g, _chol_upper, (n, n))
    r1_inv = _single(r1, np.linalg.inv, (n, n))
    g2 = _block_sum(x, _gram_of_product_block, r1_inv, split_every=split_every)
    r2 = _single(g2, _chol_upper, (n, n))
    return _one_task(np.matmul, [r2, r1], (n, n))


def _cholqr2_route(r, x, compute_uv, dtype):
    n = x.shape[1]
    if compute_uv:
        packed = _single(r, _svd_packed, (2 * n + 1, n))
        ur, s, vt = packed[:n], packed[n], packed[n + 1 :]
        m = _one_task(_inv_times, [r, ur.rechunk(ur.shape)], (n, n))
        u = _project(x, m, dtype)
        return s.astype(dtype), u, vt.astype(dtype)
    return _single(r, _svdvals, (n,)).astype(dtype), None, None


def _svdvals(r):
    return np.linalg.svd(r, compute_uv=False)


def _svd_packed(r):
    u, s, vt = np.linalg.svd(r)
    return np.concatenate([u, s[None, :], vt], axis=0)


def _inv_times(r, ur):
    return np.linalg.solve(r, ur)


def _tsqr_route(x, compute_uv, dtype):
    n = x.shape[1]
    if compute_uv:
        u, s, vt = da.linalg.svd(x)
        return s, u, vt
    _, r = da.linalg.tsqr(x)
    return _single(r, _svdvals, (n,)).astype(dtype), None, None


def svd(
    x,
    compute_uv: bool = False,
    route: str = "auto",
    *,
    tol: float | None = None,
    split_every: int | None = None,
) -> SVDResult:
    """SVD of a tall-skinny 2-D Dask array, by the fastest route that holds ``tol``.

    Parameters
    ----------
    x : dask.array.Array
        2-D, rows >= columns, NumPy or CuPy chunks, any row chunking (ragged included).
        Column blocks are joined (and the result says so).
    compute_uv : bool
        Also return U (rows x n, chunked like x) and V^T (n x n).
    route : "auto", "gram", "cholqr2" or "tsqr"
    tol : float
        Accuracy target for every singular value, relative to s_max (default by dtype:
        1e-10 for float64, 1e-4 for float32). Used by ``auto``.
    split_every : int
        Fan-in of the Gram tree reduction (default: one combine step).

    Returns
    -------
    SVDResult
        ``s`` (and ``u``, ``vt``) as Dask arrays, with the :class:`Route` taken.

    ``auto`` computes the Gram matrix and its spectrum eagerly to choose (one pass over X);
    the named routes are fully lazy.
    """
    if route not in ROUTES:
        raise UserError(f"unknown svd route '{route}'", f"use one of: {', '.join(ROUTES)}")
    notes: list[str] = []
    x = _prepare(x, notes)
    dtype = x.dtype
    tol = tol if tol is not None else TOLERANCE.get(np.dtype(dtype), 1e-10)
    gram_max_cond = tol / (GRAM_ERROR_FACTOR * EPS)
    cholqr2_max_cond = CHOLQR2_LIMIT / math.sqrt(EPS)
    limits = {
        "tol": tol,
        "eps": EPS,
        "gram_max_condition": gram_max_cond,
        "cholqr2_max_condition": cholqr2_max_cond,
    }

    if route != "auto":
        if route == "tsqr":
            s, u, vt = _tsqr_route(x, compute_uv, dtype)
        elif route == "gram":
            s, u, vt = _gram_route(x, gram(x, split_every), compute_uv, dtype)
        else:
            r = _cholqr2_parts(x, gram(x, split_every), split_every)
            s, u, vt = _cholqr2_route(r, x, compute_uv, dtype)
        return SVDResult(s, u, vt, _route(route, "asked for", limits, asked=True), notes)

    n = x.shape[1]
    if compute_uv:
        # only the estimate (one float) comes back before deciding; G is kept for U
        g = gram(x, split_every)
        w = _single(g, _eigvalsh_desc, (n,))
        s_gram = _single(w, _sqrt_clip, (n,)).astype(dtype)
        cond_arr = _one_task(_condition_from_eigenvalues, [w], (1,), meta=np.empty((0,)))
        g, w, s_gram, cond_arr = dask.persist(g, w, s_gram, cond_arr)
        cond = float(np.asarray(_fetch(cond_arr))[0])
    else:
        # s in the sum's last task, the estimate read from it; G is not kept (CholeskyQR2
        # makes it again)
        s_gram = _block_sum(
            x,
            _gram_block,
            split_every=split_every,
            then=_singular_values_of_gram,
            then_args=(np.dtype(dtype).str,),
            then_shape=(n,),
            then_dtype=dtype,
        )
        (s_gram,) = dask.persist(s_gram)
        cond = condition_from_singular_values(np.asarray(to_host(_fetch(s_gram))))
        g = None
    predicted = GRAM_ERROR_FACTOR * EPS * cond
    nums = {**limits, "condition_estimate": cond, "gram_predicted_error": predicted}
    if predicted <= tol:
        s, u, vt = _gram_route(x, g, True, dtype) if compute_uv else (s_gram, None, None)
        why = (
            f"condition estimate {cond:.3g} from the Gram spectrum: predicted error "
            f"{predicted:.2g} x s_max <= tol {tol:g}, one pass suffices"
        )
        return SVDResult(s, u, vt, _route("gram", why, nums), notes)
    if cond <= cholqr2_max_cond:
        r = _cholqr2_parts(x, gram(x, split_every) if g is None else g, split_every)
        ok = _one_task(_all_finite, [r], (1,), meta=np.empty((0,)))
        r, ok = dask.persist(r, ok)
        try:
            finite = bool(np.asarray(_fetch(ok))[0])
        except Exception:  # noqa: BLE001 - NumPy raises LinAlgError where CuPy gives NaN
            finite = False
        if finite:
            s, u, vt = _cholqr2_route(r, x, compute_uv, dtype)
            why = (
                f"condition estimate {cond:.3g}: Gram route would give ~{predicted:.2g} x s_max "
                f"> tol {tol:g}; CholeskyQR2 holds up to {cholqr2_max_cond:.3g}"
            )
            return SVDResult(s, u, vt, _route("cholqr2", why, nums), notes)
        why_extra = "; Cholesky broke down (not positive definite in floating point)"
    else:
        why_extra = ""
    s, u, vt = _tsqr_route(x, compute_uv, dtype)
    why = (
        f"condition estimate {cond:.3g} is past what CholeskyQR2 carries "
        f"({cholqr2_max_cond:.3g}){why_extra}: TSQR, accurate at any condition"
    )
    return SVDResult(s, u, vt, _route("tsqr", why, nums), notes)
