"""Collections Dask builds from host objects, inside a session: put on the session's family.

Some of Dask's creation functions (``dd.from_pandas``, ``da.from_array(numpy_array)``,
``dask.datasets.timeseries``...) make NumPy / pandas chunks whatever the backend says.
``session.host-collections`` says what a session of a non-host family does with them:
``convert`` (default) converts each block on the workers inside the tasks that make it
(:func:`~.convert.on_workers`) and records the conversion; ``warn`` issues a
:class:`HostCollectionWarning` once per call site; ``strict`` raises a one-line UserError;
``off`` leaves Dask's behaviour. Writers a family declares lossy
(:attr:`~.family.Family.lossy_writers`) write through the host library under ``convert``.

The public creation functions and writers (:data:`FUNCTIONS`, :data:`WRITERS`) are wrapped at
their module attribute while such a session is open (why this hook: docs/decisions.md, rule
``host-collections.wrappers``); a wrapper reads the session block's :class:`Scope` from a
context variable, so code in other threads or outside the block calls straight through to
Dask. The limits are in docs/guide/own-data.md.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import math
import sys
import threading
import uuid
import warnings
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

from .. import _dask_compat
from ..errors import UserError
from . import convert
from .family import HOST_CHUNKS, Family

MODES = ("convert", "warn", "strict", "off")

FUNCTIONS: dict[str, tuple[str, ...]] = {
    "dask.array": (
        "from_array",
        "asarray",
        "asanyarray",
        "from_zarr",
        "from_delayed",
        "from_npy_stack",
        "from_tiledb",
    ),
    "dask.dataframe": (
        "from_pandas",
        "from_dict",
        "from_array",
        "from_dask_array",
        "from_map",
        "from_delayed",
        "read_csv",
        "read_table",
        "read_fwf",
        "read_json",
        "read_hdf",
        "read_orc",
        "read_parquet",
        "read_sql",
        "read_sql_table",
        "read_sql_query",
    ),
    "dask.datasets": ("timeseries",),
}
"""The creation functions wrapped in a session (module -> attribute names); those that
dispatch on the backend pass through when they return the family's chunks."""

WRITERS: dict[str, tuple[str, ...]] = {
    "dask.dataframe": ("to_csv",),
    "dask.dataframe.io": ("to_csv",),
    "dask.dataframe.io.csv": ("to_csv",),
}
"""Dask's DataFrame writers wrapped in a session (module -> attribute names), by the name a
family's :attr:`~.family.Family.lossy_writers` uses. ``DataFrame.to_csv`` imports
``dask.dataframe.io.csv.to_csv`` when called, so the method is caught with the function."""

PARTITIONING = ("aggregate_files", "blocksize", "split_row_groups", "filesystem", "chunksize")
"""Keywords of Dask's readers that say how files become partitions: a call that sets any of
them keeps Dask's reading as it asked (:func:`family_keywords`)."""

IN_MEMORY = frozenset({"from_pandas", "from_dict", "from_array", "asarray", "asanyarray"})
"""Functions whose input is the host object itself: the fix is ``s.to_backend(obj)`` (each task
builds its block on the backend); for the others it is ``s.to_backend(collection)``."""

LIBRARY_MODULES = ("dask", "distributed", "toolz", "tlz", "cytoolz")
"""Modules (and their submodules; ``dask`` also covers ``dask_cudf``, ``dask_cuda``) skipped when
looking for the user's call site."""

WRAPPERS = frozenset({__name__, f"{__package__}.fallback"})
"""gpuscale's modules whose frames wrap a Dask call inside a session (these wrappers and the
fallback's): skipped when looking for the call site, not taken for gpuscale's own code."""


class HostCollectionWarning(UserWarning):
    """A collection built from host objects stays on the host inside a session
    (``session.host-collections: warn``)."""


class _Sited:
    """A record of something made at a call site in the user's code (``file``, ``line``)."""

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "where": self.where}


@dataclass
class Conversion(_Sited):
    """One collection a session converted (``convert``) or reported (``warn``)."""

    id: str
    function: str
    """The Dask function the user called (``dask.dataframe.from_pandas``)."""
    file: str
    line: int
    collection: str
    """"array" or "dataframe"."""
    from_type: str
    """Its chunk type as Dask built it (``pandas.DataFrame``)."""
    to_module: str
    """The family's chunk library it was converted to (``cudf``)."""
    partitions: int
    """Blocks (array) or partitions (frame) of the collection."""
    action: str = "convert"
    why: str = ""
    """Why it was converted when Dask's chunks were the family's (a writer that loses data)."""


