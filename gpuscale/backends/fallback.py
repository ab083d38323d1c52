"""Host fallback: a DataFrame call the session's family cannot run runs on the host.

A call in the user's code on a collection of the family (or a groupby / ``.loc`` made from
one) that raises is made again on host copies of the family's collections among its
arguments; if that raises too, the first error is raised. A frame or series result goes back
to the family partition by partition. A creation function that raises under the family's Dask
backend is called again under Dask's host backends (:func:`create`). Each fallback is recorded
(:class:`Fallback`, with its two conversions) and warned once per call site
(:class:`FallbackWarning`); ``session.host-collections: strict`` raises a one-line UserError
instead. The methods are wrapped while a session of a non-host family is open, with the
wrappers of :mod:`.host_collections`. docs/fallback.md describes the behaviour and its limits.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import sys
import threading
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import dask
from dask.base import tokenize
from dask.utils import key_split

from .. import _dask_compat
from ..errors import UserError
from . import convert, host_collections
from .family import HOST_CHUNKS

EXCLUDED = frozenset(
    {
        "compute",
        "persist",
        "head",
        "tail",
        "visualize",
        "explain",
        "pprint",
        "analyze",
        "optimize",
        "simplify",
        "lower_once",
        "lower_completely",
        "to_backend",
        "to_delayed",
        "to_dask_array",
        "to_html",
        "to_string",
        "to_records",
        "enforce_runtime_divisions",
        "memory_usage_per_partition",
        "get_partition",
        "dask",
        "expr",
    }
)
"""Methods never retried on the host: those that compute what is already built (a task that
fails on a worker fails the same way under a host copy of its input) or leave the family."""

NEVER = (AttributeError, UserError, KeyboardInterrupt)
"""Errors that are not the chunk library's gap (a missing attribute is how ``hasattr`` asks)."""

_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("gpuscale_fallback_inside", default=False)
_LOCK = threading.Lock()
_ORIGINALS: dict[tuple[type, str], Callable] = {}


class FallbackWarning(UserWarning):
    """An operation the session's family cannot run ran on the host."""


@dataclass
class Fallback(host_collections._Sited):
    """One operation run on the host in a session."""

    id: str
    operation: str
    """``DataFrame.rename``, ``SeriesGroupBy.mean``, ``LocIndexer.__getitem__``."""
    file: str
    line: int
    error: str
    """The family's error, one line (``TypeError: ...``)."""
    family: str
    partitions: int = 0
    """Partitions of the family's collections copied to the host."""
    returns: str = ""
    """What it gave back, for the warning: its result on the family, a host groupby / ``.loc``
    whose results go back, or a value (a writer's)."""
    to_host: str = ""
    """The id of its conversion to the host (its bytes: the audit's ``bytes_to_host``); empty
    for a creation function made again with Dask's host backend (nothing copied to the host)."""
    back: str = ""
    """The id of its conversion back to the family (``bytes_to_device``)."""
    prefixes: list[str] = field(default_factory=list)
    """Task prefixes of the graphs of its host copies and host result (a frame's, or a
    reduction's value): their host outputs are allowed by the audit (Dask's optimizer fuses an
    input's operation with the copy to the host and may name the fused task after it, so the
    inputs' prefixes are included; outputs of the family are never affected)."""

    def line_text(self) -> str:
        how = (
            f"{self.partitions} partition(s) copied to pandas"
            if self.to_host
            else f"made by Dask's host backend, {self.partitions} partition(s)"
        )
        return (
            f"{self.where}: {self.operation} failed on the {self.family} family ({self.error}); "
            f"ran on the host ({how}; {self.returns})"
        )


# -- The decision --------------------------------------------------------------------------
def _on_family(s, x) -> bool:
    """Whether ``x`` is a Dask DataFrame, Series or Index of the scope's family (not pandas)."""
    if convert.collection_kind(x) != "dataframe":
        return False
    top = type(x._meta).__module__.partition(".")[0]
    return top == s.family.dataframe_module.partition(".")[0] and top != HOST_CHUNKS["dataframe"]


def call(s, fn: Callable, self, name: str, args: tuple, kwargs: dict, caller) -> Any:
    """``fn(self, *args, **kwargs)``, with its host fallback."""
    made = getattr(self, "__dict__", {}).get("_gpuscale_fallback")
    try:
        out = fn(self, *args, **kwargs)
    except NEVER:
        raise
    except Exception as err:  # noqa: BLE001 - what the family cannot run is decided below
        return _fall_back(s, fn, self, name, args, kwargs, err, caller)
    if made is not None:  # a groupby / .loc of a fallback: its result goes back to the family
        return _back(s, out, made)
    _note_origin(out, self, name, args, kwargs)
    return out


def _fallback(s, operation: str, site: tuple[str, int], err: Exception, *, to_host: bool) -> Fallback:
    """A new fallback of ``operation`` at the user's ``site`` after ``err``, with fresh ids (a
    conversion to the host only where data is copied there)."""
    return Fallback(
        id=uuid.uuid4().hex[:12],
        operation=operation,
        file=site[0],
        line=site[1],
        error=_one_line(err),
        family=s.family.name,
        to_host=uuid.uuid4().hex[:12] if to_host else "",
        back=uuid.uuid4().hex[:12],
    )


def _fall_back(s, fn, self, name, args, kwargs, err: Exception, caller):
    site = host_collections.call_site(caller)
    if site is None:
        raise err  # gpuscale's own code: left as it fails
    operation = f"{type(self).__name__}.{name}"
    fb = _fallback(s, operation, site, err, to_host=True)
    moved: list = []
    try:
        h_self, h_args, h_kwargs = _host(s, (self, args, kwargs), fb, moved)
        if not moved:
            raise err  # nothing of the family's involved: not its gap
        if s.mode == "strict":
            raise UserError(
                f"{fb.where}: {operation} fails on the {fb.family} family ({fb.error}) "
                "(session.host-collections is strict: no host fallback)",
                "run it on the host with .to_backend('pandas') and back, or set "
                "session.host-collections to convert (host_collections='convert')",
            ) from err
        with _tasks_run(fb):
            out = fn(h_self, *h_args, **h_kwargs)
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - the host fails too: the CPU would, so the first error stands
        raise err from None
    return _record(s, fb, moved, _back(s, out, fb))


HOST_BACKENDS = {"dataframe.backend": "pandas", "array.backend": "numpy"}


def create(s, fn: Callable, label: str, args: tuple, kwargs: dict, err: Exception, caller):
    """A Dask creation function (``label``) that raised ``err`` under the family's Dask
    backend, called again with Dask's host backends and its collection put on the family on
    the workers, recorded as a fallback. Raises ``err`` where the family has no Dask backend of
    its own, the call came from gpuscale's code, or the host raises too; strict mode raises a
    one-line UserError."""
    site = host_collections.call_site(caller)
    kind = "array" if label.startswith("dask.array.") else "dataframe"
    own = getattr(s.family, f"{kind}_backend") != HOST_BACKENDS[f"{kind}.backend"]
    if site is None or not own or isinstance(err, NEVER):
        raise err
    fb = _fallback(s, label, site, err, to_host=False)
    if s.mode == "strict":
        raise UserError(
            f"{fb.where}: {label} fails under the {fb.family} family's Dask backend ({fb.error}) "
            "(session.host-collections is strict: no host fallback)",
            "read on the host with dask.config.set({'dataframe.backend': 'pandas'}) and "
            "s.to_backend(collection), or set session.host-collections to convert",
        ) from err
    try:
        with dask.config.set(HOST_BACKENDS):
            out = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the host fails too: the first error stands
        raise err from None
    kind = convert.collection_kind(out)
    if kind is None:
        raise err
    fb.partitions = host_collections._blocks(out)
    result = convert.on_workers(out, s.family, fb.back)
    fb.returns = "its result on the family"
    from_type = host_collections._chunk_type(out._meta)
    back = _conversion(fb, fb.back, kind, from_type, s.family.chunk_module(kind), fb.partitions)
    return _announce(s, fb, [back], result)