@dataclass
class Scope:
    """What one session's block does with host collections (see :func:`scope`)."""

    family: Family
    mode: str
    conversions: list[Conversion] = field(default_factory=list)
    """Every conversion made in the block, in order (the backend audit names those it saw)."""
    warned: set[tuple] = field(default_factory=set)
    fallbacks: list = field(default_factory=list)
    """Every host fallback made in the block (:class:`.fallback.Fallback`), in order."""
    host_of: dict = field(default_factory=dict, repr=False)
    """A fallback's result on the family (by its Dask token) -> the host collection it converted."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def apply(self, out, function: str, args: tuple, kwargs: dict, caller) -> Any:
        """The policy for ``out``, what ``function`` returned when called from frame ``caller``."""
        collection = convert.collection_kind(out)
        if collection is None or any(out is a for a in itertools.chain(args, kwargs.values())):
            return out  # not a collection, or one it was given
        module = type(out._meta).__module__.partition(".")[0]
        if module != HOST_CHUNKS[collection] or self.family.host_native(collection):
            return out
        site = call_site(caller)
        if site is None:
            return out  # built by gpuscale's own code
        file, line = site
        conv = Conversion(
            id=uuid.uuid4().hex[:12],
            function=function,
            file=file,
            line=line,
            collection=collection,
            from_type=_chunk_type(out._meta),
            to_module=self.family.chunk_module(collection),
            partitions=_blocks(out),
            action=self.mode,
        )
        if self.mode == "strict":
            raise UserError(
                f"{conv.where}: {_what(conv)} inside a session of the {self.family.name} family "
                "(session.host-collections is strict)",
                _fix(conv),
            )
        if self.mode == "warn":
            with self.lock:
                first = (file, line) not in self.warned
                self.warned.add((file, line))
            if first:
                warnings.warn_explicit(
                    f"{conv.where}: {_what(conv)}, which stays on the host inside a session "
                    f"of the {self.family.name} family; {_fix(conv)}",
                    HostCollectionWarning,
                    file,
                    line,
                )
            return out
        with self.lock:
            self.conversions.append(conv)
        return convert.on_workers(out, self.family, conv.id)

    def write(self, df, writer: str, function: str, caller):
        """The frame ``writer`` (``"to_csv"``) should write: ``df`` itself, or under ``convert``
        its host copy when the family's chunk library would lose some of its columns."""
        if convert.collection_kind(df) != "dataframe":
            return df
        hit = self.family.lossy_writer(writer, df._meta)
        site = call_site(caller) if hit is not None else None
        if site is None:
            return df
        lossy, columns = hit
        file, line = site
        conv = Conversion(
            id=uuid.uuid4().hex[:12],
            function=function,
            file=file,
            line=line,
            collection="dataframe",
            from_type=_chunk_type(df._meta),
            to_module=HOST_CHUNKS["dataframe"],
            partitions=_blocks(df),
            action=self.mode,
            why=f"{lossy.reason}: columns {', '.join(columns)}",
        )
        what = f"{function} of {conv.partitions} {conv.from_type} partition(s) loses data ({conv.why})"
        fix = (
            f"write through the host library with df.to_backend('{HOST_CHUNKS['dataframe']}').{writer}(...), "
            "or write Parquet, or set session.host-collections to convert (host_collections='convert')"
        )
        if self.mode == "strict":
            raise UserError(f"{conv.where}: {what} (session.host-collections is strict)", fix)
        if self.mode == "warn":
            with self.lock:
                first = (file, line) not in self.warned
                self.warned.add((file, line))
            if first:
                warnings.warn_explicit(f"{conv.where}: {what}; {fix}", HostCollectionWarning, file, line)
            return df
        with self.lock:
            self.conversions.append(conv)
        return convert.host_copy(df, self.family, conv.id)


def family_keywords(family: Family, name: str, kwargs: dict, caller) -> dict:
    """``kwargs`` of the user's call of Dask's reader ``name`` from frame ``caller``, with the
    family's :attr:`~.family.Knobs.read_keywords` for it added, where the call sets none of
    :data:`PARTITIONING` (rule ``reads.family``); gpuscale's own reads keep theirs."""
    add = family.knobs.read_keywords.get(name)
    if not add or any(k in kwargs for k in PARTITIONING) or call_site(caller) is None:
        return kwargs
    return {**add, **kwargs}


def _blocks(obj) -> int:
    n = getattr(obj, "npartitions", None)
    return int(n if n is not None else math.prod(len(c) for c in obj.chunks))


def _chunk_type(meta) -> str:
    return f"{type(meta).__module__.partition('.')[0]}.{type(meta).__name__}"


def _what(conv: Conversion) -> str:
    kind = "a Dask array of" if conv.collection == "array" else "a Dask DataFrame of"
    unit = "chunk(s)" if conv.collection == "array" else "partition(s)"
    return f"{conv.function} built {kind} {conv.partitions} {conv.from_type} {unit}"


def _fix(conv: Conversion) -> str:
    name = conv.function.rpartition(".")[2]
    build = (
        f"build it on the backend with s.to_backend(obj) instead of {name}(obj)"
        if name in IN_MEMORY
        else "convert it on the workers with s.to_backend(collection)"
    )
    return f"{build}, or set session.host-collections to convert (host_collections='convert')"