def _one_line(err: Exception) -> str:
    text = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {text[:200]}"


def _host(s, x, fb: Fallback, moved: list):
    """``x`` with every collection of the family as its host copy (a groupby or ``.loc`` of one:
    made again from it), walking tuples, lists and dicts; ``moved`` gets the collections copied."""
    if isinstance(x, (list, tuple)):
        return type(x)(_host(s, v, fb, moved) for v in x)
    if isinstance(x, dict):
        return {k: _host(s, v, fb, moved) for k, v in x.items()}
    if _on_family(s, x):
        moved.append(x)
        known = s.host_of.get(tokenize(x))
        copy = known if known is not None else convert.host_copy(x, s.family, fb.to_host)
        fb.prefixes = sorted(set(fb.prefixes) | _prefixes(copy))
        return copy
    origin = getattr(x, "__dict__", {}).get("_gpuscale_origin") or _indexer(x)
    if origin is not None:
        parent, name, args, kwargs = origin
        made = getattr(_host(s, parent, fb, moved), name)
        return made if args is None else made(*_host(s, args, fb, moved), **_host(s, kwargs, fb, moved))
    return x


def _indexer(x):
    got = _dask_compat.indexer_origin(x)
    return None if got is None else (got[0], got[1], None, None)


def _note_origin(out, self, name: str, args: tuple, kwargs: dict) -> None:
    """Mark ``out`` (a groupby or another wrapped non-collection) with how it was made, so a
    failing call on it can make it again on the host."""
    if out is None or convert.collection_kind(out) or not hasattr(out, "__dict__"):
        return
    if _adopt(type(out)):
        out.__dict__["_gpuscale_origin"] = (self, name, args, kwargs)


def _back(s, out, fb: Fallback):
    """The fallback's result on the family: frames and series converted partition by
    partition; a groupby / ``.loc`` object stays on the host (marked); anything else as is."""
    if isinstance(out, (list, tuple)):
        return type(out)(_back(s, v, fb) for v in out)
    kind = convert.collection_kind(out)
    if kind == "dataframe":
        module = s.family.dataframe_module
        meta = convert.convert_frame(out._meta, module)
        back = out.map_partitions(
            convert._convert_part_noted, module, fb.back, meta=meta, enforce_metadata=False, token="from_host"
        )
        s.host_of[tokenize(back)] = out
    elif kind is None and type(out) in _WRAPPED_TYPES and hasattr(out, "__dict__"):
        out.__dict__["_gpuscale_fallback"] = fb
    fb.prefixes = sorted(set(fb.prefixes) | _prefixes(out))  # the host result's tasks (a reduction's)
    return back if kind == "dataframe" else out


def _record(s, fb: Fallback, moved: list, result):
    """Count, name and announce ``fb``; returns ``result``."""
    fb.partitions = sum(int(x.npartitions) for x in {id(m): m for m in moved}.values())
    fb.returns = (
        "its result back on the family"
        if convert.collection_kind(result) == "dataframe"
        else "a host object whose results go back"
        if type(result) in _WRAPPED_TYPES
        else "a value"
    )
    from_type = host_collections._chunk_type(moved[0]._meta)
    partitions = getattr(result, "npartitions", 0) or 0
    convs = [
        _conversion(fb, fb.to_host, "dataframe", from_type, HOST_CHUNKS["dataframe"], fb.partitions),
        _conversion(fb, fb.back, "dataframe", "pandas.DataFrame", s.family.dataframe_module, partitions),
    ]
    return _announce(s, fb, convs, result)


def _conversion(fb: Fallback, id: str, collection: str, from_type: str, to_module: str, partitions: int):
    """One of ``fb``'s conversions (``id``), as the session records it."""
    return host_collections.Conversion(
        id=id,
        function=f"fallback {fb.operation}",
        file=fb.file,
        line=fb.line,
        collection=collection,
        from_type=from_type,
        to_module=to_module,
        partitions=partitions,
        action="fallback",
        why=f"host fallback of {fb.operation}: {fb.error}",
    )


def _announce(s, fb: Fallback, convs: list, result):
    with s.lock:
        s.fallbacks.append(fb)
        s.conversions.extend(convs)
        first = ("fallback", fb.operation, fb.file, fb.line) not in s.warned
        s.warned.add(("fallback", fb.operation, fb.file, fb.line))
    if first:
        warnings.warn_explicit(fb.line_text(), FallbackWarning, fb.file, fb.line)
    return result


@contextlib.contextmanager
def _tasks_run(fb: Fallback):
    """Add to ``fb.prefixes`` the prefixes of the tasks the cluster ran during the block: a
    writer or a reduction computes inside the host call, in tasks its result's graph does not
    name (Dask's ``to_parquet`` resets the index first). Nothing without a client."""
    try:
        from distributed import default_client, get_task_stream

        client = default_client()
    except (ImportError, ValueError):
        yield
        return
    with get_task_stream(client) as ts:
        yield
    fb.prefixes = sorted(set(fb.prefixes) | {key_split(t["key"]) for t in ts.data})


def _prefixes(x) -> set[str]:
    try:
        graph = x.__dask_graph__()
    except Exception:  # noqa: BLE001 - not a collection, or one whose graph cannot be built here
        return set()
    return {key_split(k) for k in graph}


# -- The wrappers --------------------------------------------------------------------------
_WRAPPED_TYPES: set[type] = set()
_BASES: list[tuple[type, tuple[str, ...]]] = []


def _wrap(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        s = host_collections.current()
        if s is None or _INSIDE.get() or host_collections._INSIDE.get():
            return fn(self, *args, **kwargs)
        token = _INSIDE.set(True)
        try:
            return call(s, fn, self, name, args, kwargs, sys._getframe(1))
        finally:
            _INSIDE.reset(token)

    method.__gpuscale_fallback__ = fn
    return method


def _methods(cls: type, dunders: tuple[str, ...]):
    for name, fn in list(vars(cls).items()):
        wanted = name in dunders or not name.startswith("_") and name not in EXCLUDED
        if wanted and callable(fn) and not isinstance(fn, (type, staticmethod, classmethod)):
            yield name, fn


def _with_subclasses(cls: type) -> list[type]:
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        if c not in out:
            out.append(c)
            todo.extend(c.__subclasses__())
    return out


def _wrap_class(cls: type, dunders: tuple[str, ...]) -> None:
    _WRAPPED_TYPES.add(cls)
    for name, fn in _methods(cls, dunders):
        if hasattr(fn, "__gpuscale_fallback__"):
            continue
        _ORIGINALS[(cls, name)] = fn
        setattr(cls, name, _wrap(name, fn))


def _adopt(cls: type) -> bool:
    """Whether ``cls`` is wrapped, wrapping it first where it subclasses a wrapped class but
    was defined after :func:`install` (dask-cudf defines its groupby classes on first use)."""
    if cls in _WRAPPED_TYPES:
        return True
    with _LOCK:
        for base, dunders in _BASES:
            if issubclass(cls, base):
                for c in reversed(cls.__mro__[: cls.__mro__.index(base)]):
                    if c not in _WRAPPED_TYPES:
                        _wrap_class(c, dunders)
                return True
    return False


def install(family=None) -> None:
    """Wrap the methods of the collection classes and of their subclasses; ``family``'s
    DataFrame libraries are imported first, so their subclasses exist."""
    for module in family.knobs.pre_import.get("dataframe", ()) if family is not None else ():
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    with _LOCK:
        _BASES[:] = _dask_compat.classes()
        for base, dunders in _BASES:
            for cls in _with_subclasses(base):
                _wrap_class(cls, dunders)


def uninstall() -> None:
    with _LOCK:
        for (cls, name), fn in _ORIGINALS.items():
            if getattr(vars(cls).get(name), "__gpuscale_fallback__", None) is fn:
                setattr(cls, name, fn)
        _ORIGINALS.clear()
        _WRAPPED_TYPES.clear()
        _BASES.clear()


host_collections.register_fallback(sys.modules[__name__])