# -- The user's call site ------------------------------------------------------------------
def _within(name: str, roots) -> bool:
    return any(name == r or name.startswith(r + ".") or name.startswith(r + "_") for r in roots)


def call_site(frame) -> tuple[str, int] | None:
    """(file, line) of the user's code that made the call whose caller is ``frame``: the first
    frame outward not in :data:`LIBRARY_MODULES`; None when gpuscale's own code is on the stack."""
    user = None
    f = frame
    while f is not None:
        name = f.f_globals.get("__name__") or ""
        if name not in WRAPPERS:
            if name == "gpuscale" or name.startswith("gpuscale."):
                return None
            if user is None and not _within(name, LIBRARY_MODULES):
                user = f
        f = f.f_back
    user = user or frame
    return user.f_code.co_filename, user.f_lineno


# -- The scope and the wrappers ------------------------------------------------------------
_SCOPE: ContextVar[Scope | None] = ContextVar("gpuscale_host_collections", default=None)
_INSIDE: ContextVar[bool] = ContextVar("gpuscale_host_collections_inside", default=False)
_LOCK = threading.RLock()
_USERS: list = []
"""The scopes open now, in any thread: the first installs the wrappers, the last removes them."""
_ORIGINALS: dict[tuple[str, str], Callable] = {}


def current() -> Scope | None:
    """The scope of the session block this code runs in (this thread / context), or None."""
    return _SCOPE.get()


@contextlib.contextmanager
def scope(family: Family, mode: str) -> Iterator[Scope | None]:
    """Apply ``mode`` (:data:`MODES`) to the host collections built in this block, for
    ``family``. Yields the :class:`Scope`, or None when there is nothing to do (``off``, or a
    host-native family); then an enclosing scope is off for the block too. Raises UserError
    for an unknown mode."""
    if mode not in MODES:
        raise UserError(f"unknown session.host-collections mode {mode!r}", f"use one of: {', '.join(MODES)}")
    s = None if mode == "off" or family.host_native() else Scope(family, mode)
    with contextlib.ExitStack() as stack:
        if s is not None:
            stack.enter_context(
                _dask_compat.while_open(_LOCK, _USERS, s, lambda: _install(family), _uninstall)
            )
        token = _SCOPE.set(s)
        try:
            yield s
        finally:
            try:
                _SCOPE.reset(token)
            except ValueError:  # set in another context
                _SCOPE.set(None)


def _wrap(module: str, name: str, fn: Callable) -> Callable:
    label = f"{module}.{name}"

    @functools.wraps(fn)
    def creation(*args, **kwargs):
        s = _SCOPE.get()
        if s is None or _INSIDE.get():
            return fn(*args, **kwargs)
        kwargs = family_keywords(s.family, name, kwargs, sys._getframe(1))
        token = _INSIDE.set(True)
        try:
            out = fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - the fallback raises err where it does not apply
            if _FALLBACK is None:
                raise
            return _FALLBACK.create(s, fn, label, args, kwargs, err, sys._getframe(1))
        finally:
            _INSIDE.reset(token)
        return s.apply(out, label, args, kwargs, sys._getframe(1))

    creation.__gpuscale_host_collections__ = fn
    return creation


def _wrap_writer(module: str, name: str, fn: Callable) -> Callable:
    label = f"dask.dataframe.{name}"

    @functools.wraps(fn)
    def writer(df, *args, **kwargs):
        s = _SCOPE.get()
        if s is None or _INSIDE.get():
            return fn(df, *args, **kwargs)
        df = s.write(df, name, label, sys._getframe(1))
        token = _INSIDE.set(True)
        try:
            return fn(df, *args, **kwargs)
        finally:
            _INSIDE.reset(token)

    writer.__gpuscale_host_collections__ = fn
    return writer


_FALLBACK = None
""":mod:`.fallback`, once imported (it registers itself): installed and removed with these
wrappers."""


def register_fallback(module) -> None:
    global _FALLBACK
    _FALLBACK = module


def _install(family: Family | None = None) -> None:
    if _FALLBACK is not None:
        _FALLBACK.install(family)
    for table, wrap in ((FUNCTIONS, _wrap), (WRITERS, _wrap_writer)):
        for module, names in table.items():
            try:
                mod = importlib.import_module(module)
            except ImportError:
                continue
            for name in names:
                fn = getattr(mod, name, None)
                if fn is None or hasattr(fn, "__gpuscale_host_collections__"):
                    continue
                _ORIGINALS[(module, name)] = fn
                setattr(mod, name, wrap(module, name, fn))


def _uninstall() -> None:
    if _FALLBACK is not None:
        _FALLBACK.uninstall()
    for (module, name), fn in _ORIGINALS.items():
        mod = sys.modules.get(module)
        if mod is not None and getattr(getattr(mod, name, None), "__gpuscale_host_collections__", None) is fn:
            setattr(mod, name, fn)
    _ORIGINALS.clear()


def installed() -> bool:
    """Whether the wrappers are in place (some session of a non-host family is open)."""
    with _LOCK:
        return bool(_USERS)
